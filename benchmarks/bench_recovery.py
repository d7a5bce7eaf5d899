"""Recovery throughput: an unclean open of a 512 MiB unflushed segment of 16 KiB batches vs
reading the same file sequentially with ``cat file > /dev/null``.

Issue target: recovery >= 30% of the sequential read, same file, same run, page cache warm for
both (each is run twice and the best is reported). ``--profile`` prints a cProfile of one open.
"""

from __future__ import annotations

import cProfile
import logging
import os
import pstats
import subprocess
import sys
import time

from _util import report, scratch_dir

from tierlog import Log, Record
from tierlog.records import build_batch

BATCH_BYTES = 16 * 1024
TOTAL_BYTES = 512 * 1024 * 1024
ROUNDS = 2


def build_batch_of_16k() -> bytes:
    records = [Record(key=b"key-%d" % i, value=os.urandom(100)) for i in range(200)]
    n = 1
    while len(build_batch(records[: n + 1])) <= BATCH_BYTES:
        n += 1
    return build_batch(records[:n])


def recover(directory: os.PathLike[str]) -> Log:
    """An unclean open from recovery point 0: every batch is re-validated."""
    return Log.open(directory, had_clean_shutdown=False, recovery_point=0)


def main() -> dict[str, float]:
    logging.getLogger("tierlog").setLevel(logging.ERROR)  # each unclean open warns
    batch = build_batch_of_16k()
    count = TOTAL_BYTES // len(batch)
    with scratch_dir("recovery") as root:
        directory = root / "bench-0"
        log = Log.open(directory, {"segment.bytes": 1 << 30})
        for _ in range(count):
            log.append(batch)
        log.close()  # the files stay as written: nothing is flushed before the unclean opens
        segment_file = directory / "00000000000000000000.log"
        size = segment_file.stat().st_size

        def cat() -> float:
            start = time.perf_counter()
            with open(os.devnull, "wb") as sink:
                subprocess.run(["cat", str(segment_file)], stdout=sink, check=True)
            return time.perf_counter() - start

        def tierlog_recovery() -> float:
            start = time.perf_counter()
            recovered = recover(directory)
            elapsed = time.perf_counter() - start
            assert recovered.log_end_offset == count * batch_count_of(batch)
            assert recovered.recovery.segments_recovered == 1
            recovered.close()
            return elapsed

        cat()  # bring the file into the page cache for both contenders
        cat_times, recovery_times = [], []
        for _ in range(ROUNDS):
            cat_times.append(cat())
            recovery_times.append(tierlog_recovery())
        if "--profile" in sys.argv:
            profiler = cProfile.Profile()
            profiler.runcall(lambda: recover(directory).close())
            pstats.Stats(profiler).sort_stats("cumulative").print_stats(20)
    mib = size / (1 << 20)
    cat_best, recovery_best = min(cat_times), min(recovery_times)
    ratio = cat_best / recovery_best
    report(f"recovery: {count} batches of {len(batch)} bytes ({mib:.0f} MiB), best of {ROUNDS}", [
        ("cat file > /dev/null", f"{mib / cat_best:8.0f} MiB/s ({cat_best * 1000:.0f} ms)"),
        ("tierlog unclean open",
         f"{mib / recovery_best:8.0f} MiB/s ({recovery_best * 1000:.0f} ms)"),
        ("ratio tierlog/cat", f"{ratio:8.0%}   (target >= 30%)"),
    ])
    return {"recovery_ratio": ratio}


def batch_count_of(batch: bytes) -> int:
    """Records in a batch built by ``build_batch_of_16k`` (its recordCount field)."""
    return int.from_bytes(batch[57:61], "big")


if __name__ == "__main__":
    main()
