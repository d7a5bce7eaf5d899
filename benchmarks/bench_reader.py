"""tierlog.reader decoding a remote tier into Arrow (the Kafka-format segments, no table), against
pyarrow reading the same records back from one Parquet file on the same filesystem, same run.

The named case ``issue23`` is issue 23's workload: 1 M records, 100-byte values, 1,000 keys, a
header on every tenth record, 1,000 records per batch, one process, tiered with the test suite's
tier builder onto the ``local`` plugin. It runs with constant values (``b"v" * 100``: Parquet
dictionary-encodes the value column to a few KB, so pyarrow reads 18 MB where the reader reads
111 MB of segments) and random ones (incompressible: both read ~110 MB), segments and Parquet
both uncompressed and both zstd. Each round times, back to back, the reader's warm
``read_table``, ``pq.read_table`` (pyarrow's default: its threads, two on this machine) and
``pq.read_table(use_threads=False)``; the ratios are per round and reported as ranges over the
rounds (a shared machine's load moves single timings by tens of percent). The reader's first
read in the process is reported too (it pays the first page faults of Arrow's pool).

    python benchmarks/bench_reader.py [--rounds N] [--values constant,random] [--codecs none,zstd]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from _util import ROOT, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))
from support.tier_builder import build_simple_tier

from tierlog.plugins.local import create_remote_storage
from tierlog.reader import RemoteTopicReader

CASE = "issue23"
RECORDS = 1_000_000
PER_BATCH = 1000
VALUE_SIZE = 100
TOPIC = "events"
CODECS = ("none", "zstd")
VALUES = ("constant", "random")
ROUNDS = 5


def build_tier(root: Path, compression: str = "none", values: str = "constant") -> str:
    """A local tier holding ``RECORDS`` records of ``TOPIC``; returns its URL."""
    url = (root / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    rng = random.Random(23)
    log, _ = build_simple_tier(
        root / "logs", rsm, topic=TOPIC, records=RECORDS, per_batch=PER_BATCH,
        value_size=VALUE_SIZE, compression=compression,
        values=None if values == "constant" else lambda _: rng.randbytes(VALUE_SIZE))
    log.close()
    return url


def _timed(fn: object) -> float:
    started = time.perf_counter()
    fn()  # type: ignore[operator]
    return time.perf_counter() - started


def _span(values: list[float], fmt: str) -> str:
    return (f"{fmt.format(min(values))}-{fmt.format(max(values))} "
            f"(median {fmt.format(statistics.median(values))})")


def run_case(codec: str, values: str, rounds: int) -> tuple[list[tuple[str, str]],
                                                            dict[str, float]]:
    """One tier of the named case: its rows of the report and its figures."""
    tag = f"[{CASE} {values} {codec}]"
    with scratch_dir(f"reader-{values}-{codec}") as root:
        started = time.perf_counter()
        url = build_tier(root, codec, values)
        build_s = time.perf_counter() - started
        reader = RemoteTopicReader(url)
        first = _timed(lambda: reader.read_table(TOPIC))
        table = reader.read_table(TOPIC)
        assert table.num_rows == RECORDS
        parquet = root / "events.parquet"
        pq.write_table(table, parquet, compression=codec)
        del table
        tier_mib = sum(s.segment_size_in_bytes for s in reader.list_segments(TOPIC, 0)) / 2**20
        parquet_mib = parquet.stat().st_size / 2**20
        tl, pqt, pq1 = [], [], []
        for _ in range(rounds):
            tl.append(_timed(lambda: reader.read_table(TOPIC)))
            pqt.append(_timed(lambda: pq.read_table(parquet)))
            pq1.append(_timed(lambda: pq.read_table(parquet, use_threads=False)))
    rate = "{:.2f}"
    rows = [
        (f"{tag} tier built", (f"{build_s:.1f} s ({tier_mib:.0f} MiB of segments, "
                               f"Parquet {parquet_mib:.0f} MiB)")),
        (f"{tag} tierlog.reader first read", f"{RECORDS / first / 1e6:.2f} M records/s"),
        (f"{tag} tierlog.reader", _span([RECORDS / t / 1e6 for t in tl], rate) + " M records/s"),
        (f"{tag} pyarrow Parquet (threads)",
         _span([RECORDS / t / 1e6 for t in pqt], rate) + " M records/s"),
        (f"{tag} pyarrow Parquet (1 thread)",
         _span([RECORDS / t / 1e6 for t in pq1], rate) + " M records/s"),
        (f"{tag} ratio reader/Parquet (threads)",
         _span([p / t for t, p in zip(tl, pqt, strict=True)], "{:.2f}") + "x"),
        (f"{tag} ratio reader/Parquet (1 thread)",
         _span([p / t for t, p in zip(tl, pq1, strict=True)], "{:.2f}") + "x"),
    ]
    key = f"{values}_{codec}"
    figures = {f"reader_records_per_s_{key}": RECORDS / min(tl),
               f"parquet_records_per_s_{key}": RECORDS / min(pqt),
               f"ratio_threads_median_{key}": statistics.median(
                   p / t for t, p in zip(tl, pqt, strict=True))}
    return rows, figures


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--values", default=",".join(VALUES))
    parser.add_argument("--codecs", default=",".join(CODECS))
    args = parser.parse_args(argv)
    results: dict[str, float] = {}
    rows: list[tuple[str, str]] = []
    for values in args.values.split(","):
        for codec in args.codecs.split(","):
            case_rows, figures = run_case(codec, values, args.rounds)
            rows += case_rows
            results.update(figures)
    report(f"Remote tier -> Arrow, case {CASE}: {RECORDS:,} records, {VALUE_SIZE}-byte values, "
           f"1,000 keys, {PER_BATCH} per batch, one process, {args.rounds} rounds", rows)
    return results


if __name__ == "__main__":
    # Under run_all.py the arguments are run_all's own.
    main(sys.argv[1:] if Path(sys.argv[0]).name == "bench_reader.py" else [])
