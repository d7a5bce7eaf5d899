"""Backfilled topics for the adoption and restore tests: deterministic Arrow rows
(:func:`rows`), one committed backfill job of them (:func:`backfill`), and the raw batches the
tier and a Log hold (:func:`tier_batches`, :func:`log_batches`) compared field by field
(:func:`fields`)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from tierlog import Log
from tierlog.records.batch import iter_batches
from tierlog.remote.ops.backfill import (
    BackfillTaskWriter,
    WriteOptions,
    collect,
    new_job_id,
    task_attempt_name,
)
from tierlog.remote.ops.backfill_commit import BackfillCommitter
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions

#: Row i's timestamp is T0 + i.
T0 = 1_700_000_000_000


def rows(start: int, n: int) -> pa.RecordBatch:
    """Rows ``start`` to ``start + n``: null and repeated keys, empty and growing values,
    headers on every third row."""
    idx = range(start, start + n)
    return pa.RecordBatch.from_pydict({
        "key": [f"k{i % 5}".encode() if i % 4 else None for i in idx],
        "value": [f"value-{i}".encode() * (i % 3) for i in idx],
        "headers": [[{"key": "h", "value": str(i).encode()}] if i % 3 == 0 else [] for i in idx],
        "timestamp": pa.array([T0 + i for i in idx], pa.timestamp("ms")),
    })


def backfill(tier: RemoteTier, topic: str, tasks: list[list[pa.RecordBatch]],
             **options: Any) -> None:
    """One backfill job of ``tasks`` (each a task's Arrow batches), committed."""
    opts = WriteOptions(topic=topic, **options)
    job = new_job_id()
    messages = []
    for task, batches in enumerate(tasks):
        writer = BackfillTaskWriter(tier, job, task, task_attempt_name(task, 0), opts,
                                    now_ms=T0)
        for b in batches:
            writer.write(b)
        messages.append(writer.commit_message())
    chunks, created = collect(messages, job)
    committer = BackfillCommitter(tier, time_ms=lambda: T0)
    try:
        committer.commit(job, chunks, created=created)
    finally:
        committer.close()


def tier_batches(tier: RemoteTier, topic: str, partition: int) -> list[bytes]:
    """The raw batches of the partition's committed segments, in offset order."""
    tip = topic_partitions(tier, topic)[partition]
    manifest, _ = load_partition(tier, tip)
    out: list[bytes] = []
    for md in sorted(manifest.committed, key=lambda m: m.start_offset):
        data = tier.get_bytes(tier.path(segment_object_key(md, SEGMENT_SUFFIX)))
        out += [bytes(b.view()) for b in iter_batches(data, strict=True)]
    return out


def log_batches(partition_log: Log, start: int, end: int) -> list[bytes]:
    """The raw batches Log.read returns for ``[start, end)``."""
    out: list[bytes] = []
    offset = start
    while offset < end:
        info = partition_log.read(offset, max_bytes=4096)
        batches = list(info.batches())
        assert batches, f"no batch at {offset}"
        out += [bytes(b.view()) for b in batches]
        offset = batches[-1].next_offset
    return out


def fields(batches: list[bytes]) -> list[tuple[Any, ...]]:
    """(offset, timestamp, key, value, headers) of every record of ``batches``."""
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for data in batches for b in iter_batches(data, strict=True) for r in b.records()]


def manager_config(url: str) -> dict[str, object]:
    """A LogManager config tiering to the local tier at ``url``, with small segments."""
    return {"remote.storage.manager": "local", "remote.storage.url": url,
            "segment.bytes": 2048, "local.retention.bytes": 0}
