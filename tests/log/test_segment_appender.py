"""PlainAppender: the C accelerator and its Python twin, side by side, on real segments.

The Python twin calls the segment's own objects (FileRecords, OffsetIndex, TimeIndex); the C
twin keeps a copy of the segment's tail, writes index entries into the maps itself and writes
every change through. Both must leave the same files and the same attributes after every
append (the segment's, the log end they start at and move, the counters they count into),
disarm on every other change to the segment, and refuse what they cannot index.
"""

from __future__ import annotations

import gc
import importlib
import random
import weakref
from pathlib import Path

import pytest
from support.hot_path import TWINS

from tierlog.common.int_bounds import INT32_MAX
from tierlog.common.stats import LogStats
from tierlog.errors import LogClosedError
from tierlog.index import TimestampOffset
from tierlog.log import segment_appender
from tierlog.log.segment import AppendedBatch, LogSegment
from tierlog.records import Record, build_batch, build_control_batch
from tierlog.records.control import COMMIT

NOW = 1_700_000_000_000
LONG_AGO = 10 * 365 * 86_400_000  # segment.ms no batch here comes near


def _appender_type(twin: str) -> type:
    if twin == "c":  # imported here, so that a missing accelerator fails instead of skipping
        return importlib.import_module("tierlog.log._segment_appender").PlainAppender
    return segment_appender.PlainAppenderPy


@pytest.fixture(params=TWINS)
def twin(request, monkeypatch) -> str:
    monkeypatch.setattr(segment_appender, "PlainAppender", _appender_type(request.param))
    return request.param


def _open(directory: Path, clock, *, index_bytes: int = 4096, interval: int = 4096) -> LogSegment:
    directory.mkdir(parents=True, exist_ok=True)
    return LogSegment.open(directory, 0, index_interval_bytes=interval,
                           max_index_size=index_bytes, time_ms=clock)


def _batch(n: int, ts: int, value_size: int = 20, base_offset: int = 0) -> bytes:
    records = [Record(key=b"k%d" % i, value=b"v" * value_size, timestamp=ts) for i in range(n)]
    return build_batch(records, base_offset=base_offset, now_ms=ts)


def _start(segment: LogSegment) -> int:
    """The general append of a segment's first batch (an empty segment is never armed)."""
    data = _batch(2, NOW)
    segment.append([data], [AppendedBatch(1, NOW, len(data))])
    return 2


class _LogEnd:
    """The log end an armed appender starts each batch at and moves (a LocalLog's)."""

    def __init__(self, next_offset: int) -> None:
        self.next_offset = next_offset


def _end(next_offset: int = 2) -> _LogEnd:
    return _LogEnd(next_offset)


def _arm(segment: LogSegment, end: _LogEnd | None = None, counts: LogStats | None = None,
         *, segment_bytes: int = 1 << 30, check_records: bool = True):
    return segment.arm_plain_appends(segment_bytes, LONG_AGO, 1 << 20, check_records,
                                     end if end is not None else _end(),
                                     counts if counts is not None else LogStats())


def _state(segment: LogSegment) -> dict[str, object]:
    """Everything an append may change, as readers see it."""
    offsets, times = segment.offset_index, segment.time_index
    return {
        "log size": segment.log.size_in_bytes(),
        "log bytes": segment.log.path.read_bytes()[:segment.log.size_in_bytes()],
        "offset entries": offsets.entries,
        "offset last": offsets.last_offset,
        "offset index bytes": bytes(offsets.mapping[:offsets.size_in_bytes]),
        "time entries": times.entries,
        "time last": times.last_entry,
        "time last type": type(times.last_entry),
        "time index bytes": bytes(times.mapping[:times.size_in_bytes]),
        "since index entry": segment.bytes_since_last_index_entry,
        "max timestamp": segment.max_timestamp_and_offset,
        "max timestamp type": type(segment.max_timestamp_and_offset),
    }


def _workload(seed: int, steps: int) -> list[tuple[str, bytes, int | None]]:
    """Plain batches of random sizes whose timestamps rise, repeat and fall back, with a few
    batches the hot path must refuse (idempotent, control, damaged) in between."""
    rng = random.Random(seed)
    out, ts = [], NOW
    for _ in range(steps):
        ts += rng.choice([0, 0, 1, 5, 1000, -3000])
        kind = rng.random()
        epoch = rng.choice([None, None, 3, 7])
        if kind < 0.05:
            data = build_batch([Record(key=b"p", value=b"v")], producer_id=9, producer_epoch=0,
                               base_sequence=0, now_ms=ts)
        elif kind < 0.08:
            data = build_control_batch(COMMIT, producer_id=9, producer_epoch=0, timestamp=ts)
        elif kind < 0.11:
            damaged = bytearray(_batch(3, ts))
            damaged[-1] ^= 0xFF
            data = bytes(damaged)
        else:
            data = _batch(rng.randrange(1, 30), ts, rng.randrange(0, 300))
        out.append(("append", data, epoch))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_c_and_python_leave_the_same_files_and_attributes(tmp_path, clock, monkeypatch, seed):
    """Batches the hot path refuses go the general way (as the Log sends them), which disarms
    it; the next appender starts from what the general path left. Small indexes and a short
    index interval make most appends add index entries until an index fills up."""
    segments, appenders, ends, counts = {}, {}, {}, {}
    for name in TWINS:
        monkeypatch.setattr(segment_appender, "PlainAppender", _appender_type(name))
        segments[name] = _open(tmp_path / name, clock, index_bytes=12 * 60, interval=600)
        ends[name], counts[name] = _end(_start(segments[name])), LogStats()
        appenders[name] = _arm(segments[name], ends[name], counts[name])
    hot = general = 0
    for step, (_, data, epoch) in enumerate(_workload(seed, 400)):
        for name in TWINS:
            monkeypatch.setattr(segment_appender, "PlainAppender", _appender_type(name))
            if appenders[name] is not None and not appenders[name].armed:  # out of room
                appenders[name] = _arm(segments[name], ends[name], counts[name])
        if appenders["c"] is None or appenders["python"] is None:
            assert appenders["c"] is appenders["python"] is None, f"step {step}"
            break  # an index is full: a Log would roll
        results = {}
        for name in TWINS:
            monkeypatch.setattr(segment_appender, "PlainAppender", _appender_type(name))
            before = ends[name].next_offset
            results[name] = appenders[name].append(data, epoch)
            if results[name] is not None:
                assert ends[name].next_offset == results[name][1] + 1 > before
            else:  # the general path appends a batch in its place, then arms a new appender
                assert ends[name].next_offset == before
                batch = _batch(2, NOW + step, base_offset=before)
                ends[name].next_offset += 2  # (the LocalLog moves its end)
                segments[name].append([batch], [AppendedBatch(before + 1, NOW + step,
                                                              len(batch))])
                appenders[name] = _arm(segments[name], ends[name], counts[name])
        assert results["c"] == results["python"], f"step {step}"
        assert appenders["c"].armed == appenders["python"].armed, f"step {step}"
        assert _state(segments["c"]) == _state(segments["python"]), f"step {step}"
        assert ends["c"].next_offset == ends["python"].next_offset, f"step {step}"
        assert (_counted(counts["c"]) == _counted(counts["python"])), f"step {step}"
        hot += results["c"] is not None
        general += results["c"] is None
    else:
        pytest.fail("the indexes never filled up: make them smaller")
    assert hot > 40 and general >= 3
    assert _counted(counts["c"])[1] > 0
    assert _state(segments["c"])["time last type"] is TimestampOffset
    for segment in segments.values():
        segment.close()
    for suffix in (".log", ".index", ".timeindex"):
        c_file, py_file = (tmp_path / name / f"{0:020d}{suffix}" for name in TWINS)
        assert c_file.read_bytes() == py_file.read_bytes(), suffix


def _counted(counts: LogStats) -> tuple[int, int]:
    return counts.append_bytes, counts.append_messages


def test_the_result_counts_what_was_written(tmp_path, clock, twin):
    segment = _open(tmp_path, clock)
    end, counts = _end(_start(segment)), LogStats()
    counts.append_messages = 100  # counters carried on: an append adds to them
    appender = _arm(segment, end, counts)
    data = _batch(5, NOW + 10)
    assert appender.append(data, 4) == (len(data), 6, NOW + 10, 5, 4)
    assert (end.next_offset, _counted(counts)) == (7, (len(data), 105))
    assert appender.append(data, None) == (len(data), 11, NOW + 10, 5, -1)
    assert (end.next_offset, _counted(counts)) == (12, (2 * len(data), 110))
    assert segment.max_timestamp_so_far == NOW + 10
    assert segment.offset_of_max_timestamp_so_far == 6
    assert [batch.base_offset for _, batch in segment.log.batches_from(0)] == [0, 2, 7]


def test_refused_batches_change_nothing(tmp_path, clock, twin):
    segment = _open(tmp_path, clock, interval=1)
    end, counts = _end(_start(segment)), LogStats()
    appender = _arm(segment, end, counts, segment_bytes=200)
    before = _state(segment)
    too_big = _batch(10, NOW, value_size=100)
    idempotent = build_batch([Record(key=b"k", value=b"v")], producer_id=1, producer_epoch=0,
                             base_sequence=0, now_ms=NOW)
    for data in (too_big, idempotent, b"\0" * 70):
        assert appender.append(data, None) is None
    assert _state(segment) == before
    assert (end.next_offset, _counted(counts)) == (2, (0, 0))
    assert appender.armed


def test_a_disarmed_appender_writes_nothing(tmp_path, clock, twin):
    segment = _open(tmp_path, clock)
    end, counts = _end(_start(segment)), LogStats()
    appender = _arm(segment, end, counts)
    segment.disarm_plain_appends()
    before = _state(segment)
    assert not appender.armed
    assert appender.append(_batch(1, NOW), None) is None
    assert _state(segment) == before
    assert (end.next_offset, _counted(counts)) == (2, (0, 0))
    appender.disarm()  # idempotent


def test_it_disarms_itself_when_the_indexes_have_no_room_left(tmp_path, clock, twin):
    # 4 offset-index slots; 3 time-index slots, of which the last is kept for the roll's entry.
    segment = _open(tmp_path, clock, index_bytes=36, interval=1)
    end = _end(_start(segment))
    appender = _arm(segment, end)
    for i in range(2):  # rising timestamps: each append adds an entry to both indexes
        assert appender.armed
        assert appender.append(_batch(1, NOW + 1 + i), None) is not None
    assert not appender.armed
    offset = end.next_offset
    assert appender.append(_batch(1, NOW), None) is None
    assert end.next_offset == offset == 4
    assert (segment.offset_index.entries, segment.time_index.entries) == (2, 2)
    assert segment.time_index.is_full()
    assert segment.should_roll(1, NOW, offset, 1 << 30, LONG_AGO, clock)
    assert _arm(segment) is None


@pytest.mark.parametrize("change", ["general append", "truncate", "roll", "recover", "close",
                                    "delete"])
def test_every_other_change_to_the_segment_disarms_it_first(tmp_path, clock, twin, change):
    segment = _open(tmp_path, clock, interval=1)
    _start(segment)
    appender = _arm(segment)
    appender.append(_batch(3, NOW + 1), None)
    if change == "general append":
        data = _batch(1, NOW + 2, base_offset=5)
        segment.append([data], [AppendedBatch(5, NOW + 2, len(data))])
    elif change == "truncate":
        segment.truncate_to(2)
    elif change == "roll":
        segment.on_becoming_inactive()  # trims (resizes) both index maps
    elif change == "recover":
        segment.rebuild_indexes()
    elif change == "close":
        segment.close()
    else:
        segment.delete()
    assert not appender.armed
    assert appender.append(_batch(1, NOW), None) is None


def test_the_c_appender_holds_the_index_maps_while_armed(tmp_path, clock):
    """A change that forgot to disarm would fail loudly instead of writing into a stale map."""
    c_appender = _appender_type("c")
    segment = _open(tmp_path, clock)
    _start(segment)
    appender = c_appender(segment, (1 << 20, INT32_MAX, 1 << 62, 1 << 20, True), 10, _end(),
                          LogStats())
    with pytest.raises(BufferError):
        segment.offset_index.resize(8)
    appender.disarm()
    segment.offset_index.resize(8)


def test_bad_arguments_are_refused_alike(tmp_path, clock, twin):
    appender_type = segment_appender.PlainAppender
    segment = _open(tmp_path, clock)
    _start(segment)
    rules = (1 << 20, INT32_MAX, 1 << 62, 1 << 20, True)
    end, counts = _end(), LogStats()
    with pytest.raises(ValueError, match="index room 0"):
        appender_type(segment, rules, 0, end, counts)
    with pytest.raises(ValueError, match="4-byte index fields"):
        appender_type(segment, (INT32_MAX + 1, *rules[1:]), 10, end, counts)
    with pytest.raises(ValueError, match="4-byte index fields"):
        appender_type(segment, (*rules[:1], INT32_MAX + 1, *rules[2:]), 10, end, counts)
    # The end and the counters are read on every append: a wrong one fails when arming.
    with pytest.raises(AttributeError, match="next_offset"):
        appender_type(segment, rules, 10, counts, counts)
    with pytest.raises(AttributeError, match="append_bytes"):
        appender_type(segment, rules, 10, end, end)
    segment.close()
    with pytest.raises(LogClosedError, match="is closed"):
        appender_type(segment, rules, 10, end, counts)


def test_a_segment_dropped_while_armed_is_collected(tmp_path, clock, twin):
    segment = _open(tmp_path, clock)
    end = _end(_start(segment))
    # The segment and its appender refer to each other, and so do the end and the appender
    # (as a LocalLog holds the appender whose end it is).
    end.appender = _arm(segment, end)
    gone = weakref.ref(segment), weakref.ref(end)
    del segment, end
    gc.collect()
    assert [ref() for ref in gone] == [None, None]


def _fields(obj: object) -> dict[str, object]:
    """Every instance attribute of ``obj``: its __dict__ and its slots."""
    fields = dict(getattr(obj, "__dict__", {}))
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if hasattr(obj, name):
                fields[name] = getattr(obj, name)
    return fields


def _attributes(segment: LogSegment, end: object, counts: LogStats) -> dict[tuple[str, str], object]:
    """Every instance attribute of the segment, the parts an append touches, the log end and
    the counters, by (part, name) as in segment_appender.APPEND_WRITES ("" is the segment)."""
    parts = {"": segment, "log": segment.log, "offset_index": segment.offset_index,
             "time_index": segment.time_index, "end": end, "counts": counts}
    return {(part, name): value for part, obj in parts.items()
            for name, value in _fields(obj).items()}


def test_an_append_sets_the_contract_attributes_and_nothing_else(tmp_path, clock, twin):
    """Both twins write only the public attributes the contract names, and every one of them
    (an index interval of 1 byte, rising timestamps and growing batches make each append
    add entries and change the bytes since the last one)."""
    segment = _open(tmp_path, clock, interval=1)
    end, counts = _end(_start(segment)), LogStats()
    appender = _arm(segment, end, counts)
    contract = {(part, name) for part, names in segment_appender.APPEND_WRITES.items()
                for name in names}
    assert not any(name.startswith("_") for _, name in contract)
    changed: set[tuple[str, str]] = set()
    for i in range(4):
        before = _attributes(segment, end, counts)
        assert appender.append(_batch(2 + i, NOW + 1 + i), None) is not None
        after = _attributes(segment, end, counts)
        assert after.keys() == before.keys(), f"append {i}"
        changed |= {key for key in before if after[key] != before[key]}
    assert changed == contract


def test_the_written_attributes_are_the_protocols_declared_ones():
    """APPEND_WRITES and the protocols' settable (annotated) members say the same thing."""
    protocols = {"": segment_appender.PlainAppendTarget, "log": segment_appender.PlainAppendFile,
                 "offset_index": segment_appender.PlainAppendOffsetIndex,
                 "time_index": segment_appender.PlainAppendTimeIndex,
                 "end": segment_appender.PlainAppendEnd,
                 "counts": segment_appender.PlainAppendCounts}
    declared = {part: tuple(protocol.__annotations__) for part, protocol in protocols.items()}
    assert declared == dict(segment_appender.APPEND_WRITES)
