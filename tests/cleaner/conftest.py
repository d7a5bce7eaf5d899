"""The cleaner room (retention and compaction): nothing of its own to share; the fake
``clock`` comes from tests/conftest.py. Retention opens several LogManagers per test, so its
``manager`` is a factory of its own."""
