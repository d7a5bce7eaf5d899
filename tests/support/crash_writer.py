"""Crash-test writer: appends a seeded, deterministic workload through a LogManager until killed.

Run by tests/test_crash_recovery.py as ``python crash_writer.py DIR SEED [options]``. It prints
``APPEND <step> <log end offset>`` after every append returns and ``ACK <recovery point>``
after every completed flush (and recovery-point checkpoint). The test SIGKILLs it from
outside, or ``--die-at N`` makes it SIGKILL itself just before its N-th file-system call
(``--in-roll``: counting only calls made while rolling a segment), which is reproducible.
``steps(seed)`` is the workload; the test regenerates it to know what each batch must be.

With ``--tier URL`` the topic is tiered (``remote.storage.enable``, ``local.retention.bytes``)
and every flush also runs ``tier_now`` (copy, remote and local retention) and checkpoints the
log start offsets. A writer started on a directory that already holds the topic resumes: it
prints ``START <step> <log end offset> <local log start offset>``, re-sends the last batch
each idempotent producer has in the log, as a producer retrying after a broker restart does
(``RETRY <producer id> <duplicate 0/1> <first offset> <last offset>``), and continues the
workload at ``<step>``.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tierlog.manager.log_manager import LogManager
from tierlog.records import Record, build_batch, build_control_batch

TOPIC = "crash"
#: The writer's clock: step i happens at T0 + i * STEP_MS, so markers (timestamped by the
#: log) are the same bytes when the test rebuilds them.
T0 = 1_700_000_000_000
STEP_MS = 20
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
IDEMPOTENT_PRODUCERS = (7, 8)
TRANSACTIONAL_PRODUCERS = (9, 10)
#: Names of the builtins counted by --die-at: every call that changes a file or a mapping.
IO_CALLS = frozenset({
    "pwritev", "pwrite", "write", "ftruncate", "truncate", "replace", "rename", "fsync",
    "unlink", "open", "pack_into", "flush", "mkdir",
})


@dataclass(frozen=True)
class Step:
    """One append of the workload: a producer batch, or a transaction marker."""

    data: bytes
    """The batch as the writer hands it over (base offset 0): the log patches only that."""
    producer_id: int = -1
    marker: int | None = None
    """ABORT (0) or COMMIT (1) for a marker step, written with ``append_marker``."""

    @property
    def record_count(self) -> int:
        return int.from_bytes(self.data[57:61], "big")


def steps(seed: int) -> Iterator[Step]:
    """The endless workload of ``seed``: plain, idempotent and transactional batches of every
    codec and varied sizes (leader epochs rising, some timestamps late), and COMMIT/ABORT
    markers from two interleaved transactional producers."""
    rng = random.Random(seed)
    sequences = dict.fromkeys(IDEMPOTENT_PRODUCERS + TRANSACTIONAL_PRODUCERS, 0)
    in_txn = dict.fromkeys(TRANSACTIONAL_PRODUCERS, False)
    i = 0
    while True:
        now = T0 + i * STEP_MS
        kind = rng.random()
        if kind < 0.25:
            pid = rng.choice(TRANSACTIONAL_PRODUCERS)
            if in_txn[pid] and rng.random() < 0.4:
                in_txn[pid] = False
                marker = rng.choice((0, 1))
                yield Step(build_control_batch(marker, producer_id=pid, producer_epoch=0,
                                               coordinator_epoch=0, timestamp=now),
                           pid, marker)
                i += 1
                continue
            in_txn[pid] = True
        elif kind < 0.55:
            pid = rng.choice(IDEMPOTENT_PRODUCERS)
        else:
            pid = -1
        count = rng.randint(1, 10)
        late = rng.random() < 0.1
        records = [
            Record(key=b"k%d-%d" % (i, j), value=rng.randbytes(rng.randint(0, 120)),
                   headers=[("h", b"%d" % j)] if rng.random() < 0.3 else (),
                   timestamp=now - (5000 if late else 0) + j)
            for j in range(count)
        ]
        sequence = -1
        if pid >= 0:
            sequence = sequences[pid]
            sequences[pid] += count
        yield Step(build_batch(
            records, compression=rng.choice(CODECS), producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1, base_sequence=sequence,
            is_transactional=pid in TRANSACTIONAL_PRODUCERS, partition_leader_epoch=i // 40,
            now_ms=now,
        ), pid)
        i += 1


class _Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


def _die_at(n: int, in_roll: bool) -> None:
    """SIGKILL this process just before its n-th file-system call (inside a roll only, with
    ``in_roll``: Log.roll, LogAppends.roll and LocalLog.roll are all named ``roll``)."""
    state = {"calls": 0, "roll_depth": 0}
    out = sys.stdout

    def hook(frame, event, arg):  # sys.setprofile's signature
        if event == "call" and frame.f_code.co_name == "roll":
            state["roll_depth"] += 1
        elif event == "return" and frame.f_code.co_name == "roll":
            state["roll_depth"] -= 1
        elif event == "c_call" and getattr(arg, "__name__", "") in IO_CALLS:
            if (in_roll and not state["roll_depth"]) or getattr(arg, "__self__", None) is out:
                return
            state["calls"] += 1
            if state["calls"] >= n:
                os.kill(os.getpid(), signal.SIGKILL)

    sys.setprofile(hook)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument("seed", type=int)
    parser.add_argument("--flush-every", type=int, default=5)
    parser.add_argument("--segment-bytes", type=int, default=16384)
    parser.add_argument("--index-interval-bytes", type=int, default=256)
    parser.add_argument("--segment-index-bytes", type=int, default=4096)
    parser.add_argument("--preallocate", action="store_true")
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--die-at", type=int, default=0)
    parser.add_argument("--in-roll", action="store_true")
    parser.add_argument("--tier", default="", help="remote.storage.url: tier the topic")
    parser.add_argument("--local-retention-bytes", type=int, default=0)
    parser.add_argument("--kill-at-end", action="store_true",
                        help="SIGKILL itself after --max-steps instead of returning")
    args = parser.parse_args(argv)
    clock = _Clock()
    mgr = LogManager.open(args.directory, {"remote.storage.url": args.tier} if args.tier else {},
                          time_ms=clock, start_scheduler=False)
    out = sys.stdout
    if mgr.partitions(TOPIC):
        log = mgr.log(TOPIC, 0)
        start = resume_step(args.seed, log.log_end_offset)
        out.write(f"START {start} {log.log_end_offset} {log.local_log_start_offset}\n")
        clock.now = T0 + start * STEP_MS
        for pid, step in last_steps(args.seed, start).items():
            info = log.append(step.data)
            out.write(f"RETRY {pid} {int(info.duplicate)} {info.first_offset} {info.last_offset}\n")
        out.flush()
    else:
        config = {
            "segment.bytes": args.segment_bytes,
            "index.interval.bytes": args.index_interval_bytes,
            "segment.index.bytes": args.segment_index_bytes,
            "preallocate": args.preallocate,
        }
        if args.tier:
            config.update({"remote.storage.enable": True,
                           "local.retention.bytes": args.local_retention_bytes})
        log = mgr.create_topic(TOPIC, 1, config)[0]
        start = 0
    if args.die_at:
        _die_at(args.die_at, args.in_roll)
    for i, step in enumerate(steps(args.seed)):
        if i >= args.max_steps:
            break
        if i < start:
            continue
        clock.now = T0 + i * STEP_MS
        if step.marker is not None:
            log.append_marker(step.producer_id, 0, commit=bool(step.marker), coordinator_epoch=0)
        else:
            log.append(step.data)
        out.write(f"APPEND {i} {log.log_end_offset}\n")
        if (i + 1) % args.flush_every == 0:
            log.flush()
            if args.tier:
                mgr.tier_now()
                mgr.checkpoint_log_start_offsets()
            mgr.checkpoint_recovery_points()
            out.write(f"ACK {log.recovery_point}\n")
        out.flush()
    sys.setprofile(None)
    if args.kill_at_end:
        os.kill(os.getpid(), signal.SIGKILL)


def resume_step(seed: int, log_end_offset: int) -> int:
    """The index of the workload step that starts at ``log_end_offset`` (the log holds a whole
    prefix of the workload: steps before it)."""
    offset = 0
    for i, step in enumerate(steps(seed)):
        if offset == log_end_offset:
            return i
        if offset > log_end_offset:
            break
        offset += step.record_count
    raise SystemExit(f"log end offset {log_end_offset} is not a step boundary of seed {seed}")


def last_steps(seed: int, stop: int) -> dict[int, Step]:
    """Each idempotent producer's last step before step ``stop`` (producers without one are
    left out)."""
    last: dict[int, Step] = {}
    for i, step in enumerate(steps(seed)):
        if i >= stop:
            break
        if step.producer_id in IDEMPOTENT_PRODUCERS:
            last[step.producer_id] = step
    return last


def step_offsets(seed: int, stop: int) -> list[tuple[int, int]]:
    """(first offset, last offset) of every workload step before step ``stop``."""
    out, offset = [], 0
    for i, step in enumerate(steps(seed)):
        if i >= stop:
            break
        out.append((offset, offset + step.record_count - 1))
        offset += step.record_count
    return out


if __name__ == "__main__":
    main()
