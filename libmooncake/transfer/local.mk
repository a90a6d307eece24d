# transfer engine (owner: transfer).  Add sources here only.
libmooncake_internal_la_SOURCES += \
	$(NULL)
