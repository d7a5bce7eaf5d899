"""Producer state of a tiered log whose local retention removed the segments holding the
producers' last batches: it must survive unclean restarts, so that a producer re-sending its
last batch after the restart gets a duplicate (its original offsets), not a second copy.

Kafka keeps the producer snapshot at the local log start offset (the data below it can no
longer be replayed locally), and every remote segment carries the snapshot at its end.
The writer is tests/crash_writer.py, SIGKILLed at the end of each run (``--kill-at-end``).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from support.crash_writer import step_offsets
from support.tiered_crash import check_log

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.producer.snapshot import decode_snapshot
from tierlog.remote import IndexType
from tierlog.remote.rlm.remote_reader import topic_id_partition

WRITER = Path(__file__).resolve().parents[1] / "support" / "crash_writer.py"
#: A workload prefix (seed, steps) after which the log keeps only its active segment locally
#: and both idempotent producers' last batches are only in the tier.
SEED, STEPS = 3, 20


def _run_writer(root: Path, tier_url: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(WRITER), str(root), str(SEED), "--tier", tier_url,
         "--flush-every", "1", "--segment-bytes", "2048", "--max-steps", str(STEPS),
         "--kill-at-end"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc.stdout.splitlines()


def _retries(lines: list[str]) -> tuple[tuple[int, int, int], dict[int, tuple[bool, int, int]]]:
    start = next(tuple(map(int, line.split()[1:])) for line in lines if line.startswith("START"))
    retries = {}
    for line in lines:
        if line.startswith("RETRY"):
            pid, duplicate, first, last = map(int, line.split()[1:])
            retries[pid] = (bool(duplicate), first, last)
    return start, retries


def test_remote_only_producers_survive_repeated_unclean_restarts(tmp_path: Path) -> None:
    root, tier_url = tmp_path / "logs", f"file://{tmp_path}/tier"
    _run_writer(root, tier_url)
    originals = step_offsets(SEED, STEPS)
    for restart in range(3):
        # Each run recovers the killed log, re-sends each producer's last batch, and is
        # killed again without appending anything new.
        (step, leo, local_start), retries = _retries(_run_writer(root, tier_url))
        assert step == STEPS
        assert sorted(retries) == [7, 8]
        remote_only = [pid for pid, (_, _, last) in retries.items() if last < local_start]
        for pid, (duplicate, first, last) in retries.items():
            assert duplicate, (f"restart {restart}: producer {pid}'s re-sent batch was appended "
                               f"again at [{first}, {last}]")
            assert (first, last) in originals
            assert last < leo
        assert sorted(remote_only) == [7, 8], "the scenario needs both producers only in the tier"
    leo, remote_only, report = check_log(root, tier_url, SEED)
    assert remote_only == 2
    assert not report.errors and not report.snapshots_from_remote


def test_a_lost_snapshot_at_the_local_log_start_is_taken_from_the_tier(tmp_path: Path) -> None:
    """Every remote segment carries the producer snapshot at its end offset + 1: when the
    local one at the local log start is gone, the open takes the tier's and says so."""
    root, tier_url = tmp_path / "logs", f"file://{tmp_path}/tier"
    _run_writer(root, tier_url)
    partition = root / "crash-0"
    local_start = min(int(p.name[:20]) for p in partition.glob("*.log"))
    assert local_start > 0
    snapshots = list(partition.glob("*.snapshot"))
    assert any(int(p.name[:20]) <= local_start for p in snapshots)
    for path in snapshots:
        path.unlink()
    _, remote_only, report = check_log(root, tier_url, SEED)
    assert report.snapshots_from_remote == [local_start]
    assert remote_only == 2 and not report.errors


def test_without_any_snapshot_the_open_says_what_it_forgot(tmp_path: Path) -> None:
    """No snapshot locally nor in the tier (the tier's objects deleted by hand): the log
    opens, and its recovery report names the producer state it could not restore."""
    root, tier_url = tmp_path / "logs", f"file://{tmp_path}/tier"
    _run_writer(root, tier_url)
    partition = root / "crash-0"
    for path in partition.glob("*.snapshot"):
        path.unlink()
    for path in (tmp_path / "tier").rglob("*.snapshot"):
        path.unlink()
    mgr = LogManager.open(root, {"remote.storage.url": tier_url}, start_scheduler=False)
    try:
        report = mgr.log("crash", 0).recovery
        assert report.snapshots_from_remote == []
        assert any("no producer snapshot at or below the local log start offset" in e
                   for e in report.errors), report.errors
    finally:
        mgr.close()


def test_segments_waiting_for_their_copy_keep_their_end_snapshots(tmp_path: Path, clock) -> None:
    """An open transaction holds the copy back (only data below the LSO is tiered) while
    flushes and recovery-point checkpoints go on: the snapshot at the end of every segment not
    yet copied must stay, since the copy ships it to the tier (an empty one was shipped)."""
    config = {"segment.bytes": 1024, "remote.storage.enable": True,
              "remote.storage.url": f"file://{tmp_path}/tier", "local.retention.bytes": 0}
    mgr = LogManager.open(tmp_path / "logs", config, time_ms=clock, start_scheduler=False)
    try:
        log = mgr.create_topic("t", 1)[0]
        log.append_records([Record(value=b"t")], producer_id=9, producer_epoch=0,
                           base_sequence=0, transactional=True)
        for i in range(40):
            log.append_records([Record(value=b"v" * 80)], producer_id=7, producer_epoch=0,
                               base_sequence=i)
            log.flush()
            mgr.checkpoint_recovery_points()
        assert len(log.segments) >= 5
        assert log.highest_offset_in_remote == -1  # nothing copied yet
        log.append_marker(9, 0, commit=True)
        mgr.tier_now()
        copied = [m for m in mgr.remote_log_manager.rlmm.list_remote_log_segments(
            topic_id_partition(log))]
        assert len(copied) >= 4
        for metadata in copied:
            with mgr.remote_log_manager.rsm.fetch_index(
                    metadata, IndexType.PRODUCER_SNAPSHOT) as stream:
                entries = decode_snapshot(stream.read())
            mine = [e for e in entries if e.producer_id == 7]
            assert mine and mine[0].last_offset == metadata.end_offset, metadata
    finally:
        mgr.close()


def test_retention_keeps_the_snapshot_a_replay_from_the_first_segment_needs(tmp_path: Path) -> None:
    """Deleting the snapshots below the new first segment keeps the newest one at or below
    it when none was taken exactly there: it is where a replay from that segment starts."""
    from tierlog.producer.state import ProducerStateManager

    psm = ProducerStateManager(tmp_path)
    for offset in (10, 20, 35):
        psm.update_map_end_offset(offset)
        psm.take_snapshot()
    psm.delete_snapshots_before(30, keep_floor=True)
    assert [int(p.name[:20]) for p in psm.snapshot_files()] == [20, 35]
    psm.delete_snapshots_before(35, keep_floor=True)
    assert [int(p.name[:20]) for p in psm.snapshot_files()] == [35]
    psm.delete_snapshots_before(40)
    assert psm.snapshot_files() == []
