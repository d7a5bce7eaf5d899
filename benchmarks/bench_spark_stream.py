"""``spark.readStream.format("tierlog")`` on Spark ``local[2]``, two figures in one run:

1. end-to-end latency, from a record's append to a LogManager (tail publishing every 1 s,
   its scheduler running) to its row reaching ``foreachBatch`` of a stream with a 1 s
   trigger: p50 / p99 / max over every record appended during the window;
2. a ``Trigger.AvailableNow`` catch-up over bench_reader's 1 M-record tier against the batch
   read of the same range (``spark.read.format("tierlog")``), records/s, same session: both
   sum every value's length, so every split is read and decoded.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _util import best_of, report, scratch_dir
from bench_reader import RECORDS, TOPIC, build_tier

from tierlog import LogManager, Record
from tierlog.reader import RemoteTopicReader

SPLITS = 8
LATENCY_SECONDS = 30
APPEND_EVERY_S = 0.02
TAIL_MS = 1000
TRIGGER = "1 second"


def main() -> dict[str, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import tierlog.spark

    spark = tierlog.spark.session("bench-spark-stream", "local[2]",
                                  **{"spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        with scratch_dir("spark-stream") as root:
            latencies = _latency(spark, root)
        with scratch_dir("spark-stream") as root:
            stream_s, batch_s, add_batch_s = _catch_up(spark, root)
    finally:
        spark.stop()
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98]
    report("Spark local[2] stream of the tier", [
        (f"append -> foreachBatch, tail {TAIL_MS} ms, trigger {TRIGGER}",
         (f"p50 {p50:.2f} s, p99 {p99:.2f} s, max {max(latencies):.2f} s "
          f"({len(latencies)} records)")),
        (f"AvailableNow catch-up of {RECORDS:,} records",
         f"{RECORDS / stream_s / 1e6:8.2f} M records/s ({stream_s:.1f} s)"),
        ("  of which its micro-batches (addBatch)",
         f"{RECORDS / add_batch_s / 1e6:8.2f} M records/s ({add_batch_s:.1f} s)"),
        ("batch read of the same range",
         f"{RECORDS / batch_s / 1e6:8.2f} M records/s ({batch_s:.1f} s)"),
        ("stream / batch", f"{batch_s / stream_s:8.2f}x"),
    ])
    return {"stream_latency_p50_s": p50, "stream_latency_p99_s": p99,
            "stream_catch_up_records_per_s": RECORDS / stream_s,
            "batch_same_range_records_per_s": RECORDS / batch_s}


def _latency(spark: Any, root: Path) -> list[float]:
    """Append a record every APPEND_EVERY_S for LATENCY_SECONDS (its timestamp: the append
    time), and time each one's arrival in foreachBatch."""
    url = (root / "tier").as_uri()
    mgr = LogManager.open(root / "data", {
        "remote.storage.enable": True, "remote.storage.manager": "local",
        "remote.storage.url": url, "remote.log.tail.ms": TAIL_MS,
        "segment.bytes": 1 << 20})
    arrived: dict[int, float] = {}
    sent: dict[int, float] = {}
    try:
        log = mgr.create_topic("latency", 1)[0]
        log.append_records([Record(key=b"warm-up", value=b"0")])
        mgr.publish_tail_now()

        def sink(df: Any, batch_id: int) -> None:
            now = time.time()
            for row in df.select("offset").collect():
                arrived[row["offset"]] = now

        query = (spark.readStream.format("tierlog").option("path", url)
                 .option("subscribe", "latency").load()
                 .writeStream.foreachBatch(sink).trigger(processingTime=TRIGGER)
                 .option("checkpointLocation", str(root / "ckpt")).start())
        try:
            deadline = time.monotonic() + 120
            while query.lastProgress is None and time.monotonic() < deadline:
                time.sleep(0.1)  # the first (empty) batch: the stream is running
            stop = time.monotonic() + LATENCY_SECONDS
            while time.monotonic() < stop:
                now = time.time()
                info = log.append_records([Record(key=b"k", value=b"v",
                                                  timestamp=int(now * 1000))])
                sent[info.first_offset] = now
                time.sleep(APPEND_EVERY_S)
            wait_until = time.monotonic() + 30
            while not set(sent) <= set(arrived) and time.monotonic() < wait_until:
                time.sleep(0.1)
        finally:
            query.stop()
    finally:
        mgr.close()
    missing = set(sent) - set(arrived)
    if missing:
        raise AssertionError(f"{len(missing)} appended records never reached the stream")
    return [arrived[o] - t for o, t in sent.items()]


def _catch_up(spark: Any, root: Path) -> tuple[float, float, float]:
    """Seconds of an AvailableNow stream (start to end, and of its micro-batches alone:
    Spark's ``addBatch``) and of a batch query over the 1 M-record tier."""
    url = build_tier(root)
    reader = RemoteTopicReader(url)
    tier_bytes = sum(s.segment_size_in_bytes for s in reader.list_segments(TOPIC, 0))
    split_bytes = str(tier_bytes // SPLITS + 1)
    counted: list[int] = []

    def sink(df: Any, batch_id: int) -> None:
        counted.append(df.selectExpr("count(*) AS n", "sum(length(value)) AS b").first()["n"])

    batch = (spark.read.format("tierlog").option("path", url).option("subscribe", TOPIC)
             .option("splitBytes", split_bytes).load()
             .selectExpr("count(*) AS n", "sum(length(value)) AS b"))
    assert batch.first()["n"] == RECORDS  # also starts the Python workers
    runs = iter(range(100))

    def stream_once() -> None:
        counted.clear()
        query = (spark.readStream.format("tierlog").option("path", url)
                 .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                 .option("splitBytes", split_bytes).load()
                 .writeStream.foreachBatch(sink).trigger(availableNow=True)
                 .option("checkpointLocation", str(root / f"ckpt-{next(runs)}")).start())
        query.awaitTermination()
        assert sum(counted) == RECORDS, counted
        batch_ms.append(sum(p["durationMs"].get("addBatch", 0) for p in query.recentProgress))

    batch_ms: list[float] = []
    stream_s, _ = best_of(stream_once, 3)
    batch_s, _ = best_of(lambda: batch.first(), 3)
    return stream_s, batch_s, min(batch_ms) / 1000


if __name__ == "__main__":
    main()
