# tensor objects (owner: tensor): the header codec and tensor writes and
# reads on the public store API.  Add sources here only.
libmooncake_internal_la_SOURCES += \
	libmooncake/tensor/tensor.c \
	libmooncake/tensor/tensor_store.c \
	$(NULL)
