"""Every parse of a remote JSON object (a partition manifest, a segment's metadata object)
turns malformed content of any kind into CorruptRemoteMetadataError (a RemoteStorageError)
naming the object; readers treat a corrupt partition as an error of that partition only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.tier_builder import build_tier

from tierlog.errors import CorruptRemoteMetadataError, RemoteStorageError
from tierlog.plugins.local import create_remote_storage
from tierlog.reader import RemoteTopicReader
from tierlog.remote import (
    PartitionManifest,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
)
from tierlog.remote.tier.layout import MANIFEST_NAME, METADATA_DIR, partition_dir_name

DEEP = b"[" * 200_000 + b"]" * 200_000
DEEP_OBJECT = b'{"version": ' + DEEP + b"}"


def _segment_dict() -> dict[str, Any]:
    return {"brokerId": 0, "customMetadata": None, "endOffset": 9, "eventTimestampMs": 1,
            "maxTimestampMs": 5, "partition": 0, "segmentId": "AAAAAAAAAAAAAAAAAAAAAA",
            "segmentLeaderEpochs": [[0, 0]], "segmentSizeInBytes": 10, "startOffset": 0,
            "state": "COPY_SEGMENT_FINISHED", "topic": "t", "topicId": "BBBBBBBBBBBBBBBBBBBBBB",
            "txnIdxEmpty": True, "version": 1}


def _manifest_dict() -> dict[str, Any]:
    return {"partition": 0, "segments": [_segment_dict()], "topic": "t",
            "topicId": "BBBBBBBBBBBBBBBBBBBBBB", "version": 1}


SEGMENT_DAMAGE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "epochs-not-pairs": lambda d: d.update(segmentLeaderEpochs=[[{}]]),
    "epochs-not-a-list": lambda d: d.update(segmentLeaderEpochs=7),
    "epoch-a-string": lambda d: d.update(segmentLeaderEpochs=[["x", 0]]),
    "txn-flag-a-string": lambda d: d.update(txnIdxEmpty="no"),
    "partition-a-string": lambda d: d.update(partition="0"),
    "topic-a-number": lambda d: d.update(topic=5),
    "custom-a-number": lambda d: d.update(customMetadata=5),
    "version-a-list": lambda d: d.update(version=[1]),
    "nested-value": lambda d: d.update(startOffset=json.loads("[" * 500 + "]" * 500)),
}


@pytest.mark.parametrize("damage", SEGMENT_DAMAGE)
def test_malformed_segment_metadata_names_the_object(damage: str) -> None:
    data = _segment_dict()
    SEGMENT_DAMAGE[damage](data)
    with pytest.raises(CorruptRemoteMetadataError, match=r"orders-0/_metadata/x\.json"):
        RemoteLogSegmentMetadata.from_json(json.dumps(data), source="orders-0/_metadata/x.json")


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT, b"[]", b"\xff", b"null"])
def test_segment_metadata_that_is_not_an_object(text: bytes) -> None:
    with pytest.raises(CorruptRemoteMetadataError, match=r"meta\.json"):
        RemoteLogSegmentMetadata.from_json(text, source="meta.json")


MANIFEST_DAMAGE: dict[str, Callable[[dict[str, Any]], Any]] = {
    "segments-not-a-list": lambda d: d.update(segments=5),
    "segment-a-string": lambda d: d.update(segments=["x"]),
    "segments-missing": lambda d: d.pop("segments"),
    "segment-field-missing": lambda d: d["segments"][0].pop("endOffset"),
    "segment-of-another-partition": lambda d: d["segments"][0].update(partition=3),
    "partition-negative": lambda d: d.update(partition=-1),
    "log-start-a-string": lambda d: d.update(logStartOffset="150"),
    "log-start-negative": lambda d: d.update(logStartOffset=-5),
}


@pytest.mark.parametrize("damage", MANIFEST_DAMAGE)
def test_malformed_manifest_names_the_object(damage: str) -> None:
    data = _manifest_dict()
    MANIFEST_DAMAGE[damage](data)
    with pytest.raises(CorruptRemoteMetadataError, match=r"t-0/_manifest\.json"):
        PartitionManifest.from_json(json.dumps(data), source="t-0/_manifest.json")


@pytest.mark.parametrize("text", [DEEP, DEEP_OBJECT, b"[1]", b"{", b"\xfe\xff"])
def test_manifest_that_is_not_an_object(text: bytes) -> None:
    with pytest.raises(CorruptRemoteMetadataError, match="the-manifest"):
        PartitionManifest.from_json(text, source="the-manifest")


# -- readers and the metadata manager ------------------------------------------------------


@pytest.fixture
def tier(tmp_path: Path):
    url = (tmp_path / "tier").as_uri()
    rsm = create_remote_storage(url, {"fsync": False})
    yield build_tier(tmp_path, rsm, url, rounds=2)
    rsm.close()


def _partition_dir(tier: Any, topic: str, partition: int) -> Path:
    tip = tier.partitions[(topic, partition)].tip
    return Path(tier.rsm.root) / partition_dir_name(tip)


@pytest.mark.parametrize("verify", [True, False])
def test_reader_raises_for_a_deeply_nested_manifest_and_reads_the_rest(tier, verify) -> None:
    manifest = _partition_dir(tier, "orders", 0) / MANIFEST_NAME
    manifest.write_bytes(DEEP)
    reader = RemoteTopicReader(tier.url, verify_manifest=verify)
    assert reader.list_topics() == ["clicks", "orders"]
    assert reader.list_partitions("orders") == [0, 1]
    with pytest.raises(RemoteStorageError, match=f"{manifest.parent.name}/{MANIFEST_NAME}"):
        reader.read_table("orders")
    with pytest.raises(RemoteStorageError, match=MANIFEST_NAME):
        reader.offset_range("orders", 0)
    assert reader.read_table("orders", [1]).num_rows == len(
        tier.expected("orders", "read_uncommitted", [1]))
    assert reader.read_table("clicks").num_rows > 0


def test_reader_raises_for_a_corrupt_metadata_object(tier) -> None:
    directory = _partition_dir(tier, "orders", 1) / METADATA_DIR
    victim = min(directory.iterdir())
    (_partition_dir(tier, "orders", 1) / MANIFEST_NAME).unlink()  # so the object is read
    victim.write_bytes(DEEP_OBJECT)
    reader = RemoteTopicReader(tier.url)
    with pytest.raises(RemoteStorageError, match=victim.name):
        reader.read_table("orders", [1])
    assert reader.read_table("orders", [0]).num_rows > 0


def test_metadata_manager_raises_naming_the_manifest(tier) -> None:
    manifest = _partition_dir(tier, "orders", 0) / MANIFEST_NAME
    manifest.write_bytes(DEEP)
    rlmm = RemoteLogMetadataManager(tier.rsm.tier)
    tip = tier.partitions[("orders", 0)].tip
    with pytest.raises(RemoteStorageError, match=MANIFEST_NAME):
        rlmm.list_remote_log_segments(tip)
    other = tier.partitions[("orders", 1)].tip
    assert rlmm.list_remote_log_segments(other)


def test_a_missing_transaction_index_is_an_error_not_an_empty_one(tier) -> None:
    directory = _partition_dir(tier, "orders", 0)
    victim = next(p for p in sorted(directory.glob("*.txnindex")) if p.stat().st_size)
    victim.unlink()
    reader = RemoteTopicReader(tier.url)
    with pytest.raises(RemoteStorageError, match=victim.name):
        reader.read_table("orders", [0], isolation_level="read_committed")
    assert reader.read_table("orders", [0]).num_rows > 0  # read_uncommitted needs no index
