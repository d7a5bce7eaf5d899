"""The Log by owners: no part of a Log holds the Log; the offsets keep their invariant in one
place; the epoch rule is the leader-epoch cache's; reads work on a frozen view and appends on
settings read once."""

from __future__ import annotations

import dataclasses
import gc
import types

import pytest

from tierlog.checkpoint.checkpoint_file import LeaderEpochCheckpointFile
from tierlog.common.stats import LogStats
from tierlog.log import log_read
from tierlog.log.leader_epoch import LeaderEpochFileCache
from tierlog.log.log import Log
from tierlog.log.offsets import LogOffsets
from tierlog.producer.state import ProducerStateManager
from tierlog.records.builder import build_batch
from tierlog.records.record import Record


def _log(tmp_path, clock, **config) -> Log:
    return Log.open(tmp_path / "t-0", {"segment.bytes": 1 << 20, **config}, time_ms=clock,
                    auto_high_watermark=True)


def _batch(clock, n: int = 3, epoch: int = -1) -> bytes:
    return build_batch([Record(value=b"v%d" % i) for i in range(n)], now_ms=clock.now,
                       partition_leader_epoch=epoch)


def _reaches(start: object, target: object, limit: int = 20_000) -> bool:
    """Whether ``target`` is reachable from ``start`` through object references (modules,
    classes and functions, which reach everything, are not followed)."""
    seen, todo = {id(start)}, [start]
    while todo and len(seen) < limit:
        for ref in gc.get_referents(todo.pop()):
            if ref is target:
                return True
            if isinstance(ref, (type, types.ModuleType, types.FunctionType)) or id(ref) in seen:
                continue
            seen.add(id(ref))
            todo.append(ref)
    return False


def test_no_part_of_a_log_holds_the_log(tmp_path, clock):
    with _log(tmp_path, clock) as log:
        log.append(_batch(clock))  # the general path arms the hot path
        log.append(_batch(clock))  # the hot path
        log.roll()
        parts = {name: value for name, value in vars(log).items()
                 if not isinstance(value, (int, str, bool, type(None)))}
        assert {"local", "_offsets", "_appends", "_removals", "_events"} <= parts.keys()
        holding = [name for name, part in parts.items() if _reaches(part, log)]
        assert not holding, f"parts holding their Log: {holding}"


def test_the_offsets_invariant_is_asserted_where_they_change(tmp_path):
    offsets = LogOffsets(5, 10, ProducerStateManager(tmp_path, 60_000),
                         LeaderEpochFileCache(None))
    assert (offsets.log_start_offset, offsets.high_watermark) == (5, 5)
    assert offsets.update_high_watermark(99, 10) == 10  # clamped to the log end
    with pytest.raises(AssertionError, match="high watermark 11, log end 10"):
        offsets.set_high_watermark(11, 10)
    with pytest.raises(AssertionError, match="log start 7, high watermark 7, log end 6"):
        LogOffsets(7, 6, ProducerStateManager(tmp_path, 60_000), LeaderEpochFileCache(None))


def test_offsets_tell_the_epoch_cache_what_a_move_means(tmp_path, clock):
    with _log(tmp_path, clock) as log:
        log.append(_batch(clock, epoch=1))
        log.append(_batch(clock, epoch=2))
        log.append(_batch(clock, epoch=3))
        assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(1, 0), (2, 3), (3, 6)]
        log.delete_records_before(4)
        assert (log.log_start_offset, log.high_watermark) == (4, 9)
        assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(2, 4), (3, 6)]
        log.truncate_to(6)
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (4, 6, 6)
        assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(2, 4)]
        log.truncate_to(5)  # inside the batch [3, 5]: it goes, and the log start comes down
        assert (log.log_start_offset, log.high_watermark, log.log_end_offset) == (3, 3, 3)
        assert log.leader_epoch_cache.entries() == []


def test_the_epoch_rule_is_the_caches_and_survives_a_truncation(tmp_path, clock):
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint"))
    assert cache.is_news(0) and not cache.is_news(-1)
    cache.assign_if_newer(4, 10)
    cache.assign_if_newer(2, 20)  # an older leader's batch is no news
    assert not cache.is_news(4) and cache.is_news(5)
    assert [tuple(e) for e in cache.entries()] == [(4, 10)]
    cache.truncate_from_end(10)
    assert cache.is_news(4)
    assert LeaderEpochFileCache(cache.checkpoint).newest_epoch == -1
    # Through a log: epoch 7 is forgotten by the truncation, so its next batch records it again
    # (on the hot path: the log is armed by then).
    with _log(tmp_path / "log", clock) as log:
        log.append(_batch(clock))
        log.append(_batch(clock, epoch=7))
        assert log._plain_appender is not None
        log.truncate_to(3)
        log.append(_batch(clock))
        log.append(_batch(clock, epoch=7))
        assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(7, 6)]


def test_a_read_works_on_the_view_taken_under_the_lock(tmp_path, clock):
    with _log(tmp_path, clock) as log:
        log.append(_batch(clock))
        view = log.view()
        log.append(_batch(clock))
        assert (view.log_start_offset, view.log_end_offset, view.high_watermark) == (0, 3, 3)
        with pytest.raises(dataclasses.FrozenInstanceError):
            view.log_end_offset = 6  # type: ignore[misc]
        got = log_read.read(view, 0, 1 << 20, isolation="log_end", max_offset=None,
                            min_one_message=True)
        assert [r.offset for r in got.records()] == [0, 1, 2]
        assert [r.offset for r in log.read(0).records()] == [0, 1, 2, 3, 4, 5]


def test_appends_read_their_settings_once(tmp_path, clock):
    with _log(tmp_path, clock, **{"flush.messages": 4, "record.validation": "crc"}) as log:
        settings = log.append_settings
        assert (settings.flush_messages, settings.check_records, settings.fast_append,
                settings.segment_bytes) == (4, False, True, 1 << 20)
        with pytest.raises(dataclasses.FrozenInstanceError):
            settings.flush_messages = 1  # type: ignore[misc]
        # The one bookkeeping of both paths flushes at flush.messages: general, then hot.
        log.append(_batch(clock))
        assert log.recovery_point == 0
        log.append(_batch(clock))
        assert log._plain_appender is not None and log.recovery_point == 6


def test_counters_handed_over_are_the_ones_appends_count_into(tmp_path, clock):
    with _log(tmp_path, clock) as log:
        log.append(_batch(clock))
        log.append(_batch(clock))  # the hot path, armed with the first counters
        carried = LogStats()
        carried.append_messages = 100
        log.stats = carried  # as a LogManager's reopen carries a partition's counters on
        log.append(_batch(clock))  # the general path: the armed one counted elsewhere
        log.append(_batch(clock))  # the hot path again
        assert log._plain_appender is not None
        log.roll()
        assert log.stats is carried
        assert (carried.append_messages, carried.rolls) == (106, 1)
        assert carried.append_bytes == 2 * len(_batch(clock))


def _bare(tmp_path, clock, **config) -> Log:
    """A log whose appends need no bookkeeping by default: the high watermark does not follow
    the end and flush.messages is Kafka's never."""
    return Log.open(tmp_path / "b-0", {"segment.bytes": 1 << 20, **config}, time_ms=clock)


def test_the_hot_path_is_one_call_that_moves_the_end_and_counts(tmp_path, clock):
    with _bare(tmp_path, clock) as log:
        assert not log.append_settings.book_every_append
        log.append(_batch(clock))  # general: arms the hot path
        appender = log._plain_appender
        assert appender is not None
        # LocalLog.append_plain is the armed appender's own append: no frame in between.
        assert log.local.append_plain == appender.append
        size = len(_batch(clock))
        info = log.append(_batch(clock))
        assert (info.first_offset, info.last_offset, info.valid_bytes) == (3, 5, size)
        assert (log.log_end_offset, log.stats.append_messages, log.stats.append_bytes) == (
            6, 6, 2 * size)
        assert log.local.append_plain == appender.append  # still armed: it was the hot path


def test_the_hot_path_keeps_the_books_when_any_are_due(tmp_path, clock):
    """Without a high watermark to move or flush.messages to reach, the hot path still records
    a new leader epoch; with flush.messages, it flushes."""
    with _bare(tmp_path / "epoch", clock) as log:
        log.append(_batch(clock))
        log.append(_batch(clock, epoch=5))
        log.append(_batch(clock, epoch=5))
        log.append(_batch(clock, epoch=6))
        assert log._plain_appender is not None
        assert [tuple(e) for e in log.leader_epoch_cache.entries()] == [(5, 3), (6, 9)]
        assert log.high_watermark == 0
    with _bare(tmp_path / "flush", clock, **{"flush.messages": 5}) as log:
        assert log.append_settings.book_every_append
        log.append(_batch(clock))
        log.append(_batch(clock))
        assert log._plain_appender is not None and log.recovery_point == 6


def test_producer_state_after_hot_appends(tmp_path, clock):
    """Plain batches change no producer state, so its map end moves with the general path and
    with every snapshot; truncating into or after the plain batches keeps the producer, a roll
    and a close snapshot at the log end, and a reopen finds the producer."""
    with _log(tmp_path, clock) as log:
        log.append(build_batch([Record(value=b"p")], producer_id=7, producer_epoch=0,
                               base_sequence=0, now_ms=clock.now))  # offset 0, general
        for _ in range(3):
            log.append(_batch(clock))  # offsets 1-9: the first re-arms, the rest are hot
        assert log._plain_appender is not None
        log.truncate_to(7)
        assert log.producer_state.active_producers[7].last_seq == 0
        log.append(_batch(clock))
        log.append(_batch(clock))
        log.roll()
        assert log.producer_state.latest_snapshot_offset == log.log_end_offset == 13
        log.append(_batch(clock))
        log.append(_batch(clock))
    with _log(tmp_path, clock) as log:
        assert log.producer_state.latest_snapshot_offset == log.log_end_offset == 19
        assert log.producer_state.active_producers[7].last_seq == 0
