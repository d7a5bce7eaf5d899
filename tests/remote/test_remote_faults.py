"""Failures in the middle of tiering, injected with FaultFS over a local tier: no
committed metadata without data, retries succeed, corruption in the tier is detected."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem
from support.fault_fs import FaultFS, Faults, InjectedFault
from support.remote_storage_suite import (
    FINISHED,
    SegmentFiles,
    metadata_for,
    update,
)

from tierlog.errors import CorruptRecordError, RemoteStorageError, TruncatedBatchError
from tierlog.remote import (
    FsspecRemoteStorageManager,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
    read_partition_manifest,
    validate_fetched_batches,
)

TIP = TopicIdPartition("q0Vs7vGvSZ6ljmj-ZmXC1A", "payments", 1)


@pytest.fixture
def faulty(tmp_path: Path) -> FaultFS:
    return FaultFS(LocalFileSystem(), Faults())


@pytest.fixture
def rsm(faulty: FaultFS, tmp_path: Path) -> FsspecRemoteStorageManager:
    return FsspecRemoteStorageManager(faulty, str(tmp_path / "tier"))


@pytest.fixture
def rlmm(rsm: FsspecRemoteStorageManager, tmp_path: Path) -> RemoteLogMetadataManager:
    return RemoteLogMetadataManager(rsm.tier, tmp_path / "cache")


def tier(rsm: FsspecRemoteStorageManager) -> Path:
    return Path(rsm.root) / f"payments-1-{TIP.topic_id}"


def copy_and_commit(rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager,
                    segment: SegmentFiles) -> RemoteLogSegmentMetadata:
    md = metadata_for(TIP, segment)
    rlmm.add_remote_log_segment_metadata(md)
    rsm.copy_log_segment_data(md, segment.data)
    rlmm.update_remote_log_segment_metadata(update(md, FINISHED))
    return md


def assert_nothing_committed(rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager
                             ) -> None:
    assert rlmm.remote_log_segment_metadata(TIP, 0) is None
    assert read_partition_manifest(LocalFileSystem(), rsm.root, TIP).committed == ()


def test_failed_copy_leaves_no_committed_metadata_and_retry_succeeds(
        rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager,
        faulty: FaultFS, segment: SegmentFiles) -> None:
    faulty.faults.fail("put_file", nth=3)
    with pytest.raises(RemoteStorageError, match="injected put_file failure") as info:
        copy_and_commit(rsm, rlmm, segment)
    assert isinstance(info.value.__cause__, InjectedFault)
    assert_nothing_committed(rsm, rlmm)
    failed = rlmm.list_remote_log_segments(TIP)
    assert [m.state.name for m in failed] == ["COPY_SEGMENT_STARTED"]  # left for cleanup
    md = copy_and_commit(rsm, rlmm, segment)  # a retry is a new attempt with a new id
    assert md.segment_id != failed[0].segment_id
    assert rlmm.remote_log_segment_metadata(TIP, 0).segment_id == md.segment_id
    assert rsm.fetch_log_segment(md, 0).read() == segment.log_bytes


def test_cut_upload_never_leaves_a_short_log_object(
        rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager,
        faulty: FaultFS, segment: SegmentFiles) -> None:
    faulty.faults.truncate_upload(nth=1, keep_bytes=100)
    with pytest.raises(RemoteStorageError, match="cut after 100 bytes"):
        copy_and_commit(rsm, rlmm, segment)
    objects = [p.name for p in tier(rsm).iterdir() if p.is_file()]
    assert not [n for n in objects if n.endswith((".log", ".partial"))]
    assert_nothing_committed(rsm, rlmm)
    md = copy_and_commit(rsm, rlmm, segment)
    validate_fetched_batches(rsm.fetch_log_segment(md, 0).read())


def test_failed_commit_keeps_the_segment_unfinished_until_retried(
        rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager,
        faulty: FaultFS, segment: SegmentFiles) -> None:
    md = metadata_for(TIP, segment)
    rlmm.add_remote_log_segment_metadata(md)
    rsm.copy_log_segment_data(md, segment.data)
    faulty.faults.fail("pipe_file", nth=1)  # the metadata object's rewrite
    with pytest.raises(RemoteStorageError):
        rlmm.update_remote_log_segment_metadata(update(md, FINISHED))
    assert_nothing_committed(rsm, rlmm)
    rlmm.update_remote_log_segment_metadata(update(md, FINISHED))
    assert rlmm.remote_log_segment_metadata(TIP, 0).segment_id == md.segment_id
    assert read_partition_manifest(LocalFileSystem(), rsm.root, TIP).committed[0].segment_id \
        == md.segment_id


def test_reads_during_a_hung_copy_see_nothing_committed(
        rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager,
        faulty: FaultFS, segment: SegmentFiles) -> None:
    hang = faulty.faults.hang("put_file", nth=2)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            copy_and_commit(rsm, rlmm, segment)
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    copier = threading.Thread(target=run)
    copier.start()
    try:
        assert hang.entered.wait(5), "the copy never reached the hung upload"
        assert_nothing_committed(rsm, rlmm)
    finally:
        hang.release()
        copier.join(10)
    assert not copier.is_alive() and errors == []
    assert rlmm.remote_log_segment_metadata(TIP, 5) is not None


def test_a_hang_nobody_releases_fails_as_a_storage_error(
        rsm: FsspecRemoteStorageManager, faulty: FaultFS, segment: SegmentFiles
) -> None:
    faulty.faults.hang("cat_file", nth=1, timeout=0.01)
    md = metadata_for(TIP, segment)
    rsm.copy_log_segment_data(md, segment.data)
    with pytest.raises(RemoteStorageError, match="timed out"):
        rsm.fetch_log_segment(md, 0)


def test_flipped_bytes_in_the_tier_are_detected(
        rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager,
        segment: SegmentFiles) -> None:
    md = copy_and_commit(rsm, rlmm, segment)
    log_object = Path(rsm.object_path(md, ".log"))
    damaged = bytearray(log_object.read_bytes())
    second = segment.batch_positions[1]
    damaged[second + 70] ^= 0xFF  # inside the second batch's records (CRC-covered)
    log_object.write_bytes(bytes(damaged))
    validate_fetched_batches(rsm.fetch_log_segment(md, 0, second - 1).read())
    with pytest.raises(CorruptRecordError, match=r"offset 4 .*crc"):
        validate_fetched_batches(rsm.fetch_log_segment(md, 0).read())


def test_a_fetch_cut_mid_batch_is_reported(
        rsm: FsspecRemoteStorageManager, segment: SegmentFiles) -> None:
    md = metadata_for(TIP, segment)
    rsm.copy_log_segment_data(md, segment.data)
    with pytest.raises(TruncatedBatchError):
        validate_fetched_batches(rsm.fetch_log_segment(md, 0, segment.batch_positions[1]).read())
