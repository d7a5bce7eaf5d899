"""The tier backfill without Spark: tasks stage chunks, the driver commits them as segments
that readers (and a LogManager that adopts the topic) see all at once, byte-equal."""

from __future__ import annotations

import io

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from tierlog.common.partitioner import murmur2, partition_for_key
from tierlog.errors import BackfillError, CorruptRecordError, PartitionOwnedError
from tierlog.records.batch import iter_batches
from tierlog.records.compression import CODEC_NAMES
from tierlog.remote.api import new_uuid_text
from tierlog.remote.ops.backfill import (
    BackfillTaskWriter,
    WriteOptions,
    collect,
    new_job_id,
    task_attempt_name,
)
from tierlog.remote.ops.backfill_commit import BackfillCommitter, rebase_batches
from tierlog.remote.ops.backfill_visibility import job_record_names
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.ownership import record_owner
from tierlog.remote.tier.topics import topic_partitions

T0 = 1_700_000_000_000


def _rows(start: int, n: int, *, keyed: bool = True) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({
        "key": [f"k{i % 7}".encode() if keyed and i % 5 else None for i in range(start, start + n)],
        "value": [None if i % 11 == 3 else f"value-{i}".encode() * (i % 4) for i in
                  range(start, start + n)],
        "headers": [[{"key": "h", "value": str(i).encode()}] if i % 3 == 0 else [] for i in
                    range(start, start + n)],
        "timestamp": pa.array([T0 + i for i in range(start, start + n)], pa.timestamp("ms")),
    })


def _job(tier, batches_per_task, options, clock_ms=T0):
    job = new_job_id()
    messages = []
    for task, batches in enumerate(batches_per_task):
        writer = BackfillTaskWriter(tier, job, task, task_attempt_name(task, 0), options,
                                    now_ms=clock_ms)
        for b in batches:
            writer.write(b)
        messages.append(writer.commit_message())
    return job, messages


def _commit(tier, job, messages, **kw):
    chunks, created = collect(messages, job)
    committer = BackfillCommitter(tier, time_ms=lambda: T0)
    try:
        return committer.commit(job, chunks, created=created, **kw)
    finally:
        committer.close()


def _read(tier, topic):
    """Every record of every partition of ``topic`` from the committed segments' objects."""
    out = {}
    for p, tip in topic_partitions(tier, topic).items():
        manifest, _ = load_partition(tier, tip)
        records = []
        for md in manifest.committed:
            data = tier.get_bytes(tier.path(segment_object_key(md, SEGMENT_SUFFIX)))
            for batch in iter_batches(data, strict=True):
                assert batch.is_valid()
                assert batch.partition_leader_epoch == 0
                records += [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
                            for r in batch.records()]
            assert records[-1][0] == md.end_offset
        out[p] = records
    return out


def _expected(batches, partitions):
    exp: dict[int, list] = {p: [] for p in range(partitions)}
    for b in batches:
        d = b.to_pydict()
        for i in range(b.num_rows):
            key = d["key"][i]
            p = partition_for_key(key, partitions) if key is not None else None
            exp.setdefault(p, []).append((int(d["timestamp"][i].timestamp() * 1000), key,
                                          d["value"][i],
                                          tuple((h["key"], h["value"]) for h in d["headers"][i])))
    return exp


@pytest.mark.parametrize("codec", sorted(CODEC_NAMES))
def test_two_tasks_write_one_new_topic_contiguously_in_every_codec(tier, codec):
    opts = WriteOptions(topic="orders", new_topic_partitions=3, compression=codec,
                        batch_bytes=200, segment_bytes=1500)
    tasks = [[_rows(0, 60), _rows(60, 40)], [_rows(100, 80)]]
    job, messages = _job(tier, tasks, opts)
    assert _read(tier, "orders") == {}  # staged only: nothing visible
    result = _commit(tier, job, messages)
    assert result.records == 180
    got = _read(tier, "orders")
    assert sorted(got) == [0, 1, 2]
    exp = _expected([b for t in tasks for b in t], 3)
    keyless = exp.pop(None)
    for p, records in got.items():
        assert [r[0] for r in records] == list(range(len(records)))  # contiguous from 0
        keyed = [r[1:] for r in records if r[2] is not None]
        assert keyed == exp[p]  # task order, then row order
    assert sum(len(r) for r in got.values()) == 180
    assert sorted(r[1:] for rs in got.values() for r in rs if r[2] is None) == sorted(keyless)
    assert not job_record_names(tier)
    assert not tier.fs.exists(tier.path(f"_staging/{job}"))


def test_a_second_job_continues_at_the_partitions_end(tier):
    opts = WriteOptions(topic="t", segment_bytes=800)
    _commit(tier, *_job(tier, [[_rows(0, 30)]], opts))
    _commit(tier, *_job(tier, [[_rows(30, 20)], [_rows(50, 5)]], opts))
    got = _read(tier, "t")[0]
    assert [r[0] for r in got] == list(range(55))
    assert [r[1] for r in got] == [T0 + i for i in range(55)]


def test_an_aborted_job_leaves_nothing_visible_and_no_staging(tier):
    opts = WriteOptions(topic="t")
    job, messages = _job(tier, [[_rows(0, 10)]], opts)
    chunks, created = collect(messages, job)
    committer = BackfillCommitter(tier, time_ms=lambda: T0)
    assert chunks and created
    committer.abort(job)
    assert _read(tier, "t") == {}
    assert not list(tier.fs.find(tier.root))


def test_only_the_messages_passed_to_commit_count(tier):
    """A failed attempt's staged chunks (no message) are never committed: no duplicates."""
    opts = WriteOptions(topic="t")
    job = new_job_id()
    failed = BackfillTaskWriter(tier, job, 0, task_attempt_name(0, 0), opts, now_ms=T0)
    failed.write(_rows(0, 10))
    failed.commit_message()  # staged, but the attempt "failed": its message is lost
    retry = BackfillTaskWriter(tier, job, 0, task_attempt_name(0, 1), opts, now_ms=T0)
    retry.write(_rows(0, 10))
    _commit(tier, job, [retry.commit_message()])
    assert len(_read(tier, "t")[0]) == 10
    assert not tier.fs.exists(tier.path(f"_staging/{job}"))


def test_an_owned_partition_is_refused_naming_it_and_its_owner(tier):
    opts = WriteOptions(topic="t")
    _commit(tier, *_job(tier, [[_rows(0, 3)]], opts))
    tip = topic_partitions(tier, "t")[0]
    record_owner(tier, tip, "LogManager on host:/data", T0)
    job, messages = _job(tier, [[_rows(3, 3)]], opts)
    with pytest.raises(PartitionOwnedError, match=r"t-0 .*LogManager on host:/data"):
        _commit(tier, job, messages)
    assert len(_read(tier, "t")[0]) == 3


def test_a_crashed_commit_is_rolled_forward_by_the_next_writer(tier, monkeypatch):
    opts = WriteOptions(topic="t", new_topic_partitions=2, segment_bytes=400, batch_bytes=100)
    job, messages = _job(tier, [[_rows(0, 40)]], opts)
    calls = []
    real = BackfillCommitter._copy_segment

    def crash_on_second(self, s):
        calls.append(s)
        if len(calls) == 2:
            raise KeyboardInterrupt("driver killed")
        real(self, s)

    monkeypatch.setattr(BackfillCommitter, "_copy_segment", crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        _commit(tier, job, messages)
    # The killed commit was copying the first partition's second segment: none of it shows.
    assert _read(tier, "t") == {} or not _read(tier, "t")[calls[-1].chunk.partition]
    monkeypatch.setattr(BackfillCommitter, "_copy_segment", real)
    committer = BackfillCommitter(tier, time_ms=lambda: T0)
    assert committer.recover() == [job]
    got = _read(tier, "t")
    assert sum(len(r) for r in got.values()) == 40
    assert not job_record_names(tier)


def test_a_crashed_job_whose_id_starts_with_an_underscore_is_rolled_forward(tier, monkeypatch):
    """A job id is base64url: 1 in 64 starts with "_", beside the generation counter's
    ``_jobs/_generation.json``. Such a job's record must still be found and rolled forward."""
    opts = WriteOptions(topic="u", segment_bytes=400, batch_bytes=100)
    monkeypatch.setitem(globals(), "new_job_id", lambda: "_" + new_uuid_text()[1:])
    job, messages = _job(tier, [[_rows(0, 20)]], opts)
    assert job.startswith("_")
    real = BackfillCommitter._copy_segment

    def killed(self, s):
        raise KeyboardInterrupt("driver killed")

    monkeypatch.setattr(BackfillCommitter, "_copy_segment", killed)
    with pytest.raises(KeyboardInterrupt):
        _commit(tier, job, messages)
    assert job_record_names(tier) == [job]
    monkeypatch.setattr(BackfillCommitter, "_copy_segment", real)
    assert BackfillCommitter(tier, time_ms=lambda: T0).recover() == [job]
    assert sum(len(r) for r in _read(tier, "u").values()) == 20
    assert not job_record_names(tier)


def test_a_replayed_stream_batch_writes_nothing(tier):
    opts = WriteOptions(topic="s")
    first = _commit(tier, *_job(tier, [[_rows(0, 5)]], opts), stream=("q1", 0))
    again = _commit(tier, *_job(tier, [[_rows(0, 5)]], opts), stream=("q1", 0))
    nxt = _commit(tier, *_job(tier, [[_rows(5, 5)]], opts), stream=("q1", 1))
    assert (first.skipped, again.skipped, nxt.skipped) == (False, True, False)
    assert [r[0] for r in _read(tier, "s")[0]] == list(range(10))


def test_bad_rows_get_a_backfill_error_naming_the_problem(tier):
    job = new_job_id()
    writer = BackfillTaskWriter(tier, job, 0, "a", WriteOptions(topic="t"), now_ms=T0)
    with pytest.raises(BackfillError, match="'value'"):
        writer.write(pa.RecordBatch.from_pydict({"key": [b"k"]}))
    with pytest.raises(BackfillError, match="partition 5 of topic 't'"):
        writer.write(pa.RecordBatch.from_pydict({"value": [b"v"], "partition": [5]}))
    with pytest.raises(BackfillError, match="compression"):
        WriteOptions(compression="brotli")


@pytest.mark.parametrize("key", [b"", b"a", b"ab", b"abc", b"abcd", b"key-17", bytes(range(256))])
@pytest.mark.parametrize("partitions", [1, 3, 7, 64])
def test_murmur2_places_keys_where_kafka_python_does(key, partitions):
    # kafka-python's DefaultPartitioner.partition: murmur2 & 0x7fffffff % len(partitions)
    expected = (kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions
    assert partition_for_key(key, partitions) == expected
    assert 0 <= murmur2(key) < 1 << 32


def test_rebase_adds_the_base_offset_and_keeps_crcs(tmp_path):
    import io

    from tierlog.records.builder import build_batch
    from tierlog.records.record import Record

    staged = build_batch([Record(b"k", b"v", timestamp=T0)] * 3, base_offset=0) + \
        build_batch([Record(None, b"w", timestamp=T0)], base_offset=3)
    out = io.BytesIO()
    assert rebase_batches(io.BytesIO(staged), out, 1000, 4) == len(staged)
    batches = list(iter_batches(out.getvalue(), strict=True))
    assert [(b.base_offset, b.partition_leader_epoch, b.is_valid()) for b in batches] == \
        [(1000, 4, True), (1003, 4, True)]


class _Trickle(io.BytesIO):
    """A stream whose reads return at most ``step`` bytes (a block boundary anywhere)."""

    def __init__(self, data: bytes, step: int) -> None:
        super().__init__(data)
        self.step = step

    def read(self, size: int = -1, /) -> bytes:
        return super().read(self.step if size < 0 else min(size, self.step))


@pytest.mark.parametrize("step", [1, 7, 61, 70, 1000])
def test_rebase_patches_headers_that_straddle_read_blocks(step):
    from tierlog.records.builder import build_batch
    from tierlog.records.record import Record

    staged = b"".join(build_batch([Record(b"k" * i, b"v" * (i * 3), timestamp=T0)] * (i + 1),
                                  base_offset=sum(range(1, i + 1))) for i in range(6))
    out = io.BytesIO()
    assert rebase_batches(_Trickle(staged, step), out, 500, 2) == len(staged)
    whole = io.BytesIO()
    rebase_batches(io.BytesIO(staged), whole, 500, 2)
    assert out.getvalue() == whole.getvalue()
    batches = list(iter_batches(out.getvalue(), strict=True))
    assert [b.base_offset for b in batches] == [500 + sum(range(1, i + 1)) for i in range(6)]
    assert all(b.is_valid() and b.partition_leader_epoch == 2 for b in batches)
    first = len(build_batch([Record(b"", b"", timestamp=T0)], base_offset=0))
    with pytest.raises(CorruptRecordError, match=f"inside a batch header at {first}"):
        rebase_batches(_Trickle(staged[:first + 5], step), io.BytesIO(), 0, 0)
    with pytest.raises(CorruptRecordError, match=f"inside the batch at {first}"):
        rebase_batches(_Trickle(staged[:first + 20], step), io.BytesIO(), 0, 0)
