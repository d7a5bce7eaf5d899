"""``df.write.format("tierlog")`` and ``df.writeStream.format("tierlog")``: Spark writes
records straight into the remote tier as committed segments (the backfill no broker
offers), with the columns of Spark's Kafka sink.

Columns: ``value`` (required, binary or string), ``key``, ``headers``
(``array<struct<key: string, value: binary>>``), ``topic`` (else the ``topic`` option),
``partition`` (else Kafka's default partitioner on the key), ``timestamp`` (else the write
time). Options: ``path`` (the tier's URL) and ``storage.<name>`` as for reading, ``topic``,
``partitions`` (of a topic the job creates; default 1), ``compression`` (none, gzip,
snappy, lz4, zstd; Spark's Kafka sink spells it ``kafka.compression.type``, also taken),
``batch.size``, ``segment.bytes``, and for a stream ``streamId`` (default: the
``checkpointLocation`` option), under which the tier records the last committed batch id.

Tasks stage chunks; the driver's ``commit`` makes them visible, all at once per partition
(tierlog.remote.ops.backfill_commit); ``abort`` deletes the job's staging.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from tierlog.common.clock import system_time_ms
from tierlog.errors import ConfigError
from tierlog.remote.ops.backfill import (
    BackfillTaskWriter,
    TaskCommitMessage,
    WriteOptions,
    collect,
    new_job_id,
    options_from,
    task_attempt_name,
)
from tierlog.remote.ops.backfill_commit import BackfillCommitter, CommitResult
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.options import (
    backend_for_url,
    filesystem_kwargs,
    options_under,
    parse_options,
)
from tierlog.spark.options import STORAGE_PREFIXES

log = logging.getLogger(__name__)

_WRITE_KEYS = {"path", "topic", "partitions", "compression", "kafka.compression.type",
               "batch.size", "segment.bytes", "staging.retention.ms", "streamid",
               "checkpointlocation"}


class _Settings:
    """The write options, parsed once on the driver (picklable: shipped to the tasks)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        opts = {k.lower(): str(v) for k, v in options.items()}
        if "path" not in opts:
            raise ConfigError("path", "the URL of the remote tier is required")
        self.url = opts["path"]
        raw = options_under(STORAGE_PREFIXES, opts)
        self.storage = parse_options(backend_for_url(self.url), raw, prefix=STORAGE_PREFIXES[0])
        self.fs_kwargs = filesystem_kwargs(self.url, self.storage, prefix=STORAGE_PREFIXES[0])
        unknown = sorted(k for k in opts if k not in _WRITE_KEYS and not k.startswith(
            STORAGE_PREFIXES) and not k.startswith("kafka."))
        if unknown:
            raise ConfigError(unknown[0], f"unknown option of the tierlog writer; known: "
                                          f"{', '.join(sorted(_WRITE_KEYS))}, storage.<name>")
        self.write: WriteOptions = options_from(opts)
        self.stream_id = opts.get("streamid") or opts.get("checkpointlocation")

    def tier(self) -> RemoteTier:
        fs, root = fsspec.core.url_to_fs(self.url, **self.fs_kwargs)
        return RemoteTier(fs, root)


class TierlogCommitMessage(WriterCommitMessage):
    """A task's staged chunks, as Spark carries them to the driver."""

    def __init__(self, task: TaskCommitMessage) -> None:
        self.task = task


def _write_task(settings: _Settings, job_id: str, batches: Iterator[pa.RecordBatch]
                ) -> TierlogCommitMessage:
    from pyspark import TaskContext

    context = TaskContext.get()
    task_id = context.partitionId() if context is not None else 0
    attempt = context.attemptNumber() if context is not None else 0
    writer = BackfillTaskWriter(settings.tier(), job_id, task_id,
                                task_attempt_name(task_id, attempt), settings.write)
    try:
        for batch in batches:
            writer.write(batch)
        return TierlogCommitMessage(writer.commit_message())
    except BaseException:
        writer.discard()
        raise


def _tasks(messages: list[Any]) -> list[TaskCommitMessage | None]:
    return [m.task if isinstance(m, TierlogCommitMessage) else None for m in messages]


def _commit(settings: _Settings, job_id: str, messages: list[Any],
            stream: tuple[str, int] | None = None) -> CommitResult:
    chunks, created = collect(_tasks(messages), job_id)
    committer = BackfillCommitter(settings.tier(), time_ms=system_time_ms)
    try:
        result = committer.commit(job_id, chunks, created=created, stream=stream)
        committer.sweep_staging(settings.write.staging_retention_ms)
    finally:
        committer.close()
    log.info("tierlog write %s committed %d records", job_id, result.records)
    return result


def _abort(settings: _Settings, job_id: str) -> None:
    committer = BackfillCommitter(settings.tier(), time_ms=system_time_ms)
    try:
        committer.abort(job_id)
    finally:
        committer.close()


class TierlogBatchWriter(DataSourceArrowWriter):
    """``df.write.format("tierlog")``: one job, committed all at once."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.settings = _Settings(options)
        self.job_id = new_job_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write_task(self.settings, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.settings, self.job_id, list(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.settings, self.job_id)


class TierlogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("tierlog")``: each micro-batch commits atomically, once per
    batch id (a replayed batch id writes nothing new)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.settings = _Settings(options)
        if not self.settings.stream_id:
            raise ConfigError("streamId", "a streaming write needs a streamId (or a "
                                          "checkpointLocation) to record its batches under")
        self.job_id = new_job_id()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return _write_task(self.settings, self.job_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        assert self.settings.stream_id is not None
        # One job id for the query (the tasks' pickled copy has it too): micro-batches run
        # one after another, each commit deletes the staging it leaves.
        _commit(self.settings, self.job_id, list(messages),
                stream=(_safe_name(self.settings.stream_id), batchId))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _abort(self.settings, self.job_id)


def _safe_name(text: str) -> str:
    """A stream id as one object name (a checkpoint location is a path)."""
    import hashlib

    clean = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)[-80:]
    return f"{clean}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"
