"""The log room (Log, LocalLog, segments, the loader, recovery, truncation, the leader-epoch
cache, torn writes): nothing of its own to share; each module opens the Log it needs on the
fake ``clock`` from tests/conftest.py (the Logs differ in config and content). Crash drivers
and invariant checks are in tests/support (``crash_writer``, ``log_invariants``)."""
