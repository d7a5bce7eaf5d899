"""The plugins room (the plugin host, index plugins, metrics, third-party remote storage):
nothing of its own to share; ``manager`` (configured by the module's ``MANAGER_CONFIG``) and the
fake ``clock`` come from tests/conftest.py, and the test plugins live in tests/support/plugins."""
