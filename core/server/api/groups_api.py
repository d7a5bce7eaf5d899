"""The consumer-group APIs on the wire: kio requests in, :class:`GroupCoordinator` calls,
kio responses out (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete). Each handler builds one response for
every version it serves: fields a version lacks are dropped by ``make``.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.errors import CorruptRecordError
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.coordinator_wire import Reader
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.group_model import Group, GroupState
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.framing import by_topic, duration_ms, make, nested

_NO_THROTTLE = datetime.timedelta(0)

#: API key -> (min version, max version) served.
VERSIONS = {
    11: (0, 9),  # JoinGroup
    14: (0, 5),  # SyncGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    8: (2, 8),  # OffsetCommit
    9: (1, 8),  # OffsetFetch
    16: (0, 4),  # ListGroups
    15: (0, 5),  # DescribeGroups
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
}


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


def install(registry: HandlerRegistry, groups: GroupCoordinator) -> None:
    """Register the group APIs' handlers over ``groups``."""

    async def join_group(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        session = duration_ms(req.session_timeout)
        rebalance = duration_ms(getattr(req, "rebalance_timeout", req.session_timeout))
        result = await groups.join(
            req.group_id, req.member_id, getattr(req, "group_instance_id", None),
            req.protocol_type, [(p.name, p.metadata) for p in req.protocols], session,
            rebalance, ctx.client_id or "", ctx.client_host,
            require_known_member_id=ctx.api_version >= 4)
        member_t = nested(cls, "JoinGroupResponseMember")
        return make(cls, throttle_time=_NO_THROTTLE, error_code=result.error,
                    generation_id=result.generation_id, protocol_type=result.protocol_type,
                    protocol_name=(result.protocol_name or "") if ctx.api_version < 7
                    else result.protocol_name,
                    leader=result.leader_id, skip_assignment=result.skip_assignment,
                    member_id=result.member_id,
                    members=tuple(make(member_t, member_id=m, group_instance_id=i, metadata=d)
                                  for m, i, d in result.members))

    async def sync_group(ctx: RequestContext, req: Any) -> Any:
        result = await groups.sync(
            req.group_id, req.generation_id, req.member_id,
            getattr(req, "protocol_type", None), getattr(req, "protocol_name", None),
            {a.member_id: a.assignment for a in req.assignments},
            getattr(req, "group_instance_id", None))
        return make(ctx.response_type, throttle_time=_NO_THROTTLE, error_code=result.error,
                    protocol_type=result.protocol_type, protocol_name=result.protocol_name,
                    assignment=result.assignment)

    async def heartbeat(ctx: RequestContext, req: Any) -> Any:
        error = groups.heartbeat(req.group_id, req.generation_id, req.member_id,
                                 getattr(req, "group_instance_id", None))
        return make(ctx.response_type, throttle_time=_NO_THROTTLE, error_code=error)

    async def leave_group(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        if ctx.api_version < 3:
            error, results = groups.leave(req.group_id, [(req.member_id, None)])
            if error is ErrorCode.none and results:
                error = results[0][2]
            return make(cls, throttle_time=_NO_THROTTLE, error_code=error)
        error, results = groups.leave(
            req.group_id, [(m.member_id, m.group_instance_id) for m in req.members])
        member_t = nested(cls, "MemberResponse")
        return make(cls, throttle_time=_NO_THROTTLE, error_code=error,
                    members=tuple(make(member_t, member_id=m, group_instance_id=i,
                                       error_code=e) for m, i, e in results))

    async def offset_commit(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        now = groups.services.time_ms()
        offsets = {(t.name, p.partition_index): rec.OffsetValue(
            p.committed_offset, p.committed_metadata or "", now,
            getattr(p, "committed_leader_epoch", -1))
            for t in req.topics for p in t.partitions}
        errors = await groups.commit_offsets(req.group_id, req.generation_id_or_member_epoch,
                                             req.member_id, offsets,
                                             instance_id=getattr(req, "group_instance_id", None))
        return _partition_errors(cls, "OffsetCommitResponseTopic",
                                 "OffsetCommitResponsePartition", errors,
                                 throttle_time=_NO_THROTTLE)

    async def offset_fetch(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        require_stable = bool(getattr(req, "require_stable", False))
        if ctx.api_version < 8:
            error, topics = _fetch_group(cls, "OffsetFetchResponseTopic",
                                         "OffsetFetchResponsePartition", req.group_id,
                                         req.topics, require_stable)
            return make(cls, throttle_time=_NO_THROTTLE, topics=topics, error_code=error)
        group_t = nested(cls, "OffsetFetchResponseGroup")
        out = []
        for g in req.groups:
            error, topics = _fetch_group(cls, "OffsetFetchResponseTopics",
                                         "OffsetFetchResponsePartitions", g.group_id,
                                         g.topics, require_stable)
            out.append(make(group_t, group_id=g.group_id, topics=topics, error_code=error))
        return make(cls, throttle_time=_NO_THROTTLE, groups=tuple(out))

    def _fetch_group(cls: type[Any], topic_name: str, part_name: str, group_id: str,
                     topics: Any, require_stable: bool) -> tuple[ErrorCode, tuple[Any, ...]]:
        wanted = (None if topics is None else
                  [(t.name, int(p)) for t in topics for p in t.partition_indexes])
        error, offsets = groups.fetch_offsets(group_id, wanted, require_stable)
        topic_t, part_t = nested(cls, topic_name), nested(cls, part_name)
        return error, by_topic(topic_t, "name", (
            (topic, make(part_t, partition_index=partition,
                         committed_offset=-1 if value is None else value.offset,
                         committed_leader_epoch=-1 if value is None else value.leader_epoch,
                         metadata="" if value is None else value.metadata, error_code=perr))
            for (topic, partition), (value, perr) in offsets.items()))

    async def list_groups(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        states = {s.lower() for s in getattr(req, "states_filter", ()) or ()}
        listed_t = nested(cls, "ListedGroup")
        error = ErrorCode.none if groups.loaded else ErrorCode.coordinator_load_in_progress
        listed = tuple(make(listed_t, group_id=g.group_id,
                            protocol_type=g.protocol_type or "", group_state=g.state.value)
                       for g in groups.groups.values()
                       if not states or g.state.value.lower() in states)
        return make(cls, throttle_time=_NO_THROTTLE, error_code=error, groups=listed)

    async def describe_groups(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        group_t, member_t = nested(cls, "DescribedGroup"), nested(cls, "DescribedGroupMember")
        out = []
        for group_id in req.groups:
            group = groups.groups.get(group_id)
            if not groups.loaded:
                out.append(make(group_t, error_code=ErrorCode.coordinator_load_in_progress,
                                group_id=group_id, group_state="", protocol_type="",
                                protocol_data="", members=(),
                                authorized_operations=-2147483648))
                continue
            if group is None:
                out.append(make(group_t, error_code=ErrorCode.none, group_id=group_id,
                                group_state=GroupState.DEAD.value, protocol_type="",
                                protocol_data="", members=(),
                                authorized_operations=-2147483648))
                continue
            stable = group.state is GroupState.STABLE
            members = tuple(make(
                member_t, member_id=m.member_id, group_instance_id=m.instance_id,
                client_id=m.client_id, client_host=m.client_host,
                member_metadata=m.metadata(group.protocol_name) if stable else b"",
                member_assignment=m.assignment if stable else b"")
                for m in group.members.values())
            out.append(make(group_t, error_code=ErrorCode.none, group_id=group_id,
                            group_state=group.state.value,
                            protocol_type=group.protocol_type or "",
                            protocol_data=(group.protocol_name or "") if stable else "",
                            members=members, authorized_operations=-2147483648))
        return make(cls, throttle_time=_NO_THROTTLE, groups=tuple(out))

    async def delete_groups(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        result_t = nested(cls, "DeletableGroupResult")
        results = []
        for group_id in req.groups_names:
            error = await groups.delete_group(group_id)
            results.append(make(result_t, group_id=group_id, error_code=error))
        return make(cls, throttle_time=_NO_THROTTLE, results=tuple(results))

    async def offset_delete(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        wanted = [(t.name, int(p.partition_index)) for t in req.topics for p in t.partitions]
        error, errors = await groups.delete_offsets(req.group_id, wanted, subscribed_topics)
        return _partition_errors(cls, "OffsetDeleteResponseTopic",
                                 "OffsetDeleteResponsePartition", errors,
                                 throttle_time=_NO_THROTTLE, error_code=error)

    for key, handler in ((11, join_group), (14, sync_group), (12, heartbeat),
                         (13, leave_group), (8, offset_commit), (9, offset_fetch),
                         (16, list_groups), (15, describe_groups), (42, delete_groups),
                         (47, offset_delete)):
        low, high = VERSIONS[key]
        registry.add(key, handler, min_version=low, max_version=high)


def _partition_errors(cls: type[Any], topic_name: str, part_name: str,
                      errors: dict[tuple[str, int], ErrorCode], **fields: Any) -> Any:
    """A response of per-partition error codes grouped by topic."""
    topic_t, part_t = nested(cls, topic_name), nested(cls, part_name)
    return make(cls, topics=by_topic(topic_t, "name", (
        (topic, make(part_t, partition_index=partition, error_code=error))
        for (topic, partition), error in errors.items())), **fields)
