"""The plugin-facing API (ids, states, metadata and its JSON), the object layout, the
in-memory metadata lineage, option parsing and the tier's error table."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest
from support.remote_storage_suite import metadata_for, write_segment

from tierlog.errors import (
    ConfigError,
    InvalidTopicError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.remote import (
    FsspecRemoteStorageManager,
    IndexType,
    RemoteLogMetadataCache,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteTier,
    TopicIdPartition,
    is_valid_transition,
)
from tierlog.remote.tier.layout import (
    is_metadata_object_name,
    metadata_object_name,
    parse_partition_dir_name,
    partition_dir_name,
    segment_file_prefix,
)
from tierlog.remote.tier.object_store import translate_errors
from tierlog.remote.tier.options import StorageOptions, mask_secrets

S = RemoteLogSegmentState
TIP = TopicIdPartition("-0Vs7vGvSZ6ljmj-ZmXC1A", "web-logs", 12)


def md(start: int = 0, end: int = 99, epochs: dict[int, int] | None = None, *,
       state: RemoteLogSegmentState = S.COPY_SEGMENT_STARTED, event_ms: int = 1000,
       seg_id: str | None = None, size: int = 4096) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId(TIP, seg_id) if seg_id
        else RemoteLogSegmentId.generate(TIP),
        start_offset=start, end_offset=end, max_timestamp_ms=5000, event_timestamp_ms=event_ms,
        segment_size_in_bytes=size, segment_leader_epochs=epochs or {0: start}, state=state)


# -- states ----------------------------------------------------------------------------

LEGAL = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    *((s, s) for s in S),
}


@pytest.mark.parametrize("old", [None, *S])
@pytest.mark.parametrize("new", list(S))
def test_transitions_are_exactly_kafkas(old: RemoteLogSegmentState | None,
                                        new: RemoteLogSegmentState) -> None:
    assert is_valid_transition(old, new) == ((old, new) in LEGAL)
    assert S.is_valid_transition(old, new) == is_valid_transition(old, new)


def test_state_ids_and_index_suffixes_are_kafkas() -> None:
    assert [(s.name, s.id) for s in S] == [
        ("COPY_SEGMENT_STARTED", 0), ("COPY_SEGMENT_FINISHED", 1),
        ("DELETE_SEGMENT_STARTED", 2), ("DELETE_SEGMENT_FINISHED", 3)]
    assert S.for_id(2) is S.DELETE_SEGMENT_STARTED
    assert {t.name: t.suffix for t in IndexType} == {
        "OFFSET": ".index", "TIMESTAMP": ".timeindex", "PRODUCER_SNAPSHOT": ".snapshot",
        "TRANSACTION": ".txnindex", "LEADER_EPOCH": ".leader_epoch_checkpoint"}


# -- ids and metadata ------------------------------------------------------------------

def test_ids_are_validated_because_they_name_objects() -> None:
    with pytest.raises(InvalidTopicError):
        TopicIdPartition(TIP.topic_id, "..", 0)
    with pytest.raises(InvalidTopicError):
        TopicIdPartition(TIP.topic_id, "a/b", 0)
    with pytest.raises(ValueError, match="topic_id"):
        TopicIdPartition("../../etc", "t", 0)
    with pytest.raises(ValueError, match="partition"):
        TopicIdPartition(TIP.topic_id, "t", -1)
    with pytest.raises(ValueError, match="remote log segment id"):
        RemoteLogSegmentId(TIP, "x")


def test_generated_segment_ids_are_fresh_kafka_uuids() -> None:
    ids = {RemoteLogSegmentId.generate(TIP).id for _ in range(200)}
    assert len(ids) == 200
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_metadata_checks_offsets_and_sorts_epochs() -> None:
    with pytest.raises(ValueError, match="end offset 9 is below start offset 10"):
        md(10, 9)
    with pytest.raises(ValueError, match="negative"):
        md(-1, 5)
    with pytest.raises(ValueError, match="at least one leader epoch"):
        dataclasses.replace(md(), segment_leader_epochs={})
    m = md(0, 99, {7: 50, 3: 0})
    assert list(m.segment_leader_epochs.items()) == [(3, 0), (7, 50)]
    assert len({m, dataclasses.replace(m)}) == 1  # hashable, equal by value


def test_create_with_update_applies_legal_transitions_only() -> None:
    m = md()
    up = RemoteLogSegmentMetadataUpdate(
        remote_log_segment_id=m.remote_log_segment_id, event_timestamp_ms=2000,
        state=S.COPY_SEGMENT_FINISHED, custom_metadata=b"\x00rsm", broker_id=4)
    done = m.create_with_update(up)
    assert (done.state, done.custom_metadata, done.broker_id, done.event_timestamp_ms) == \
        (S.COPY_SEGMENT_FINISHED, b"\x00rsm", 4, 2000)
    assert (done.start_offset, done.end_offset) == (m.start_offset, m.end_offset)
    back = dataclasses.replace(up, state=S.COPY_SEGMENT_STARTED)
    with pytest.raises(ValueError, match="COPY_SEGMENT_FINISHED -> COPY_SEGMENT_STARTED"):
        done.create_with_update(back)
    with pytest.raises(ValueError, match="cannot apply"):
        md().create_with_update(up)


def test_json_round_trip_is_compact_and_stable() -> None:
    m = dataclasses.replace(md(10, 20, {1: 10, 2: 15}), custom_metadata=b"\xff\x00",
                            txn_idx_empty=True, state=S.COPY_SEGMENT_FINISHED)
    text = m.to_json()
    assert " " not in text and text == m.to_json()
    assert list(json.loads(text)) == sorted(json.loads(text))
    assert RemoteLogSegmentMetadata.from_json(text) == m
    assert RemoteLogSegmentMetadata.from_json(text.encode()) == m
    assert json.loads(text)["segmentLeaderEpochs"] == [[1, 10], [2, 15]]


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d.pop("endOffset"), "lacks field 'endOffset'"),
    (lambda d: d.update(startOffset="1"), "'startOffset' must be an int"),
    (lambda d: d.update(version=9), "unknown metadata version 9"),
    (lambda d: d.update(state="LOST"), "unknown remote segment state 'LOST'"),
    (lambda d: d.update(customMetadata="%%"), "malformed"),
])
def test_malformed_json_is_rejected(mutate: Callable[[dict[str, Any]], object],
                                    message: str) -> None:
    data = md().to_dict()
    mutate(data)
    with pytest.raises(ValueError, match=message):
        RemoteLogSegmentMetadata.from_json(json.dumps(data))
    with pytest.raises(ValueError, match="not JSON"):
        RemoteLogSegmentMetadata.from_json(b"{")


# -- layout ----------------------------------------------------------------------------

def test_partition_dir_names_round_trip_with_dashes_everywhere() -> None:
    assert partition_dir_name(TIP) == "web-logs-12--0Vs7vGvSZ6ljmj-ZmXC1A"
    assert parse_partition_dir_name(partition_dir_name(TIP)) == TIP
    for name in ("web-logs-12", "web-logs-x-" + TIP.topic_id, "_metadata", "-12-" + TIP.topic_id):
        assert parse_partition_dir_name(name) is None


def test_segment_object_names() -> None:
    m = md(42, seg_id="AAAAAAAAAAAAAAAAAAAAAQ")
    assert segment_file_prefix(m) == "00000000000000000042-AAAAAAAAAAAAAAAAAAAAAQ"
    assert metadata_object_name(m) == "00000000000000000042-AAAAAAAAAAAAAAAAAAAAAQ.json"
    assert is_metadata_object_name(metadata_object_name(m))
    assert not is_metadata_object_name(metadata_object_name(m) + ".partial")


# -- in-memory lineage -----------------------------------------------------------------

def finish(cache: RemoteLogMetadataCache, m: RemoteLogSegmentMetadata
           ) -> RemoteLogSegmentMetadata:
    cache.add_copy_in_progress(m)
    done = dataclasses.replace(m, state=S.COPY_SEGMENT_FINISHED)
    cache.apply(done)
    return done


def test_later_upload_of_the_same_offsets_supersedes_the_earlier() -> None:
    cache = RemoteLogMetadataCache()
    s0 = finish(cache, md(0, 100, {0: 0}))
    s1 = finish(cache, md(0, 200, {0: 0}))  # a new leader re-uploaded a superset
    assert cache.segment_for_offset(50, 0) == s1
    assert cache.highest_offset_for_epoch(0) == 200
    assert set(cache.list_segments(0)) == {s0, s1}  # the superseded one stays for cleanup


def test_overlapping_uploads_resolve_to_the_covering_segment() -> None:
    cache = RemoteLogMetadataCache()
    finish(cache, md(10, 90, {0: 10}))
    s1 = finish(cache, md(5, 100, {0: 5}))
    assert cache.segment_for_offset(95, 0) == s1
    assert cache.segment_for_offset(95) == s1  # without an epoch too
    assert cache.segment_for_offset(4) is None


def test_deleting_hides_from_lookups_but_lists_until_finished() -> None:
    cache = RemoteLogMetadataCache()
    s = finish(cache, md(0, 9))
    deleting = dataclasses.replace(s, state=S.DELETE_SEGMENT_STARTED)
    cache.apply(deleting)
    assert cache.segment_for_offset(3) is None and cache.segment_for_offset(3, 0) is None
    assert cache.list_segments() == [deleting] == cache.list_segments(0)
    assert cache.size() == 0
    cache.apply(dataclasses.replace(s, state=S.DELETE_SEGMENT_FINISHED))
    assert cache.list_segments() == [] and cache.get(s.segment_id) is None


def test_rebuild_from_stored_segments_replays_their_lifecycle() -> None:
    a = dataclasses.replace(md(0, 9, event_ms=1), state=S.COPY_SEGMENT_FINISHED)
    b = dataclasses.replace(md(10, 19, {0: 10, 1: 15}, event_ms=2), state=S.COPY_SEGMENT_FINISHED)
    c = md(20, 29, event_ms=3)
    cache = RemoteLogMetadataCache.from_segments([c, b, a])
    assert cache.list_segments() == [a, b, c]
    assert cache.segment_for_offset(16, 1) == b
    assert cache.highest_offset_for_epoch(0) == 14
    assert cache.size() == a.segment_size_in_bytes + b.segment_size_in_bytes


# -- options and the tier ----------------------------------------------------------------

def test_secrets_are_masked() -> None:
    masked = mask_secrets({"key": "AKIA", "secret": "s", "aws_session_token": "t",
                           "region": "eu-west-1", "token": None})
    assert masked == {"key": "***", "secret": "***", "aws_session_token": "***",
                      "region": "eu-west-1", "token": None}
    assert "hunter2" not in repr(StorageOptions("x", {"password": "hunter2"}, ["password"]))


def test_option_getters_convert_and_name_the_key() -> None:
    opts = StorageOptions("x", {"n": "12", "flag": "TRUE", "bad": "z"}, ["n", "flag", "bad"])
    assert opts.get_int("n") == 12 and opts.get_bool("flag", False) is True
    assert opts.get_int("missing", 3) == 3
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.bad: must be an integer"):
        opts.get_int("bad")
    with pytest.raises(ConfigError, match="must be at most 10"):
        opts.get_int("n", maximum=10)


@pytest.mark.parametrize(("raised", "expected", "text"), [
    (FileNotFoundError("gone"), RemoteResourceNotFoundError, "not found"),
    (PermissionError("AccessDenied"), RemoteStorageError, "permission denied"),
    (TimeoutError(), RemoteStorageError, "timed out"),
    (RuntimeError("EndpointConnectionError"), RemoteStorageError, "failed"),
])
def test_error_table(raised: Exception, expected: type[Exception], text: str) -> None:
    with pytest.raises(expected, match=f"read bucket/x: {text}") as info, \
            translate_errors("read", "bucket/x"):
        raise raised
    assert info.value.__cause__ is raised
    assert type(info.value) is expected


def test_tier_needs_a_root() -> None:
    with pytest.raises(ValueError, match="empty"):
        RemoteTier(fsspec.filesystem("memory"), "")


def test_any_fsspec_filesystem_works(tmp_path: Path) -> None:
    seg = write_segment(tmp_path, 0)
    rsm = FsspecRemoteStorageManager(fsspec.filesystem("memory"), f"/t-{uuid.uuid4().hex}")
    assert not rsm.tier.rename_on_publish
    m = metadata_for(TIP, seg)
    rsm.copy_log_segment_data(m, seg.data)
    assert rsm.fetch_log_segment(m, 1, 2).read() == seg.log_bytes[1:3]
    rsm.delete_log_segment_data(m)
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_index(m, IndexType.OFFSET)
