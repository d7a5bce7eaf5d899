"""The Jepsen-style harness of issue 24 at length: three ``tierlog serve`` nodes on 127.0.0.1,
an idempotent acks=all producer (librdkafka), a transactional producer and a live consumer
under random SIGKILLs, SIGSTOPs, restarts and cut links (``tests/support/jepsen_run.py``).
After each run's heal: every acknowledged record present exactly once and in order, no record
read live vanished, every transaction whole or absent to read_committed readers, replicas
byte-identical up to the high watermark.

Prints per run: faults, records acknowledged, transactions committed/aborted/unknown, leader
changes, time to a new leader (p50/p99). ``--seconds S`` per run (default 120), ``--runs N`` (default 3, seeds 1..N).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from _util import scratch_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from support.jepsen_checks import latency_percentiles
from support.jepsen_run import run_jepsen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    failover: list[float] = []
    violations = 0
    acknowledged = 0
    faults = 0
    with scratch_dir("jepsen") as scratch:
        for seed in range(1, args.runs + 1):
            report = run_jepsen(scratch / f"run-{seed}", seconds=args.seconds, seed=seed)
            print(report.summary(), flush=True)
            for violation in report.violations[:20]:
                print("  VIOLATION", violation)
            failover += report.failover_ms
            violations += len(report.violations)
            acknowledged += report.acknowledged
            faults += sum(report.faults.values())
    p50, p99 = latency_percentiles(failover) if failover else (0.0, 0.0)
    print(f"runs                    {args.runs} x {args.seconds:.0f} s")
    print(f"faults                  {faults}")
    print(f"acknowledged records    {acknowledged}")
    print(f"time to a new leader    p50 {p50:.0f} ms, p99 {p99:.0f} ms ({len(failover)} faults)")
    print(f"violations              {violations}")
    if violations:
        sys.exit(1)


if __name__ == "__main__":
    main()
