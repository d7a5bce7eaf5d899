"""translate_offset cost at 1 K vs 1.3 M offset-index entries (one index entry per batch).

Issue target: the 1.3 M-entry lookup costs at most 2x the 1 K-entry lookup.
"""

from __future__ import annotations

import random
import time

from _util import report, scratch_dir

from tierlog import Log, Record
from tierlog.records import build_batch

BATCHES_PER_APPEND = 2000


def build_segment(root, entries: int):
    # index.interval.bytes=1: every batch after the first gets an index entry.
    config = {"index.interval.bytes": 1, "segment.index.bytes": 10 * 1024 * 1024}
    log = Log.open(root / f"idx{entries}-0", config)
    single = bytearray(build_batch([Record(key=b"k", value=b"v" * 8, timestamp=1_700_000_000_000)]))
    chunk = bytes(single) * BATCHES_PER_APPEND
    remaining = entries + 1
    while remaining > 0:
        n = min(BATCHES_PER_APPEND, remaining)
        log.append(chunk[: n * len(single)])
        remaining -= n
    return log


def cost_per_lookup(log, lookups: int = 50_000) -> float:
    segment = log.segments.active
    rng = random.Random(42)
    targets = [rng.randrange(log.log_end_offset) for _ in range(lookups)]
    translate = segment.translate_offset
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for t in targets:
            translate(t)
        best = min(best, (time.perf_counter() - start) / lookups)
    return best


def main() -> dict[str, float]:
    with scratch_dir("translate") as root:
        small = build_segment(root, 1_000)
        large = build_segment(root, 1_300_000)
        assert large.segments.active.offset_index.entries >= 1_300_000, large.segments.active.offset_index.entries
        small_cost = cost_per_lookup(small)
        large_cost = cost_per_lookup(large)
        entries = (small.segments.active.offset_index.entries, large.segments.active.offset_index.entries)
        small.close()
        large.close()
    ratio = large_cost / small_cost
    report("translate_offset", [
        (f"{entries[0]:,} index entries", f"{small_cost * 1e6:6.2f} us"),
        (f"{entries[1]:,} index entries", f"{large_cost * 1e6:6.2f} us"),
        ("ratio large/small", f"{ratio:6.2f}x   (target <= 2x)"),
    ])
    return {"translate_ratio": ratio}


if __name__ == "__main__":
    main()
