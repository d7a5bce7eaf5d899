"""Test helper: builds a real remote tier from real ``tierlog.Log`` partitions (every codec,
transactions, headers, null keys and values) and says which records a reader must return.

Until the RemoteLogManager exists, closed segments are copied here the way it will copy
them: ``FsspecRemoteStorageManager.copy_log_segment_data`` between COPY_SEGMENT_STARTED and
COPY_SEGMENT_FINISHED metadata events of a ``RemoteLogMetadataManager``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from tierlog import Log, Record
from tierlog.producer.snapshot import write_snapshot
from tierlog.remote import (
    FsspecRemoteStorageManager,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)

BASE_TIME_MS = 1_700_000_000_000
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: Small segments and a small index interval: many segments, several index entries each.
SMALL_SEGMENTS = {"segment.bytes": 2500, "index.interval.bytes": 300}
ISOLATIONS = ("read_uncommitted", "read_committed")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)


class StepClock:
    """A millisecond clock that moves 1 ms per call: append times are distinct and increasing."""

    def __init__(self, start_ms: int = BASE_TIME_MS) -> None:
        self._ticks = itertools.count(start_ms)

    def __call__(self) -> int:
        return next(self._ticks)


@dataclass
class Txn:
    """A transaction the builder wrote: its first offset and, once ended, its marker's offset."""

    producer_id: int
    first_offset: int
    marker_offset: int | None = None
    commit: bool | None = None


@dataclass
class PartitionWriter:
    """Appends to one Log and remembers the transactions, so the expected read_committed view
    of a tier can be derived without the reader's own logic."""

    log: Log
    txns: list[Txn] = field(default_factory=list)
    _sequences: dict[int, int] = field(default_factory=dict)
    _open: dict[int, Txn] = field(default_factory=dict)

    def append(self, records: Sequence[Record], compression: str = "none") -> int:
        return self.log.append_records(records, compression=compression).first_offset

    def append_txn(self, producer_id: int, records: Sequence[Record],
                   compression: str = "none") -> int:
        """A transactional batch; the producer's transaction opens with its first batch."""
        sequence = self._sequences.get(producer_id, 0)
        info = self.log.append_records(
            records, compression=compression, producer_id=producer_id, producer_epoch=0,
            base_sequence=sequence, transactional=True)
        self._sequences[producer_id] = sequence + len(records)
        if producer_id not in self._open:
            txn = Txn(producer_id, info.first_offset)
            self._open[producer_id] = txn
            self.txns.append(txn)
        return info.first_offset

    def end_txn(self, producer_id: int, *, commit: bool) -> int:
        info = self.log.append_marker(producer_id, 0, commit=commit)
        txn = self._open.pop(producer_id)
        txn.marker_offset, txn.commit = info.first_offset, commit
        return info.first_offset


@dataclass
class TieredPartition:
    """One partition in the tier: its log, what was copied, and what readers must return."""

    tip: TopicIdPartition
    writer: PartitionWriter
    segments: list[RemoteLogSegmentMetadata]
    expected: dict[str, list[Record]]

    @property
    def tier_end(self) -> int:
        """One past the last offset in the tier."""
        return self.segments[-1].end_offset + 1 if self.segments else 0


@dataclass
class BuiltTier:
    url: str
    rsm: FsspecRemoteStorageManager
    partitions: dict[tuple[str, int], TieredPartition]
    timestamp_types: dict[str, int]

    def expected(self, topic: str, isolation: str,
                 partitions: Sequence[int] | None = None) -> list[tuple[int, Record]]:
        """``(partition, record)`` pairs in partition then offset order."""
        return [(p, r) for (t, p), tp in sorted(self.partitions.items())
                if t == topic and (partitions is None or p in partitions)
                for r in tp.expected[isolation]]


# -- copying closed segments ---------------------------------------------------------------


def _epochs_checkpoint(log: Log, start: int, end: int) -> tuple[dict[int, int], bytes]:
    """The leader epochs of ``[start, end]`` (epoch -> first offset inside), and the
    leader-epoch checkpoint text that travels with the segment."""
    entries = sorted((e.start_offset, e.epoch) for e in log.leader_epoch_cache.entries()
                     if e.start_offset <= end)
    in_force = [(o, e) for o, e in entries if o <= start][-1:]
    kept = {e: max(o, start) for o, e in in_force + [(o, e) for o, e in entries if o > start]}
    if not kept:
        kept = {0: start}
    text = f"0\n{len(kept)}\n" + "".join(f"{e} {o}\n" for e, o in sorted(kept.items()))
    return kept, text.encode()


def copy_closed_segments(
    log: Log, tip: TopicIdPartition, rsm: FsspecRemoteStorageManager,
    rlmm: RemoteLogMetadataManager, *, up_to_base: int | None = None,
    event_ms: Callable[[], int] | None = None,
) -> list[RemoteLogSegmentMetadata]:
    """Copy every closed segment whose successor starts at or below ``up_to_base`` (default:
    all closed ones), as the RemoteLogManager does; returns the committed metadata."""
    clock = event_ms or StepClock()
    segments = log.segments.values()
    copied: list[RemoteLogSegmentMetadata] = []
    for segment, successor in itertools.pairwise(segments):
        next_base = successor.base_offset
        if up_to_base is not None and next_base > up_to_base:
            break
        if segment.log.size_in_bytes() == 0:
            continue
        end = next_base - 1
        epochs, checkpoint = _epochs_checkpoint(log, segment.base_offset, end)
        snapshot = log.directory / f"{next_base:020d}.snapshot"
        if not snapshot.exists():
            write_snapshot(snapshot, [])
        txn_path = None if segment.txn_index.is_empty() else segment.txn_index.path
        md = RemoteLogSegmentMetadata(
            remote_log_segment_id=RemoteLogSegmentId.generate(tip),
            start_offset=segment.base_offset, end_offset=end,
            max_timestamp_ms=segment.max_timestamp_so_far, event_timestamp_ms=clock(),
            segment_size_in_bytes=segment.log.size_in_bytes(), segment_leader_epochs=epochs,
            txn_idx_empty=txn_path is None,
        )
        rlmm.add_remote_log_segment_metadata(md)
        custom = rsm.copy_log_segment_data(md, LogSegmentData(
            log_segment=segment.log.path, offset_index=segment.offset_index.path,
            time_index=segment.time_index.path, transaction_index=txn_path,
            producer_snapshot_index=snapshot, leader_epoch_index=checkpoint))
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=md.remote_log_segment_id, event_timestamp_ms=clock(),
            state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED, custom_metadata=custom))
        copied.append(md)
    return copied


# -- what a reader must return ------------------------------------------------------------


def local_records(log: Log, isolation: str) -> Iterator[Record]:
    """Every record ``log.read`` gives a consumer at ``isolation``, from the log start on."""
    offset = log.log_start_offset
    while True:
        info = log.read(offset, max_bytes=1 << 26, isolation=isolation)
        batches = list(info.batches())
        if not batches:
            return
        yield from info.records()
        offset = batches[-1].next_offset


def expected_records(writer: PartitionWriter, tier_end: int, isolation: str) -> list[Record]:
    """What the tier alone holds for ``isolation``: the local view below the tier's end, and
    under read_committed below the first offset of any transaction whose marker is not in
    the tier (the tier's last stable offset)."""
    log = writer.log
    log.update_high_watermark(log.log_end_offset)
    bound = tier_end
    if isolation == "read_committed":
        open_firsts = [t.first_offset for t in writer.txns
                       if t.first_offset < tier_end
                       and (t.marker_offset is None or t.marker_offset >= tier_end)]
        bound = min([tier_end, *open_firsts])
    return [r for r in local_records(log, isolation) if r.offset < bound]


# -- the scenario --------------------------------------------------------------------------


def _value(partition: int, n: int, size: int = 40) -> bytes:
    return (f"p{partition}-v{n}-".encode() * size)[:size]


def write_orders(writer: PartitionWriter, partition: int, *, rounds: int = 6) -> None:
    """Every codec, headers, null/empty keys and values, committed and aborted transactions
    (one spanning segments), out-of-order CreateTime timestamps."""
    ts = itertools.count(BASE_TIME_MS + partition * 7, 3)
    n = itertools.count()
    committer, aborter = 1000 + partition, 2000 + partition
    for r in range(rounds):
        for codec in CODECS:
            records = []
            for i in range(6):
                k = next(n)
                headers: tuple[tuple[str, bytes | None], ...] = ()
                if k % 3 == 0:
                    headers = (("trace", f"t{k}".encode()), ("empty", b""), ("null", None))
                key = None if k % 5 == 0 else f"key-{k % 17}".encode()
                value = None if k % 11 == 0 else (b"" if k % 13 == 0 else _value(partition, k))
                stamp = next(ts) - (50 if i == 3 else 0)  # one record out of order per batch
                records.append(Record(key=key, value=value, headers=headers, timestamp=stamp))
            writer.append(records, codec)
        pid = committer if r % 2 == 0 else aborter
        codec = CODECS[r % len(CODECS)]
        for _ in range(2):
            writer.append_txn(pid, [Record(key=f"tx-{pid}-{r}".encode(),
                                           value=_value(partition, next(n)), timestamp=next(ts))
                                    for _ in range(4)], codec)
            writer.append([Record(key=b"plain", value=_value(partition, next(n)),
                                  timestamp=next(ts))], "none")
        if r == 2:  # this transaction's marker lands a few segments later
            writer.append_txn(aborter, [Record(key=b"long-abort", value=b"x" * 600,
                                               timestamp=next(ts))], "zstd")
            for _ in range(12):
                writer.append([Record(key=b"filler", value=b"f" * 500, timestamp=next(ts))],
                              "none")
            writer.end_txn(aborter, commit=False)
        writer.end_txn(pid, commit=pid == committer)


def build_tier(
    tmp_path: Path,
    rsm: FsspecRemoteStorageManager,
    url: str,
    *,
    topic_id: str = "q0Vs7vGvSZ6ljmj-ZmXC1A",
    clicks_topic_id: str = "b1Jx5oQFTU2n8pTzQm4XYg",
    rounds: int = 6,
    open_txn_at_end: bool = True,
    segment_bytes: int = SMALL_SEGMENTS["segment.bytes"],
) -> BuiltTier:
    """A tier with topic ``orders`` (partitions 0 and 1, CreateTime) and ``clicks``
    (partition 0, LogAppendTime).

    ``orders-1`` ends with a transaction whose marker stays in the local log (not tiered), so
    a read_committed reader of the tier must stop at its first offset.
    """
    rlmm = RemoteLogMetadataManager(rsm.tier)
    config = {**SMALL_SEGMENTS, "segment.bytes": segment_bytes}
    built: dict[tuple[str, int], TieredPartition] = {}
    for partition in (0, 1):
        log = Log.open(tmp_path / "logs" / f"orders-{partition}", config,
                       time_ms=StepClock(), topic_id=topic_id)
        writer = PartitionWriter(log)
        write_orders(writer, partition, rounds=rounds)
        up_to = None
        if partition == 1 and open_txn_at_end:
            writer.append_txn(3001, [Record(key=b"open", value=b"o" * 300,
                                            timestamp=BASE_TIME_MS + 10**6)], "gzip")
            writer.append([Record(key=b"after-open", value=b"a" * 1500,
                                  timestamp=BASE_TIME_MS + 10**6 + 1)], "none")
            log.roll()
            up_to = log.log_end_offset
            writer.end_txn(3001, commit=True)  # the marker stays local
        log.roll()
        tip = TopicIdPartition(topic_id, "orders", partition)
        built[("orders", partition)] = _tiered(writer, tip, rsm, rlmm, up_to)
    clicks = Log.open(tmp_path / "logs" / "clicks-0",
                      {**config, "message.timestamp.type": "LogAppendTime"},
                      time_ms=StepClock(BASE_TIME_MS + 5_000_000), topic_id=clicks_topic_id)
    clicks_writer = PartitionWriter(clicks)
    for i, codec in enumerate(CODECS * 4):
        clicks_writer.append([Record(key=f"c{i}".encode(), value=_value(9, i, 90),
                                     headers=(("n", str(i).encode()),), timestamp=1)
                              for _ in range(5)], codec)
    clicks.roll()
    built[("clicks", 0)] = _tiered(clicks_writer, TopicIdPartition(clicks_topic_id, "clicks", 0),
                                   rsm, rlmm, None)
    return BuiltTier(url, rsm, built, {"orders": 0, "clicks": 1})


def _tiered(writer: PartitionWriter, tip: TopicIdPartition, rsm: FsspecRemoteStorageManager,
            rlmm: RemoteLogMetadataManager, up_to: int | None) -> TieredPartition:
    segments = copy_closed_segments(writer.log, tip, rsm, rlmm, up_to_base=up_to)
    tier_end = segments[-1].end_offset + 1
    expected = {iso: expected_records(writer, tier_end, iso) for iso in ISOLATIONS}
    return TieredPartition(tip, writer, segments, expected)


def build_simple_tier(
    directory: Path, rsm: FsspecRemoteStorageManager, *, topic: str = "events",
    records: int = 10_000, per_batch: int = 1000, value_size: int = 100,
    compression: str = "none", segment_bytes: int = 64 << 20,
    topic_id: str = "c2Vn6QbUSz6vHqYkQ1dM0w",
    values: Callable[[int], bytes] | None = None,
) -> tuple[Log, list[RemoteLogSegmentMetadata]]:
    """One partition of plain records (for benchmarks and examples), every segment tiered;
    each value is ``b"v" * value_size``, or ``values(i)`` for the i-th record."""
    log = Log.open(directory / f"{topic}-0", {"segment.bytes": segment_bytes},
                   time_ms=StepClock(), topic_id=topic_id)
    payload = b"v" * value_size
    stamp = itertools.count(BASE_TIME_MS)
    for start in range(0, records, per_batch):
        batch = [Record(key=f"k{i % 1000}".encode(),
                        value=payload if values is None else values(i),
                        headers=(("src", b"bench"),) if i % 10 == 0 else (),
                        timestamp=next(stamp))
                 for i in range(start, min(start + per_batch, records))]
        log.append_records(batch, compression=compression)
    log.roll()
    rlmm = RemoteLogMetadataManager(rsm.tier)
    segments = copy_closed_segments(log, TopicIdPartition(topic_id, topic, 0), rsm, rlmm)
    return log, segments


def records_of(table: Any) -> list[tuple[int, Record]]:
    """``(partition, Record)`` pairs from a reader's Arrow table, or from Spark rows (as
    dicts; naive timestamps are UTC), comparable with ``BuiltTier.expected``."""
    rows = table.to_pylist() if hasattr(table, "to_pylist") else table
    out = []
    for row in rows:
        headers = tuple((h["key"], _bytes(h["value"])) for h in row["headers"] or ())
        ts = row["timestamp"]
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        out.append((row["partition"], Record(
            key=_bytes(row["key"]), value=_bytes(row["value"]), headers=headers,
            timestamp=(ts - EPOCH) // MILLISECOND, offset=row["offset"])))
    return out


def _bytes(value: bytes | bytearray | None) -> bytes | None:
    return None if value is None else bytes(value)
