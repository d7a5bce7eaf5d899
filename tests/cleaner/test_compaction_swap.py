"""The cleaner's segment swap: a crash at any step leaves a log that reopens to the view before
or after compaction (per group of segments), with no transient files left."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

import pytest
from support.compaction_workload import TOPIC_DIR, Workload, committed_view, open_log, read_all

from tierlog import Log, Record
from tierlog.cleaner import swap
from tierlog.cleaner.compactor import Cleaner
from tierlog.common.filenames import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from tierlog.common.scheduler import Scheduler
from tierlog.errors import LogCleaningAbortedError

TRANSIENT = (CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX)
#: Sparse index entries every ~100 bytes, so an index paired with the wrong .log shows;
#: small preallocated indexes keep the many reopens quick.
CONFIG = {"cleanup.policy": "compact", "index.interval.bytes": 100, "segment.bytes": 1 << 20,
          "segment.index.bytes": 4096}


class Crash(BaseException):
    """A simulated process crash. A BaseException, so no cleanup code runs after it, as none
    would after a real crash."""


def _build_source(log_dir: Path, clock) -> int:
    """A closed log of five segments with duplicates, tombstones, committed and aborted
    transactions and every codec; segments 1 and 3 hold only records that segment 4
    supersedes. Returns a segment.bytes that groups them as [0, 1], [2, 3], [4]: a group's
    last segment then goes entirely (only its last batch's header stays)."""
    log = Log.open(log_dir / TOPIC_DIR, CONFIG, time_ms=clock, auto_high_watermark=True)
    workload = Workload(log, clock, seed=11, keys=25)
    for i in range(5):
        if i % 2 == 0:
            workload.run(8).finish()
        if i % 2 or i == 4:
            for codec in ("snappy", "none"):
                log.append_records([Record(b"superseded-%s" % codec.encode(), b"%d" % i)], codec)
        log.roll()
    sizes = [s.size for s in log.segments.non_active()]
    log.close()
    limit = max(sizes[i] + sizes[i + 1] for i in (0, 2))
    assert all(sizes[i] + sizes[i + 1] + sizes[i + 2] > limit for i in (0, 2))
    return limit


def _records(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]


def _open_log(directory: Path, clock, segment_bytes: int, recovery_point: int = 0) -> Log:
    """Open with segments below ``recovery_point`` trusted (indexes only sanity-checked), as
    after a crash of a broker that had flushed them."""
    return Log.open(directory / TOPIC_DIR, {**CONFIG, "segment.bytes": segment_bytes},
                    time_ms=clock, auto_high_watermark=True, recovery_point=recovery_point)


def _open_copy(source: Path, target: Path, clock, segment_bytes: int) -> Log:
    shutil.copytree(source, target)
    return _open_log(target, clock, segment_bytes, recovery_point=1 << 62)


def _crash_at(n: int, log_dir: Path, snapshot: Path):
    """A swap hook that copies the log dir (the disk as a crash leaves it) at its n-th call,
    then crashes."""
    calls = itertools.count()

    def hook(step: str, name: str) -> None:
        if next(calls) == n:
            shutil.copytree(log_dir, snapshot)
            raise Crash(f"crash after {step} of {name}")

    return hook


def _range_states(records: list[tuple], pre: list[tuple], post: list[tuple],
                  bounds: list[int]) -> list[set[str]]:
    """For each group's offset range: whether the records there are the pre view, the post
    view (or both, when compaction changed nothing there)."""
    states = []
    for lo, hi in itertools.pairwise(bounds):
        got = [r for r in records if lo <= r[0] < hi]
        state = {name for name, view in (("pre", pre), ("post", post))
                 if [r for r in view if lo <= r[0] < hi] == got}
        assert state, f"offsets [{lo}, {hi}) are neither the pre- nor the post-compaction view"
        states.append(state)
    return states


def test_crash_at_every_swap_step_reopens_to_the_pre_or_post_view(tmp_path, clock):
    source = tmp_path / "source"
    segment_bytes = _build_source(source, clock)
    now = clock.now

    with _open_copy(source, tmp_path / "pre", clock, segment_bytes) as log:
        pre = _records(read_all(log))
        committed = committed_view(log)
        end_offset = log.log_end_offset
    steps: list[tuple[str, str]] = []
    with _open_copy(source, tmp_path / "post", clock, segment_bytes) as log:
        result = Cleaner(swap_hook=lambda step, name: steps.append((step, name))).clean_log(
            log, now, force=True)
        assert result.segments_cleaned == 5 and result.bytes_after < result.bytes_before
        post = _records(read_all(log))
        bounds = [*log.segments.base_offsets(), end_offset + 1]
    assert len(bounds) == 5  # three groups, the active segment, the end
    assert pre != post
    assert [s for s, _ in steps].count(swap.CLEANED_WRITTEN) == 3

    for n, (step, name) in enumerate(steps):
        work, snapshot = tmp_path / f"work-{n}", tmp_path / f"crashed-{n}"
        log = _open_copy(source, work, clock, segment_bytes)
        segments = list(log.segments)
        with pytest.raises(Crash):
            Cleaner(swap_hook=_crash_at(n, work, snapshot)).clean_log(log, now, force=True)
        for segment in segments:
            if log.segments.get(segment.base_offset) is not segment:
                segment.close()
        log.close()

        with _open_log(snapshot, clock, segment_bytes, recovery_point=end_offset) as crashed:
            left = sorted(p.name for p in crashed.directory.iterdir() if p.name.endswith(TRANSIENT))
            assert left == [], f"crash after {step} of {name} left {left}"
            assert crashed.log_end_offset == end_offset
            records = _records(read_all(crashed, max_bytes=100))
            offsets = [r[0] for r in records]
            assert offsets == sorted(set(offsets))
            states = _range_states(records, pre, post, bounds[:-1])
            group = [s for s, _ in steps[:n + 1]].count(swap.CLEANED_WRITTEN) - 1
            assert all("post" in s for s in states[:group]), (step, name, states)
            assert all("pre" in s for s in states[group + 1:]), (step, name, states)
            # Kafka's loader: while a .cleaned file of the segment remains, its .swap files
            # are deleted (the old segments stay); once all are .swap, the swap completes.
            renames_left = n + 1 < len(steps) and steps[n + 1][0] == swap.RENAMED_TO_SWAP
            if step == swap.CLEANED_WRITTEN or (step == swap.RENAMED_TO_SWAP and renames_left):
                assert "pre" in states[group], (step, name, states)
            else:
                assert "post" in states[group], (step, name, states)
            assert committed_view(crashed) == committed
            # Cleaning the recovered log again converges to the post-compaction records.
            Cleaner().clean_log(crashed, now, force=True)
            assert _records(read_all(crashed)) == post


def test_swap_is_abandoned_when_the_log_lost_the_segments(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock)
    for i in range(4):
        log.append_records([Record(b"k", b"%d" % i)])
        log.roll()
    old = log.segments.first
    cleaned = swap.open_cleaned_segment(log, old.base_offset)
    log.truncate_fully_and_start_at(10)
    with pytest.raises(LogCleaningAbortedError, match="segments \\[0\\] are gone"):
        swap.replace_segments(log, cleaned, [old])
    assert not [p for p in log.directory.iterdir() if p.name.endswith(TRANSIENT)]
    log.close()


def test_truncation_during_cleaning_abandons_the_run_cleanly(tmp_path, clock):
    log = open_log(tmp_path / TOPIC_DIR, clock, **{"segment.bytes": 300})
    for i in range(6):
        log.append_records([Record(b"k", b"%d" % i * 100)])
        log.roll()

    def truncate_after_first_swap(step: str, name: str) -> None:
        if step == swap.OLD_DELETED and log.log_end_offset > 2:
            log.truncate_to(2)  # e.g. after an unclean leader election, while cleaning

    cleaner = Cleaner(swap_hook=truncate_after_first_swap)
    result = cleaner.clean_log(log, clock.now, force=True)
    assert result.skipped is not None and "abandoned" in result.skipped
    assert result.end_offset == -1
    assert not [p for p in log.directory.iterdir() if p.name.endswith(TRANSIENT)]
    assert cleaner.checkpoints.read(log) is None
    assert [r.value for r in read_all(log)] == [b"1" * 100]
    log.close()


def test_replaced_segments_stay_readable_until_file_delete_delay(tmp_path, clock):
    scheduler = Scheduler(clock)
    log = Log.open(tmp_path / TOPIC_DIR, {"cleanup.policy": "compact", "preallocate": True,
                                          "segment.bytes": 1 << 16, "file.delete.delay.ms": 1000},
                   time_ms=clock, auto_high_watermark=True, scheduler=scheduler)
    for i in range(3):
        log.append_records([Record(b"k", b"%d" % i)])
        log.roll()
    fetched = log.read(0)  # a slice of the old first segment, sent after the swap
    Cleaner().clean_log(log, clock.now, force=True)
    names = sorted(p.name for p in log.directory.iterdir())
    assert "00000000000000000000.log.deleted" in names
    assert [r.value for r in fetched.records()] == [b"0"]
    assert all(s.size == s.path.stat().st_size for s in log.segments.non_active())  # trimmed
    clock.advance(1000)
    scheduler.run_due()
    assert not [p for p in log.directory.iterdir() if p.name.endswith(TRANSIENT)]
    assert [r.value for r in read_all(log)] == [b"2"]
    log.close()
