"""A Spark writer's job without the JVM, for SIGKILL tests of the backfill (run as a script).

It runs the code Spark runs for ``df.write.format("tierlog")``: each "task" is
``tierlog.spark.write._write_task`` (the data source writer's ``write``; outside Spark it is
task 0, so the task id comes from ``TaskContext``'s stand-in below), and the driver calls
``TierlogBatchWriter.commit`` with the tasks' TierlogCommitMessages, as Spark's driver does.

``TIERLOG_TEST_KILL_AT=<Class>.<method>:<n>`` (test-only) makes the process SIGKILL itself
on entering the n-th call of one of the write path's methods, a deterministic point
mid-write or mid-commit; nothing waits on time.

Usage: ``python backfill_crash_driver.py <tier url> <first row> <rows>``; prints ``committed``
when the job committed.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from tierlog.remote.metadata.metadata import RemoteLogMetadataManager
from tierlog.remote.ops.backfill_commit import BackfillCommitter
from tierlog.remote.ops.backfill_stage import StagedPartitionWriter
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.spark import write as spark_write

TASKS = 3
T0 = 1_700_000_000_000
#: The classes whose methods TIERLOG_TEST_KILL_AT may name.
KILLABLE: dict[str, type] = {c.__name__: c for c in (
    StagedPartitionWriter, BackfillCommitter, RemoteLogMetadataManager, RemoteTier)}


def options(url: str) -> dict[str, str]:
    return {"path": url, "topic": "t", "partitions": "2", "compression": "zstd",
            "batch.size": "300", "segment.bytes": "1500", "staging.retention.ms": "0"}


def rows(first: int, n: int) -> pa.RecordBatch:
    """Deterministic rows: keyed by ``k<i % 9>`` (placed by murmur2), values unique."""
    idx = range(first, first + n)
    return pa.RecordBatch.from_pydict({
        "key": [f"k{i % 9}".encode() for i in idx],
        "value": [f"value-{i}-".encode() * (1 + i % 5) for i in idx],
        "timestamp": pa.array([T0 + i for i in idx], pa.timestamp("ms")),
    })


class _Task:
    """TaskContext's stand-in: the partition id and attempt Spark would give the task."""

    def __init__(self, task: int) -> None:
        self.task = task

    def partitionId(self) -> int:
        return self.task

    def attemptNumber(self) -> int:
        return 0


def run_job(url: str, first: int, n: int) -> None:
    """One job of TASKS tasks over rows ``[first, first + n)``, committed by the driver."""
    import pyspark

    writer = spark_write.TierlogBatchWriter(options(url))
    messages = []
    per_task = n // TASKS
    for task in range(TASKS):
        start = first + task * per_task
        count = per_task if task < TASKS - 1 else n - per_task * (TASKS - 1)
        batches: Iterator[pa.RecordBatch] = iter([rows(start, count // 2),
                                                  rows(start + count // 2, count - count // 2)])
        original = pyspark.TaskContext.get
        pyspark.TaskContext.get = staticmethod(lambda task=task: _Task(task))  # type: ignore
        try:
            messages.append(writer.write(batches))
        finally:
            pyspark.TaskContext.get = original  # type: ignore[method-assign]
    writer.commit(messages)


def _install_kill_point(spec: str) -> None:
    target, _, count = spec.partition(":")
    class_name, _, method = target.partition(".")
    cls = KILLABLE[class_name]
    real = getattr(cls, method)
    calls = [0]

    @functools.wraps(real)
    def killing(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == int(count):
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)

    setattr(cls, method, killing)


def main(argv: list[str]) -> None:
    url, first, n = argv[0], int(argv[1]), int(argv[2])
    spec = os.environ.get("TIERLOG_TEST_KILL_AT")
    if spec:
        _install_kill_point(spec)
    run_job(url, first, n)
    print("committed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
