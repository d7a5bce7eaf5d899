"""Topic ids and partition.metadata: Kafka's Uuid text form and the exact file content."""

from __future__ import annotations

import re
import uuid

import pytest

from tierlog.checkpoint.partition_metadata import (
    METADATA_TOPIC_ID,
    PartitionMetadataFile,
    new_topic_id,
    topic_id_from_bytes,
    topic_id_to_bytes,
)
from tierlog.errors import CorruptCheckpointError

FIXTURE_IDS = {
    "TestTopicPatient-0": "B3_HiNPgSQ6oxG9ZZ6ED5A",
    "__consumer_offsets-6": "gSnfpEbtQfSDpxM2lhEn9A",
    "__cluster_metadata-0": METADATA_TOPIC_ID,
}


def test_new_topic_ids_are_random_v4_uuids_in_url_safe_base64():
    ids = {new_topic_id() for _ in range(200)}
    assert len(ids) == 200
    for topic_id in ids:
        assert len(topic_id) == 22 and not topic_id.startswith("-")
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", topic_id)
        assert uuid.UUID(bytes=topic_id_to_bytes(topic_id)).version == 4


def test_topic_id_bytes_round_trip():
    raw = bytes(range(16))
    assert topic_id_from_bytes(raw) == "AAECAwQFBgcICQoLDA0ODw"
    assert topic_id_to_bytes("AAECAwQFBgcICQoLDA0ODw") == raw
    assert topic_id_to_bytes("AAECAwQFBgcICQoLDA0ODw==") == raw
    for bad in ("AAECAwQFBgcICQoLDA0OD", "AAECAwQFBgcICQoLDA0OD+", "AAECAwQFBgcICQoLDA0ODwAA"):
        with pytest.raises(ValueError):
            topic_id_to_bytes(bad)
    with pytest.raises(ValueError):
        topic_id_from_bytes(b"short")


def test_write_exact_content_and_read_back(tmp_path):
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    assert not f.exists()
    topic_id = new_topic_id()
    f.write(topic_id)
    assert f.path.read_bytes() == f"version: 0\ntopic_id: {topic_id}".encode()
    assert f.read() == topic_id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["partition.metadata"]


@pytest.mark.parametrize("partition", sorted(FIXTURE_IDS))
def test_kafka_fixture_round_trips_byte_identically(kafka_logdir, tmp_path, partition):
    source = kafka_logdir / partition / "partition.metadata"
    topic_id = PartitionMetadataFile(source).read()
    assert topic_id == FIXTURE_IDS[partition]
    copy = PartitionMetadataFile(tmp_path / "partition.metadata")
    copy.write(topic_id)
    assert copy.path.read_bytes() == source.read_bytes()


def test_write_validates(tmp_path):
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    for bad in ("not-a-topic-id", "AAAAAAAAAAAAAAAAAAAAAA"):
        with pytest.raises(ValueError):
            f.write(bad)
    assert not f.exists()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"version: 0\n",
        b"version:0\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A",
        b"version: x\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A",
        b"version: -1\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A",
        b"version: 0\ntopicid: B3_HiNPgSQ6oxG9ZZ6ED5A",
        b"version: 0\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5",
        b"version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA",
        b"\xff\xfe",
    ],
)
def test_malformed_files_raise_naming_the_file(tmp_path, content):
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    f.path.write_bytes(content)
    with pytest.raises(CorruptCheckpointError, match=r"partition\.metadata"):
        f.read()


def test_newer_version_and_trailing_newline_are_accepted(tmp_path):
    f = PartitionMetadataFile(tmp_path / "partition.metadata")
    f.path.write_bytes(b"version: 1\ntopic_id: B3_HiNPgSQ6oxG9ZZ6ED5A\n")
    assert f.read() == "B3_HiNPgSQ6oxG9ZZ6ED5A"


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        PartitionMetadataFile(tmp_path / "partition.metadata").read()
