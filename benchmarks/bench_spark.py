"""Spark ``local[2]`` reading remote tiers through ``spark.read.format("tierlog")``, against
one ``tierlog.reader`` process on the same tier, same run, at several sizes: a tiny topic
gives Spark's fixed cost per query (planning, the Python planner process, task launch), the
large ones its marginal rate; the ratio to one reader process is given at every size.

The query counts records and sums their value lengths, so every split is read, decoded and
handed to the JVM as Arrow; the reader baseline decodes the same seven columns into one Arrow
table. Where the time goes, from the same run:

* Spark's event log (``spark.eventLog.enabled``): per query the job's wall time, the tasks'
  executor run, CPU, deserialization and GC time, and the Python workers' metrics;
  the query's wall time outside its job is planning (the Python planner process included);
* a timed copy of the source whose workers record the seconds spent inside ``read_split``
  (decoding) against the seconds the generator lived (the rest: handing batches over);
* the same query with ``.schema("value binary")``, so only the column it uses is shipped;
* floors: Python sources that decode nothing and yield ready RecordBatches read back from
  Parquet, with all seven columns and with the one column the query uses (Spark 4.3 does not
  push the pruned schema into a Python data source, so only the first is reachable).

``TIERLOG_BENCH_SPARK_RECORDS`` (comma-separated, default ``1000,1000000,5000000``) picks the
sizes; the figures for the last size are broken down.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from _util import ROOT, best_of, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))
from tier_builder import build_simple_tier

from tierlog.plugins.local import create_remote_storage
from tierlog.reader import RemoteTopicReader

CODEC = "none"
TOPIC = "events"
PER_BATCH = 1000
#: About 8 splits per million records of this benchmark (about 139 bytes per record).
SPLIT_BYTES = 18 << 20
SIZES = tuple(int(n) for n in
              os.environ.get("TIERLOG_BENCH_SPARK_RECORDS", "1000,1000000,5000000").split(","))
REPEATS = 3


def build(root: Path, records: int) -> str:
    """A local tier of ``records`` records of ``TOPIC`` (as bench_reader's); its URL."""
    url = (root / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    log, _ = build_simple_tier(root / "logs", rsm, topic=TOPIC, records=records,
                               per_batch=PER_BATCH, compression=CODEC)
    log.close()
    return url


def main() -> dict[str, float]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import tierlog.spark

    with scratch_dir("spark") as root:
        events, worker_times = root / "events", root / "worker-times"
        events.mkdir()
        worker_times.mkdir()
        tiers = {n: build(root / f"tier-{n}", n) for n in SIZES}
        reader_s = {}
        for n, url in tiers.items():
            reader = RemoteTopicReader(url)
            reader_s[n] = best_of(lambda r=reader: r.read_table(TOPIC, include_headers=False),
                                  REPEATS)[0]
        largest = SIZES[-1]
        parquet = root / "same-batches.parquet"
        pq.write_table(RemoteTopicReader(tiers[largest]).read_table(TOPIC, include_headers=False),
                       parquet, compression="none", row_group_size=65_536)

        started = time.perf_counter()
        spark = (SparkSession.builder.master("local[2]").appName("bench-spark")
                 .config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.eventLog.enabled", "true")
                 .config("spark.eventLog.dir", events.as_uri())
                 .config("spark.eventLog.compress", "false")
                 .config("spark.eventLog.rolling.enabled", "false")
                 .config("spark.sql.shuffle.partitions", "2").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        tierlog.spark.register(spark)
        startup = time.perf_counter() - started

        def timed(label: str, df: Any, expected: int) -> tuple[float, float]:
            query = df.selectExpr("count(*) AS n", "sum(length(value)) AS bytes")
            spark.sparkContext.setJobDescription(label)

            def run() -> None:
                row = query.first()
                assert row["n"] == expected, (label, row)

            run()  # warm-up: the first run also starts the Python workers
            result = best_of(run, REPEATS)
            spark.sparkContext.setJobDescription(None)
            return result

        def tierlog_df(n: int, source: str = "tierlog", user_schema: str | None = None,
                       **options: str) -> Any:
            reader = spark.read.format(source)
            if user_schema is not None:
                reader = reader.schema(user_schema)
            reader = reader.option("path", tiers[n]).option("subscribe", TOPIC)
            reader = reader.option("splitBytes", str(SPLIT_BYTES))
            for key, value in options.items():
                reader = reader.option(key, value)
            return reader.load()

        first_started = time.perf_counter()
        tierlog_df(SIZES[0]).selectExpr("count(*)").first()
        first = time.perf_counter() - first_started
        spark_s = {n: timed(f"tierlog {n}", tierlog_df(n), n) for n in SIZES}
        partitions = {n: tierlog_df(n).rdd.getNumPartitions() for n in SIZES}

        # Breakdown at the largest size: batch sizes, the timed source, the two floors.
        batch_rows = {rows: timed(f"tierlog {largest} batchRows={rows}",
                                  tierlog_df(largest, batchRows=str(rows)), largest)[0]
                      for rows in (8192, 262_144)}
        value_only = timed(f"tierlog {largest} value only",
                           tierlog_df(largest, user_schema="value binary"), largest)[0]
        spark.dataSource.register(_timed_source(str(worker_times)))
        timed_s = timed(f"timed {largest}", tierlog_df(largest, "tierlog-timed"), largest)[0]
        spark.dataSource.register(_parquet_batches_source())
        floors = {cols: timed(f"floor {cols}", spark.read.format("batches")
                              .option("path", str(parquet)).option("columns", cols)
                              .option("parts", str(partitions[largest])).load(), largest)[0]
                  for cols in ("all", "value")}
        spark.stop()
        log = _event_log(events)
        worker = _worker_times(worker_times, partitions[largest])

    n_small, n_large = SIZES[0], SIZES[-1]
    rows: list[tuple[str, str]] = [
        ("Spark session start / first query", f"{startup:8.1f} s / {first:.1f} s")]
    for n in SIZES:
        best, median = spark_s[n]
        rows += [
            (f"[{n:,}] one tierlog.reader process", _rate(n, reader_s[n])),
            (f"[{n:,}] Spark local[2], {partitions[n]} partitions",
             f"{_rate(n, best)}, median {median:.2f} s"),
            (f"[{n:,}] ratio Spark/reader", f"{reader_s[n] / best:8.2f}x"),
        ]
    fixed = spark_s[n_small][0]
    marginal = (n_large - n_small) / max(1e-9, spark_s[n_large][0] - fixed)
    rows += [
        (f"Spark fixed cost per query ({n_small:,} records)", f"{fixed:8.2f} s"),
        ("Spark marginal rate (largest minus tiny)", f"{marginal / 1e6:8.2f} M records/s"),
        ("reader marginal rate", f"{n_large / reader_s[n_large] / 1e6:8.2f} M records/s"),
    ]
    for label in [f"tierlog {n}" for n in SIZES] + [f"timed {n_large}"]:
        rows += _breakdown(label, log.get(label))
    if worker:
        rows += [
            (f"[timed {n_large:,}] Python: in read_split (decode)",
             (f"{worker['decode']:8.2f} s over {worker['splits']} splits (per query, "
             f"mean of {worker['runs']:.0f} runs)")),
            (f"[timed {n_large:,}] Python: rest of the generator's life (hand-over)",
             f"{worker['life'] - worker['decode']:8.2f} s"),
            (f"[timed {n_large:,}] query", f"{timed_s:8.2f} s"),
        ]
    rows += [(f"[{n_large:,}] batchRows={k}", _rate(n_large, v)) for k, v in batch_rows.items()]
    rows += [(f"[{n_large:,}] .schema(\"value binary\"): the one column shipped",
              f"{_rate(n_large, value_only)}, {reader_s[n_large] / value_only:.2f}x the reader")]
    rows += [
        (f"[{n_large:,}] floor: ready batches, 7 columns", _rate(n_large, floors["all"])),
        (f"[{n_large:,}] floor: ready batches, value only", _rate(n_large, floors["value"])),
        ("CPU cores of this machine / load average", (f"{os.cpu_count():8d} / "
                                                     f"{os.getloadavg()[0]:.1f}")),
    ]
    report(f"Spark local[2] over a remote tier ({CODEC}), fixed cost and marginal rate", rows)
    return {"spark_records_per_s": n_large / spark_s[n_large][0],
            "spark_speedup": reader_s[n_large] / spark_s[n_large][0],
            "spark_fixed_cost_s": fixed, "spark_marginal_records_per_s": marginal,
            "spark_value_only_records_per_s": n_large / value_only,
            "spark_python_source_floor_records_per_s": n_large / floors["all"]}


def _rate(records: int, seconds: float) -> str:
    return f"{records / seconds / 1e6:8.2f} M records/s ({seconds:.2f} s)"


def _breakdown(label: str, queries: list[dict[str, float]] | None) -> list[tuple[str, str]]:
    """Median figures of the event log's jobs labelled ``label`` (warm-up excluded)."""
    if not queries:
        return []
    timed_runs = queries[1:] or queries
    med = {key: statistics.median(q[key] for q in timed_runs) for key in timed_runs[0]}
    sql = ", ".join(f"{k.removeprefix('sql:')} {v:.3g}" for k, v in sorted(med.items())
                    if k.startswith("sql:"))
    return [(f"[{label}] SQL execution / its jobs (wall)",
             f"{med.get('sql_s', 0):8.2f} s / {med['job_s']:.2f} s, {med['tasks']:.0f} tasks"),
            (f"[{label}] task run / CPU / deserialize / GC (sum)",
             (f"{med['run_s']:8.2f} / {med['cpu_s']:.2f} / {med['deser_s']:.2f} / "
             f"{med['gc_s']:.2f} s")),
            (f"[{label}] SQL metrics (sum)", f"    {sql or '-'}")]


def _event_log(directory: Path) -> dict[str, list[dict[str, float]]]:
    """Per job description: one dict per SQL execution (query run) of its wall time in
    Spark's SQL events, its jobs' wall time, and its tasks' sums (SQL metrics included)."""
    executions: dict[int, dict[str, Any]] = {}
    stage_execution: dict[int, int] = {}
    job_start: dict[int, tuple[int, int]] = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            kind = event["Event"]
            if kind.endswith("SparkListenerSQLExecutionStart"):
                executions[event["executionId"]] = {
                    "label": None, "start": event["time"], "m": defaultdict(float)}
            elif kind.endswith("SparkListenerSQLExecutionEnd"):
                execution = executions[event["executionId"]]
                execution["m"]["sql_s"] = (event["time"] - execution["start"]) / 1000
            elif kind == "SparkListenerJobStart":
                properties = event.get("Properties") or {}
                if "spark.sql.execution.id" not in properties:
                    continue
                execution_id = int(properties["spark.sql.execution.id"])
                executions[execution_id]["label"] = properties.get("spark.job.description")
                job_start[event["Job ID"]] = (execution_id, event["Submission Time"])
                for stage in event["Stage IDs"]:
                    stage_execution[stage] = execution_id
            elif kind == "SparkListenerJobEnd" and event["Job ID"] in job_start:
                execution_id, started = job_start[event["Job ID"]]
                executions[execution_id]["m"]["job_s"] += (event["Completion Time"]
                                                           - started) / 1000
            elif kind == "SparkListenerTaskEnd" and event["Stage ID"] in stage_execution:
                m = executions[stage_execution[event["Stage ID"]]]["m"]
                metrics = event.get("Task Metrics") or {}
                m["tasks"] += 1
                m["run_s"] += metrics.get("Executor Run Time", 0) / 1000
                m["cpu_s"] += metrics.get("Executor CPU Time", 0) / 1e9
                m["deser_s"] += metrics.get("Executor Deserialize Time", 0) / 1000
                m["gc_s"] += metrics.get("JVM GC Time", 0) / 1000
                for acc in event["Task Info"].get("Accumulables", []):
                    name = str(acc.get("Name", ""))
                    # The Python source's own metrics ("data returned from Python workers")
                    # are shared by every task of a local JVM: their updates are running
                    # totals, not per task, so they are left out.
                    if (name.startswith("internal.") or "Python" in name
                            or "Update" not in acc):
                        continue
                    try:
                        m["sql:" + name] += float(acc["Update"])
                    except (TypeError, ValueError):
                        pass
    out: dict[str, list[dict[str, float]]] = defaultdict(list)
    for execution_id in sorted(executions):
        execution = executions[execution_id]
        if execution["label"] and execution["m"]["tasks"]:
            out[execution["label"]].append(dict(execution["m"]))
    return out


def _worker_times(directory: Path, splits: int) -> dict[str, float]:
    """The timed source's figures per query: its lines (one per split and run) summed and
    divided by the number of runs (``splits`` lines each)."""
    lines = [json.loads(line) for path in directory.iterdir()
             for line in path.read_text().splitlines()]
    if not lines:
        return {}
    runs = len(lines) / splits
    return {"splits": splits, "runs": runs,
            "decode": sum(line["decode"] for line in lines) / runs,
            "life": sum(line["life"] for line in lines) / runs}


def _timed_source(directory: str) -> Any:
    """The tierlog source under another name, whose workers append, per split, the seconds
    spent inside ``read_split`` and the seconds its generator lived to a file in
    ``directory`` (defined in a function so Spark ships it to workers by value)."""
    from tierlog.spark.source import TierlogDataSource, TierlogReader

    class TimedReader(TierlogReader):
        def read(self, partition: Any) -> Any:
            inner = super().read(partition)
            started, decode = time.perf_counter(), 0.0
            while True:
                t = time.perf_counter()
                try:
                    batch = next(inner)
                except StopIteration:
                    break
                finally:
                    decode += time.perf_counter() - t
                yield batch
            life = time.perf_counter() - started
            with open(os.path.join(directory, f"{os.getpid()}.jsonl"), "a") as out:
                out.write(json.dumps({"decode": decode, "life": life}) + "\n")

    class Timed(TierlogDataSource):
        @classmethod
        def name(cls) -> str:
            return "tierlog-timed"

        def reader(self, schema: Any) -> Any:
            self.parsed.check_batch()
            return TimedReader(self.parsed)

    return Timed


def _parquet_batches_source() -> Any:
    """A Python data source yielding a Parquet file's row groups as RecordBatches of the
    reader's seven columns (``columns=all``) or of ``value`` alone (``columns=value``),
    decoding nothing (defined in a function so Spark ships it to workers by value)."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from tierlog.spark.schema import schema_ddl

    class Reader(DataSourceReader):
        def __init__(self, path: str, parts: int, columns: list[str] | None) -> None:
            self.path, self.parts, self.columns = path, parts, columns

        def partitions(self) -> list[InputPartition]:
            groups = pq.ParquetFile(self.path).num_row_groups
            return [InputPartition(list(range(i, groups, self.parts))) for i in range(self.parts)]

        def read(self, partition: InputPartition) -> Any:
            source = pq.ParquetFile(self.path)
            for group in partition.value:
                yield from source.read_row_group(group, columns=self.columns).to_batches()

    class Batches(DataSource):
        @classmethod
        def name(cls) -> str:
            return "batches"

        def schema(self) -> str:
            if self.options.get("columns") == "value":
                return "value binary"
            return str(schema_ddl(include_headers=False))

        def reader(self, schema: Any) -> DataSourceReader:
            columns = ["value"] if self.options.get("columns") == "value" else None
            return Reader(str(Path(self.options["path"])), int(self.options["parts"]), columns)

    return Batches


if __name__ == "__main__":
    main()
