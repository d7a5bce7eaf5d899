"""The producer room (producer state, idempotence, transactions, snapshots, tiered producer
state): nothing of its own to share; each module opens the Log it needs on the fake ``clock``
from tests/conftest.py (the Logs differ in config and content, so they are not one fixture)."""
