"""Compaction, retention and truncation keep plugin indexes right, with the real third-party
example plugin (examples/plugin-key-index, pip-installed into a scratch site): the cleaned
segment's ``.keyindex`` is fed as appends feed it and renamed with the segment's other files,
so ``lookup_key`` answers right at once, after a crash at any step of a swap, and after reopening.
"""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest

from tierlog import Log, Record
from tierlog.cleaner.compactor import Cleaner
from tierlog.cleaner.retention import DeletePolicy
from tierlog.common.filenames import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from tierlog.common.scheduler import Scheduler

TRANSIENT = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)
TOPIC = "users-0"
#: Big segments, rolled by hand: the cleaner then merges several into one group.
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 1 << 20, "segment.index.bytes": 4096,
          "index.interval.bytes": 100}


class Crash(BaseException):
    """A simulated process crash: a BaseException, so no cleanup code runs after it."""


def _fill(log: Log, clock) -> dict[bytes, int]:
    """Five closed segments: keys written once early (their latest lives in the first
    segments), keys overwritten throughout, a tombstone; returns each key's latest offset."""
    latest: dict[bytes, int] = {}

    def put(key: bytes, value: bytes | None) -> None:
        latest[key] = log.append_records([Record(key=key, value=value)]).first_offset
        clock.advance(1)

    for segment in range(5):
        for i in range(4):
            put(b"solo-%d-%d" % (segment, i), b"once" * 20)
        for i in range(12):
            put(b"hot-%d" % (i % 5), b"v%d-%d" % (segment, i) + b"x" * 60)
        if segment == 2:
            put(b"hot-4", None)
        log.roll()
    return latest


def _keyindex_names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".keyindex" in p.name)


def _expected_keyindex_names(directory: Path) -> list[str]:
    """One ``.keyindex`` per segment with data, named as its ``.log``."""
    return sorted(p.stem + ".keyindex" for p in directory.glob("*.log") if p.stat().st_size)


def _transient(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(TRANSIENT))


def _assert_lookups(log: Log, latest: dict[bytes, int]) -> None:
    wrong = {k: (log.lookup_key(k), v) for k, v in latest.items() if log.lookup_key(k) != v}
    assert not wrong, f"lookup_key (got, expected): {wrong}"


def test_lookup_key_answers_for_surviving_keys_right_after_compaction(host, tmp_path, clock):
    directory = tmp_path / TOPIC
    with Log.open(directory, CONFIG, time_ms=clock, plugins=host, auto_high_watermark=True) as log:
        latest = _fill(log, clock)
        result = Cleaner().clean_log(log, clock.now, force=True)
        assert result.segments_cleaned == 5 and result.records_removed > 0
        assert len(log.segments) == 2  # one cleaned segment, the active one
        _assert_lookups(log, latest)
        assert _transient(directory) == []
    # One .keyindex per segment, named as its .log (the active one's is written at close).
    assert _keyindex_names(directory) == _expected_keyindex_names(directory)
    # What compaction fed and wrote is what a rebuild from the cleaned .log writes.
    written = {p.name: p.read_bytes() for p in directory.glob("*.keyindex")}
    with Log.open(directory, CONFIG, time_ms=clock, plugins=host, auto_high_watermark=True,
                  had_clean_shutdown=True) as log:
        assert log.recovery.indexes_rebuilt == []
        _assert_lookups(log, latest)
    for path in directory.glob("*.keyindex"):
        path.unlink()
    with Log.open(directory, CONFIG, time_ms=clock, plugins=host, auto_high_watermark=True) as log:
        assert log.recovery.indexes_rebuilt
        _assert_lookups(log, latest)
    assert {name: (directory / name).read_bytes() for name in written} == written


def test_a_stale_cleaned_key_index_of_a_failed_attempt_is_not_reused(host, tmp_path, clock):
    directory = tmp_path / TOPIC
    with Log.open(directory, CONFIG, time_ms=clock, plugins=host, auto_high_watermark=True) as log:
        latest = _fill(log, clock)
        first = log.segments.first.path.stem
        # An earlier attempt died after writing its .cleaned key index (claiming a ghost key).
        stale = directory / f"{first}.keyindex{CLEANED_SUFFIX}"
        stale.write_bytes(b"TLKI\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x00\x05ghost"
                          + (7).to_bytes(8, "big"))
        Cleaner().clean_log(log, clock.now, force=True)
        assert log.lookup_key(b"ghost") is None
        _assert_lookups(log, latest)
        assert _transient(directory) == []


def test_old_key_indexes_wait_as_deleted_files_and_never_take_the_new_ones(host, tmp_path,
                                                                           clock):
    directory = tmp_path / TOPIC
    scheduler = Scheduler(clock)
    config = {**CONFIG, "file.delete.delay.ms": 1000}
    with Log.open(directory, config, time_ms=clock, plugins=host, auto_high_watermark=True,
                  scheduler=scheduler) as log:
        latest = _fill(log, clock)
        Cleaner().clean_log(log, clock.now, force=True)
        first = log.segments.first.path.stem
        assert f"{first}.keyindex{DELETED_SUFFIX}" in _keyindex_names(directory)
        clock.advance(1000)
        scheduler.run_due()
        assert _transient(directory) == []
        assert f"{first}.keyindex" in _keyindex_names(directory)
        _assert_lookups(log, latest)
    assert _keyindex_names(directory) == _expected_keyindex_names(directory)
    with Log.open(directory, config, time_ms=clock, plugins=host, auto_high_watermark=True,
                  had_clean_shutdown=True) as log:
        assert log.recovery.indexes_rebuilt == []
        _assert_lookups(log, latest)


def _crash_at(n: int, log_dir: Path, snapshot: Path):
    """A swap hook that copies the log dir (the disk as a crash leaves it) at its n-th call,
    then crashes."""
    calls = itertools.count()

    def hook(step: str, name: str) -> None:
        if next(calls) == n:
            shutil.copytree(log_dir, snapshot)
            raise Crash(f"crash after {step} of {name}")

    return hook


def test_a_crash_at_any_swap_step_reopens_with_a_right_key_index(host, tmp_path, clock):
    source = tmp_path / "source"
    with Log.open(source / TOPIC, CONFIG, time_ms=clock, plugins=host,
                  auto_high_watermark=True) as log:
        latest = _fill(log, clock)
        end_offset = log.log_end_offset
    steps: list[tuple[str, str]] = []
    work = tmp_path / "all-steps"
    shutil.copytree(source, work)
    with Log.open(work / TOPIC, CONFIG, time_ms=clock, plugins=host,
                  auto_high_watermark=True) as log:
        Cleaner(swap_hook=lambda step, name: steps.append((step, name))).clean_log(
            log, clock.now, force=True)
    renamed = [name for _, name in steps]
    # The key index moves with the segment's other files at every stage of the swap.
    assert any(name.endswith(".keyindex" + SWAP_SUFFIX) for name in renamed)
    assert any(name.endswith(".keyindex" + DELETED_SUFFIX) for name in renamed)
    assert any(name.endswith(".keyindex") for name in renamed)

    for n, (step, name) in enumerate(steps):
        work, snapshot = tmp_path / f"work-{n}", tmp_path / f"crashed-{n}"
        shutil.copytree(source, work)
        log = Log.open(work / TOPIC, CONFIG, time_ms=clock, plugins=host, auto_high_watermark=True)
        segments = list(log.segments)
        with pytest.raises(Crash):
            Cleaner(swap_hook=_crash_at(n, work / TOPIC, snapshot / TOPIC)).clean_log(
                log, clock.now, force=True)
        for segment in segments:
            if log.segments.get(segment.base_offset) is not segment:
                segment.close()
        log.close()
        # Indexes below the recovery point are trusted as found (only sanity-checked).
        with Log.open(snapshot / TOPIC, CONFIG, time_ms=clock, plugins=host,
                      auto_high_watermark=True, recovery_point=end_offset) as crashed:
            assert _transient(crashed.directory) == [], (step, name)
            assert crashed.log_end_offset == end_offset
            wrong = {k: (crashed.lookup_key(k), v) for k, v in latest.items()
                     if crashed.lookup_key(k) != v}
            assert not wrong, f"after a crash after {step} of {name}: {wrong}"


def test_retention_and_truncation_keep_the_key_index_right(host, tmp_path, clock):
    directory = tmp_path / TOPIC
    config = {**CONFIG, "cleanup.policy": "compact,delete", "retention.bytes": 1}
    with Log.open(directory, config, time_ms=clock, plugins=host, auto_high_watermark=True) as log:
        latest = _fill(log, clock)
        Cleaner().clean_log(log, clock.now, force=True)
        _assert_lookups(log, latest)
        log.append_records([Record(key=b"hot-0", value=b"after")])
        log.roll()
        log.append_records([Record(key=b"late", value=b"after")])
        log.roll()
        # Truncation drops what lies at or above its offset, and no more.
        log.truncate_to(log.log_end_offset - 1)
        assert log.lookup_key(b"late") is None
        assert log.lookup_key(b"hot-0") == log.log_end_offset - 1
        _assert_lookups(log, {k: v for k, v in latest.items() if k != b"hot-0"})
        # Retention deletes whole segments; their keys go with them (and their files).
        DeletePolicy().clean(log, clock.now)
        start = log.log_start_offset
        assert start > 0
        for key, offset in latest.items():
            if key != b"hot-0":
                assert log.lookup_key(key) == (offset if offset >= start else None), key
        assert _transient(directory) == []
    assert _keyindex_names(directory) == _expected_keyindex_names(directory)
