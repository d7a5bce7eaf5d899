"""Backfill: write records straight into the remote tier as committed segments, the write
no broker offers (Spark's ``df.write.format("tierlog")`` is its front door).

Rows come as Arrow record batches with the columns of Spark's Kafka sink: ``value``
(required; binary or string), ``key``, ``headers`` (list of ``{key: string, value:
binary}``), ``topic`` (else the writer's topic), ``partition`` (else Kafka's default
partitioner on the key, :mod:`tierlog.common.partitioner`; keyless rows of one Arrow batch go to
one partition, the next batch's to the next, as a producer's sticky partitioner does),
``timestamp`` (else the write time). A task (:class:`BackfillTaskWriter`) stages chunks
(:mod:`.backfill_stage`) and returns a picklable :class:`TaskCommitMessage`; the job's
driver hands the messages of its successful tasks to
:class:`~tierlog.remote.ops.backfill_commit.BackfillCommitter`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tierlog.checkpoint.partition_metadata import topic_id_from_bytes
from tierlog.common.clock import system_time_ms
from tierlog.common.partitioner import partition_for_key
from tierlog.errors import BackfillError, RemoteStorageError
from tierlog.records.compression import codec_id
from tierlog.remote.api import TopicIdPartition, new_uuid_text
from tierlog.remote.ops.backfill_commit import DEFAULT_STAGING_RETENTION_MS, pending_jobs
from tierlog.remote.ops.backfill_stage import (
    _HEADER_TYPE,
    ROW_SCHEMA,
    StagedChunk,
    StagedPartitionWriter,
    StageSettings,
)
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions

log = logging.getLogger(__name__)

COLUMNS = ("key", "value", "headers", "topic", "partition", "timestamp")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as a job writes it: its id and partition count; ``created`` when the job
    creates it (it was not in the tier)."""

    topic: str
    topic_id: str
    partitions: int
    created: bool

    def partition(self, number: int) -> TopicIdPartition:
        return TopicIdPartition(self.topic_id, self.topic, number)


def new_topic_id_for(job_id: str, topic: str) -> str:
    """The topic id a job gives a topic it creates: derived from both, so every task of the
    job names the new topic's partition directories alike without asking each other."""
    counter = 0
    while True:
        digest = bytearray(hashlib.sha256(f"{job_id}/{topic}/{counter}".encode()).digest()[:16])
        digest[6] = (digest[6] & 0x0F) | 0x40  # a version-4 UUID, as Kafka's are
        digest[8] = (digest[8] & 0x3F) | 0x80
        text = topic_id_from_bytes(bytes(digest))
        if not text.startswith("-"):
            return text
        counter += 1


def resolve_topic(tier: RemoteTier, job_id: str, topic: str, new_partitions: int
                  ) -> TopicInfo:
    """The topic's incarnation in the tier (the one readers read), else the one a crashed
    commit's job record creates (the driver rolls it forward before committing, so the two
    jobs do not make two incarnations), else a new one of ``new_partitions`` partitions."""
    found = dict(topic_partitions(tier, topic))
    ids = {p.topic_id for p in found.values()}
    for plan in pending_jobs(tier):  # a half-applied record's partitions may not list yet
        for p in plan.partitions:
            if p.topic == topic and (not ids or p.topic_id in ids):
                found.setdefault(p.partition, p)
    if found:
        ids = {p.topic_id for p in found.values()}
        return TopicInfo(topic, ids.pop(), max(found) + 1, False)
    return TopicInfo(topic, new_topic_id_for(job_id, topic), new_partitions, True)


@dataclass(frozen=True, slots=True)
class TaskCommitMessage:
    """What a task hands the driver (picklable): its staged chunks and the topics it saw."""

    job_id: str
    task_id: int
    attempt: str
    chunks: tuple[StagedChunk, ...]
    topics: tuple[TopicInfo, ...]


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A job's settings (picklable): the default topic, a new topic's partition count, the
    codec and sizes, and how long orphaned staging is kept."""

    topic: str | None = None
    new_topic_partitions: int = 1
    compression: str = "none"
    batch_bytes: int = 16384
    segment_bytes: int = 1 << 30
    staging_retention_ms: int = DEFAULT_STAGING_RETENTION_MS

    def __post_init__(self) -> None:
        try:
            codec_id(self.compression)
        except ValueError as e:
            raise BackfillError(f"compression: {e}") from e
        for name in ("new_topic_partitions", "batch_bytes", "segment_bytes"):
            if getattr(self, name) < 1:
                raise BackfillError(f"{name} must be positive, got {getattr(self, name)}")

    def stage_settings(self) -> StageSettings:
        return StageSettings(compression=self.compression, batch_bytes=self.batch_bytes,
                             segment_bytes=self.segment_bytes)


class BackfillTaskWriter:
    """One task attempt's writer: feed Arrow record batches to :meth:`write`, then
    :meth:`commit_message` (or :meth:`discard` on failure)."""

    def __init__(self, tier: RemoteTier, job_id: str, task_id: int, attempt: str,
                 options: WriteOptions, *, now_ms: int | None = None) -> None:
        self._tier = tier
        self._job_id = job_id
        self._task_id = task_id
        self._attempt = attempt
        self._options = options
        self._now_ms = system_time_ms() if now_ms is None else now_ms
        self._topics: dict[str, TopicInfo] = {}
        self._writers: dict[TopicIdPartition, StagedPartitionWriter] = {}
        self._round_robin = task_id

    def write(self, batch: pa.RecordBatch) -> None:
        """Route and stage one Arrow batch's rows, column by column (no Python per row,
        except Kafka's partitioner once per distinct key of a many-partition topic)."""
        if batch.num_rows == 0:
            return
        names = set(batch.schema.names)
        if "value" not in names:
            raise BackfillError("the rows have no 'value' column (Spark's Kafka sink "
                                "requires one; key, headers, topic, partition and timestamp "
                                "are optional)")
        n = batch.num_rows
        rows = pa.table({
            "key": _binary(batch, "key") if "key" in names else pa.nulls(n, pa.binary()),
            "value": _binary(batch, "value"),
            "headers": _headers(batch) if "headers" in names else pa.nulls(n, _HEADER_TYPE),
            "timestamp": _timestamps(batch, self._now_ms) if "timestamp" in names
            else pa.array([self._now_ms] * n, pa.int64())}, schema=ROW_SCHEMA)
        keyless = self._round_robin
        self._round_robin += 1
        for topic, picked in self._by_topic(batch, n):
            info = self._topic(topic)
            subset = rows if picked is None else rows.filter(picked)
            parts = self._partitions(batch, subset, picked, info, keyless)
            if isinstance(parts, int):
                self._writer(info.partition(parts)).append(subset)
                continue
            for p in pc.unique(parts).to_pylist():
                self._writer(info.partition(p)).append(subset.filter(pc.equal(parts, p)))

    def _by_topic(self, batch: pa.RecordBatch, n: int
                  ) -> list[tuple[str, pa.Array | None]]:
        """Each topic of the rows with a mask of its rows (None: every row)."""
        default = self._options.topic
        if "topic" not in batch.schema.names:
            if default is None:
                raise BackfillError("row 0: no topic (set the 'topic' option or column)")
            return [(default, None)]
        topics = _strings(batch, "topic")
        if default is not None:
            topics = pc.fill_null(topics, default)
        elif topics.null_count:
            row = pc.index(pc.is_null(topics), True).as_py()
            raise BackfillError(f"row {row}: no topic (set the 'topic' option or column)")
        distinct = pc.unique(topics).to_pylist()
        if len(distinct) == 1:
            return [(distinct[0], None)]
        return [(t, pc.equal(topics, t)) for t in distinct]

    def _partitions(self, batch: pa.RecordBatch, subset: pa.Table, picked: pa.Array | None,
                    info: TopicInfo, keyless: int) -> pa.Array | int:
        """The partition of each row of ``subset`` (an int: all rows in one): the
        ``partition`` column, else Kafka's partitioner on the key, else ``keyless``'s turn."""
        given = None
        if "partition" in batch.schema.names:
            given = batch.column("partition")
            if not pa.types.is_integer(given.type):
                raise BackfillError(f"column 'partition' must be an integer, not {given.type}")
            if picked is not None:
                given = given.filter(picked)
            given = given.cast(pa.int64())
            bad = pc.or_(pc.less(given, 0), pc.greater_equal(given, info.partitions))
            if pc.any(bad).as_py():
                row = pc.index(pc.fill_null(bad, False), True).as_py()
                if picked is not None:  # the row number in the batch, not in the subset
                    row = pc.indices_nonzero(picked)[row].as_py()
                value = batch.column("partition")[row].as_py()
                raise BackfillError(f"row {row}: partition {value} of topic {info.topic!r} is "
                                    f"out of range (it has {info.partitions} partitions)")
            if given.null_count == 0:
                return given
        fallback = keyless % info.partitions
        keys = subset.column("key")
        if info.partitions > 1 and keys.null_count < len(keys):
            encoded = keys.combine_chunks().dictionary_encode()
            hashed = pa.array([partition_for_key(k, info.partitions)
                               for k in encoded.dictionary.to_pylist()], pa.int64())
            by_key = pc.fill_null(pc.take(hashed, encoded.indices), fallback)
        elif given is None:
            return fallback
        else:
            by_key = pa.array([fallback] * subset.num_rows, pa.int64())
        return by_key if given is None else pc.coalesce(given, by_key)

    def commit_message(self) -> TaskCommitMessage:
        """Stage what is left and describe every chunk."""
        chunks: list[StagedChunk] = []
        for writer in self._writers.values():
            chunks += writer.close()
        return TaskCommitMessage(self._job_id, self._task_id, self._attempt, tuple(chunks),
                                 tuple(self._topics.values()))

    def discard(self) -> None:
        for writer in self._writers.values():
            writer.discard()

    def _topic(self, topic: str) -> TopicInfo:
        info = self._topics.get(topic)
        if info is None:
            try:
                info = resolve_topic(self._tier, self._job_id, topic,
                                     self._options.new_topic_partitions)
            except ValueError as e:
                raise BackfillError(f"topic {topic!r}: {e}") from e
            self._topics[topic] = info
        return info

    def _writer(self, tip: TopicIdPartition) -> StagedPartitionWriter:
        writer = self._writers.get(tip)
        if writer is None:
            writer = self._writers[tip] = StagedPartitionWriter(
                self._tier, tip, self._job_id, self._attempt, self._options.stage_settings(),
                self._now_ms)
        return writer


def new_job_id() -> str:
    return new_uuid_text()


def task_attempt_name(task_id: int, attempt: int) -> str:
    """``t<task>-a<attempt>-<random>``: unique even for a speculative duplicate attempt."""
    return f"t{task_id:05d}-a{attempt}-{new_uuid_text()[:8]}"


def collect(messages: Iterable[TaskCommitMessage | None], job_id: str
            ) -> tuple[list[StagedChunk], list[TopicIdPartition]]:
    """The chunks of the job's messages (one per task: a duplicate task id is an error)
    and every partition of the topics they create."""
    chunks: list[StagedChunk] = []
    created: set[TopicIdPartition] = set()
    tasks: set[int] = set()
    new_ids: dict[str, str] = {}
    for m in messages:
        if m is None:
            continue
        if m.job_id != job_id:
            raise RemoteStorageError(f"commit message of job {m.job_id} given to job {job_id}")
        if m.task_id in tasks:
            raise RemoteStorageError(f"job {job_id}: two commit messages of task {m.task_id}")
        tasks.add(m.task_id)
        chunks += sorted(m.chunks, key=lambda c: c.index)
        for info in m.topics:
            if info.created:
                if new_ids.setdefault(info.topic, info.topic_id) != info.topic_id:
                    raise RemoteStorageError(f"job {job_id}: tasks disagree on the id of "
                                             f"new topic {info.topic!r}")
                created.update(info.partition(p) for p in range(info.partitions))
    order = {(m.job_id, m.attempt): m.task_id for m in messages if m is not None}
    chunks.sort(key=lambda c: (order[(c.job_id, c.attempt)], c.index))
    return chunks, sorted(created, key=str)


# -- Arrow columns -> Python values -----------------------------------------------------------


def _binary(batch: pa.RecordBatch, name: str) -> pa.Array:
    column = batch.column(name)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.string()).view(pa.binary())
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column.cast(pa.binary())
    raise BackfillError(f"column {name!r} must be binary or string, not {column.type}")


def _strings(batch: pa.RecordBatch, name: str) -> pa.Array:
    column = batch.column(name)
    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        raise BackfillError(f"column {name!r} must be a string, not {column.type}")
    return column.cast(pa.string())


_UNITS_PER_MS = {"s": None, "ms": 1, "us": 1000, "ns": 1_000_000}


def _timestamps(batch: pa.RecordBatch, now_ms: int) -> pa.Array:
    """Epoch milliseconds (a null: ``now_ms``); finer timestamps are floored to the
    millisecond, as Spark's Kafka sink does (``DateTimeUtils.toMillis``)."""
    column: Any = batch.column("timestamp")
    if pa.types.is_timestamp(column.type):
        per_ms = _UNITS_PER_MS[column.type.unit]
        raw = column.cast(pa.int64())
        if per_ms is None:
            column = pc.multiply_checked(raw, 1000)
        elif per_ms == 1:
            column = raw
        else:
            quotient = pc.divide(raw, per_ms)  # truncates towards zero
            below = pc.and_(pc.less(raw, 0),
                            pc.not_equal(pc.multiply(quotient, per_ms), raw))
            column = pc.if_else(below, pc.subtract(quotient, 1), quotient)
    elif pa.types.is_integer(column.type):
        column = column.cast(pa.int64())
    else:
        raise BackfillError(f"column 'timestamp' must be a timestamp or epoch milliseconds, "
                            f"not {column.type}")
    return pc.fill_null(column, now_ms)


def _headers(batch: pa.RecordBatch) -> pa.Array:
    column = batch.column("headers")
    try:
        return column.cast(_HEADER_TYPE)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise BackfillError(f"column 'headers' must be {_HEADER_TYPE}, not {column.type}: "
                            f"{e}") from e


def options_from(mapping: Mapping[str, str], *, topic_key: str = "topic") -> WriteOptions:
    """WriteOptions from string options (Spark's): ``topic``, ``partitions`` (of a new
    topic), ``compression`` (Kafka's names: none, gzip, snappy, lz4, zstd; also
    ``kafka.compression.type``, the producer setting Spark's Kafka sink takes),
    ``batch.size``, ``segment.bytes``, ``staging.retention.ms``. BackfillError naming a
    bad one."""
    def number(key: str, default: int) -> int:
        text = mapping.get(key)
        if text is None:
            return default
        try:
            return int(text)
        except ValueError:
            raise BackfillError(f"option {key!r} must be an integer, got {text!r}") from None
    compression = mapping.get("compression", mapping.get("kafka.compression.type", "none"))
    return WriteOptions(
        topic=mapping.get(topic_key), new_topic_partitions=number("partitions", 1),
        compression=compression, batch_bytes=number("batch.size", 16384),
        segment_bytes=number("segment.bytes", 1 << 30),
        staging_retention_ms=number("staging.retention.ms", DEFAULT_STAGING_RETENTION_MS))


__all__ = [
    "COLUMNS",
    "BackfillTaskWriter",
    "TaskCommitMessage",
    "TopicInfo",
    "WriteOptions",
    "collect",
    "new_job_id",
    "new_topic_id_for",
    "options_from",
    "resolve_topic",
    "task_attempt_name",
]
