"""LocalLog, the segments of a Log: roll, read caps, truncation, removal and delayed deletes,
each checked on a real Log's ``log.local`` against what the files and offsets say."""

from __future__ import annotations

import pytest

from tierlog.common import filenames
from tierlog.common.scheduler import Scheduler
from tierlog.log.local_log import LocalLog
from tierlog.log.log import Log
from tierlog.records.record import Record


def _log(tmp_path, clock, scheduler: Scheduler | None = None, **config) -> Log:
    return Log.open(tmp_path / "t-0", {"segment.bytes": 1 << 20, **config}, time_ms=clock,
                    auto_high_watermark=True, scheduler=scheduler)


def _fill(log: Log, batches: int, per: int = 3) -> None:
    for b in range(batches):
        log.append_records([Record(value=b"v%d-%d" % (b, i)) for i in range(per)])


def test_the_log_delegates_its_local_state(tmp_path, clock):
    with _log(tmp_path, clock) as log:
        _fill(log, 4)
        assert isinstance(log.local, LocalLog)
        assert log.segments is log.local.segments
        assert log.log_end_offset == log.local.next_offset == 12
        log.flush()
        assert log.recovery_point == log.local.recovery_point == 12


def test_roll_is_undone_when_the_owner_hook_fails(tmp_path, clock):
    with _log(tmp_path, clock) as log:
        _fill(log, 2)
        local = log.local

        def fail(new_base: int) -> None:
            assert new_base == 6
            raise OSError("disk full")

        with pytest.raises(OSError, match="disk full"):
            local.roll(6, fail)
        assert local.segments.base_offsets() == [0]
        assert not filenames.log_file(log.directory, 6).exists()
        assert sorted(p.name for p in log.directory.glob("*.log")) == [
            "00000000000000000000.log"]
        assert local.roll(6).base_offset == 6
        assert local.roll(6) is local.segments.active  # an empty one there: no second roll


@pytest.mark.parametrize("cut", range(13))
def test_truncate_to_cuts_at_batch_boundaries(tmp_path, clock, cut):
    with _log(tmp_path, clock) as log:
        _fill(log, 2)
        log.roll()
        _fill(log, 2)  # batches at 0, 3 | 6, 9
        log.flush()
        local = log.local
        removed_reasons: list[str] = []
        local.truncate_to(cut, lambda doomed, reason: removed_reasons.append(reason))
        kept = (cut // 3) * 3  # the batch holding cut goes whole
        assert local.next_offset == kept
        assert local.recovery_point == min(12, kept)
        assert local.segments.first.base_offset == 0
        assert removed_reasons == (["truncation"] if cut <= 6 else [])


@pytest.mark.parametrize("upper", range(1, 13))
def test_read_stops_before_the_batch_holding_the_cap(tmp_path, clock, upper):
    with _log(tmp_path, clock) as log:
        _fill(log, 4)
        segments = log.local.segments.values(0)
        info = LocalLog.read(segments, 12, 0, 1 << 20, "log_end", upper, True)
        bases = [b.base_offset for b in info.batches()]
        # Whole batches only: up to the one holding upper - 1, never the next.
        assert bases == [0, 3, 6, 9][:(upper + 2) // 3]
        assert info.upper_bound == upper
        assert [b.base_offset for b in log.read(0, max_offset=upper).batches()] == bases


def test_removed_segments_are_deleted_by_the_scheduler_later(tmp_path, clock):
    scheduler = Scheduler(clock)
    with _log(tmp_path, clock, scheduler, **{"file.delete.delay.ms": 1000}) as log:
        for _ in range(3):
            _fill(log, 1)
            log.roll()
        local = log.local
        doomed = local.segments.values()[:2]
        seen: list[tuple[int, ...]] = []
        local.remove_segments(doomed, "test",
                              lambda d, reason: seen.append(tuple(s.base_offset for s in d)))
        assert seen == [(0, 3)]
        assert local.segments.base_offsets() == [6, 9]
        deleted = sorted(p.name for p in log.directory.glob("*" + filenames.DELETED_SUFFIX))
        assert deleted and all(n.startswith(("00000000000000000000", "00000000000000000003"))
                               for n in deleted)
        assert local.pending_deletes == doomed
        scheduler.run_due()
        assert local.pending_deletes == doomed  # not yet due
        clock.advance(1000)
        scheduler.run_due()
        assert local.pending_deletes == []
        assert not list(log.directory.glob("*" + filenames.DELETED_SUFFIX))


@pytest.mark.parametrize("hw,remote,expected", [
    (0, None, []), (3, None, [0]), (6, None, [0, 3]), (12, None, [0, 3, 6]),
    (12, -1, []), (12, 2, [0]), (12, 5, [0, 3]), (12, 100, [0, 3, 6]),
])
def test_deletable_segments_stop_at_the_high_watermark_and_the_tier(tmp_path, clock, hw, remote,
                                                                    expected):
    with _log(tmp_path, clock) as log:
        for _ in range(3):
            _fill(log, 1)
            log.roll()  # segments 0, 3, 6 and an empty active one at 9
        local = log.local
        got = local.deletable_segments(lambda s, n: True, hw, remote)
        assert [s.base_offset for s in got] == expected
        assert local.deletable_segments(lambda s, n: s.base_offset < 3, 12, None) == \
            local.segments.values()[:1]
