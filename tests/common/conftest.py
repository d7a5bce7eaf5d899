"""The common room (atomic writes, file names, properties, the scheduler, config, events):
small unit tests with nothing to share beyond tests/conftest.py's fake ``clock``."""
