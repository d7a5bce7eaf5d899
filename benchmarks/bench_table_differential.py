"""Issue 23's differential at length: every ``(start, end)`` pair of the boundary set (each key
mark -- log start, table file edges, coverage end, stable end, tier end, restore cut -- +-1, and
a stride of 7) of each partition of support.table_tier's small tier (3 rounds), both isolation
levels, in the three states (as built, after a log start offset, after a restore cut): the
table path == the segment path == ``Log.read``'s records on every read
(tests/support/table_differential.py; the CI test, tests/reader/test_reader_table.py, runs a
sample). ``--stride 1`` makes the set every offset (about an hour). Prints the reads
checked, the mismatches (must be 0) and the time; exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import sys
import time

from _util import ROOT, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))
from support.table_differential import Tally, boundaries, check_reads, every_pair, states
from support.table_tier import build_table_tier
from support.tier_builder import ISOLATIONS

from tierlog.plugins.local import create_remote_storage

TOPIC = "orders"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stride", type=int, default=7)
    args, _ = parser.parse_known_args()
    total = Tally()
    began = time.perf_counter()
    with scratch_dir("table-differential") as root:
        url = (root / "tier").as_uri()
        tt = build_table_tier(root, create_remote_storage(url, {"fsync": False}), url,
                              uncovered_links=1, rounds=3)
        for state, cuts in states(tt, TOPIC):
            for isolation in ISOLATIONS:
                t0 = time.perf_counter()
                tally = Tally()
                for p in tt.partitions(TOPIC):
                    offsets = boundaries(tt, TOPIC, p, isolation, cuts.get(p), args.stride)
                    reads = [{p: pair} for pair in every_pair(offsets)]
                    tally.add(check_reads(tt, TOPIC, isolation, reads, label=state))
                total.add(tally)
                print(f"{state:20} {isolation:17} {tally.reads:6} reads "
                      f"{len(tally.mismatches)} mismatches {time.perf_counter() - t0:6.1f} s",
                      flush=True)
    for mismatch in total.mismatches[:20]:
        print("MISMATCH", mismatch)
    print(f"pairs checked {total.reads}, mismatches {len(total.mismatches)}, "
          f"{time.perf_counter() - began:.1f} s")
    return 1 if total.mismatches else 0


if __name__ == "__main__":
    status = main()
    if status:
        sys.exit(status)
