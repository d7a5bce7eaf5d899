"""LogManager.open(read_only=True): reading a data dir beside its live owner, or after a crash,
without writing anything; and the one-line summary of an unclean restart.

The owner here is a LogManager of this process that is never closed (its active segment's
indexes are preallocated and mapped, its tail unflushed, no clean-shutdown marker), as a live
``tierlog serve`` leaves a dir; test_data_dir_lock.py does the same beside a real server.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.clock import FakeClock
from support.process_death import die

from tierlog import Record
from tierlog.errors import LogDamagedError, ReadOnlyLogError, TierlogError
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch

#: Small segments and a dense offset index, so a few records make several segments and entries.
CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 256}


def file_state(root: Path) -> dict[str, tuple[str, int]]:
    """Every file under ``root``: its sha256 and mtime (ns)."""
    return {str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                       p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def values(mgr: LogManager, topic: str, partition: int = 0) -> list[bytes | None]:
    log = mgr.log(topic, partition)
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        res = log.read(offset, 1 << 16)
        batches = list(res.batches())
        assert batches, f"nothing read at offset {offset}"
        out += [r.value for r in res.records()]
        offset = batches[-1].next_offset
    return out


@pytest.fixture
def live(tmp_path: Path, clock: FakeClock) -> Iterator[LogManager]:
    """A live owner of ``tmp_path``: 60 records in clicks-0 over several segments, not closed."""
    owner = LogManager.open(tmp_path, CONFIG, time_ms=clock, start_scheduler=False)
    log = owner.create_topic("clicks", 2)[0]
    for i in range(60):
        log.append(build_batch([Record(value=b"click-%02d" % i + b"." * 80)]))
    yield owner
    owner.close()


def test_a_reader_beside_a_live_owner_reads_everything_and_writes_nothing(
        tmp_path: Path, live: LogManager) -> None:
    before = file_state(tmp_path)
    active = live.log("clicks", 0).segments.active
    assert active.offset_index.length > active.offset_index.size_in_bytes  # preallocated
    with LogManager.open(tmp_path, read_only=True) as reader:
        assert reader.owners[tmp_path] is not None
        log = reader.log("clicks", 0)
        assert log.log_end_offset == 60 and log.high_watermark == 60
        assert len(log.segments.base_offsets()) > 1
        got = values(reader, "clicks")
        assert [v[:8] for v in got if v] == [b"click-%02d" % i for i in range(60)]
        assert log.offset_for_timestamp(0) == 0
        assert not log.recovery.damage
        with pytest.raises(TierlogError, match="read-only"):
            reader.create_topic("more", 1)
    assert file_state(tmp_path) == before
    live.log("clicks", 0).append(build_batch([Record(value=b"after")]))  # the owner goes on


def test_a_read_only_log_refuses_every_change_and_writes_nothing(
        tmp_path: Path, live: LogManager) -> None:
    before = file_state(tmp_path)
    with LogManager.open(tmp_path, read_only=True) as reader:
        log = reader.log("clicks", 0)
        changes = [
            lambda: log.append(build_batch([Record(value=b"behind the owner's back")])),
            lambda: log.append_records([Record(value=b"x")], compression="zstd"),
            log.roll,
            lambda: log.truncate_to(10),
            lambda: log.truncate_fully_and_start_at(100),
            lambda: log.delete_records_before(5),
            lambda: log.maybe_increment_log_start_offset(5),
        ]
        for change in changes:
            with pytest.raises(ReadOnlyLogError, match="opened read-only"):
                change()
        assert (log.log_start_offset, log.log_end_offset) == (0, 60)
    assert file_state(tmp_path) == before


def test_a_partition_the_owner_is_still_creating_is_left_out(
        tmp_path: Path, live: LogManager) -> None:
    (tmp_path / "new-0").mkdir()  # made by the owner, its first segment not yet
    before = file_state(tmp_path)
    with LogManager.open(tmp_path, read_only=True) as reader:
        assert reader.topics() == ["clicks"]
    assert file_state(tmp_path) == before and (tmp_path / "new-0").is_dir()


def test_a_batch_in_flight_at_the_end_of_the_active_segment_is_not_read(
        tmp_path: Path, live: LogManager) -> None:
    log = live.log("clicks", 0)
    whole = build_batch([Record(value=b"in flight")])
    with open(log.segments.active.path, "ab") as f:
        f.write(whole[: len(whole) // 2])  # the writer is half way through its write
    before = file_state(tmp_path)
    with LogManager.open(tmp_path, read_only=True) as reader:
        assert reader.log("clicks", 0).log_end_offset == 60
        assert not reader.log("clicks", 0).recovery.damage
        assert len(values(reader, "clicks")) == 60
    assert file_state(tmp_path) == before


@pytest.mark.parametrize("which", ["active", "first"])
def test_damage_below_the_end_is_reported_where_it_is_and_left(
        tmp_path: Path, live: LogManager, which: str) -> None:
    segments = live.log("clicks", 0).segments
    segment = segments.active if which == "active" else segments.first
    assert segment is not None and len(segments) > 1
    first = segment.log.read_header(0)
    assert first is not None
    raw = bytearray(segment.path.read_bytes())
    raw[first.size_in_bytes - 2] ^= 0x40  # the last byte but one of the first batch's record
    segment.path.write_bytes(raw)
    before = file_state(tmp_path)
    with LogManager.open(tmp_path, read_only=True) as reader:
        log = reader.log("clicks", 0)
        if which == "active":  # the last segment is checked at open, the others when read
            [damage] = log.recovery.damage
            assert (damage.file, damage.position, damage.offset) == (
                segment.path, 0, segment.base_offset)
        else:
            assert log.recovery.damage == [] and log.log_end_offset == 60
        with pytest.raises(LogDamagedError, match=f"{segment.path}.*position 0 .*crc"):
            values(reader, "clicks")
    assert file_state(tmp_path) == before


@pytest.mark.parametrize("which", ["active", "first"])
def test_a_read_starting_past_the_damage_returns_its_records(
        tmp_path: Path, live: LogManager, which: str) -> None:
    """The damage is before the read: a consumer starting after it gets the records from its
    start (the segment is checked lazily, on this very read, for the first one)."""
    segments = live.log("clicks", 0).segments
    segment = segments.active if which == "active" else segments.first
    assert segment is not None
    headers = [h for _, h in segment.log.headers_from(0)]
    assert len(headers) > 4
    raw = bytearray(segment.path.read_bytes())
    raw[headers[0].size_in_bytes - 2] ^= 0x40  # the first batch's record: CRC fails
    segment.path.write_bytes(raw)
    start, end = headers[3].base_offset, headers[-1].next_offset
    before = file_state(tmp_path)
    with LogManager.open(tmp_path, read_only=True) as reader:
        log = reader.log("clicks", 0)
        got = [r.offset for r in log.read(start, 1 << 20, max_offset=end).records()]
        assert got == list(range(start, end))
        with pytest.raises(LogDamagedError, match=f"{segment.path}.*position 0 .*crc"):
            list(log.read(segment.base_offset, 1 << 20).records())
    assert file_state(tmp_path) == before


def test_a_missing_index_is_scanned_not_rebuilt(tmp_path: Path, clock: FakeClock) -> None:
    with LogManager.open(tmp_path, CONFIG, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("clicks", 1)[0]
        for i in range(60):
            log.append(build_batch([Record(value=b"click-%02d" % i + b"." * 80)]))
        first = log.segments.first
        assert first is not None and first is not log.segments.active
        index = first.offset_index.path
    index.unlink()
    before = file_state(tmp_path)
    with LogManager.open(tmp_path, read_only=True) as reader:
        assert len(values(reader, "clicks")) == 60
    assert not index.exists()
    assert file_state(tmp_path) == before


def test_beside_a_live_owner_a_tiered_partition_says_why_its_tier_is_not_attached(
        tmp_path: Path, clock: FakeClock) -> None:
    data = tmp_path / "data"
    config = {"remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    owner = LogManager.open(data, config, time_ms=clock, start_scheduler=False)
    try:
        log = owner.create_topic("t", 1, {"remote.storage.enable": True,
                                          "segment.bytes": 1024})[0]
        for i in range(30):
            log.append(build_batch([Record(value=b"v%02d" % i + b"." * 80)]))
        owner.tier_now()
        before = file_state(data)
        with LogManager.open(data, config, read_only=True) as reader:
            error = reader.remote_unavailable("t", 0)
            assert error is not None
            assert "read-only" in str(error) and f"process {os.getpid()}" in str(error)
            assert len(values(reader, "t")) == 30  # the local segments still hold them all
        assert file_state(data) == before
    finally:
        owner.close()
    with LogManager.open(data, config, read_only=True) as reader:  # no live owner now
        assert reader.remote_unavailable("t", 0) is None
        assert reader.remote_log_manager is not None


# -- an unclean restart's log lines ---------------------------------------------------------


def test_an_unclean_restart_logs_one_summary_and_warns_only_of_lost_bytes(
        tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    mgr = LogManager.open(tmp_path, time_ms=clock, start_scheduler=False)
    mgr.create_topic("idle", 30)
    busy = mgr.create_topic("busy", 1)[0]
    for i in range(5):
        busy.append(build_batch([Record(value=b"v%d" % i)]))
    die(mgr)
    caplog.set_level(logging.INFO, logger="tierlog")
    with LogManager.open(tmp_path, time_ms=clock, start_scheduler=False) as again:
        assert again.log("busy", 0).log_end_offset == 5
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], [r.getMessage() for r in warnings]
    summaries = [r.getMessage() for r in caplog.records if "unclean shutdown" in r.getMessage()]
    assert len(summaries) == 1 and "31 partitions" in summaries[0], summaries
    assert "no partition lost a byte" in summaries[0]

    caplog.clear()
    mgr = LogManager.open(tmp_path, time_ms=clock, start_scheduler=False)
    torn = mgr.log("busy", 0).segments.active.path
    die(mgr)
    with open(torn, "ab") as f:
        f.write(b"\x01" * 30)  # a torn write after the last batch
    with LogManager.open(tmp_path, time_ms=clock, start_scheduler=False):
        pass
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any("busy-0" in w and "30 bytes truncated" in w for w in lines), lines
    assert not any("idle-" in w for w in lines), lines
    [summary] = [w for w in lines if "unclean shutdown" in w]
    assert "1 lost or hold invalid bytes: busy-0" in summary
