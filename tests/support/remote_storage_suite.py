"""The contract every remote storage backend must meet: one base class, subclassed per plugin
(``test_remote_local.py``, ``test_remote_s3.py``) with fixtures giving a fresh, empty tier.
Segment files are built with ``tierlog.records.build_batch`` and plain writes, not the Log.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError
from tierlog.index import AbortedTxn
from tierlog.records import Record, build_batch, iter_batches
from tierlog.remote import (
    FsspecRemoteStorageManager,
    IndexType,
    LogSegmentData,
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    list_remote_partitions,
    read_partition_manifest,
    validate_fetched_batches,
)
from tierlog.remote.tier.layout import MANIFEST_NAME, partition_dir_name

TOPIC_ID = "q0Vs7vGvSZ6ljmj-ZmXC1A"
BASE_TIME_MS = 1_700_000_000_000
EMPTY_PRODUCER_SNAPSHOT = bytes.fromhex("000148674bc700000000")
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


@dataclass
class SegmentFiles:
    """A closed segment on local disk, and what the tests check fetched bytes against."""

    data: LogSegmentData
    log_bytes: bytes
    batch_positions: list[int]
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    epochs: Mapping[int, int]


def write_segment(
    directory: Path, start_offset: int = 0, *, batches: int = 5, records_per_batch: int = 4,
    epochs: Mapping[int, int] | None = None, with_txn_index: bool = True,
) -> SegmentFiles:
    """Write ``<start>.log/.index/.timeindex[/.txnindex]/.snapshot`` under ``directory``.

    ``epochs`` maps leader epoch -> first offset (default: epoch 0 from ``start_offset``);
    each batch is stamped with the epoch in force at its base offset.
    """
    epochs = dict(epochs or {0: start_offset})
    directory.mkdir(parents=True, exist_ok=True)
    stem = directory / f"{start_offset:020d}"
    log_bytes, positions, offset_entries, time_entries = b"", [], b"", b""
    offset, max_ts = start_offset, -1
    for b in range(batches):
        epoch = max(e for e, first in epochs.items() if first <= offset)
        ts = BASE_TIME_MS + offset
        records = [Record(key=f"k{offset + i}".encode(), value=f"v{offset + i}".encode() * 8,
                          timestamp=ts + i) for i in range(records_per_batch)]
        batch = build_batch(records, base_offset=offset, partition_leader_epoch=epoch,
                            compression="gzip" if b % 2 else "none")
        positions.append(len(log_bytes))
        offset_entries += struct.pack(">ii", offset - start_offset, len(log_bytes))
        max_ts = ts + records_per_batch - 1
        time_entries += struct.pack(">qi", max_ts, offset + records_per_batch - 1 - start_offset)
        log_bytes += batch
        offset += records_per_batch
    paths = {s: Path(f"{stem}{s}") for s in (".log", ".index", ".timeindex", ".txnindex")}
    paths[".log"].write_bytes(log_bytes)
    paths[".index"].write_bytes(offset_entries)
    paths[".timeindex"].write_bytes(time_entries)
    txn_index = None
    if with_txn_index:
        paths[".txnindex"].write_bytes(AbortedTxn(7, start_offset, start_offset + 1,
                                                  start_offset).to_bytes())
        txn_index = paths[".txnindex"]
    snapshot = directory / f"{offset:020d}.snapshot"
    snapshot.write_bytes(EMPTY_PRODUCER_SNAPSHOT)
    checkpoint = f"0\n{len(epochs)}\n" + "".join(f"{e} {o}\n" for e, o in sorted(epochs.items()))
    data = LogSegmentData(
        log_segment=paths[".log"], offset_index=paths[".index"], time_index=paths[".timeindex"],
        transaction_index=txn_index, producer_snapshot_index=snapshot,
        leader_epoch_index=checkpoint.encode(),
    )
    return SegmentFiles(data, log_bytes, positions, start_offset, offset - 1, max_ts, epochs)


def metadata_for(tip: TopicIdPartition, seg: SegmentFiles, *, event_ms: int = BASE_TIME_MS,
                 ) -> RemoteLogSegmentMetadata:
    """COPY_SEGMENT_STARTED metadata of a fresh copy attempt of ``seg``."""
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate(tip),
        start_offset=seg.start_offset, end_offset=seg.end_offset,
        max_timestamp_ms=seg.max_timestamp_ms, event_timestamp_ms=event_ms,
        segment_size_in_bytes=len(seg.log_bytes), segment_leader_epochs=seg.epochs,
        txn_idx_empty=seg.data.transaction_index is None,
    )


@dataclass(frozen=True)
class MultipartCopy:
    """What :func:`copy_multipart_segment` copied: the segment, its metadata, the local log
    file copied, and the S3 HEAD of its log object."""

    seg: SegmentFiles
    md: RemoteLogSegmentMetadata
    big: Path
    head: dict[str, Any]


def copy_multipart_segment(rsm: Any, tmp_path: Path, tip: TopicIdPartition,
                           part_size: int) -> MultipartCopy:
    """Copy a segment of a little over two ``part_size`` parts through ``rsm`` (an S3 remote
    storage manager), so s3fs uploads it in three parts."""
    seg = write_segment(tmp_path, 0)
    big = tmp_path / "big.log"
    big.write_bytes(seg.log_bytes * (2 * part_size // len(seg.log_bytes) + 1))
    data = seg.data.__class__(**{**{f: getattr(seg.data, f) for f in seg.data.__slots__},
                                 "log_segment": big})
    md = metadata_for(tip, seg)
    rsm.copy_log_segment_data(md, data)
    bucket, key = rsm.object_path(md, ".log").split("/", 1)
    return MultipartCopy(seg, md, big, rsm.fs.call_s3("head_object", Bucket=bucket, Key=key))


def update(md: RemoteLogSegmentMetadata, state: RemoteLogSegmentState, event_ms: int = 0
           ) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=md.remote_log_segment_id,
        event_timestamp_ms=md.event_timestamp_ms + event_ms + 1, state=state,
        custom_metadata=md.custom_metadata)


class RemoteStorageManagerTests:
    """Contract tests. Subclasses provide ``rsm`` (a manager on a fresh, empty tier) and
    ``reader_fs`` (an independent filesystem on the same storage, as a reader would have)."""

    @pytest.fixture
    def rsm(self) -> FsspecRemoteStorageManager:
        raise NotImplementedError("subclasses provide a remote storage manager")

    @pytest.fixture
    def reader_fs(self) -> fsspec.AbstractFileSystem:
        raise NotImplementedError("subclasses provide a filesystem for readers")

    @pytest.fixture
    def tip(self) -> TopicIdPartition:
        return TopicIdPartition(TOPIC_ID, "orders-eu", 3)

    @pytest.fixture
    def segment(self, tmp_path: Path) -> SegmentFiles:
        return write_segment(tmp_path / "local", 100)

    @pytest.fixture
    def rlmm_factory(self, rsm: FsspecRemoteStorageManager, tmp_path: Path
                     ) -> Callable[..., RemoteLogMetadataManager]:
        def make(cache: bool = True) -> RemoteLogMetadataManager:
            return RemoteLogMetadataManager(rsm.tier, tmp_path / "rlmm" if cache else None)
        return make

    @pytest.fixture
    def rlmm(self, rlmm_factory: Callable[..., RemoteLogMetadataManager]
             ) -> RemoteLogMetadataManager:
        return rlmm_factory()

    def copy(self, rsm: FsspecRemoteStorageManager, tip: TopicIdPartition, seg: SegmentFiles,
             rlmm: RemoteLogMetadataManager | None = None, event_ms: int = BASE_TIME_MS
             ) -> RemoteLogSegmentMetadata:
        """The RemoteLogManager's sequence: add STARTED, copy, commit FINISHED."""
        md = metadata_for(tip, seg, event_ms=event_ms)
        if rlmm is not None:
            rlmm.add_remote_log_segment_metadata(md)
        custom = rsm.copy_log_segment_data(md, seg.data)
        if rlmm is None:
            return md
        rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=md.remote_log_segment_id, event_timestamp_ms=event_ms + 1,
            state=FINISHED, custom_metadata=custom))
        result = rlmm.list_remote_log_segments(tip)
        return next(m for m in result if m.remote_log_segment_id == md.remote_log_segment_id)

    # -- copy and fetch -------------------------------------------------------------------

    def test_copy_then_fetch_whole_segment(self, rsm: Any, tip: Any, segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        assert rsm.fetch_log_segment(md, 0).read() == segment.log_bytes
        size = len(segment.log_bytes)
        assert rsm.fetch_log_segment(md, 0, size - 1).read() == segment.log_bytes
        validate_fetched_batches(rsm.fetch_log_segment(md, 0).read())

    def test_fetch_ranges_are_inclusive_at_both_ends(self, rsm: Any, tip: Any, segment: Any
                                                     ) -> None:
        md = self.copy(rsm, tip, segment)
        data, size = segment.log_bytes, len(segment.log_bytes)
        assert rsm.fetch_log_segment(md, 10, 20).read() == data[10:21]
        assert rsm.fetch_log_segment(md, 7, 7).read() == data[7:8]
        assert rsm.fetch_log_segment(md, size - 1).read() == data[-1:]
        assert rsm.fetch_log_segment(md, size - 1, size - 1).read() == data[-1:]
        assert rsm.fetch_log_segment(md, 5, size + 1000).read() == data[5:]
        assert rsm.fetch_log_segment(md, size).read() == b""
        with pytest.raises(ValueError, match="before start"):
            rsm.fetch_log_segment(md, 20, 19)

    def test_fetch_batch_aligned_range_parses(self, rsm: Any, tip: Any, segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        first, second = segment.batch_positions[1], segment.batch_positions[3]
        fetched = rsm.fetch_log_segment(md, first, second - 1).read()
        validate_fetched_batches(fetched)
        assert [b.base_offset for b in iter_batches(fetched)] == [104, 108]

    def test_fetch_every_index_type(self, rsm: Any, tip: Any, segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        data = segment.data
        expected = {
            IndexType.OFFSET: data.offset_index.read_bytes(),
            IndexType.TIMESTAMP: data.time_index.read_bytes(),
            IndexType.TRANSACTION: data.transaction_index.read_bytes(),
            IndexType.PRODUCER_SNAPSHOT: EMPTY_PRODUCER_SNAPSHOT,
            IndexType.LEADER_EPOCH: b"0\n1\n0 100\n",
        }
        assert set(expected) == set(IndexType)
        for index_type, content in expected.items():
            assert rsm.fetch_index(md, index_type).read() == content, index_type

    def test_empty_index_is_fetchable(self, rsm: Any, tip: Any, tmp_path: Path) -> None:
        seg = write_segment(tmp_path / "empty", 0, batches=1)
        seg.data.offset_index.write_bytes(b"")
        md = self.copy(rsm, tip, seg)
        assert rsm.fetch_index(md, IndexType.OFFSET).read() == b""

    def test_missing_transaction_index_raises_not_found(self, rsm: Any, tip: Any,
                                                        tmp_path: Path) -> None:
        seg = write_segment(tmp_path / "notxn", 0, with_txn_index=False)
        md = self.copy(rsm, tip, seg)
        with pytest.raises(RemoteResourceNotFoundError, match=r"\.txnindex"):
            rsm.fetch_index(md, IndexType.TRANSACTION)
        assert rsm.fetch_index(md, IndexType.OFFSET).read() == seg.data.offset_index.read_bytes()

    def test_objects_follow_kafka_layout(self, rsm: Any, tip: Any, segment: Any,
                                         reader_fs: Any) -> None:
        md = self.copy(rsm, tip, segment)
        directory = f"{rsm.root}/orders-eu-3-{TOPIC_ID}"
        stem = f"{100:020d}-{md.segment_id}"
        names = {p.rsplit("/", 1)[-1] for p in reader_fs.ls(directory, detail=False)}
        assert names == {stem + s for s in (".log", ".index", ".timeindex", ".txnindex",
                                            ".snapshot", ".leader_epoch_checkpoint")}

    def test_copy_retry_overwrites(self, rsm: Any, tip: Any, segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        segment.data.offset_index.write_bytes(b"\x00" * 16)
        assert rsm.copy_log_segment_data(md, segment.data) is None
        assert rsm.fetch_index(md, IndexType.OFFSET).read() == b"\x00" * 16
        assert rsm.fetch_log_segment(md, 0).read() == segment.log_bytes

    def test_copy_of_missing_local_file_uploads_nothing(self, rsm: Any, tip: Any,
                                                         segment: Any) -> None:
        segment.data.time_index.unlink()
        md = metadata_for(tip, segment)
        with pytest.raises(RemoteStorageError, match=r"\.timeindex does not exist"):
            rsm.copy_log_segment_data(md, segment.data)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0)

    def test_each_fetch_is_one_get(self, rsm: Any, tip: Any, segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        before = rsm.stats.snapshot()
        rsm.fetch_log_segment(md, 3, 90).read()
        rsm.fetch_log_segment(md, 3).read()
        rsm.fetch_index(md, IndexType.OFFSET).read()
        after = rsm.stats.snapshot()
        assert after["gets"] - before["gets"] == 3
        assert after["puts"] == before["puts"]
        assert before["puts"] == 6  # every object of the copy, one upload each

    # -- delete ---------------------------------------------------------------------------

    def test_delete_is_idempotent_and_fetch_after_delete_fails(self, rsm: Any, tip: Any,
                                                                segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        rsm.delete_log_segment_data(md)
        rsm.delete_log_segment_data(md)
        with pytest.raises(RemoteResourceNotFoundError):
            rsm.fetch_log_segment(md, 0)
        for index_type in IndexType:
            with pytest.raises(RemoteResourceNotFoundError):
                rsm.fetch_index(md, index_type)

    def test_delete_of_never_copied_segment_is_not_an_error(self, rsm: Any, tip: Any,
                                                             segment: Any) -> None:
        rsm.delete_log_segment_data(metadata_for(tip, segment))

    def test_delete_leaves_other_segments(self, rsm: Any, tip: Any, segment: Any) -> None:
        first, second = self.copy(rsm, tip, segment), self.copy(rsm, tip, segment)
        rsm.delete_log_segment_data(first)
        assert rsm.fetch_log_segment(second, 0).read() == segment.log_bytes

    def test_closed_manager_refuses_calls(self, rsm: Any, tip: Any, segment: Any) -> None:
        md = self.copy(rsm, tip, segment)
        rsm.close()
        rsm.close()
        with pytest.raises(RemoteStorageError, match="closed"):
            rsm.fetch_log_segment(md, 0)

    # -- metadata manager -----------------------------------------------------------------

    def test_metadata_add_update_list_sorted(self, rsm: Any, rlmm: Any, tip: Any,
                                             tmp_path: Path) -> None:
        later = write_segment(tmp_path / "b", 20)
        earlier = write_segment(tmp_path / "a", 0)
        md_later = self.copy(rsm, tip, later, rlmm)
        md_earlier = metadata_for(tip, earlier)
        rlmm.add_remote_log_segment_metadata(md_earlier)
        listed = rlmm.list_remote_log_segments(tip)
        assert [(m.start_offset, m.state) for m in listed] == [(0, STARTED), (20, FINISHED)]
        assert rlmm.remote_log_segment_metadata(tip, 5) is None  # not readable while copying
        assert rlmm.remote_log_segment_metadata(tip, 25) == md_later
        assert rlmm.remote_log_size(tip) == len(later.log_bytes)

    def test_metadata_lookup_by_offset_and_epoch(self, rsm: Any, rlmm: Any, tip: Any,
                                                 tmp_path: Path) -> None:
        a = self.copy(rsm, tip, write_segment(tmp_path / "a", 0, epochs={0: 0, 1: 8}), rlmm)
        b = self.copy(rsm, tip, write_segment(tmp_path / "b", 20, epochs={1: 20, 2: 28}), rlmm)
        assert (a.end_offset, b.end_offset) == (19, 39)
        assert rlmm.remote_log_segment_metadata(tip, 5, leader_epoch=0) == a
        assert rlmm.remote_log_segment_metadata(tip, 12, leader_epoch=0) is None
        assert rlmm.remote_log_segment_metadata(tip, 12, leader_epoch=1) == a
        assert rlmm.remote_log_segment_metadata(tip, 25, leader_epoch=1) == b
        assert rlmm.remote_log_segment_metadata(tip, 30, leader_epoch=1) is None
        assert rlmm.remote_log_segment_metadata(tip, 39, leader_epoch=2) == b
        assert rlmm.remote_log_segment_metadata(tip, 40) is None
        assert rlmm.remote_log_segment_metadata(tip, 39) == b
        assert [rlmm.highest_offset_for_epoch(tip, e) for e in (0, 1, 2, 3)] == [7, 27, 39, None]
        assert rlmm.list_remote_log_segments(tip, leader_epoch=1) == [a, b]
        assert rlmm.list_remote_log_segments(tip, leader_epoch=2) == [b]
        assert rlmm.remote_log_size(tip, leader_epoch=0) == a.segment_size_in_bytes

    def test_metadata_rejects_illegal_transitions(self, rsm: Any, rlmm: Any, tip: Any,
                                                  segment: Any) -> None:
        md = self.copy(rsm, tip, segment, rlmm)
        with pytest.raises(ValueError, match="COPY_SEGMENT_STARTED"):
            rlmm.update_remote_log_segment_metadata(update(md, STARTED))
        with pytest.raises(ValueError, match="must be added in state COPY_SEGMENT_STARTED"):
            rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(update(md, FINISHED, 1))  # same state: retry
        rlmm.update_remote_log_segment_metadata(update(md, DELETE_STARTED, 2))
        with pytest.raises(ValueError, match="DELETE_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED"):
            rlmm.update_remote_log_segment_metadata(update(md, FINISHED, 3))
        unknown = metadata_for(tip, segment)
        with pytest.raises(RemoteResourceNotFoundError, match=unknown.segment_id):
            rlmm.update_remote_log_segment_metadata(update(unknown, FINISHED))

    def test_metadata_delete_lifecycle(self, rsm: Any, rlmm: Any, tip: Any, segment: Any,
                                       reader_fs: Any) -> None:
        md = self.copy(rsm, tip, segment, rlmm)
        rlmm.update_remote_log_segment_metadata(update(md, DELETE_STARTED, 1))
        assert rlmm.remote_log_segment_metadata(tip, 100) is None
        assert [m.state for m in rlmm.list_remote_log_segments(tip)] == [DELETE_STARTED]
        assert read_partition_manifest(reader_fs, rsm.root, tip).committed == ()
        rsm.delete_log_segment_data(md)
        rlmm.update_remote_log_segment_metadata(update(md, DELETE_FINISHED, 2))
        assert rlmm.list_remote_log_segments(tip) == []
        assert rlmm.remote_log_size(tip) == 0
        assert read_partition_manifest(reader_fs, rsm.root, tip).segments == ()

    def test_abandoned_copy_can_be_deleted(self, rsm: Any, rlmm: Any, tip: Any,
                                           segment: Any) -> None:
        md = metadata_for(tip, segment)
        rlmm.add_remote_log_segment_metadata(md)
        rlmm.update_remote_log_segment_metadata(update(md, DELETE_STARTED))
        rlmm.update_remote_log_segment_metadata(update(md, DELETE_FINISHED, 1))
        assert rlmm.list_remote_log_segments(tip) == []

    # -- the self-describing tier ---------------------------------------------------------

    def test_manifest_readable_with_only_fsspec(self, rsm: Any, rlmm: Any, tip: Any,
                                                tmp_path: Path, reader_fs: Any) -> None:
        a = self.copy(rsm, tip, write_segment(tmp_path / "a", 0), rlmm)
        b = self.copy(rsm, tip, write_segment(tmp_path / "b", 20), rlmm)
        manifest = read_partition_manifest(reader_fs, rsm.root, tip)
        assert manifest.committed == (a, b)
        assert not manifest.from_listing
        assert [(m.start_offset, m.end_offset, m.max_timestamp_ms) for m in manifest.committed] \
            == [(0, 19, BASE_TIME_MS + 19), (20, 39, BASE_TIME_MS + 39)]
        by_name = read_partition_manifest(reader_fs, rsm.root, partition_dir_name(tip),
                                          verify=False)
        assert by_name.committed == (a, b)
        assert list_remote_partitions(reader_fs, rsm.root) == [tip]
        assert rlmm.list_partitions() == [tip]
        assert rlmm.list_topics() == ["orders-eu"]

    def test_reader_falls_back_to_listing_without_manifest(self, rsm: Any, rlmm: Any, tip: Any,
                                                           segment: Any, reader_fs: Any
                                                           ) -> None:
        md = self.copy(rsm, tip, segment, rlmm)
        reader_fs.rm_file(f"{rsm.root}/{partition_dir_name(tip)}/{MANIFEST_NAME}")
        manifest = read_partition_manifest(reader_fs, rsm.root, tip, verify=False)
        assert manifest.committed == (md,)
        assert manifest.from_listing

    def test_reader_fills_gaps_of_a_stale_manifest(self, rsm: Any, rlmm: Any, tip: Any,
                                                   tmp_path: Path, reader_fs: Any) -> None:
        a = self.copy(rsm, tip, write_segment(tmp_path / "a", 0), rlmm)
        path = f"{rsm.root}/{partition_dir_name(tip)}/{MANIFEST_NAME}"
        old_manifest = reader_fs.cat_file(path)
        b = self.copy(rsm, tip, write_segment(tmp_path / "b", 20), rlmm)
        reader_fs.pipe_file(path, old_manifest)  # as if the writer crashed before rewriting it
        assert read_partition_manifest(reader_fs, rsm.root, tip, verify=False).committed == (a,)
        manifest = read_partition_manifest(reader_fs, rsm.root, tip)
        assert manifest.from_listing
        assert manifest.committed == (a, b)

    def test_local_cache_survives_restart(self, rsm: Any, rlmm_factory: Any, tip: Any,
                                          tmp_path: Path) -> None:
        first = rlmm_factory()
        a = self.copy(rsm, tip, write_segment(tmp_path / "a", 0), first)
        in_flight = metadata_for(tip, write_segment(tmp_path / "b", 20))
        first.add_remote_log_segment_metadata(in_flight)
        expected = first.list_remote_log_segments(tip)
        first.close()
        with pytest.raises(RemoteStorageError, match="closed"):
            first.list_remote_log_segments(tip)
        second = rlmm_factory()
        rsm.stats.reset()
        assert second.list_remote_log_segments(tip) == expected == [a, in_flight]
        # Reconciled from the manifest, one listing and the cache: no per-object reads.
        assert rsm.stats.snapshot()["gets"] == 1
        assert rsm.stats.snapshot()["lists"] == 1
        second.update_remote_log_segment_metadata(update(in_flight, FINISHED))
        assert second.remote_log_segment_metadata(tip, 25).start_offset == 20

    def test_restart_without_cache_rebuilds_from_tier(self, rsm: Any, rlmm_factory: Any,
                                                      tip: Any, segment: Any, reader_fs: Any
                                                      ) -> None:
        md = self.copy(rsm, tip, segment, rlmm_factory(cache=False))
        manifest = f"{rsm.root}/{partition_dir_name(tip)}/{MANIFEST_NAME}"
        reader_fs.rm_file(manifest)
        fresh = rlmm_factory(cache=False)
        assert fresh.remote_log_segment_metadata(tip, 101) == md
        assert fresh.highest_offset_for_epoch(tip, 0) == md.end_offset
        reader_fs.invalidate_cache()
        assert reader_fs.exists(manifest)  # repaired on load
        assert read_partition_manifest(reader_fs, rsm.root, tip, verify=False).committed == (md,)
