"""The delete cleanup policy (retention by time, size and log start offset), policy selection,
and the lifecycle events it fires."""

from __future__ import annotations

import pytest
from support.plugins.audit import AuditPlugin

from tierlog import Record
from tierlog.errors import ConfigError, OffsetOutOfRangeError
from tierlog.manager.log_manager import LogManager
from tierlog.plugin_manager import get_plugins

DAY = 86_400_000


def _append(log, i, ts, size=200):
    log.append_records([Record(key=b"k%d" % i, value=b"v" * size, timestamp=ts)])


@pytest.fixture
def manager(tmp_path, clock):
    managers = []

    def open_(**config):
        mgr = LogManager.open(tmp_path / "data", {"segment.bytes": 1024, **config},
                              time_ms=clock, start_scheduler=False)
        managers.append(mgr)
        return mgr

    yield open_
    for mgr in managers:
        mgr.close()


def _consume(log):
    """Every record from the log start, advancing by batches as a consumer does (cleaned
    segments may hold batches with no records left)."""
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        res = log.read(offset)
        batches = list(res.batches())
        out.extend(res.records())
        offset = batches[-1].next_offset
    return out


def _segment_sizes(log):
    return [(s.base_offset, s.size) for s in log.segments]


def test_retention_ms_deletes_expired_segments_oldest_first(manager, clock):
    mgr = manager(**{"retention.ms": DAY})
    log = mgr.create_topic("t", 1)[0]
    start = clock.now
    for i in range(30):
        _append(log, i, start - 3 * DAY + i * 10_000_000)  # spans ~3.5 days
    bases = log.segments.base_offsets()
    expired = [s.base_offset for s in log.segments.non_active()
               if clock.now - s.largest_timestamp > DAY]
    assert expired and len(expired) < len(bases) - 1
    result = mgr.cleanup_logs()["t-0"][0]
    assert result.segments_deleted == len(expired)
    assert log.segments.base_offsets() == [b for b in bases if b not in expired]
    assert log.log_start_offset == log.segments.first.base_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0)
    # The files were renamed .deleted and go after file.delete.delay.ms.
    deleted = list(log.directory.glob("*.deleted"))
    assert deleted
    clock.advance(60_000)
    mgr.scheduler.run_due()
    assert not list(log.directory.glob("*.deleted"))


def test_retention_ms_stops_at_the_first_segment_that_stays(manager, clock):
    mgr = manager(**{"retention.ms": DAY})
    log = mgr.create_topic("t", 1)[0]
    for i in range(8):
        _append(log, i, clock.now - 5 * DAY)
    _append(log, 8, clock.now)           # a young segment in the middle...
    log.roll()
    for i in range(9, 14):
        _append(log, i, clock.now - 5 * DAY)  # ...protects the old ones after it (Kafka)
    before = log.segments.base_offsets()
    mgr.cleanup_logs()
    remaining = log.segments.base_offsets()
    young = next(s.base_offset for s in log.segments if s.max_timestamp_so_far == clock.now)
    assert remaining[0] == young
    assert set(remaining) >= {b for b in before if b >= young}


def test_retention_bytes(manager, clock):
    mgr = manager(**{"retention.bytes": 3000})
    log = mgr.create_topic("t", 1)[0]
    for i in range(40):
        _append(log, i, clock.now)
    mgr.cleanup_logs()
    assert log.size_in_bytes <= 3000 + 1024
    # One more old segment would have fitted under the limit only if it were deleted:
    sizes = _segment_sizes(log)
    assert log.size_in_bytes - sizes[0][1] < 3000


def test_segments_wholly_below_the_log_start_offset(manager, clock):
    mgr = manager()
    log = mgr.create_topic("t", 1)[0]
    for i in range(40):
        _append(log, i, clock.now)
    bases = log.segments.base_offsets()
    log.delete_records_before(bases[3] + 1)
    mgr.cleanup_logs()
    assert log.segments.base_offsets()[0] == bases[3]
    assert log.log_start_offset == bases[3] + 1


def test_the_active_segment_is_never_deleted(manager, clock):
    mgr = manager(**{"retention.ms": DAY})
    log = mgr.create_topic("t", 1)[0]
    for i in range(20):
        _append(log, i, clock.now - 10 * DAY)
    leo = log.log_end_offset
    active_before = log.segments.active
    mgr.cleanup_logs()
    # Kafka rolls first, so the segment that was active goes only once it is not active.
    assert len(log.segments) == 1
    assert log.segments.active is not active_before
    assert log.segments.active.base_offset == leo and log.segments.active.size == 0
    assert log.log_end_offset == leo and log.log_start_offset == leo
    # And an empty active segment is never deleted.
    assert mgr.cleanup_logs()["t-0"][0].segments_deleted == 0


def test_segments_above_the_high_watermark_stay(manager, clock):
    mgr = manager(**{"retention.ms": DAY, "auto.high.watermark": False})
    log = mgr.create_topic("t", 1)[0]
    for i in range(20):
        _append(log, i, clock.now - 10 * DAY)
    bases = log.segments.base_offsets()
    log.update_high_watermark(bases[2])
    mgr.cleanup_logs()
    assert log.segments.base_offsets() == bases[2:]


def test_compact_delete_applies_both_and_unknown_policies_are_config_errors(manager, clock):
    mgr = manager(**{"retention.ms": DAY})
    with pytest.raises(ConfigError, match=r"cleanup\.policy.*no plugin provides.*'shred'"):
        mgr.create_topic("bad", 1, {"cleanup.policy": "shred"})
    log = mgr.create_topic("t", 1, {"cleanup.policy": "compact,delete",
                                    "min.cleanable.dirty.ratio": 0.01})[0]
    for i in range(30):
        _append(log, i % 3, clock.now - 2 * DAY if i < 20 else clock.now)
    results = {r.policy: r for r in mgr.cleanup_logs()["t-0"]}
    assert set(results) == {"compact", "delete"}
    assert results["compact"].segments_cleaned >= 1
    assert results["delete"].segments_deleted >= 1
    timestamps = [r.timestamp for r in _consume(log)]
    assert timestamps and min(timestamps) == clock.now  # every two-day-old record is gone


def test_lifecycle_events_reach_plugins(manager, clock):
    audit = AuditPlugin()
    host = get_plugins()
    host.register(audit, name="audit")
    try:
        mgr = manager(**{"retention.ms": DAY})
        log = mgr.create_topic("t", 1)[0]
        for i in range(10):
            _append(log, i, clock.now - 2 * DAY)
        rolled = [e for e in audit.events if e[0] == "rolled"]
        assert rolled and all(e[1] == "t" for e in rolled)
        mgr.cleanup_logs()
        deleted = [e for e in audit.events if e[0] == "deleted"]
        assert deleted and all(e[3] == "retention.ms breached" for e in deleted)
    finally:
        host.unregister("audit")
