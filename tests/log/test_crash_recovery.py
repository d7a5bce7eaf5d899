"""Crash recovery: a writer process SIGKILLed at a random moment loses nothing it acknowledged.

Each run starts ``crash_writer.py`` on a fresh log dir with a seeded workload and settings,
kills it (from outside after a random number of output lines, or by itself just before a
chosen file-system call, possibly in the middle of a segment roll), reopens the dir with a
LogManager (unclean: no shutdown marker) and checks the log against the regenerated workload.
Every plan comes from ``random.Random(run)``: a failing run is reproducible by its number.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.crash_writer import IDEMPOTENT_PRODUCERS, T0, TOPIC, steps
from support.log_invariants import (
    TxnModel,
    aborted_txns,
    check_indexes,
    check_offsets_contiguous,
    epoch_starts,
    log_batches,
    log_file_bytes,
)

from tierlog.checkpoint.checkpoint_file import OffsetCheckpointFile
from tierlog.common import filenames
from tierlog.manager.log_manager import LogManager
from tierlog.producer.snapshot import read_snapshot

WRITER = Path(__file__).resolve().parents[1] / "support" / "crash_writer.py"
RUNS = 60
MODES = ("outside", "io", "roll")


def _plan(run: int) -> dict:
    rng = random.Random(run)
    mode = MODES[run % len(MODES)]
    plan = {
        "mode": mode,
        "seed": rng.randrange(1 << 30),
        "flush_every": rng.randint(1, 8),
        "segment_bytes": rng.choice((2048, 3072, 4096) if mode == "roll" else (4096, 8192, 65536)),
        "index_interval_bytes": rng.choice((0, 64, 512, 4096)),
        "segment_index_bytes": rng.choice((48, 120, 4096)),
        "preallocate": rng.random() < 0.3,
    }
    if mode == "outside":
        plan["kill_after_lines"] = rng.randint(2, 150)
    else:
        plan["die_at"] = rng.randint(1, 150 if mode == "roll" else 800)
    return plan


def _run_writer(directory: Path, plan: dict) -> str:
    args = [
        sys.executable, str(WRITER), str(directory), str(plan["seed"]),
        "--flush-every", str(plan["flush_every"]),
        "--segment-bytes", str(plan["segment_bytes"]),
        "--index-interval-bytes", str(plan["index_interval_bytes"]),
        "--segment-index-bytes", str(plan["segment_index_bytes"]),
    ]
    if plan["preallocate"]:
        args.append("--preallocate")
    if "die_at" in plan:
        args += ["--die-at", str(plan["die_at"])]
        if plan["mode"] == "roll":
            args.append("--in-roll")
    errors = directory.parent / "writer.stderr"  # a file: a full pipe must not block it
    with open(errors, "w") as stderr:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines = []
        if plan["mode"] == "outside":
            while len(lines) < plan["kill_after_lines"]:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=120)
    died = proc.returncode == -signal.SIGKILL
    assert died, f"writer did not die of SIGKILL: {errors.read_text()}"
    return "".join(lines) + out


def _parse(output: str) -> tuple[list[int], list[int]]:
    """(log end offsets printed after appends, recovery points printed after flushes);
    a line cut by the kill is ignored."""
    appended, acked = [], []
    for line in output.split("\n")[:-1]:
        kind, *values = line.split()
        if kind == "APPEND":
            appended.append(int(values[1]))
        elif kind == "ACK":
            acked.append(int(values[0]))
    return appended, acked


@pytest.mark.parametrize("run", range(RUNS))
def test_sigkilled_writer_recovers_everything_it_acknowledged(tmp_path, run):
    plan = _plan(run)
    root = tmp_path / "logs"
    appended, acked = _parse(_run_writer(root, plan))
    partition = root / filenames.partition_dir_name(TOPIC, 0)
    if not partition.exists():
        pytest.skip(f"run {run}: killed before the topic existed")
    checkpoint = OffsetCheckpointFile(root / filenames.RECOVERY_POINT_CHECKPOINT).read()
    checkpointed_rp = checkpoint.get((TOPIC, 0), 0)
    bytes_before = log_file_bytes(partition)

    mgr = LogManager.open(root, time_ms=lambda: T0 + 10**7, start_scheduler=False)
    try:
        log = mgr.log(TOPIC, 0)
        report = log.recovery
        leo = log.log_end_offset
        # Everything acknowledged, and everything whose append returned, is there.
        assert leo >= max(acked, default=0), plan
        assert leo >= max(appended, default=0), plan
        # The log is exactly a prefix of the workload.
        batches = log_batches(log)
        offset = 0
        for batch, step in zip(batches, steps(plan["seed"]), strict=False):
            assert batch.base_offset == offset
            # Only the base offset and (stamped by the leader, as Kafka does) the partition
            # leader epoch may differ from what the producer built: both lie outside the CRC.
            stored = bytes(batch.view())
            assert stored[8:12] == step.data[8:12] and stored[16:] == step.data[16:], (plan, offset)
            assert batch.partition_leader_epoch == 0, (plan, offset)
            offset += step.record_count
        assert offset == leo
        check_offsets_contiguous(log)
        check_indexes(log)
        # What recovery reports matches what it did to the files.
        assert not report.clean_shutdown
        assert report.log_end_offset == leo
        assert report.bytes_truncated == bytes_before - log_file_bytes(partition)
        assert log.recovery_point == report.recovery_point == min(checkpointed_rp, leo)
        bases = log.segments.base_offsets()
        floor = max((b for b in bases if b <= checkpointed_rp), default=bases[0])
        recovered = {f"{b:020d}.log" for b in bases if b >= min(floor, bases[-1])}
        assert recovered <= set(report.indexes_rebuilt)
        if plan["preallocate"] and report.bytes_truncated:
            assert report.errors
        # Leader epochs, transactions and producer state were rebuilt from the data.
        assert [tuple(e) for e in log.leader_epoch_cache.entries()] == epoch_starts(batches)
        model = TxnModel()
        for batch in batches:
            model.apply(batch)
        assert aborted_txns(log) == model.aborted
        assert log.last_stable_offset == model.last_stable_offset(log.high_watermark)
        _check_read_committed(log, batches, model)
        for snapshot in partition.glob("*.snapshot"):
            assert filenames.offset_from_filename(snapshot.name) <= leo
            read_snapshot(snapshot)
        _check_producers_resume(log, batches, plan["seed"])
        for pid in list(model.open):
            log.append_marker(pid, 0, commit=True, coordinator_epoch=0)
        assert log.last_stable_offset == log.high_watermark == log.log_end_offset
    finally:
        mgr.close()


def _check_read_committed(log, batches, model: TxnModel) -> None:
    lso = log.last_stable_offset
    expected = [o for b in batches if not b.is_control
                for o in range(b.base_offset, b.next_offset)
                if o < lso and o not in model.aborted_offsets]
    got, offset = [], 0
    while offset < lso:
        res = log.read(offset, max_bytes=1 << 20, isolation="read_committed")
        got += [r.offset for r in res.records()]
        offset = max(b.next_offset for b in res.batches())
    assert got == expected


def _check_producers_resume(log, batches, seed: int) -> None:
    """Re-sending each idempotent producer's last batch is a duplicate (its offsets, nothing
    written); its next batch of the workload is accepted in sequence."""
    workload = steps(seed)
    present = [next(workload) for _ in batches]
    upcoming = {}
    while len(upcoming) < len(IDEMPOTENT_PRODUCERS):
        step = next(workload)
        if step.producer_id in IDEMPOTENT_PRODUCERS:
            upcoming.setdefault(step.producer_id, step)
    for pid in IDEMPOTENT_PRODUCERS:
        mine = [(b, s) for b, s in zip(batches, present, strict=True) if b.producer_id == pid]
        if mine:
            last_batch, last_step = mine[-1]
            assert log.producer_state.last_entry(pid).last_seq == last_batch.last_sequence
            leo = log.log_end_offset
            dup = log.append(last_step.data)
            assert dup.duplicate
            assert (dup.first_offset, dup.last_offset) == (last_batch.base_offset,
                                                          last_batch.last_offset)
            assert log.log_end_offset == leo
        info = log.append(upcoming[pid].data)
        assert not info.duplicate and info.first_offset >= 0
