"""The cli room (every ``tierlog`` command, in process and as a subprocess): the wire commands
(groups, produce, consume) use the ``server`` fixture of tests/conftest.py, which the server
room shares; CLI runs go through tests/support/cli_runner.py."""
