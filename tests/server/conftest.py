"""The server room (the Kafka protocol server against real clients, its coordinators, limits
and hostile input): the ``server`` fixture, a real ``tierlog serve`` configured by the module's
``SERVER_CONFIG`` / ``SERVER_ARGS`` / ``SERVER_TOPICS`` / ``SERVER_PER_TEST``, is in
tests/conftest.py because the cli room's wire commands use it too. Hostile frames are built
by tests/support/hostile_frames.py."""
