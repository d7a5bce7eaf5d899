"""Helpers shared by the tests of every room: real servers, CLI runs, fault-injecting
filesystems, test plugins, crash drivers. Importable as ``support`` (pytest's pythonpath)."""
