"""The third-party example plugin (examples/plugin-key-index): installed with pip into a
scratch site directory (the room's ``plugin_site``), discovered through its entry point (the
room's ``host``), and used by the engine — fed on append, persisted, rebuilt after a crash,
and answering log.lookup_key."""

from __future__ import annotations

import pytest

from tierlog import Log, Record
from tierlog.errors import PluginError

COMPACT = {"cleanup.policy": "compact", "segment.bytes": 2048}


def _fill(log, rounds=30):
    latest = {}
    for i in range(rounds):
        key = b"user-%d" % (i % 7)
        info = log.append_records([Record(key=key, value=b"v%d" % i + b"x" * 100)])
        latest[key] = info.first_offset
    return latest


def test_the_plugin_is_discovered_through_its_entry_point(host):
    assert "key" in host.registries.index_types
    info = {p.name: p for p in host.plugins()}["key_index"]
    assert info.distribution == "tierlog-key-index 0.1.0"
    assert info.hooks == ("tierlog_register_index_types",)
    key_type = host.registries.index_types["key"]
    assert key_type.suffix == ".keyindex" and not key_type.uploaded_to_remote


def test_the_engine_feeds_and_queries_it(host, tmp_path, clock):
    with Log.open(tmp_path / "users-0", COMPACT, time_ms=clock, plugins=host) as log:
        latest = _fill(log)
        assert len(log.segments) > 2
        for key, offset in latest.items():
            assert log.lookup_key(key) == offset
        assert log.lookup_key(b"nobody") is None
    # Every segment has its .keyindex file next to its .log.
    logs = sorted(p.stem for p in (tmp_path / "users-0").glob("*.log"))
    assert sorted(p.stem for p in (tmp_path / "users-0").glob("*.keyindex")) == logs


def test_it_is_rebuilt_after_a_crash_and_survives_truncation(host, tmp_path, clock):
    directory = tmp_path / "users-0"
    with Log.open(directory, COMPACT, time_ms=clock, plugins=host) as log:
        latest = _fill(log)
    for index in directory.glob("*.keyindex"):
        index.unlink()  # lost in the crash
    (directory / min(p.name for p in directory.glob("*.log"))).with_suffix(
        ".keyindex").write_bytes(b"garbage")  # and one corrupted
    with Log.open(directory, COMPACT, time_ms=clock, plugins=host) as log:
        assert log.recovery.indexes_rebuilt
        for key, offset in latest.items():
            assert log.lookup_key(key) == offset
        log.truncate_to(20)
        assert log.lookup_key(b"user-6") == 13  # offset 20 (user-6) is gone; 13 is its last


def test_topics_that_do_not_compact_have_no_key_index(host, tmp_path, clock):
    with Log.open(tmp_path / "events-0", {"cleanup.policy": "delete"}, time_ms=clock,
                  plugins=host) as log:
        _fill(log, rounds=3)
        with pytest.raises(PluginError, match="no 'key' index"):
            log.lookup_key(b"user-1")
    assert not list((tmp_path / "events-0").glob("*.keyindex"))
