"""tierlog.reader decoding a remote tier of 1 M records into Arrow, against pyarrow reading
the same records back from one Parquet file on the same filesystem, same run.

The tier is built with a real Log (1000 records per batch, 100-byte values, a header on every
tenth record) and tiered with the test suite's tier builder onto the ``local`` plugin.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from _util import ROOT, best_of, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))
from tier_builder import build_simple_tier

from tierlog.plugins.local import create_remote_storage
from tierlog.reader import RemoteTopicReader

RECORDS = 1_000_000
PER_BATCH = 1000
TOPIC = "events"
CODECS = ("none", "zstd")


def build_tier(root: Path, compression: str = "none") -> str:
    """A local tier holding ``RECORDS`` records of ``TOPIC``; returns its URL."""
    url = (root / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    log, _ = build_simple_tier(root / "logs", rsm, topic=TOPIC, records=RECORDS,
                               per_batch=PER_BATCH, compression=compression)
    log.close()
    return url


def main() -> dict[str, float]:
    results: dict[str, float] = {}
    rows = []
    for codec in CODECS:
        with scratch_dir(f"reader-{codec}") as root:
            started = time.perf_counter()
            url = build_tier(root, codec)
            build_s = time.perf_counter() - started
            reader = RemoteTopicReader(url)
            table = reader.read_table(TOPIC)
            assert table.num_rows == RECORDS
            parquet = root / "tier" / "events.parquet"
            pq.write_table(table, parquet, compression=codec)
            tl_best, tl_med = best_of(lambda r=reader: r.read_table(TOPIC), 3)
            pq_best, pq_med = best_of(lambda p=parquet: pq.read_table(p), 3)
            tier_mib = sum(s.segment_size_in_bytes for s in reader.list_segments(TOPIC, 0))
            tier_mib /= 1 << 20
        rows += [
            (f"[{codec}] tier built ({tier_mib:.0f} MiB of segments)", f"{build_s:8.1f} s"),
            (f"[{codec}] tierlog.reader", (f"{RECORDS / tl_best / 1e6:8.2f} M records/s "
                                          f"(median {RECORDS / tl_med / 1e6:.2f})")),
            (f"[{codec}] pyarrow Parquet", (f"{RECORDS / pq_best / 1e6:8.2f} M records/s "
                                           f"(median {RECORDS / pq_med / 1e6:.2f})")),
            (f"[{codec}] ratio reader/Parquet", f"{pq_best / tl_best:8.1%}"),
        ]
        results[f"reader_records_per_s_{codec}"] = RECORDS / tl_best
        results[f"parquet_records_per_s_{codec}"] = RECORDS / pq_best
    report(f"Remote tier -> Arrow: {RECORDS:,} records, {PER_BATCH} per batch, one process", rows)
    return results


if __name__ == "__main__":
    main()
