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

from crash_writer import step_offsets
from tiered_crash import check_log

WRITER = Path(__file__).with_name("crash_writer.py")
#: A workload prefix (seed, steps) after which the log keeps only its active segment locally
#: and both idempotent producers' last batches are only in the tier.
SEED, STEPS = 3, 20


def _run_writer(root: Path, tier_url: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(WRITER), str(root), str(SEED), "--tier", tier_url,
         "--flush-every", "1", "--segment-bytes", "2048", "--max-steps", str(STEPS),
         "--kill-at-end"],
        capture_output=True, text=True, timeout=300,
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
    leo, remote_only = check_log(root, tier_url, SEED)
    assert remote_only == 2
