"""``tierlog.spark.table``: a topic read by Spark at its own Parquet speed. The offsets the
topic's table covers are read by ``spark.read.parquet`` over the files one table snapshot
plans; the rest (the tail) by the ``tierlog`` source; the two meet where that snapshot's
coverage ends, so the rows are the source's, always (docs/tables.md, "Spark over the table").

The read's offsets are resolved once, on the driver, by the source's own planning
(``planning.plan_read`` over ``TierlogOptions``); the tail is then a ``tierlog`` read of
fixed offsets. When Spark's Hadoop cannot open the files' scheme (``s3a`` without
hadoop-aws), or a topic has no table, that read of fixed offsets covers it all; a read by
timestamp is the source's own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from pyiceberg.exceptions import NoSuchTableError
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from tierlog.reader import READ_COMMITTED, RemoteTopicReader
from tierlog.remote.read.readable import open_tier
from tierlog.remote.table.catalogs import load_topic_table
from tierlog.remote.table.plan import TablePlan
from tierlog.remote.table.schema import ABORTED, OFFSET, PARTITION, table_identifier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions
from tierlog.spark.options import NAME, TierlogOptions
from tierlog.spark.planning import plan_read

log = logging.getLogger(__name__)

#: Spark lists explicit paths with a parallel job (one task per path) above this many; the
#: planned files need no listing, so the threshold is raised around the call (200 files:
#: 4.0 s listed by a job, 0.34 s on the driver).
LISTING_THRESHOLD = "spark.sql.sources.parallelPartitionDiscovery.threshold"
_DRIVER_LISTING = "1000000"
#: The options that choose topics, and with the offsets' the ones the plan sets for the tail.
_TOPIC_OPTIONS = frozenset({"subscribe", "subscribepattern", "assign"})
_RANGE_OPTIONS = _TOPIC_OPTIONS | frozenset({
    "startingoffsets", "endingoffsets",
    "startingtimestamp", "endingtimestamp", "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp", "startingoffsetsbytimestampstrategy"})
#: Hadoop's name of an fsspec scheme (Spark reads S3 through s3a).
_HADOOP_SCHEMES = {"s3": "s3a", "s3n": "s3a"}


@dataclass(frozen=True, slots=True)
class _Range:
    """Part ``[start, end)`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Planned:
    """A read's ranges (``ranges``), split between the table (``head``, with its files' URLs)
    and the tail. ``whole`` are the head's ranges whose every file lies inside the range:
    their files are read without a row filter."""

    ranges: list[_Range]
    head: list[_Range]
    files: list[str]
    tail: list[_Range]
    whole: dict[_Range, list[str]] = field(default_factory=dict)


def table(spark: SparkSession, path: str, topic: str | None = None,
          **options: str | int | bool) -> DataFrame:
    """The DataFrame of ``spark.read.format("tierlog")`` with ``path``, ``topic`` (as
    ``subscribe``) and ``options`` (the source's names: ``subscribe``/``subscribePattern``/
    ``assign``, ``startingOffsets``, ``endingOffsets``, ``isolation.level``,
    ``includeHeaders``, ``failOnDataLoss``, ``storage.*``, ...): the same schema and rows, the
    offsets each topic's table covers read by Spark's Parquet reader. The offsets are resolved
    when this is called and every query of the DataFrame reads those (a read by timestamp is
    the source's own, resolved by each query); ConfigError and the source's other errors are
    raised here."""
    given = _given(path, topic, options)
    parsed = TierlogOptions.parse(given)
    parsed.check_batch()
    if parsed.limit("starting")[0] != "offsets" or parsed.limit("ending")[0] != "offsets":
        log.info("%s: a read by timestamp resolves its offsets while reading: through the "
                 "%s source", parsed.url, NAME)
        return _source(spark, given)
    planned = _plan(parsed)
    schema = _source(spark, given).schema
    tail = planned.tail
    if planned.files:
        why = _unreachable(spark, planned.files[0])
        if why is None:
            head = _head(spark, planned, parsed, schema)
            return head.unionByName(_source(spark, _tail_options(given, tail))) if tail else head
        log.warning("table files under %s:// not readable by this Spark (%s): reading through "
                    "the %s source", planned.files[0].partition("://")[0], why, NAME)
        tail = planned.ranges
    if not tail:
        return spark.createDataFrame([], schema)
    return _source(spark, _tail_options(given, tail))


def register_views(spark: SparkSession, path: str, topics: Sequence[str] | None = None, *,
                   prefix: str = "", **options: str | int | bool) -> dict[str, str]:
    """A temporary view of :func:`table` per topic (every topic in the tier by default),
    named ``prefix + topic``; returns topic -> view name. A view is fixed at the snapshot and
    offsets it was planned with: call this again to see newer records."""
    if topics is None:
        given = {k: v for k, v in _given(path, None, options).items()
                 if k.lower() not in _TOPIC_OPTIONS}
        parsed = TierlogOptions.parse({**given, "subscribePattern": ".*"})
        topics = RemoteTopicReader(parsed.url, parsed.storage_options).existing_topics()
    views: dict[str, str] = {}
    for topic in topics:
        name = prefix + topic
        table(spark, path, topic, **options).createOrReplaceTempView(name)
        views[topic] = name
    return views


# -- planning ------------------------------------------------------------------------------


def _given(path: str, topic: str | None, options: Mapping[str, str | int | bool]
           ) -> dict[str, str]:
    """The source's options as Spark gets them (strings; booleans as ``true``/``false``)."""
    given = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in options.items()}
    given["path"] = path
    if topic is not None:
        given["subscribe"] = topic
    return given


def _plan(o: TierlogOptions) -> _Planned:
    """The read's ranges, resolved as the source resolves them, split at each topic's table
    snapshot: covered offsets to the head, the rest to the tail."""
    ranges: dict[tuple[str, int], _Range] = {}
    # Only the ranges count here: no finer splits for minPartitions (the tail's own plan has).
    for split in plan_read(replace(o, min_partitions=None)):
        known = ranges.get((split.topic, split.partition))
        start, end = split.start_offset, split.end_offset
        if known is not None:
            start, end = min(start, known.start), max(end, known.end)
        ranges[(split.topic, split.partition)] = _Range(split.topic, split.partition, start, end)
    tier = open_tier(o.url, o.storage_options)
    head: list[_Range] = []
    tail: list[_Range] = []
    files: list[str] = []
    whole: dict[_Range, list[str]] = {}
    plans: dict[str, TablePlan | None] = {}
    for (topic, partition), wanted in sorted(ranges.items()):
        if topic not in plans:
            plans[topic] = _table_plan(tier, topic, o.topic_id(topic))
        plan = plans[topic]
        if plan is None:
            tail.append(wanted)
            continue
        parts = plan.split(partition, wanted.start, wanted.end)
        if parts.table:
            covered = _Range(topic, partition, parts.table.start, parts.table.stop)
            head.append(covered)
            planned = plan.files(partition, covered.start, covered.end)
            files += [_spark_url(f.path) for f in planned]
            if all(covered.start <= f.first_offset and f.last_offset < covered.end
                   for f in planned):
                whole[covered] = [_spark_url(f.path) for f in planned]
        if parts.tail:
            tail.append(_Range(topic, partition, parts.tail.start, parts.tail.stop))
    everything = list(ranges.values())
    if not files:  # nothing covered holds a row: the source reads it all
        return _Planned(everything, [], [], everything)
    return _Planned(everything, head, files, tail, whole)


def _table_plan(tier: RemoteTier, topic: str, topic_id: str | None) -> TablePlan | None:
    """The plan of the topic's table (``load_topic_table``), at its current snapshot; None
    when the topic has none (or it cannot be planned: then a warning, and the source reads
    the topic)."""
    tips = topic_partitions(tier, topic, topic_id)
    if not tips:
        return None
    incarnation = next(iter(tips.values())).topic_id
    identifier = table_identifier(topic, incarnation)
    try:
        table = load_topic_table(tier, topic, incarnation)
        if table is None:
            return None
        plan = TablePlan.of(table)
    except NoSuchTableError:
        return None
    except Exception as exc:  # noqa: BLE001 - any table failure leaves the segments to read
        log.warning("%s: table %s cannot be planned (%s): the %s source reads the topic",
                    topic, ".".join(identifier), exc, NAME)
        return None
    return plan if plan.snapshot_id is not None else None


def _spark_url(path: str) -> str:
    """A table file's location as Spark's Hadoop names it: ``file://`` for a local path,
    ``s3a://`` for ``s3://``."""
    if "://" not in path:  # a local tier's table names its files by their paths
        return f"file://{path}"
    scheme, rest = path.split("://", 1)
    return f"{_HADOOP_SCHEMES.get(scheme, scheme)}://{rest}"


def _unreachable(spark: SparkSession, url: str) -> str | None:
    """None when Spark's Hadoop has a FileSystem for ``url``'s scheme, else why not."""
    jvm = getattr(spark, "_jvm", None)
    jsc = getattr(spark, "_jsc", None)
    if jvm is None or jsc is None:  # Spark Connect: the server reads; it cannot be asked
        return None
    scheme = url.partition("://")[0]
    try:
        jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, jsc.hadoopConfiguration())
    except Exception as exc:  # noqa: BLE001 - py4j wraps the JVM's exception
        first = str(exc).strip().splitlines()
        return next((line for line in first if "Exception" in line), first[0] if first else
                    "no FileSystem")[:200]
    return None


# -- the two parts -------------------------------------------------------------------------


def _head(spark: SparkSession, planned: _Planned, o: TierlogOptions, schema: StructType
          ) -> DataFrame:
    """The covered ranges, read from the planned files by Spark's Parquet reader, filtered to
    the ranges (and to committed rows under read_committed), as the source's columns.

    The files of a range they lie wholly inside (a whole partition, as a read from the log
    start to the end usually is) need no range filter: each file holds one partition's rows.
    Left out, the scan reads only the columns a query uses (the filter would read ``topic``,
    ``partition`` and ``offset`` of every row: 1.1 s against 0.6 s for a selective count of
    2 M rows, bench_table)."""
    whole = sorted({url for urls in planned.whole.values() for url in urls})
    trimmed = [r for r in planned.head if r not in planned.whole]
    parts: list[DataFrame] = []
    if whole:
        parts.append(_parquet(spark, whole))
    if trimmed:
        rest = sorted(set(planned.files) - set(whole))
        parts.append(_parquet(spark, rest).where(_ranges_predicate(trimmed)))
    files = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
    if o.isolation_level == READ_COMMITTED:
        files = files.where(~F.col(ABORTED))
    return files.select(*[F.col(f.name).cast(f.dataType).alias(f.name) for f in schema.fields])


def _parquet(spark: SparkSession, urls: Sequence[str]) -> DataFrame:
    """``spark.read.parquet`` of ``urls``, listed on the driver (no listing job)."""
    with _conf(spark, LISTING_THRESHOLD, _DRIVER_LISTING):
        return spark.read.parquet(*urls)


def _ranges_predicate(ranges: Sequence[_Range]) -> Column:
    """``topic = t AND partition = p AND offset >= a AND offset < b``, OR-ed over ``ranges``
    (those with a file reaching outside them: a log start inside a file, a read of part of a
    partition)."""
    terms = [(F.col("topic") == r.topic) & (F.col(PARTITION) == r.partition)
             & (F.col(OFFSET) >= r.start) & (F.col(OFFSET) < r.end) for r in ranges]
    wanted = terms[0]
    for term in terms[1:]:
        wanted = wanted | term
    return wanted


def _tail_options(given: Mapping[str, str], tail: Sequence[_Range]) -> dict[str, str]:
    """The source's options reading exactly ``tail`` (not empty): ``assign`` with fixed
    offsets."""
    options = {k: v for k, v in given.items() if k.lower() not in _RANGE_OPTIONS}
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in tail:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    options.update(assign=json.dumps(assign), startingOffsets=json.dumps(starting),
                   endingOffsets=json.dumps(ending))
    return options


def _source(spark: SparkSession, options: Mapping[str, str]) -> DataFrame:
    return spark.read.format(NAME).options(**options).load()


@contextmanager
def _conf(spark: SparkSession, key: str, value: str) -> Iterator[None]:
    """``key`` set to ``value`` in the session's SQL conf for the block, then restored."""
    before = spark.conf.get(key, None)
    spark.conf.set(key, value)
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
