"""tierlog.reader through a topic's table (issue 23) against pyarrow reading the same Parquet
files directly, and against the reader decoding the segments (``use_table=False``), same run.

One partition of 1 M records (1000 per batch, 100-byte values, a header on every tenth record)
in 16 MiB segments, tiered with the test suite's tier builder onto the ``local`` plugin; every
segment converted with ``convert_link`` and committed with ``TableCommitter`` as the tiering
run does. Reads, read_committed: the whole partition (all columns, then ``value`` alone), and
one record (the fixed cost of a read).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
from _util import ROOT, best_of, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))
from support.table_tier import convert_partition, ready
from support.tier_builder import build_simple_tier

from tierlog.plugins.local import create_remote_storage
from tierlog.reader import RemoteTopicReader
from tierlog.remote import TopicIdPartition
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import TableCommitter
from tierlog.remote.table.schema import open_or_create_table, table_identifier

RECORDS = 1_000_000
PER_BATCH = 1000
TOPIC, TOPIC_ID = "events", "c2Vn6QbUSz6vHqYkQ1dM0w"
SEGMENT_BYTES = 16 << 20
ISOLATION = "read_committed"


def build(root: Path) -> tuple[str, list[str]]:
    """The tier and its table; ``(url, the table's data files)``."""
    url = (root / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    log, _ = build_simple_tier(root / "logs", rsm, topic=TOPIC, records=RECORDS,
                               per_batch=PER_BATCH, segment_bytes=SEGMENT_BYTES,
                               topic_id=TOPIC_ID)
    log.close()
    catalog = TierCatalog(rsm.tier)
    table = open_or_create_table(catalog, TOPIC, TOPIC_ID)
    files = convert_partition(rsm.tier, table, TopicIdPartition(TOPIC_ID, TOPIC, 0))
    TableCommitter(catalog, table_identifier(TOPIC, TOPIC_ID)).commit(
        [ready(f) for f in files], starts={0: 0})
    return url, [f.path for f in files]


def _rate(seconds: float) -> str:
    return f"{RECORDS / seconds / 1e6:8.2f} M records/s"


def main() -> dict[str, float]:
    results: dict[str, float] = {}
    rows = []
    with scratch_dir("reader-table") as root:
        started = time.perf_counter()
        url, paths = build(root)
        rows.append((f"tier and table built ({len(paths)} segments/files)",
                     f"{time.perf_counter() - started:8.1f} s"))
        reader = RemoteTopicReader(url)
        assert reader.read_table(TOPIC, isolation_level=ISOLATION).equals(
            reader.read_table(TOPIC, isolation_level=ISOLATION, use_table=False))
        for label, columns in (("all columns", None), ("value only", ["value"])):
            wanted = columns or reader.read_table(TOPIC, max_offset=0).schema.names

            def table_path(c: list[str] | None = columns) -> object:
                return reader.read_table(TOPIC, isolation_level=ISOLATION, columns=c)

            def segments(c: list[str] | None = columns) -> object:
                return reader.read_table(TOPIC, isolation_level=ISOLATION, columns=c,
                                         use_table=False)

            def parquet(c: list[str] = wanted) -> object:
                return ds.dataset(paths, format="parquet").to_table(columns=c)

            tb, tm = best_of(table_path, 7)
            sb, sm = best_of(segments, 7)
            pb, pm = best_of(parquet, 7)
            rows += [
                (f"[{label}] reader, table path", f"{_rate(tb)} (median {_rate(tm).strip()})"),
                (f"[{label}] pyarrow, the same Parquet", f"{_rate(pb)} (median "
                                                          f"{_rate(pm).strip()})"),
                (f"[{label}] reader, segments", f"{_rate(sb)} (median {_rate(sm).strip()})"),
                (f"[{label}] table path / pyarrow", f"{pb / tb:8.1%}"),
                (f"[{label}] table path / segments", f"{sb / tb:8.2f}x"),
            ]
            key = "all" if columns is None else "value"
            results[f"table_path_records_per_s_{key}"] = RECORDS / tb
            results[f"parquet_records_per_s_{key}"] = RECORDS / pb
            results[f"segments_records_per_s_{key}"] = RECORDS / sb
        # The fixed cost of a read: one record (the table path reads a row group, and plans).
        one_t, _ = best_of(lambda: reader.read_table(TOPIC, isolation_level=ISOLATION,
                                                     max_offset=0), 7)
        one_s, _ = best_of(lambda: reader.read_table(TOPIC, isolation_level=ISOLATION,
                                                     max_offset=0, use_table=False), 7)
        rows += [("[one record] reader, table path", f"{one_t * 1e3:8.1f} ms"),
                 ("[one record] reader, segments", f"{one_s * 1e3:8.1f} ms")]
        results["one_record_table_path_s"] = one_t
        results["one_record_segments_s"] = one_s
    report(f"Reading a topic through its table: {RECORDS:,} records, one process, "
           f"{ISOLATION}", rows)
    return results


if __name__ == "__main__":
    main()
