"""Compaction of 1 M records over 100 K keys: cleaner throughput, and the offset map's memory per
key against a plain ``dict`` holding the same key -> offset map.
"""

from __future__ import annotations

import gc
import random
import sys
import time
import tracemalloc

from _util import report, scratch_dir
from tierlog import Log, Record
from tierlog.cleaner.compactor import Cleaner
from tierlog.cleaner.offset_map import OffsetMap
from tierlog.records import build_batch

RECORDS = 1_000_000
KEYS = 100_000
RECORDS_PER_BATCH = 100
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 4 << 20}
NOW_MS = 1_700_000_000_000


def key_of(i: int) -> bytes:
    return b"key-%08d" % i


def workload() -> list[int]:
    """The key index of each record: every key once, then random updates."""
    rng = random.Random(42)
    return list(range(KEYS)) + [rng.randrange(KEYS) for _ in range(RECORDS - KEYS)]


def build_log(directory, keys: list[int]) -> Log:
    log = Log.open(directory, CONFIG, time_ms=lambda: NOW_MS, auto_high_watermark=True)
    for start in range(0, len(keys), RECORDS_PER_BATCH):
        records = [Record(key_of(k), b"value-%010d" % (start + i), timestamp=NOW_MS)
                   for i, k in enumerate(keys[start:start + RECORDS_PER_BATCH])]
        log.append(build_batch(records, compression="lz4", now_ms=NOW_MS))
    log.roll()
    return log


def traced_peak(build) -> tuple[int, object]:
    """(peak bytes tracemalloc saw while ``build()`` ran, its result)."""
    gc.collect()
    tracemalloc.start()
    try:
        result = build()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, result


def map_memory(keys: list[int]) -> dict[str, float]:
    """Bytes per key of the OffsetMap and of a dict {key bytes: offset}, for the same puts."""
    def offset_map() -> OffsetMap:
        offsets = OffsetMap()
        for offset, k in enumerate(keys):
            offsets.put(key_of(k), offset)
        return offsets

    def plain_dict() -> dict[bytes, int]:
        offsets: dict[bytes, int] = {}
        for offset, k in enumerate(keys):
            offsets[key_of(k)] = offset
        return offsets

    map_peak, offsets = traced_peak(offset_map)
    dict_peak, plain = traced_peak(plain_dict)
    shallow = sys.getsizeof(plain)
    deep = shallow + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in plain.items())
    n = len(plain)
    assert len(offsets) == n
    return {
        "map_table": offsets.memory_bytes / n,
        "map_peak": map_peak / n,
        "dict_shallow": shallow / n,
        "dict_deep": deep / n,
        "dict_peak": dict_peak / n,
    }


def main() -> dict[str, float]:
    keys = workload()
    with scratch_dir("compaction") as root:
        log = build_log(root / "compacted-0", keys)
        size_before = log.size_in_bytes
        start = time.perf_counter()
        result = Cleaner().clean_log(log, NOW_MS, force=True)
        elapsed = time.perf_counter() - start
        size_after = log.size_in_bytes
        log.close()
    assert result.records_kept == KEYS and result.records_removed == RECORDS - KEYS, result
    memory = map_memory(keys)
    rate = RECORDS / elapsed
    cleaned = (f"{elapsed:6.2f} s = {rate:,.0f} records/s ({size_before / 2**20:.1f} -> "
               f"{size_after / 2**20:.1f} MiB, {result.segments_cleaned} segments)")
    report(f"compaction: {RECORDS:,} records over {KEYS:,} keys (lz4, "
           f"{RECORDS_PER_BATCH} records per batch)", [
        ("clean_log", cleaned),
        ("OffsetMap table", f"{memory['map_table']:6.1f} B/key (slots of 16 B MD5 + 8 B offset)"),
        ("OffsetMap peak (tracemalloc)", f"{memory['map_peak']:6.1f} B/key (includes a rehash)"),
        ("dict sys.getsizeof", f"{memory['dict_shallow']:6.1f} B/key (the dict alone)"),
        ("dict + keys + ints", f"{memory['dict_deep']:6.1f} B/key (sys.getsizeof of all)"),
        ("dict peak (tracemalloc)", f"{memory['dict_peak']:6.1f} B/key"),
        ("OffsetMap vs dict peak", f"{memory['dict_peak'] / memory['map_peak']:6.1f}x smaller"),
    ])
    return {"compaction_records_per_s": rate, **{f"bytes_per_key_{k}": v for k, v in memory.items()}}


if __name__ == "__main__":
    main()
