"""The index room (offset, time and transaction indexes: entries, growth, corruption,
rebuilds, timestamp search): nothing of its own to share; ``kafka_logdir`` (indexes a real
broker wrote) and the fake ``clock`` come from tests/conftest.py."""
