"""The keys and values of ``__consumer_offsets`` in Kafka's formats (the one codec of them).

Key version 0/1 is an OffsetCommitKey (group, topic, partition); key version 2 is a
GroupMetadataKey (group). A null value is a tombstone (an offset or a group deleted), which the
cleaner keeps until ``delete.retention.ms`` and then drops. Values are written as Kafka 3.x
writes them: OffsetCommitValue version 3 (1 when an expire timestamp is set) and
GroupMetadataValue version 3; every version 0-4 is read (4 is flexible).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tierlog.errors import CorruptRecordError
from tierlog.server.coordinator.coordinator_wire import Reader, Writer

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
_FLEXIBLE_FROM = 4  # both value schemas: "flexibleVersions": "4+"


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    metadata: str = ""
    commit_timestamp: int = -1
    leader_epoch: int = -1
    expire_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    client_id: str
    client_host: str
    session_timeout: int
    rebalance_timeout: int
    subscription: bytes
    assignment: bytes
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: tuple[MemberMetadata, ...] = field(default=())


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        w = Writer(OFFSET_KEY_VERSION)
        w.string(key.group)
        w.string(key.topic)
        w.int32(key.partition)
        return w.finish()
    w = Writer(GROUP_KEY_VERSION)
    w.string(key.group)
    return w.finish()


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    r = Reader(data, "__consumer_offsets key")
    if r.version in (0, 1):
        key: OffsetKey | GroupKey = OffsetKey(r.required_string("group"),
                                              r.required_string("topic"), r.int32())
    elif r.version == GROUP_KEY_VERSION:
        key = GroupKey(r.required_string("group"))
    else:
        raise CorruptRecordError(f"__consumer_offsets key has unknown version {r.version}")
    r.end()
    return key


def encode_offset_value(value: OffsetValue) -> bytes:
    version = 1 if value.expire_timestamp >= 0 else 3
    w = Writer(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.string(value.metadata)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    return w.finish()


def decode_offset_value(data: bytes) -> OffsetValue:
    r = Reader(data, "OffsetCommitValue")
    if not 0 <= r.version <= 4:
        raise CorruptRecordError(f"OffsetCommitValue has unknown version {r.version}")
    r.flexible = r.version >= _FLEXIBLE_FROM
    offset = r.int64()
    epoch = r.int32() if r.version >= 3 else -1
    metadata = r.string() or ""
    timestamp = r.int64()
    expire = r.int64() if r.version == 1 else -1
    r.tagged_fields()
    r.end()
    return OffsetValue(offset, metadata, timestamp, epoch, expire)


def encode_group_value(value: GroupValue, version: int = 3) -> bytes:
    w = Writer(version, flexible=version >= _FLEXIBLE_FROM)
    w.string(value.protocol_type)
    w.int32(value.generation)
    w.string(value.protocol)
    w.string(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array(len(value.members))
    for m in value.members:
        w.string(m.member_id)
        if version >= 3:
            w.string(m.group_instance_id)
        w.string(m.client_id)
        w.string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.tagged_fields()
    w.tagged_fields()
    return w.finish()


def decode_group_value(data: bytes) -> GroupValue:
    r = Reader(data, "GroupMetadataValue")
    if not 0 <= r.version <= 4:
        raise CorruptRecordError(f"GroupMetadataValue has unknown version {r.version}")
    r.flexible = r.version >= _FLEXIBLE_FROM
    protocol_type = r.string() or ""
    generation = r.int32()
    protocol = r.string()
    leader = r.string()
    timestamp = r.int64() if r.version >= 2 else -1
    members = []
    for _ in range(r.array() or 0):
        member_id = r.required_string("memberId")
        instance = r.string() if r.version >= 3 else None
        client_id = r.string() or ""
        client_host = r.string() or ""
        rebalance = r.int32() if r.version >= 1 else -1
        session = r.int32()
        subscription = r.bytes_() or b""
        assignment = r.bytes_() or b""
        r.tagged_fields()
        members.append(MemberMetadata(member_id, client_id, client_host, session,
                                      rebalance if rebalance >= 0 else session, subscription,
                                      assignment, instance))
    r.tagged_fields()
    r.end()
    return GroupValue(protocol_type, generation, protocol, leader, timestamp, tuple(members))
