"""A backfill job is visible to every reader at once (issue 21, defect 12): readers that look
at the tier after each write of a healthy commit, readers whose view was taken before or
during a commit that completes while they read, and readers of a tier whose counter or
tags are not ours. The SIGKILL side is in test_backfill_kill.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import fsspec
import pyarrow as pa
import pytest

from tierlog.reader import RemoteTopicReader, read_split
from tierlog.remote.api import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.remote.ops.backfill import (
    BackfillTaskWriter,
    WriteOptions,
    collect,
    new_job_id,
    task_attempt_name,
)
from tierlog.remote.ops.backfill_commit import BackfillCommitter
from tierlog.remote.ops.backfill_stage import StagedChunk
from tierlog.remote.ops.backfill_visibility import (
    JobVisibility,
    job_tag,
    read_generation,
    tagged_job,
)
from tierlog.remote.read.readable import segment_chain
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions
from tierlog.spark import TierlogOptions, plan_read

T0 = 1_700_000_000_000
ROWS = 40  # per job, over partitions 0 and 1 (keys placed by Kafka's partitioner)


def _rows(first: int) -> pa.RecordBatch:
    idx = range(first, first + ROWS)
    return pa.RecordBatch.from_pydict({
        "key": [f"k{i % 6}".encode() for i in idx],
        "value": [f"v{i}".encode() * 8 for i in idx],
        "timestamp": pa.array([T0 + i for i in idx], pa.timestamp("ms")),
    })


Staged = tuple[str, list[StagedChunk], list[TopicIdPartition]]


def stage(tier: RemoteTier, first: int) -> Staged:
    """Two tasks' staged chunks of one job (small segments: several per partition)."""
    job = new_job_id()
    opts = WriteOptions(topic="t", new_topic_partitions=2, segment_bytes=1000, batch_bytes=300)
    messages = []
    for task in (0, 1):
        writer = BackfillTaskWriter(tier, job, task, task_attempt_name(task, 0), opts,
                                    now_ms=T0)
        writer.write(_rows(first + task * ROWS // 2).slice(0, ROWS // 2))
        messages.append(writer.commit_message())
    chunks, created = collect(messages, job)
    return job, chunks, created


def commit(tier: RemoteTier, staged: Staged) -> None:
    job, chunks, created = staged
    committer = BackfillCommitter(tier, time_ms=lambda: T0)
    try:
        committer.commit(job, chunks, created=created)
    finally:
        committer.close()


def counts(url: str) -> tuple[int, int]:
    """Rows of partitions 0 and 1 as tierlog.reader reads them."""
    reader = RemoteTopicReader(url)
    if "t" not in reader.list_topics():
        return 0, 0
    parts = reader.read_table("t").column("partition").to_pylist()
    return parts.count(0), parts.count(1)


def spark_counts(url: str) -> tuple[int, int]:
    """Rows of partitions 0 and 1 as the Spark source plans and reads them."""
    if "t" not in RemoteTopicReader(url).list_topics():
        return 0, 0
    splits = plan_read(TierlogOptions.parse({"path": url, "subscribe": "t"}))
    parts = [p for s in splits for b in read_split(s) for p in b.column("partition").to_pylist()]
    return parts.count(0), parts.count(1)


def observing(tier: RemoteTier, observe: Callable[[], None]) -> RemoteTier:
    """``tier`` calling ``observe`` after each of its writes and deletes."""
    for name in ("put_bytes", "put_file", "delete"):
        real = getattr(tier, name)

        def write(*args: Any, _real: Any = real) -> None:
            _real(*args)
            observe()

        setattr(tier, name, write)
    return tier


@pytest.fixture
def url(tmp_path: Any) -> str:
    return (tmp_path / "tier").as_uri()


def new_tier(url: str) -> RemoteTier:
    return RemoteTier(fsspec.filesystem("file"), url.removeprefix("file://"))


def test_every_reader_between_the_writes_of_a_commit_sees_none_or_all_of_it(url: str) -> None:
    tier = new_tier(url)
    commit(tier, stage(tier, 0))
    before = counts(url)
    assert before[0] > 0 and before[1] > 0
    seen: list[tuple[tuple[int, int], tuple[int, int]]] = []
    commit(observing(new_tier(url), lambda: seen.append((counts(url), spark_counts(url)))),
           stage(tier, 1000))
    after = counts(url)
    assert after[0] > before[0] and after[1] > before[1] and sum(after) == 2 * ROWS
    assert len(seen) > 15  # the record, the counter, each segment's objects and manifests
    for reader, spark in seen:
        assert reader == spark
        assert reader in (before, after), (reader, before, after)
    assert seen[-1][0] == after  # the last write (deleting the record) published the job


def test_a_view_taken_before_or_during_a_commit_hides_the_job_in_every_partition(
        url: str) -> None:
    """The ABA case: the commit completes (its record gone) while a reader that took its
    view earlier is still reading manifests."""
    tier = new_tier(url)
    commit(tier, stage(tier, 0))
    tips = sorted(topic_partitions(tier, "t").values(), key=lambda t: t.partition)

    def ends(jobs: JobVisibility | None) -> list[int]:
        return [segment_chain(tier, tip, jobs=jobs)[-1].last_offset for tip in tips]

    old = ends(None)
    views = [JobVisibility.read(tier)]
    commit(observing(new_tier(url), lambda: views.append(JobVisibility.read(tier))),
           stage(tier, 1000))
    new = ends(None)
    assert all(n > o for n, o in zip(new, old, strict=True))
    assert [ends(v) for v in views[:-1]] == [old] * (len(views) - 1)  # before publishing
    assert ends(views[-1]) == new


def test_a_reader_pins_one_view_for_all_partitions_of_a_read(url: str) -> None:
    """A commit completing between the reader's partitions is in none of them."""
    tier = new_tier(url)
    commit(tier, stage(tier, 0))
    before = counts(url)
    staged = stage(tier, 1000)
    reader = RemoteTopicReader(url)
    real_get = reader._tier.get_bytes
    done: list[bool] = []

    def get_bytes(path: str, *args: Any) -> bytes:
        if "/t-1-" in path and path.endswith("_tail.json") and not done:  # before its view
            done.append(True)
            commit(tier, staged)  # the whole commit, after partition 0 was planned
        return real_get(path, *args)

    reader._tier.get_bytes = get_bytes  # type: ignore[method-assign]
    parts = reader.read_table("t").column("partition").to_pylist()
    assert done and (parts.count(0), parts.count(1)) == before
    assert sum(counts(url)) == 2 * ROWS


def test_tags_and_the_counter(url: str) -> None:
    tier = new_tier(url)
    assert read_generation(tier) == 0
    commit(tier, stage(tier, 0))
    commit(tier, stage(tier, 1000))
    assert read_generation(tier) == 2
    segments = [md for tip in topic_partitions(tier, "t").values()
                for md in (link.segment for link in segment_chain(tier, tip))]
    assert {tagged_job(md)[1] for md in segments if tagged_job(md)} == {1, 2}  # type: ignore[index]
    md = segments[0]

    def with_custom(custom: bytes | None) -> RemoteLogSegmentMetadata:
        return dataclasses.replace(md, custom_metadata=custom)

    # Another writer's custom metadata (the fsspec RSM's JSON, or bytes) is no tag.
    for other in (None, b'{"extraIndexes": [".keyindex"]}', b"\x00\x01", b"{not json"):
        assert tagged_job(with_custom(other)) is None
        assert JobVisibility(0, frozenset()).visible(with_custom(other))
    tagged = with_custom(job_tag("job-a", 5))
    assert tagged_job(tagged) == ("job-a", 5)
    assert JobVisibility(5, frozenset()).visible(tagged)
    assert not JobVisibility(4, frozenset()).visible(tagged)
    assert not JobVisibility(9, frozenset({"job-a"})).visible(tagged)
