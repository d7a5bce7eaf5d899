"""Rounds of SIGKILLs of a tiered writer on one directory: producer state must survive them all.

Shared by tests/test_crash_tiered.py (a short run) and benchmarks/bench_crash_tiered.py (500+
rounds). Each round starts ``crash_writer.py`` with ``--tier`` on the same log dir: it recovers
from the previous kill (unclean: no shutdown marker), re-sends each idempotent producer's last
batch in the log, continues the seeded workload with tiering and local retention after every
flush, and is SIGKILLed (from outside after a random number of output lines, or by itself
before a random file-system call). Local retention keeps (almost) nothing, so the producers'
last batches mostly live only in the remote tier. After each restart the round checks:

* nothing lost: the log end is at least every offset acknowledged by a flush and every log
  end an append returned before the kill, and it is a step boundary of the workload;
* no duplicate: every re-sent batch is reported as a duplicate with its original offsets.

``check_log`` opens the directory in this process and checks the whole log (remote part
included) against the regenerated workload.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.crash_writer import IDEMPOTENT_PRODUCERS, T0, TOPIC, last_steps, step_offsets, steps
from tierlog.common import filenames
from tierlog.log.loader import RecoveryReport
from tierlog.manager.log_manager import LogManager

WRITER = Path(__file__).with_name("crash_writer.py")


@dataclass
class Totals:
    """What a run of rounds did."""

    rounds: int = 0
    restarts: int = 0
    """Rounds that reopened an existing (SIGKILLed) log."""
    retries: int = 0
    duplicates_caught: int = 0
    appends: int = 0
    remote_only_producers: int = 0
    """Re-sent batches whose original lay below the local log start (only in the tier)."""
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)


@dataclass
class _State:
    """What the rounds so far promise about the log."""

    acked: int = 0
    appended: int = 0


def _parse(output: str) -> dict:
    """START/RETRY/APPEND/ACK lines; a line cut by the kill (no newline) is ignored."""
    out: dict = {"start": None, "retries": [], "appended": [], "acked": []}
    for line in output.split("\n")[:-1]:
        kind, *values = line.split() or [""]
        if kind not in ("START", "RETRY", "APPEND", "ACK"):
            continue
        numbers = [int(v) for v in values]
        if kind == "START":
            out["start"] = numbers
        elif kind == "RETRY":
            out["retries"].append(numbers)
        elif kind == "APPEND":
            out["appended"].append(numbers[1])
        elif kind == "ACK":
            out["acked"].append(numbers[0])
    return out


def run_round(root: Path, tier_url: str, seed: int, rng: random.Random) -> tuple[str, int]:
    """Start the writer on ``root`` and SIGKILL it; returns (its output, return code)."""
    args = [
        sys.executable, str(WRITER), str(root), str(seed),
        "--tier", tier_url,
        "--flush-every", str(rng.randint(1, 6)),
        "--segment-bytes", str(rng.choice((2048, 3072, 4096))),
        "--index-interval-bytes", str(rng.choice((0, 256, 4096))),
        "--local-retention-bytes", str(rng.choice((0, 0, 2048))),
    ]
    kill_after = None
    if rng.random() < 0.5:
        kill_after = rng.randint(1, 60)
    else:
        args += ["--die-at", str(rng.randint(1, 1500))]
    errors = root.parent / "writer.stderr"
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(errors, "w") as stderr:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines = []
        if kill_after is not None:
            while len(lines) < kill_after:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
            proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    if proc.returncode != -signal.SIGKILL:
        out += f"\nSTDERR {errors.read_text()}\n"
    return "".join(lines) + out, proc.returncode


def check_round(output: str, returncode: int, seed: int, state: _State, totals: Totals) -> list[str]:
    """The promises of one round; returns what was broken (empty: all kept)."""
    problems = []
    if returncode != -signal.SIGKILL:
        problems.append(f"writer did not die of SIGKILL (rc {returncode}): {output[-2000:]}")
    parsed = _parse(output)
    start = parsed["start"]
    if start is not None:
        totals.restarts += 1
        step, leo, local_start = start
        if leo < max(state.acked, state.appended):
            problems.append(f"restart lost data: log end {leo}, but {state.appended} was "
                            f"appended and {state.acked} acknowledged before the kill")
        offsets = step_offsets(seed, step)
        expected = {pid: offsets[i] for pid, i in _last_step_indexes(seed, step).items()}
        for pid, duplicate, first, last in parsed["retries"]:
            totals.retries += 1
            if pid not in expected:
                problems.append(f"retried producer {pid} has no batch in the log")
            elif not duplicate:
                problems.append(f"restart at {leo}: producer {pid}'s retried batch "
                                f"{expected[pid]} was appended again at [{first}, {last}]")
            elif (first, last) != expected[pid]:
                problems.append(f"producer {pid}'s duplicate reported offsets [{first}, {last}], "
                                f"the original is at {expected[pid]}")
            else:
                totals.duplicates_caught += 1
                totals.remote_only_producers += last < local_start
        state.appended = leo
    elif state.appended:
        problems.append(f"the writer did not reopen the log: {output[-2000:]}")
    if parsed["appended"]:
        state.appended = max(state.appended, parsed["appended"][-1])
        totals.appends += len(parsed["appended"])
    if parsed["acked"]:
        state.acked = max(state.acked, parsed["acked"][-1])
    return problems


def _last_step_indexes(seed: int, stop: int) -> dict[int, int]:
    last: dict[int, int] = {}
    for i, step in enumerate(steps(seed)):
        if i >= stop:
            break
        if step.producer_id in IDEMPOTENT_PRODUCERS:
            last[step.producer_id] = i
    return last


def run_rounds(root: Path, tier_url: str, seed: int, rounds: int,
               totals: Totals | None = None) -> Totals:
    """``rounds`` writer runs (each SIGKILLed) on one log dir; failures are collected with the
    round number, and the run stops at the first failing round."""
    totals = totals or Totals()
    rng = random.Random(seed)
    state = _State()
    began = time.monotonic()
    for n in range(rounds):
        output, rc = run_round(root, tier_url, seed, rng)
        totals.rounds += 1
        problems = check_round(output, rc, seed, state, totals)
        if problems:
            totals.failures += [f"seed {seed} round {n}: {p}" for p in problems]
            break
    totals.seconds += time.monotonic() - began
    return totals


def check_log(root: Path, tier_url: str, seed: int) -> tuple[int, int, RecoveryReport]:
    """Open the SIGKILLed directory here and check it whole: every batch, remote ones
    included, is the workload's; each idempotent producer's last batch is deduplicated when
    re-sent. Returns (log end offset, how many re-sent batches were only in the tier, what
    the open reported)."""
    mgr = LogManager.open(root, {"remote.storage.url": tier_url},
                          time_ms=lambda: T0 + 10**7, start_scheduler=False)
    try:
        log = mgr.log(TOPIC, 0)
        report = log.recovery
        assert not report.clean_shutdown
        leo = log.log_end_offset
        assert report.log_end_offset == leo
        offset, workload = log.log_start_offset, steps(seed)
        skipped = 0
        while skipped < offset:
            skipped += next(workload).record_count
        assert skipped == offset, "the log start is not a step boundary"
        count = 0
        while offset < leo:
            res = log.read(offset, max_bytes=1 << 20)
            batches = [b for b in res.batches() if b.next_offset > offset]
            assert batches, f"no batch at offset {offset}"
            for batch in batches:
                step = next(workload)
                stored = bytes(batch.view())
                assert batch.base_offset == offset
                assert stored[8:12] == step.data[8:12] and stored[16:] == step.data[16:], offset
                offset = batch.next_offset
                count += 1
        assert offset == leo
        stop = _step_count(seed, leo)
        offsets = step_offsets(seed, stop)
        remote_only = 0
        for pid, index in _last_step_indexes(seed, stop).items():
            step = last_steps(seed, stop)[pid]
            info = log.append(step.data)
            assert info.duplicate, f"producer {pid}'s re-sent batch was appended again"
            assert (info.first_offset, info.last_offset) == offsets[index]
            remote_only += offsets[index][1] < log.local_log_start_offset
        assert log.log_end_offset == leo
        partition = root / filenames.partition_dir_name(TOPIC, 0)
        assert partition.is_dir()
        return leo, remote_only, report
    finally:
        mgr.close()


def _step_count(seed: int, leo: int) -> int:
    offset = 0
    for i, step in enumerate(steps(seed)):
        if offset >= leo:
            return i
        offset += step.record_count
    raise AssertionError("unreachable")
