"""The consumer-group APIs on the wire: kio requests in, :class:`GroupCoordinator` calls,
kio responses out (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete). Each handler builds one response for
every version it serves: fields a version lacks are dropped by ``make``. Each checks the
group's (and its topics') ACLs first, as Kafka's KafkaApis does
(``tierlog.server.authorization``).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import kio.schema.heartbeat.v0
import kio.schema.heartbeat.v1
import kio.schema.heartbeat.v2
import kio.schema.join_group.v0
import kio.schema.join_group.v1
import kio.schema.join_group.v2
import kio.schema.join_group.v3
import kio.schema.join_group.v4
import kio.schema.leave_group.v0
import kio.schema.leave_group.v1
import kio.schema.leave_group.v2
import kio.schema.list_groups.v4
import kio.schema.offset_commit.v2
import kio.schema.offset_commit.v3
import kio.schema.offset_commit.v4
import kio.schema.offset_commit.v5
import kio.schema.offset_commit.v7
import kio.schema.offset_commit.v8
import kio.schema.offset_fetch.v7
import kio.schema.offset_fetch.v8
import kio.schema.sync_group.v0
import kio.schema.sync_group.v1
import kio.schema.sync_group.v2
import kio.schema.sync_group.v5
from kio.schema.errors import ErrorCode

from tierlog.errors import CorruptRecordError
from tierlog.security.acl import AclOperation, Action, ResourceType
from tierlog.server.authorization import UNKNOWN_OPERATIONS, RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.coordinator_wire import Reader
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.group_model import Group, GroupState
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.framing import by_topic, duration_ms, make, nested
from tierlog.server.registry import Endpoint, register

if TYPE_CHECKING:
    from tierlog.server.api.messages import (
        DeleteGroupsRequest,
        DeleteGroupsResponse,
        DescribeGroupsRequest,
        DescribeGroupsResponse,
        HeartbeatRequest,
        HeartbeatResponse,
        JoinGroupRequest,
        JoinGroupResponse,
        LeaveGroupRequest,
        LeaveGroupResponse,
        ListGroupsRequest,
        ListGroupsResponse,
        OffsetCommitRequest,
        OffsetCommitResponse,
        OffsetDeleteRequest,
        OffsetDeleteResponse,
        OffsetFetchRequest,
        OffsetFetchResponse,
        SyncGroupRequest,
        SyncGroupResponse,
    )

_R = TypeVar("_R")
_NO_THROTTLE = datetime.timedelta(0)
_GROUP, _TOPIC = ResourceType.GROUP, ResourceType.TOPIC
_DENIED_GROUP = ErrorCode.group_authorization_failed

# The versions before a field came (the version-dependent fields are read in one function per
# API below, narrowed by these classes).
_JOIN_BEFORE_V5 = (kio.schema.join_group.v1.JoinGroupRequest,
                   kio.schema.join_group.v2.JoinGroupRequest,
                   kio.schema.join_group.v3.JoinGroupRequest,
                   kio.schema.join_group.v4.JoinGroupRequest)
_SYNC_BEFORE_V3 = (kio.schema.sync_group.v0.SyncGroupRequest,
                   kio.schema.sync_group.v1.SyncGroupRequest,
                   kio.schema.sync_group.v2.SyncGroupRequest)
_HEARTBEAT_BEFORE_V3 = (kio.schema.heartbeat.v0.HeartbeatRequest,
                        kio.schema.heartbeat.v1.HeartbeatRequest,
                        kio.schema.heartbeat.v2.HeartbeatRequest)
_LEAVE_ONE = (kio.schema.leave_group.v0.LeaveGroupRequest,
              kio.schema.leave_group.v1.LeaveGroupRequest,
              kio.schema.leave_group.v2.LeaveGroupRequest)
_COMMIT_WITHOUT_EPOCH = (kio.schema.offset_commit.v2.OffsetCommitRequest,
                         kio.schema.offset_commit.v3.OffsetCommitRequest,
                         kio.schema.offset_commit.v4.OffsetCommitRequest,
                         kio.schema.offset_commit.v5.OffsetCommitRequest)
_COMMIT_WITH_INSTANCE = (kio.schema.offset_commit.v7.OffsetCommitRequest,
                         kio.schema.offset_commit.v8.OffsetCommitRequest)


def subscribed_topics(group: Group) -> set[str]:
    """The topics a consumer group's members subscribe to, from their ConsumerProtocol
    subscriptions (version int16, topics []string, ...); unreadable ones count as none."""
    topics: set[str] = set()
    if group.protocol_type != "consumer":
        return topics
    for member in group.members.values():
        try:
            r = Reader(member.metadata(group.protocol_name), "consumer subscription")
            for _ in range(r.array() or 0):
                topics.add(r.required_string("topic"))
        except CorruptRecordError:
            continue
    return topics


def _auth(groups: GroupCoordinator, ctx: RequestContext) -> RequestAuth:
    return request_auth(groups.services, ctx)


def group_and_topics(auth: RequestAuth, group_operation: AclOperation, group_id: str,
                     topic_operation: AclOperation, topics: Iterable[str]
                     ) -> tuple[bool, set[str]]:
    """(whether ``group_operation`` on the group is allowed, the topics ``topic_operation``
    is allowed on), in one check of the authorizer."""
    names = list(dict.fromkeys(topics))
    answers = auth.allowed([Action(group_operation, _GROUP, group_id),
                            *(Action(topic_operation, _TOPIC, n) for n in names)])
    return answers[0], {n for n, ok in zip(names, answers[1:], strict=True) if ok}


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------

def join_timeouts(request: JoinGroupRequest) -> tuple[int, int, str | None]:
    """The version-dependent fields of a JoinGroupRequest: (session timeout, rebalance
    timeout, group instance id); v0 has no rebalance timeout (the session timeout serves),
    v5 added the instance id (KIP-345)."""
    session = duration_ms(request.session_timeout)
    if isinstance(request, kio.schema.join_group.v0.JoinGroupRequest):
        return session, session, None
    rebalance = duration_ms(request.rebalance_timeout)
    if isinstance(request, _JOIN_BEFORE_V5):
        return session, rebalance, None
    return session, rebalance, request.group_instance_id


async def join_group(groups: GroupCoordinator, ctx: RequestContext,
                     request: JoinGroupRequest) -> JoinGroupResponse:
    """Join (or rejoin) a group; answered when its rebalance completes."""
    cls: type[JoinGroupResponse] = ctx.response_type
    if not _auth(groups, ctx).may(AclOperation.READ, _GROUP, request.group_id):
        return make(cls, throttle_time=_NO_THROTTLE, error_code=_DENIED_GROUP,
                    generation_id=-1, protocol_type=None,
                    protocol_name="" if ctx.api_version < 7 else None, leader="",
                    skip_assignment=False, member_id="", members=())
    session, rebalance, instance_id = join_timeouts(request)
    result = await groups.join(
        request.group_id, request.member_id, instance_id, request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols], session, rebalance,
        ctx.client_id or "", ctx.client_host, require_known_member_id=ctx.api_version >= 4)
    member_t = nested(cls, "JoinGroupResponseMember")
    return make(cls, throttle_time=_NO_THROTTLE, error_code=result.error,
                generation_id=result.generation_id, protocol_type=result.protocol_type,
                # protocol_name is nullable from v7 on
                protocol_name=(result.protocol_name or "") if ctx.api_version < 7
                else result.protocol_name,
                leader=result.leader_id, skip_assignment=result.skip_assignment,
                member_id=result.member_id,
                members=tuple(make(member_t, member_id=m, group_instance_id=i, metadata=d)
                              for m, i, d in result.members))


def sync_protocol(request: SyncGroupRequest) -> tuple[str | None, str | None, str | None]:
    """The version-dependent fields of a SyncGroupRequest: (group instance id, v3+; protocol
    type and name, v5+)."""
    if isinstance(request, _SYNC_BEFORE_V3):
        return None, None, None
    if isinstance(request, kio.schema.sync_group.v5.SyncGroupRequest):
        return request.group_instance_id, request.protocol_type, request.protocol_name
    return request.group_instance_id, None, None


async def sync_group(groups: GroupCoordinator, ctx: RequestContext,
                     request: SyncGroupRequest) -> SyncGroupResponse:
    """The leader hands out the assignment; every member gets its own."""
    cls: type[SyncGroupResponse] = ctx.response_type
    if not _auth(groups, ctx).may(AclOperation.READ, _GROUP, request.group_id):
        return make(cls, throttle_time=_NO_THROTTLE, error_code=_DENIED_GROUP,
                    protocol_type=None, protocol_name=None, assignment=b"")
    instance_id, protocol_type, protocol_name = sync_protocol(request)
    result = await groups.sync(
        request.group_id, request.generation_id, request.member_id, protocol_type,
        protocol_name, {a.member_id: a.assignment for a in request.assignments}, instance_id)
    return make(cls, throttle_time=_NO_THROTTLE, error_code=result.error,
                protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                assignment=result.assignment)


async def heartbeat(groups: GroupCoordinator, ctx: RequestContext,
                    request: HeartbeatRequest) -> HeartbeatResponse:
    """Keep a member's session (the error tells it to rejoin)."""
    instance_id = (None if isinstance(request, _HEARTBEAT_BEFORE_V3)
                   else request.group_instance_id)  # KIP-345: v3+
    if _auth(groups, ctx).may(AclOperation.READ, _GROUP, request.group_id):
        error = groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                 instance_id)
    else:
        error = _DENIED_GROUP
    cls: type[HeartbeatResponse] = ctx.response_type
    return make(cls, throttle_time=_NO_THROTTLE, error_code=error)


async def leave_group(groups: GroupCoordinator, ctx: RequestContext,
                      request: LeaveGroupRequest) -> LeaveGroupResponse:
    """Members leave: one (v0-2) or a batch with per-member errors (v3+, KIP-345)."""
    cls: type[LeaveGroupResponse] = ctx.response_type
    if not _auth(groups, ctx).may(AclOperation.READ, _GROUP, request.group_id):
        return make(cls, throttle_time=_NO_THROTTLE, error_code=_DENIED_GROUP, members=())
    if isinstance(request, _LEAVE_ONE):
        error, results = groups.leave(request.group_id, [(request.member_id, None)])
        if error is ErrorCode.none and results:
            error = results[0][2]
        return make(cls, throttle_time=_NO_THROTTLE, error_code=error)
    error, results = groups.leave(
        request.group_id, [(m.member_id, m.group_instance_id) for m in request.members])
    member_t = nested(cls, "MemberResponse")
    return make(cls, throttle_time=_NO_THROTTLE, error_code=error,
                members=tuple(make(member_t, member_id=m, group_instance_id=i, error_code=e)
                              for m, i, e in results))


# -- offsets ---------------------------------------------------------------------------

def committed_offsets(request: OffsetCommitRequest,
                      now_ms: int) -> dict[tuple[str, int], rec.OffsetValue]:
    """The version-dependent fields of an OffsetCommitRequest's partitions: the committed
    leader epoch came with v6 (-1 before)."""
    if isinstance(request, _COMMIT_WITHOUT_EPOCH):
        return {(t.name, int(p.partition_index)): rec.OffsetValue(
            p.committed_offset, p.committed_metadata or "", now_ms, -1)
            for t in request.topics for p in t.partitions}
    return {(t.name, int(p.partition_index)): rec.OffsetValue(
        p.committed_offset, p.committed_metadata or "", now_ms, p.committed_leader_epoch)
        for t in request.topics for p in t.partitions}


async def offset_commit(groups: GroupCoordinator, ctx: RequestContext,
                        request: OffsetCommitRequest) -> OffsetCommitResponse:
    """Commit a group member's offsets (READ on the group and on each topic)."""
    offsets = committed_offsets(request, groups.services.time_ms())
    instance_id = (request.group_instance_id
                   if isinstance(request, _COMMIT_WITH_INSTANCE) else None)  # KIP-345: v7+
    group_ok, readable = group_and_topics(_auth(groups, ctx), AclOperation.READ,
                                          request.group_id, AclOperation.READ,
                                          (t for t, _ in offsets))
    errors = {tp: ErrorCode.topic_authorization_failed if group_ok else _DENIED_GROUP
              for tp in offsets if not group_ok or tp[0] not in readable}
    allowed = {tp: v for tp, v in offsets.items() if tp not in errors}
    if allowed:
        errors.update(await groups.commit_offsets(
            request.group_id, request.generation_id_or_member_epoch, request.member_id,
            allowed, instance_id=instance_id))
    cls: type[OffsetCommitResponse] = ctx.response_type
    return _partition_errors(cls, "OffsetCommitResponseTopic",
                             "OffsetCommitResponsePartition", errors, throttle_time=_NO_THROTTLE)


@dataclass(frozen=True, slots=True)
class _GroupOffsets:
    """One group's part of an OffsetFetch: the partitions asked (None: all)."""

    group_id: str
    partitions: list[tuple[str, int]] | None


def fetched_groups(request: OffsetFetchRequest) -> tuple[list[_GroupOffsets], bool]:
    """The version-dependent fields of an OffsetFetchRequest: (the groups asked, whether
    only stable offsets may be returned); v8 asks for many groups, before one; v7 added
    require_stable."""
    if isinstance(request, kio.schema.offset_fetch.v8.OffsetFetchRequest):
        return [_GroupOffsets(g.group_id, None if g.topics is None else
                              [(t.name, int(p)) for t in g.topics for p in t.partition_indexes])
                for g in request.groups], request.require_stable
    one = _GroupOffsets(request.group_id, None if request.topics is None else
                        [(t.name, int(p)) for t in request.topics for p in t.partition_indexes])
    stable = (request.require_stable
              if isinstance(request, kio.schema.offset_fetch.v7.OffsetFetchRequest) else False)
    return [one], stable


async def offset_fetch(groups: GroupCoordinator, ctx: RequestContext,
                       request: OffsetFetchRequest) -> OffsetFetchResponse:
    """The committed offsets of one group (v1-7) or several (v8): DESCRIBE on the group, and
    on each topic (when all are asked, those it may not describe are left out)."""
    cls: type[OffsetFetchResponse] = ctx.response_type
    asked, require_stable = fetched_groups(request)
    auth = _auth(groups, ctx)
    if ctx.api_version < 8:
        error, topics = _fetch_group(groups, auth, cls, "OffsetFetchResponseTopic",
                                     "OffsetFetchResponsePartition", asked[0], require_stable,
                                     ctx.api_version)
        return make(cls, throttle_time=_NO_THROTTLE, topics=topics, error_code=error)
    group_t = nested(cls, "OffsetFetchResponseGroup")
    out = []
    for group in asked:
        error, topics = _fetch_group(groups, auth, cls, "OffsetFetchResponseTopics",
                                     "OffsetFetchResponsePartitions", group, require_stable,
                                     ctx.api_version)
        out.append(make(group_t, group_id=group.group_id, topics=topics, error_code=error))
    return make(cls, throttle_time=_NO_THROTTLE, groups=tuple(out))


def _fetch_group(groups: GroupCoordinator, auth: RequestAuth, cls: type[object],
                 topic_name: str, part_name: str, asked: _GroupOffsets, require_stable: bool,
                 version: int) -> tuple[ErrorCode, tuple[object, ...]]:
    topic_t, part_t = nested(cls, topic_name), nested(cls, part_name)
    listed = asked.partitions or []
    group_ok, described = group_and_topics(auth, AclOperation.DESCRIBE, asked.group_id,
                                           AclOperation.DESCRIBE, (t for t, _ in listed))
    if not group_ok:  # v0-1 tell each partition asked; later versions only the group
        return _DENIED_GROUP, by_topic(topic_t, "name", (
            (topic, make(part_t, partition_index=partition, committed_offset=-1,
                         committed_leader_epoch=-1, metadata="", error_code=_DENIED_GROUP))
            for topic, partition in (listed if version < 2 else ())))
    wanted = (None if asked.partitions is None
              else [tp for tp in asked.partitions if tp[0] in described])
    error, offsets = groups.fetch_offsets(asked.group_id, wanted, require_stable)
    if asked.partitions is None and auth.enabled:
        visible = auth.names(AclOperation.DESCRIBE, _TOPIC, (t for t, _ in offsets),
                             audit=False)
        offsets = {tp: v for tp, v in offsets.items() if tp[0] in visible}
    elif asked.partitions is not None:
        refused = (None, ErrorCode.topic_authorization_failed)
        offsets = {tp: offsets.get(tp, refused) if tp[0] in described else refused
                   for tp in asked.partitions}
    return error, by_topic(topic_t, "name", (
        (topic, make(part_t, partition_index=partition,
                     committed_offset=-1 if value is None else value.offset,
                     committed_leader_epoch=-1 if value is None else value.leader_epoch,
                     metadata="" if value is None else value.metadata, error_code=perr))
        for (topic, partition), (value, perr) in offsets.items()))


async def offset_delete(groups: GroupCoordinator, ctx: RequestContext,
                        request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    """Delete a group's offsets of topics no member subscribes to (DELETE on the group, READ
    on each topic)."""
    wanted = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]
    group_ok, readable = group_and_topics(_auth(groups, ctx), AclOperation.DELETE,
                                          request.group_id, AclOperation.READ,
                                          (t for t, _ in wanted))
    errors: dict[tuple[str, int], ErrorCode]
    if not group_ok:
        error, errors = _DENIED_GROUP, {}
    else:
        error, errors = await groups.delete_offsets(
            request.group_id, [tp for tp in wanted if tp[0] in readable], subscribed_topics)
        errors.update({tp: ErrorCode.topic_authorization_failed
                       for tp in wanted if tp[0] not in readable})
    cls: type[OffsetDeleteResponse] = ctx.response_type
    return _partition_errors(cls, "OffsetDeleteResponseTopic",
                             "OffsetDeleteResponsePartition", errors,
                             throttle_time=_NO_THROTTLE, error_code=error)


# -- ListGroups, DescribeGroups, DeleteGroups ------------------------------------------

async def list_groups(groups: GroupCoordinator, ctx: RequestContext,
                      request: ListGroupsRequest) -> ListGroupsResponse:
    """Every group, or those in the states asked (v4+); without DESCRIBE on the cluster,
    only the groups the principal may DESCRIBE."""
    cls: type[ListGroupsResponse] = ctx.response_type
    auth = _auth(groups, ctx)
    visible = (None if not auth.enabled or auth.may_cluster(AclOperation.DESCRIBE, audit=False)
               else auth.names(AclOperation.DESCRIBE, _GROUP, groups.groups, audit=False))
    states = ({s.lower() for s in request.states_filter}
              if isinstance(request, kio.schema.list_groups.v4.ListGroupsRequest) else set())
    listed_t = nested(cls, "ListedGroup")
    error = ErrorCode.none if groups.loaded else ErrorCode.coordinator_load_in_progress
    listed = tuple(make(listed_t, group_id=g.group_id,
                        protocol_type=g.protocol_type or "", group_state=g.state.value)
                   for g in groups.groups.values()
                   if (not states or g.state.value.lower() in states)
                   and (visible is None or g.group_id in visible))
    return make(cls, throttle_time=_NO_THROTTLE, error_code=error, groups=listed)


def _described(groups: GroupCoordinator, group_t: type[object], member_t: type[object],
               group_id: str, operations: int | None) -> object:
    """One DescribedGroup; ``operations`` None: the principal may not describe it."""
    if operations is None:
        return make(group_t, error_code=_DENIED_GROUP, group_id=group_id, group_state="",
                    protocol_type="", protocol_data="", members=(),
                    authorized_operations=UNKNOWN_OPERATIONS)
    if (error := groups.check(group_id)) is not ErrorCode.none:
        return make(group_t, error_code=error, group_id=group_id, group_state="", protocol_type="", protocol_data="",
                    members=(), authorized_operations=UNKNOWN_OPERATIONS)
    group = groups.groups.get(group_id)
    if group is None:
        return make(group_t, error_code=ErrorCode.none, group_id=group_id,
                    group_state=GroupState.DEAD.value, protocol_type="", protocol_data="",
                    members=(), authorized_operations=operations)
    stable = group.state is GroupState.STABLE
    members = tuple(make(
        member_t, member_id=m.member_id, group_instance_id=m.instance_id,
        client_id=m.client_id, client_host=m.client_host,
        member_metadata=m.metadata(group.protocol_name) if stable else b"",
        member_assignment=m.assignment if stable else b"")
        for m in group.members.values())
    return make(group_t, error_code=ErrorCode.none, group_id=group_id,
                group_state=group.state.value, protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=members, authorized_operations=operations)


async def describe_groups(groups: GroupCoordinator, ctx: RequestContext,
                          request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    """Each group's state, protocol and members (DESCRIBE on each; v3+ may ask for the
    operations the principal may do on it)."""
    cls: type[DescribeGroupsResponse] = ctx.response_type
    group_t, member_t = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
    auth = _auth(groups, ctx)
    described = auth.names(AclOperation.DESCRIBE, _GROUP, request.groups)
    with_operations = bool(getattr(request, "include_authorized_operations", False))  # v3+

    def operations(group_id: str) -> int | None:
        if group_id not in described:
            return None
        return auth.operations(_GROUP, group_id) if with_operations else UNKNOWN_OPERATIONS

    return make(cls, throttle_time=_NO_THROTTLE, groups=tuple(
        _described(groups, group_t, member_t, group_id, operations(group_id))
        for group_id in request.groups))


async def delete_groups(groups: GroupCoordinator, ctx: RequestContext,
                        request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    """Delete each empty group (DELETE on each)."""
    cls: type[DeleteGroupsResponse] = ctx.response_type
    result_t = nested(cls, "DeletableGroupResult")
    deletable = _auth(groups, ctx).names(AclOperation.DELETE, _GROUP, request.groups_names)
    results = []
    for group_id in request.groups_names:
        error = (await groups.delete_group(group_id) if group_id in deletable
                 else _DENIED_GROUP)
        results.append(make(result_t, group_id=group_id, error_code=error))
    return make(cls, throttle_time=_NO_THROTTLE, results=tuple(results))


def _partition_errors(cls: type[_R], topic_name: str, part_name: str,
                      errors: dict[tuple[str, int], ErrorCode], **fields: object) -> _R:
    """A response of per-partition error codes grouped by topic."""
    topic_t, part_t = nested(cls, topic_name), nested(cls, part_name)
    return make(cls, topics=by_topic(topic_t, "name", (
        (topic, make(part_t, partition_index=partition, error_code=error))
        for (topic, partition), error in errors.items())), **fields)


ENDPOINTS = (
    Endpoint(11, join_group, 0, 9),
    Endpoint(14, sync_group, 0, 5),
    Endpoint(12, heartbeat, 0, 4),
    Endpoint(13, leave_group, 0, 5),
    Endpoint(8, offset_commit, 2, 8),
    Endpoint(9, offset_fetch, 1, 8),
    Endpoint(16, list_groups, 0, 4),
    Endpoint(15, describe_groups, 0, 5),
    Endpoint(42, delete_groups, 0, 2),
    Endpoint(47, offset_delete, 0, 0),
)


def install(registry: HandlerRegistry, groups: GroupCoordinator) -> None:
    """Register the group APIs' handlers over ``groups``."""
    register(registry, groups, ENDPOINTS)
