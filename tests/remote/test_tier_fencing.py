"""A replicated partition's tier is written by one leader, fenced by the store (issue 24):
the tier's compare-and-swap (``RemoteTier.replace_if``), ``_owner.json`` version 2
(``claim_leadership``) and the manifest written by compare-and-swap
(``RemoteLogMetadataManager.fence_writes``/``claim``). Two writers over one tier, on a local
directory and on S3 (moto): the stale one gets the conflict, and nothing it uploaded is
referenced by what readers see."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from support.remote_storage_suite import metadata_for, write_segment
from support.s3 import S3_BUCKET

from tierlog.errors import MetadataConflictError, TierFencedError
from tierlog.plugins.local import create_remote_storage as local_storage
from tierlog.plugins.s3 import create_remote_storage as s3_storage
from tierlog.remote import FsspecRemoteStorageManager, TopicIdPartition
from tierlog.remote.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
)
from tierlog.remote.metadata.metadata import RemoteLogMetadataManager, manifest_leader_epoch
from tierlog.remote.tier.layout import manifest_key, owner_key
from tierlog.remote.tier.manifest import load_partition, read_stored_manifest
from tierlog.remote.tier.ownership import (
    PartitionOwner,
    claim_leadership,
    read_owner,
    record_owner,
)

TIP = TopicIdPartition("a6aNOwnsT0GOjEPVJZEMgA", "orders", 0)
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED


@pytest.fixture(params=["local", "s3"])
def rsm(request: pytest.FixtureRequest, tmp_path: Path) -> FsspecRemoteStorageManager:
    """An empty tier on a local directory or under a fresh prefix of moto's bucket."""
    if request.param == "local":
        return local_storage((tmp_path / "tier").as_uri(), {"fsync": False})
    options: dict[str, Any] = request.getfixturevalue("s3_options")
    return s3_storage(f"s3://{S3_BUCKET}/fence-{uuid.uuid4().hex[:12]}", options)


def _node(rsm: FsspecRemoteStorageManager, tmp_path: Path, name: str
          ) -> RemoteLogMetadataManager:
    rlmm = RemoteLogMetadataManager(rsm.tier, tmp_path / name)
    rlmm.fence_writes()
    return rlmm


def _copy(rsm: FsspecRemoteStorageManager, rlmm: RemoteLogMetadataManager, seg_dir: Path,
          start: int) -> RemoteLogSegmentMetadata:
    """The RemoteLogManager's copy: COPY_STARTED, the objects, then COPY_FINISHED."""
    seg = write_segment(seg_dir, start, batches=2)
    md = metadata_for(TIP, seg)
    rlmm.add_remote_log_segment_metadata(md)
    custom = rsm.copy_log_segment_data(md, seg.data)
    rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=md.remote_log_segment_id, event_timestamp_ms=1,
        state=FINISHED, custom_metadata=custom))
    return md


def test_replace_if_swaps_only_the_version_read(rsm: FsspecRemoteStorageManager) -> None:
    tier = rsm.tier
    path = tier.path("p", "obj.json")
    first = tier.replace_if(b"one", path, None)
    with pytest.raises(MetadataConflictError):
        tier.replace_if(b"other", path, None)  # exists
    found = tier.read_versioned(path)
    assert found == (b"one", first)
    second = tier.replace_if(b"two", path, first)
    with pytest.raises(MetadataConflictError) as lost:
        tier.replace_if(b"stale", path, first)  # the version read is gone
    assert lost.value.key == path and lost.value.found == second
    assert tier.read_versioned(path) == (b"two", second)
    assert tier.list_names(tier.path("p")) == ["obj.json"]  # no lock file is listed


def test_stale_leader_cannot_commit_and_its_upload_is_never_referenced(
        rsm: FsspecRemoteStorageManager, tmp_path: Path) -> None:
    old, new = _node(rsm, tmp_path, "node-1"), _node(rsm, tmp_path, "node-2")
    old.claim(TIP, 1)
    kept = _copy(rsm, old, tmp_path / "s1", 0)
    new.claim(TIP, 2)  # the new leader's first tier action: read the manifest, stamp it
    with pytest.raises(TierFencedError, match="leader epoch 1"):
        _copy(rsm, old, tmp_path / "s2", 10)
    assert old.claimed_epoch(TIP) is None  # it stopped writing the partition
    stored = read_stored_manifest(rsm.tier, TIP)
    assert stored is not None
    assert [m.remote_log_segment_id for m in stored.committed] == [kept.remote_log_segment_id]
    path = rsm.tier.path(manifest_key(TIP))
    assert manifest_leader_epoch(rsm.tier.get_bytes(path), path) == 2
    # A reader loading the whole partition (manifest + _metadata/) commits nothing of it.
    current, _ = load_partition(rsm.tier, TIP)
    assert [m.start_offset for m in current.committed] == [0]
    # It cannot claim back at its old epoch; the new leader goes on committing.
    with pytest.raises(TierFencedError, match="newer than this node's 1"):
        old.claim(TIP, 1)
    _copy(rsm, new, tmp_path / "s3", 10)
    stored = read_stored_manifest(rsm.tier, TIP)
    assert stored is not None and [m.start_offset for m in stored.committed] == [0, 10]


def test_a_follower_loading_the_tier_never_writes_it(rsm: FsspecRemoteStorageManager,
                                                    tmp_path: Path) -> None:
    leader = _node(rsm, tmp_path, "node-1")
    leader.claim(TIP, 3)
    _copy(rsm, leader, tmp_path / "s1", 0)
    path = rsm.tier.path(manifest_key(TIP))
    before = rsm.tier.read_versioned(path)
    follower = _node(rsm, tmp_path, "node-2")
    assert [m.start_offset for m in follower.list_remote_log_segments(TIP)] == [0]
    with pytest.raises(TierFencedError, match="does not lead"):
        follower.update_log_start_offset(TIP, 5)
    assert rsm.tier.read_versioned(path) == before


def test_owner_v2_names_the_leader_epoch_and_only_a_higher_one_replaces_it(
        rsm: FsspecRemoteStorageManager) -> None:
    tier = rsm.tier
    record_owner(tier, TIP, "LogManager on host:/data", 5)  # version 1, read as before
    assert read_owner(tier, TIP) == PartitionOwner("LogManager on host:/data", 5)
    claim_leadership(tier, TIP, "node-1", 4, 10)
    assert read_owner(tier, TIP) == PartitionOwner("node-1", 10, 4)
    assert b'"version":2' in tier.get_bytes(tier.path(owner_key(TIP)))
    with pytest.raises(TierFencedError, match="at leader epoch 4"):
        claim_leadership(tier, TIP, "node-2", 3, 11)
    record_owner(tier, TIP, "LogManager on host:/data", 12)  # never replaces a leader's
    claim_leadership(tier, TIP, "node-2", 5, 13)
    assert read_owner(tier, TIP) == PartitionOwner("node-2", 13, 5)
