# store client (owner: store).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	$(NULL)
