# Python bindings (owner: python).
if ENABLE_PYTHON
endif
