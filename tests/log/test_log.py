"""Log: append, offsets, rolls, reads across segments, timestamps, reopen."""

from __future__ import annotations

import contextlib
import errno
import resource
import signal
import socket
import struct
import threading

import pytest
from support.hot_path import TWINS, use_hot_path

from tierlog import Log, Record
from tierlog.errors import ConfigError, LogClosedError, OffsetOutOfRangeError
from tierlog.log import log_append as log_module
from tierlog.records import RecordBatch, build_batch, iter_batches

#: A timestamp bound (ten years, never reached here) keeps every append on the general path.
GENERAL_PATH = {"message.timestamp.before.max.ms": 10 * 365 * 86_400_000}


def _records(n: int, start: int = 0, ts: int | None = None, size: int = 20) -> list[Record]:
    return [
        Record(key=b"k%d" % i, value=(b"v%d-" % i).ljust(size, b"x"),
               headers=[("h", b"%d" % i)], timestamp=ts)
        for i in range(start, start + n)
    ]


def _all_records(log: Log, start: int | None = None):
    offset = log.log_start_offset if start is None else start
    out = []
    while offset < log.log_end_offset:
        res = log.read(offset, max_bytes=4096)
        got = list(res.records())
        assert got, f"no progress at offset {offset}"
        out.extend(got)
        offset = got[-1].offset + 1
    return out


@pytest.fixture
def log(tmp_path, clock):
    with Log.open(tmp_path / "orders-0", time_ms=clock) as log:
        yield log


def test_append_records_assigns_contiguous_offsets_and_reads_back(log, clock):
    first = log.append_records(_records(3))
    second = log.append_records(_records(2, start=3), compression="zstd")
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert log.log_end_offset == 5
    got = list(log.read(0).records())
    assert [r.offset for r in got] == [0, 1, 2, 3, 4]
    assert [r.key for r in got] == [b"k0", b"k1", b"k2", b"k3", b"k4"]
    assert got[4].headers == (("h", b"4"),)
    assert all(r.timestamp == clock.now for r in got)


def test_append_patches_base_offset_in_place_and_keeps_crc_valid(log, clock):
    log.append_records(_records(4))
    batch = build_batch(_records(3), base_offset=999_999, now_ms=clock.now)
    info = log.append(batch)
    assert (info.first_offset, info.last_offset) == (4, 6)
    raw = (log.directory / "00000000000000000000.log").read_bytes()
    batches = list(iter_batches(raw))
    assert [b.base_offset for b in batches] == [0, 4]
    assert all(b.is_valid() for b in batches)
    # Only the 8-byte base offset differs from what the producer built.
    assert bytes(batches[1].view())[8:] == batch[8:]


def test_segment_bytes_rolls_and_reads_cross_segment_boundaries(tmp_path, clock):
    with Log.open(tmp_path / "t-0", {"segment.bytes": 2048}, time_ms=clock) as log:
        for i in range(40):
            log.append_records(_records(5, start=i * 5, size=60))
        bases = log.segments.base_offsets()
        assert len(bases) > 5
        for base in bases:
            assert (log.directory / f"{base:020d}.log").exists()
            assert (log.directory / f"{base:020d}.log").stat().st_size <= 2048
        got = _all_records(log)
        assert [r.offset for r in got] == list(range(200))
        assert [r.key for r in got] == [b"k%d" % i for i in range(200)]


def test_segment_ms_rolls_by_first_batch_timestamp_with_jitter(tmp_path, clock):
    config = {"segment.ms": 1000, "segment.jitter.ms": 0}
    with Log.open(tmp_path / "t-0", config, time_ms=clock) as log:
        log.append_records(_records(1))
        clock.advance(999)
        log.append_records(_records(1))
        assert len(log.segments) == 1
        clock.advance(2)
        log.append_records(_records(1))
        assert log.segments.base_offsets() == [0, 2]


def test_segment_jitter_is_subtracted_from_segment_ms(tmp_path, clock):
    config = {"segment.ms": 1000, "segment.jitter.ms": 500}
    with Log.open(tmp_path / "t-0", config, time_ms=clock, seed=7) as log:
        jitter = log.segments.active.rolling_jitter_ms
        assert 0 <= jitter < 500
        log.append_records(_records(1))
        clock.advance(1000 - jitter)
        log.append_records(_records(1))
        assert len(log.segments) == 1
        clock.advance(1)
        log.append_records(_records(1))
        assert len(log.segments) == 2


@pytest.mark.parametrize("writer", TWINS)
def test_full_offset_index_rolls_the_segment(tmp_path, clock, monkeypatch, writer):
    # 36 bytes: 4 offset-index entries, 3 time-index entries of which the last is kept for the
    # roll's. index.interval.bytes=1 indexes every batch after a segment's first.
    use_hot_path(monkeypatch, writer)
    config = {"segment.index.bytes": 36, "index.interval.bytes": 1}
    # Rising timestamps fill the time index first (2 entries: 3 batches); equal ones give it
    # one entry, and the offset index fills (4 entries: 5 batches). Idempotent batches take
    # the general path: with one as each segment's fifth, the general path fills the index.
    for tick, batches_per_segment, idempotent in ((1, 3, False), (0, 5, False), (0, 5, True)):
        with Log.open(tmp_path / f"t{tick}{idempotent}-0", config, time_ms=clock) as log:
            for i in range(10):
                clock.advance(tick)
                if idempotent and i % 5 == 4:
                    log.append_records(_records(1, start=i), producer_id=7, producer_epoch=0,
                                       base_sequence=i // 5)
                else:
                    log.append_records(_records(1, start=i))
            assert log.segments.base_offsets() == list(range(0, 10, batches_per_segment))
            assert [r.offset for r in _all_records(log)] == list(range(10))


@pytest.mark.parametrize("writer", TWINS)
def test_segment_bytes_is_a_limit_the_hot_path_can_reach_but_not_pass(
        tmp_path, clock, monkeypatch, general_appends, writer):
    use_hot_path(monkeypatch, writer)
    batch = build_batch(_records(1), now_ms=clock.now)
    for spare, base_offsets in ((0, [0, 3]), (-1, [0, 2])):
        config = {"segment.bytes": 3 * len(batch) + spare}
        with Log.open(tmp_path / f"t{-spare}-0", config, time_ms=clock) as log:
            general_appends.clear()
            for _ in range(4):
                log.append(batch)
            assert log.segments.base_offsets() == base_offsets
            # Only the first batch of each segment goes the general way (for the later ones,
            # that is the batch that did not fit and rolled); the others take the hot path.
            assert len(general_appends) == len(base_offsets)


def test_relative_offset_overflow_rolls(tmp_path, clock):
    with Log.open(tmp_path / "t-0", time_ms=clock) as log:
        log.append(build_batch(_records(1), base_offset=0, now_ms=clock.now), assign_offsets=False)
        far = (1 << 31) + 5
        log.append(build_batch(_records(1), base_offset=far, now_ms=clock.now),
                   assign_offsets=False)
        assert log.segments.base_offsets() == [0, far]
        assert log.log_end_offset == far + 1
        assert [r.offset for r in log.read(far).records()] == [far]


@pytest.mark.parametrize("writer", TWINS)
def test_producer_batch_leaving_the_relative_offset_range_rolls(tmp_path, clock, monkeypatch,
                                                               writer):
    use_hot_path(monkeypatch, writer)
    near = (1 << 31) - 3  # the last offsets segment 0 can index: 0 .. 2^31-1
    with Log.open(tmp_path / "t-0", time_ms=clock) as log:
        log.append(build_batch(_records(1), base_offset=near, now_ms=clock.now),
                   assign_offsets=False)
        log.append_records(_records(2))  # near+1, near+2: still fits
        assert log.segments.base_offsets() == [0]
        log.append_records(_records(2))  # near+3 would not
        assert log.segments.base_offsets() == [0, near + 3]
        assert [r.offset for r in _all_records(log, near)] == [near + i for i in range(5)]


def test_read_respects_max_bytes_and_min_one_message(log):
    for i in range(10):
        log.append_records(_records(1, start=i, size=200))
    one = log.read(0, max_bytes=1)
    assert [r.offset for r in one.records()] == [0]
    assert not one.first_entry_incomplete  # Kafka: min_one_message lets the batch through
    none = log.read(0, max_bytes=1, min_one_message=False)
    assert list(none.records()) == []
    assert none.first_entry_incomplete
    some = log.read(3, max_bytes=700)
    assert next(r.offset for r in some.records()) == 3
    assert some.size_in_bytes <= 700


def test_read_is_capped_at_high_watermark_and_max_offset(log):
    log.append_records(_records(5))
    log.append_records(_records(5, start=5))
    assert list(log.read(0, isolation="read_uncommitted").records()) == []
    log.update_high_watermark(5)
    assert [r.offset for r in log.read(0, isolation="read_uncommitted").records()] == [0, 1, 2, 3, 4]
    assert [r.offset for r in log.read(0, max_offset=7).records()] == list(range(7))
    assert log.update_high_watermark(100) == 10


def test_read_out_of_range(log):
    log.append_records(_records(3))
    assert list(log.read(3).records()) == []
    with pytest.raises(OffsetOutOfRangeError, match="offset 4 is out of range"):
        log.read(4)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1)


def test_read_from_the_middle_of_a_batch_skips_earlier_records(log):
    log.append_records(_records(10))
    assert [r.offset for r in log.read(6).records()] == [6, 7, 8, 9]


def test_offset_for_timestamp_across_segments(tmp_path, clock):
    with Log.open(tmp_path / "t-0", {"segment.bytes": 1024}, time_ms=clock) as log:
        stamps = {}
        for i in range(60):
            ts = 1_000_000 + i * 10
            log.append_records(_records(1, start=i, ts=ts, size=100))
            stamps[i] = ts
        assert len(log.segments) > 3
        assert log.offset_for_timestamp(0) == 0
        assert log.offset_for_timestamp(1_000_000 + 255) == 26
        assert log.offset_for_timestamp(1_000_000 + 250) == 25
        assert log.offset_for_timestamp(1_000_000 + 590) == 59
        assert log.offset_for_timestamp(1_000_000 + 591) is None
        assert log.fetch_offset_by_timestamp(-2).offset == 0
        assert log.fetch_offset_by_timestamp(-1).offset == 60
        assert log.fetch_offset_by_timestamp(-3) == (1_000_590, 59)


def test_translate_offset_agrees_with_a_linear_scan(tmp_path, clock):
    with Log.open(tmp_path / "t-0", {"index.interval.bytes": 256}, time_ms=clock) as log:
        for i in range(200):
            log.append_records(_records(3, start=i * 3, size=50))
        segment = log.segments.active
        assert segment.offset_index.entries > 10
        positions = {}
        for position, batch in segment.log.batches_from(0):
            for offset in range(batch.base_offset, batch.last_offset + 1):
                positions[offset] = position
        for offset in range(0, 600, 7):
            found = segment.translate_offset(offset)
            assert found.position == positions[offset]


def test_snapshots_written_at_roll_and_close(tmp_path, clock):
    directory = tmp_path / "t-0"
    with Log.open(directory, {"segment.bytes": 1024}, time_ms=clock) as log:
        for i in range(20):
            log.append_records(_records(2, start=i * 2, size=100), producer_id=7,
                               producer_epoch=0, base_sequence=i * 2)
        bases = log.segments.base_offsets()
        leo = log.log_end_offset
    snapshots = sorted(p.name for p in directory.glob("*.snapshot"))
    assert f"{leo:020d}.snapshot" in snapshots
    for base in bases[1:]:
        assert f"{base:020d}.snapshot" in snapshots


def test_epoch_checkpoint_and_partition_metadata_in_kafka_format(log):
    log.append_records(_records(2), leader_epoch=3)
    log.append_records(_records(2), leader_epoch=5)
    text = (log.directory / "leader-epoch-checkpoint").read_text()
    assert text == "0\n2\n3 0\n5 2\n"
    metadata = (log.directory / "partition.metadata").read_text()
    assert metadata.startswith("version: 0\ntopic_id: ")
    assert len(metadata.split("topic_id: ")[1]) == 22
    # The leader epoch is stamped into the batch headers.
    first = next(iter_batches((log.directory / "00000000000000000000.log").read_bytes()))
    assert first.partition_leader_epoch == 3


def test_reopen_after_clean_close_keeps_everything(tmp_path, clock):
    directory = tmp_path / "t-0"
    with Log.open(directory, {"segment.bytes": 2048}, time_ms=clock) as log:
        for i in range(30):
            log.append_records(_records(4, start=i * 4, size=40))
        before = _all_records(log)
        leo = log.log_end_offset
        bases = log.segments.base_offsets()
    for index in directory.glob("*.index"):
        assert index.stat().st_size % 8 == 0
        assert index.stat().st_size < 10 * 1024 * 1024  # trimmed on close
    with Log.open(directory, {"segment.bytes": 2048}, time_ms=clock,
                  had_clean_shutdown=True) as log:
        assert log.log_end_offset == leo
        assert log.segments.base_offsets() == bases
        assert log.recovery.indexes_rebuilt == []
        assert _all_records(log) == before
        log.append_records(_records(1, start=999))
        assert log.log_end_offset == leo + 1


def test_write_to_socket_sends_the_file_slice(log):
    for i in range(20):
        log.append_records(_records(5, start=i * 5, size=100))
    res = log.read(0, max_bytes=4000)
    a, b = socket.socketpair()
    received = bytearray()

    def drain():
        while len(received) < res.size_in_bytes:
            chunk = b.recv(65536)
            if not chunk:
                break
            received.extend(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    sent = res.write_to(a)
    reader.join(timeout=10)
    a.close()
    b.close()
    assert sent == res.size_in_bytes
    assert bytes(received) == res.data.to_bytes()
    raw = (log.directory / "00000000000000000000.log").read_bytes()
    assert bytes(received) == raw[: len(received)]


def test_closed_log_rejects_operations(tmp_path, clock):
    log = Log.open(tmp_path / "t-0", time_ms=clock)
    log.close()
    log.close()
    with pytest.raises(LogClosedError):
        log.append_records(_records(1))


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        Log.open(tmp_path / "t-0", {"segment.bytes": "lots"})
    with pytest.raises(ConfigError, match=r"no\.such\.key"):
        Log.open(tmp_path / "t-0", {"no.such.key": 1})


def test_log_append_time_rewrites_timestamps_and_crc(tmp_path, clock):
    config = {"message.timestamp.type": "LogAppendTime"}
    with Log.open(tmp_path / "t-0", config, time_ms=clock) as log:
        info = log.append_records(_records(3, ts=5))
        assert info.log_append_time == clock.now
        batch = next(log.read(0).batches())
        assert batch.timestamp_type == 1
        assert batch.max_timestamp == clock.now
        assert batch.is_valid()
        assert all(r.timestamp == clock.now for r in batch.records())


def test_record_batch_header_of_appended_data_is_kafka_layout(log):
    log.append_records([Record(key=None, value=b"v")])
    raw = (log.directory / "00000000000000000000.log").read_bytes()
    base_offset, length, _epoch, magic = struct.unpack_from(">qiib", raw)
    assert (base_offset, magic) == (0, 2)
    assert length + 12 == len(raw)
    assert RecordBatch(raw).records()[0].key is None


def test_one_append_of_more_batches_than_iov_max(log, clock):
    single = build_batch([Record(key=b"k", value=b"v")], now_ms=clock.now)
    info = log.append(single * 3000)
    assert (info.first_offset, info.last_offset) == (0, 2999)
    assert [r.offset for r in log.read(2990).records()] == list(range(2990, 3000))


@contextlib.contextmanager
def _file_size_limit(limit: int):
    """Make the kernel refuse file growth past ``limit`` bytes in this process: a write that
    crosses it writes short, and the next one fails with EFBIG, just as on a full disk."""
    old_limit = resource.getrlimit(resource.RLIMIT_FSIZE)
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, old_limit[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old_limit)
        signal.signal(signal.SIGXFSZ, old_handler)


@pytest.fixture
def general_appends(monkeypatch) -> list[int]:
    """Counts the appends that took the general path (the planner, in LogAppends); the rest
    took the plain-batch hot path."""
    calls: list[int] = []
    real = log_module.plan_append

    def counting(data, **kwargs):
        calls.append(1)
        return real(data, **kwargs)

    monkeypatch.setattr(log_module, "plan_append", counting)
    return calls


@pytest.mark.parametrize("route", ["hot path (C)", "hot path (Python)", "general path"])
def test_a_failed_write_leaves_no_partial_batch(tmp_path, clock, monkeypatch, general_appends,
                                                route):
    use_hot_path(monkeypatch, "python" if route == "hot path (Python)" else "c")
    config = GENERAL_PATH if route == "general path" else {}
    with Log.open(tmp_path / "t-0", config, time_ms=clock) as log:
        log.append_records(_records(2))
        log.append_records(_records(2))
        path = log.segments.active.path
        size = path.stat().st_size
        general_before = len(general_appends)
        with _file_size_limit(size + 10), pytest.raises(OSError) as failure:
            log.append_records(_records(3))
        assert failure.value.errno == errno.EFBIG
        assert len(general_appends) - general_before == (route == "general path")
        assert path.stat().st_size == size
        assert log.log_end_offset == 4
        assert log.append_records(_records(1, start=9)).first_offset == 4
        assert [r.key for r in _all_records(log)] == [b"k0", b"k1", b"k0", b"k1", b"k9"]


@pytest.mark.parametrize("writer", TWINS)
def test_hot_path_writes_exactly_what_the_general_path_writes(tmp_path, clock, monkeypatch,
                                                              general_appends, writer):
    """Plain producer batches take a hot path that compares them with limits precomputed from
    the roll rule; a timestamp bound forces the general path. Both must leave
    byte-identical segments, indexes, snapshots and checkpoints through size, age (with
    jitter) and full-index rolls, truncations and leader epoch changes."""
    import random as _random

    use_hot_path(monkeypatch, writer)
    rng = _random.Random(5)
    steps = []
    for _ in range(600):
        clock.advance(rng.choice([0, 100, 3_000, 30_000, 200_000]))
        roll = rng.random()
        if roll < 0.02:
            steps.append((clock.now, "truncate", rng.randrange(0, 30)))
        elif roll < 0.04:
            steps.append((clock.now, "epoch", rng.choice([None, 3, 4, 5])))
        else:
            n = rng.randrange(1, 20)
            recs = [Record(key=b"k%d" % j, value=b"v" * rng.randrange(0, 400),
                           timestamp=clock.now - rng.randrange(0, 1000)) for j in range(n)]
            steps.append((clock.now, "append", build_batch(
                recs, compression=rng.choice(["none", "lz4"]), now_ms=clock.now)))
    config = {"segment.bytes": 16384, "segment.ms": 600_000, "segment.jitter.ms": 300_000,
              "segment.index.bytes": 96, "index.interval.bytes": 1024}
    dirs, general_counts = [], []
    for name, extra in (("hot-0", {}), ("general-0", GENERAL_PATH)):
        replay = type(clock)(steps[0][0])
        general_appends.clear()
        with Log.open(tmp_path / name, {**config, **extra}, time_ms=replay, leader_epoch=3,
                      seed=11) as log:
            for now, kind, arg in steps:
                replay.now = now
                if kind == "append":
                    log.append(arg)
                elif kind == "truncate":
                    log.truncate_to(max(0, log.log_end_offset - arg))
                else:
                    log.leader_epoch = arg
            assert log._fast_append is (name == "hot-0")
        dirs.append(tmp_path / name)
        general_counts.append(len(general_appends))
    appends = [arg for _, kind, arg in steps if kind == "append"]
    compressed = sum(RecordBatch(data).compression != 0 for data in appends)
    assert general_counts[1] == len(appends)
    # Compressed batches go the general way (their records are checked after decompressing);
    # the hot path took most of the others.
    assert general_counts[0] - compressed < (len(appends) - compressed) * 0.5
    # partition.metadata holds each log's own random topic id; everything else must match.
    hot = {p.name: p.read_bytes() for p in dirs[0].iterdir() if p.name != "partition.metadata"}
    general = {p.name: p.read_bytes() for p in dirs[1].iterdir()
               if p.name != "partition.metadata"}
    assert len([n for n in hot if n.endswith(".log")]) > 10
    assert hot == general


def test_reopening_does_not_regrow_the_empty_indexes_of_closed_segments(tmp_path, clock):
    directory = tmp_path / "t-0"
    with Log.open(directory, {"segment.bytes": 4096}, time_ms=clock) as log:
        for _ in range(100):
            log.append_records([Record(key=b"k", value=b"v" * 100)])
        assert len(log.segments) > 3
    with Log.open(directory, {"segment.bytes": 4096}, time_ms=clock, had_clean_shutdown=True) as log:
        active = log.segments.active.base_offset
        for segment in log.segments.non_active():
            assert segment.offset_index.path.stat().st_size == segment.offset_index.entries * 8
            assert segment.time_index.path.stat().st_size == segment.time_index.entries * 12
        log.append_records([Record(key=b"k", value=b"v")])  # the active one is resized
        assert log.segments.active.base_offset == active
