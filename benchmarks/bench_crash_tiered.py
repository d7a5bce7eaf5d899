"""Crash rounds of a tiered log: a writer with tiering and local retention active is SIGKILLed
at random moments, again and again on the same directories; after every restart it re-sends
each idempotent producer's last batch, which must come back as a duplicate.

Issue target (defect 3): >= 500 rounds without a lost acknowledged offset or a duplicate
appended twice. Prints rounds, restarts, re-sends, duplicates caught (and how many of them
were only in the remote tier), appends and time. ``--rounds N`` (default 500), ``--per-log M``
(rounds on one directory before a fresh one, default 25).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _util import scratch_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from tiered_crash import Totals, check_log, run_rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--per-log", type=int, default=25)
    args = parser.parse_args()
    totals = Totals()
    began = time.monotonic()
    seed = 0
    with scratch_dir("crash-tiered") as scratch:
        while totals.rounds < args.rounds and not totals.failures:
            root = scratch / f"run-{seed}"
            tier_url = f"file://{root}/tier"
            rounds = min(args.per_log, args.rounds - totals.rounds)
            run_rounds(root / "logs", tier_url, seed, rounds, totals)
            if not totals.failures:
                try:
                    check_log(root / "logs", tier_url, seed)
                except AssertionError as exc:
                    totals.failures.append(f"seed {seed}: final check: {exc}")
            print(f"seed {seed}: {totals.rounds} rounds, {totals.duplicates_caught} duplicates "
                  f"caught so far", flush=True)
            seed += 1
    elapsed = time.monotonic() - began
    print(f"rounds                  {totals.rounds}")
    print(f"restarts (unclean)      {totals.restarts}")
    print(f"logs (fresh dirs)       {seed}")
    print(f"re-sent batches         {totals.retries}")
    print(f"duplicates caught       {totals.duplicates_caught}")
    print(f"  only in the tier      {totals.remote_only_producers}")
    print(f"appends                 {totals.appends}")
    print(f"time                    {elapsed:.1f} s ({elapsed / max(totals.rounds, 1):.2f} s a round)")
    if totals.failures:
        print("FAILURES:")
        for failure in totals.failures:
            print("  " + failure)
        sys.exit(1)
    print("no acknowledged offset lost, no re-sent batch appended twice")


if __name__ == "__main__":
    main()
