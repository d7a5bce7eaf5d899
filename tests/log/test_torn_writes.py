"""Torn writes: an unclean open keeps exactly the valid prefix of the active segment.

The ``.log`` is cut at every byte of its last batch, or followed by garbage, zeros, a copy of
an earlier batch, or the zero tail of a preallocated file; recovery must cut at the first
invalid byte, keep every byte before it, and say so in ``log.recovery``.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest
from support.log_invariants import aborted_txns, check_indexes, check_offsets_contiguous

from tierlog import Log, Record
from tierlog.records import build_batch

CONFIG = {"segment.bytes": 4096, "index.interval.bytes": 200, "segment.index.bytes": 4096}


def _records(rng: random.Random, n: int, ts: int) -> list[Record]:
    return [Record(key=b"k%d" % i, value=rng.randbytes(rng.randint(0, 90)), timestamp=ts + i)
            for i in range(n)]


def _build(directory: Path, clock, last: str) -> tuple[str, int, int]:
    """A log of a few segments ending in a small batch of kind ``last`` (``data``: an
    idempotent gzip batch; ``abort``: the ABORT marker of an open transaction). Returns the
    active segment's file name and its last batch's start and end positions."""
    rng = random.Random(11)
    with Log.open(directory, CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        for i in range(40):
            codec = ("none", "gzip", "snappy", "lz4", "zstd")[i % 5]
            log.append_records(_records(rng, rng.randint(1, 6), clock.now + i * 10), codec,
                               producer_id=5, producer_epoch=0, base_sequence=log.producer_state
                               .last_entry(5).last_seq + 1 if i else 0, leader_epoch=i // 10)
        log.append_records(_records(rng, 3, clock.now + 500), producer_id=9, producer_epoch=0,
                           base_sequence=0, transactional=True, leader_epoch=4)
        if last == "data":
            log.append_records([Record(key=b"last", value=b"x" * 40, timestamp=clock.now + 900)],
                               "gzip", producer_id=5, producer_epoch=0,
                               base_sequence=log.producer_state.last_entry(5).last_seq + 1,
                               leader_epoch=5)
        else:
            log.append_marker(9, 0, commit=False, leader_epoch=5)
        active = log.segments.active
        start, batch = list(active.log.batches_from(0))[-1]
        assert len(log.segments) > 2
    return active.path.name, start, start + batch.size_in_bytes


def _state(log: Log) -> dict:
    return {
        "leo": log.log_end_offset,
        "lso": log.last_stable_offset,
        "aborted": aborted_txns(log),
        "epochs": log.leader_epoch_cache.entries(),
        "seq5": log.producer_state.last_entry(5).last_seq,
        "max_ts": log.segments.active.max_timestamp_so_far,
    }


@pytest.mark.parametrize("last", ["data", "abort"])
def test_cut_at_every_byte_of_the_last_batch(tmp_path, clock, last):
    original = tmp_path / "t-0"
    active, start, end = _build(original, clock, last)
    full = (original / active).read_bytes()
    assert end == len(full)
    # The state the log must come back to: the same log without its last batch.
    expected_dir = tmp_path / "expected" / "t-0"
    shutil.copytree(original, expected_dir)
    os.truncate(expected_dir / active, start)
    with Log.open(expected_dir, CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        expected = _state(log)
    complete = _reopen_state(original, clock)
    assert expected["leo"] == complete["leo"] - 1
    if last == "abort":  # without its marker the transaction is open again
        assert complete["lso"] == complete["leo"] and complete["aborted"]
        assert expected["aborted"] == complete["aborted"][:-1]
        assert expected["lso"] == complete["aborted"][-1][1]
    else:
        assert expected["seq5"] == complete["seq5"] - 1
    for cut in range(start, end):
        work = tmp_path / f"cut-{cut}" / "t-0"
        shutil.copytree(original, work)
        os.truncate(work / active, cut)
        with Log.open(work, CONFIG, time_ms=clock, auto_high_watermark=True,
                      recovery_point=expected["leo"] - 1) as log:
            assert _state(log) == expected, f"cut at byte {cut}"
            report = log.recovery
            assert report.bytes_truncated == cut - start
            assert bool(report.errors) == (cut > start)
            assert report.segments_recovered == 1 and report.indexes_rebuilt == [active]
            assert report.log_end_offset == expected["leo"]
            check_indexes(log)
            assert (work / active).read_bytes() == full[:start]
            # The log goes on from there.
            assert log.append_records([Record(value=b"after")]).first_offset == expected["leo"]
        shutil.rmtree(work.parent)


def _reopen_state(directory: Path, clock) -> dict:
    copy = directory.parent / "peek" / directory.name
    shutil.copytree(directory, copy)
    with Log.open(copy, CONFIG, time_ms=clock, had_clean_shutdown=True,
                  auto_high_watermark=True) as log:
        return _state(log)


def _tails() -> list[tuple[str, bytes]]:
    rng = random.Random(3)
    # baseOffset 0, batchLength 1 GiB, leader epoch 0, magic 2: a plausible header, no batch
    header_of_a_giant = bytes(8) + (1 << 30).to_bytes(4, "big") + bytes(4) + b"\x02"
    return [
        *((f"garbage-{n}", rng.randbytes(n)) for n in (1, 11, 12, 16, 17, 60, 61, 62, 300, 5000)),
        *((f"zeros-{n}", b"\x00" * n) for n in (1, 12, 61, 4096, 1 << 20)),
        ("giant-header", header_of_a_giant + b"\x00" * 100),
        ("half-a-batch", build_batch([Record(value=b"v" * 200)], now_ms=0)[:150]),
    ]


@pytest.mark.parametrize("name,tail", _tails(), ids=[n for n, _ in _tails()])
def test_garbage_after_the_last_batch_is_cut(tmp_path, clock, caplog, name, tail):
    directory = tmp_path / "t-0"
    active, _, _ = _build(directory, clock, "data")
    valid = (directory / active).read_bytes()
    before = _reopen_state(directory, clock)
    with open(directory / active, "ab") as f:
        f.write(tail)
    with Log.open(directory, CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        assert _state(log) == before
        assert log.recovery.bytes_truncated == len(tail)
        assert log.recovery.errors and active in log.recovery.errors[0]
        assert f"{len(tail)} bytes truncated" in caplog.text  # reported through logging
        check_offsets_contiguous(log)
        check_indexes(log)
    assert (directory / active).read_bytes() == valid


def test_a_replayed_earlier_batch_at_the_end_is_cut(tmp_path, clock):
    """A whole batch with a valid CRC but offsets going backwards is not part of the log."""
    directory = tmp_path / "t-0"
    active, _, _ = _build(directory, clock, "data")
    valid = (directory / active).read_bytes()
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        replay = bytes(next(log.segments.active.log.batches_from(0))[1].view())
    with open(directory / active, "ab") as f:
        f.write(replay)
    with Log.open(directory, CONFIG, time_ms=clock) as log:
        assert log.recovery.bytes_truncated == len(replay)
        assert "not above" in log.recovery.errors[0]
    assert (directory / active).read_bytes() == valid


@pytest.mark.parametrize("index_missing", [False, True])
def test_corruption_inside_an_older_unflushed_segment_drops_everything_after_it(
    tmp_path, clock, index_missing
):
    directory = tmp_path / "t-0"
    _build(directory, clock, "data")
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        bases = log.segments.base_offsets()
        middle = log.segments.get(bases[1])
        batches = list(middle.log.batches_from(0))
        bad_position, bad_batch = batches[len(batches) // 2]
    middle_file = directory / f"{bases[1]:020d}.log"
    later = [directory / f"{b:020d}.log" for b in bases[2:]]
    later_bytes = sum(p.stat().st_size for p in later)
    data = bytearray(middle_file.read_bytes())
    data[bad_position + 70] ^= 0x40  # a record byte: only the CRC can notice
    middle_file.write_bytes(bytes(data))
    if index_missing:  # recovered while loading: the later segments must still go
        middle_file.with_suffix(".index").unlink()
    with Log.open(directory, CONFIG, time_ms=clock, recovery_point=bases[1]) as log:
        report = log.recovery
        assert log.log_end_offset == bad_batch.base_offset
        assert log.segments.base_offsets() == bases[:2]
        assert report.segments_deleted == bases[2:]
        assert report.bytes_truncated == len(data) - bad_position + later_bytes
        assert "crc" in report.errors[0].lower()
        assert report.segments_recovered == 1  # the segment below the recovery point is trusted
        check_indexes(log)
        # Producer state and epochs follow the shortened log.
        assert log.leader_epoch_cache.latest_entry.start_offset < log.log_end_offset
        assert all(int(p.name[:20]) <= log.log_end_offset for p in directory.glob("*.snapshot"))
    assert not any(p.exists() for p in later)
    assert middle_file.read_bytes() == bytes(data[:bad_position])


def test_preallocated_segment_with_a_zero_tail(tmp_path, clock):
    config = {**CONFIG, "segment.bytes": 1 << 20, "preallocate": True}
    directory = tmp_path / "t-0"
    active = "00000000000000000000.log"
    log = Log.open(directory, config, time_ms=clock)
    for i in range(50):
        log.append_records([Record(key=b"k", value=b"v" * i, timestamp=clock.now + i)])
    assert (directory / active).stat().st_size == 1 << 20
    valid = log.segments.active.size
    crashed = tmp_path / "crashed" / "t-0"
    shutil.copytree(directory, crashed)  # the files as a crash leaves them: never trimmed
    log.close()
    with Log.open(crashed, config, time_ms=clock) as recovered:
        assert recovered.log_end_offset == 50
        assert recovered.recovery.bytes_truncated == (1 << 20) - valid
        assert (crashed / active).stat().st_size == valid
        check_indexes(recovered)
        assert recovered.append_records([Record(value=b"next")]).first_offset == 50
    assert (crashed / active).read_bytes()[:valid] == (directory / active).read_bytes()
