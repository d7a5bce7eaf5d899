"""The manager room (LogManager, its data-dir lock, topic isolation, atomic topic creation):
nothing of its own to share; each test opens the LogManagers it needs (several data dirs,
reopened, locked twice), on the fake ``clock`` of tests/conftest.py, whose ``manager``
fixture serves the rooms that need one plain LogManager."""
