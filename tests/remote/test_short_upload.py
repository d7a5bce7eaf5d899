"""Short uploads: a filesystem that silently writes only part of an object (and reports
success) must not get the segment committed or its local copy deleted. The tier checks every
object's stored size before publishing it; the copy fails with RemoteStorageError naming the
object, the metadata stays COPY_SEGMENT_STARTED (cleaned as an orphan on the next run) and the
local segment is kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem
from support.fault_fs import FaultFS, Faults, fault_storage
from support.remote_storage_suite import metadata_for

from tierlog import Record
from tierlog.errors import RemoteStorageError
from tierlog.manager.log_manager import LogManager
from tierlog.remote import FsspecRemoteStorageManager, RemoteLogSegmentState, TopicIdPartition
from tierlog.remote.rlm.remote_reader import topic_id_partition

TIP = TopicIdPartition("q0Vs7vGvSZ6ljmj-ZmXC1A", "payments", 1)
STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


def _records(i: int) -> list[Record]:
    return [Record(key=b"k%d" % j, value=b"value-%d-" % i + b"x" * 40) for j in range(10)]


@pytest.mark.parametrize("rename_on_publish", [True, False])
def test_a_short_log_object_fails_the_copy_naming_it(tmp_path, segment, rename_on_publish):
    faulty = FaultFS(LocalFileSystem(), Faults())
    rsm = FsspecRemoteStorageManager(faulty, str(tmp_path / "tier"),
                                     rename_on_publish=rename_on_publish)
    metadata = metadata_for(TIP, segment)
    # Publishing in place (as on an object store) does not create directories: do it here.
    Path(rsm.object_path(metadata, ".log")).parent.mkdir(parents=True)
    faulty.faults.short_write("put_file", nth=1, keep_bytes=100)  # the .log goes first
    with pytest.raises(RemoteStorageError, match=r"\.log: .*100 of its \d+ bytes"):
        rsm.copy_log_segment_data(metadata, segment.data)
    if rename_on_publish:  # a short object is never published under its name
        assert not Path(rsm.object_path(metadata, ".log")).exists()


def test_a_short_metadata_write_fails_too(tmp_path, segment):
    faulty = FaultFS(LocalFileSystem(), Faults())
    rsm = FsspecRemoteStorageManager(faulty, str(tmp_path / "tier"))
    metadata = metadata_for(TIP, segment)
    faulty.faults.short_write("pipe_file", nth=1, keep_bytes=3)  # the leader-epoch checkpoint
    with pytest.raises(RemoteStorageError, match=r"leader_epoch_checkpoint: .*3 of its"):
        rsm.copy_log_segment_data(metadata, segment.data)


def test_a_short_upload_is_not_committed_and_the_local_segment_stays(tmp_path, clock):
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty",
              "remote.storage.url": f"faulty://{tmp_path}/tier", "local.retention.bytes": 0}
    with fault_storage() as fs:
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("orders", 1)[0]
            for i in range(20):
                log.append_records(_records(i))
            first_local = log.segments.base_offsets()
            # Each copy uploads .log, .index, .timeindex, .snapshot: call 1 is the first .log.
            fs.short_write("put_file", nth=1, keep_bytes=100)
            result = mgr.tier_now()["orders-0"]
            assert result.copied == []
            assert len(result.errors) == 1 and ".log" in result.errors[0]
            assert "100 of its" in result.errors[0]
            rlmm = mgr.remote_log_manager.rlmm
            tip = topic_id_partition(log)
            assert [m.state for m in rlmm.list_remote_log_segments(tip)] == [STARTED]
            assert rlmm.remote_log_segment_metadata(tip, 0) is None
            assert log.highest_offset_in_remote == -1
            assert log.segments.base_offsets() == first_local  # nothing deleted locally
            assert next(r.offset for r in log.read(0, max_bytes=1).records()) == 0
            result = mgr.tier_now()["orders-0"]
            assert result.errors == [] and result.orphans_removed == 1
            committed = [m for m in rlmm.list_remote_log_segments(tip) if m.state is FINISHED]
            assert [m.start_offset for m in committed] == first_local[:-1]
        finally:
            mgr.close()
