"""The topic admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and
OffsetsForLeaderEpoch, over the LogManager (one node: a replication factor above 1 is
refused with INVALID_REPLICATION_FACTOR, as a one-broker Kafka cluster refuses it); on a
replicating node topics are created, deleted and grown in the cluster store
(:class:`~tierlog.server.replication.node.ClusterNode`), and DeleteRecords is the leader's. Each
topic is checked against the authorizer first (``tierlog.server.authorization``): a refused
one answers TOPIC_AUTHORIZATION_FAILED whether or not it exists."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

import kio.schema.delete_topics.v6
from kio.schema.errors import ErrorCode

from tierlog.common.filenames import validate_topic
from tierlog.config import check_topic_config
from tierlog.errors import (
    ConfigError,
    InvalidTopicError,
    TierlogError,
    UnknownTopicOrPartitionError,
)
from tierlog.manager.log_manager import LogManager
from tierlog.security.acl import AclOperation, ResourceType
from tierlog.server.api.metadata import topic_uuid
from tierlog.server.authorization import RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.internal_topics import AdminChange, refusal
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import by_topic, make, nested
from tierlog.server.partition_limits import new_partitions_check
from tierlog.server.registry import Endpoint, register
from tierlog.server.replication.node import ClusterNode
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import (
        CreatePartitionsRequest,
        CreatePartitionsResponse,
        CreateTopicsRequest,
        CreateTopicsResponse,
        DeleteRecordsRequest,
        DeleteRecordsResponse,
        DeleteTopicsRequest,
        DeleteTopicsResponse,
        OffsetForLeaderEpochRequest,
        OffsetForLeaderEpochResponse,
    )

_NO_THROTTLE = datetime.timedelta(0)

#: (error code, message) of one item; ErrorCode.none and None when it succeeded.
_Result = tuple[ErrorCode, str | None]
_OK: _Result = (ErrorCode.none, None)


class _Config(Protocol):
    """A CreatableTopicConfig (of any CreateTopics version)."""

    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str | None: ...


class CreatableTopic(Protocol):
    """The fields of a CreatableTopic (the same in every CreateTopics version) read here."""

    @property
    def name(self) -> str: ...
    @property
    def num_partitions(self) -> int: ...
    @property
    def replication_factor(self) -> int: ...
    @property
    def assignments(self) -> Sequence[object]: ...
    @property
    def configs(self) -> Sequence[_Config]: ...


def _attempt(fn: Callable[[], object]) -> _Result:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc)
    return _OK


def create_topic(manager: LogManager, topic: CreatableTopic, default_partitions: int,
                 validate_only: bool, check_new: Callable[[int], None]) -> _Result:
    """One CreatableTopic: checks (``check_new(count)`` raises when the broker may not take
    ``count`` more partitions), then (unless ``validate_only``) the topic."""
    replication = int(topic.replication_factor)
    if replication not in (-1, 1):
        return (ErrorCode.invalid_replication_factor,
                f"replication factor {replication} is larger than the 1 available broker")
    count = int(topic.num_partitions)
    if topic.assignments:
        count = len(topic.assignments)
    if count == -1:
        count = default_partitions
    if count < 1:
        return ErrorCode.invalid_partitions, f"number of partitions must be positive, got {count}"
    configs = {c.name: c.value for c in topic.configs if c.value is not None}

    def run() -> None:
        validate_topic(topic.name)
        check_topic_config(manager.config.topic_defaults.with_overrides(configs))
        if manager.partitions(topic.name):
            manager.create_topic(topic.name, count, configs)  # raises TopicExistsError
        check_new(count)
        if not validate_only:
            manager.create_topic(topic.name, count, configs)

    return _attempt(run)


@dataclass(frozen=True, slots=True)
class CreateAccess:
    """What a CreateTopics principal may do (Kafka's ``handleCreateTopicsRequest``): create
    the topics in ``creatable`` (None: CREATE on the cluster, any), and learn that a topic
    exists only if it may DESCRIBE it (``describable``; None: no authorizer)."""

    creatable: Container[str] | None = None
    describable: Container[str] | None = None

    def refused(self, name: str) -> _Result | None:
        """TOPIC_AUTHORIZATION_FAILED for a topic it may not create, else None."""
        if self.creatable is None or name in self.creatable:
            return None
        return ErrorCode.topic_authorization_failed, f"not authorized to create topic {name}"

    def answer(self, name: str, result: _Result) -> _Result:
        """``result``, unless it tells of an existing topic the principal may not describe."""
        if result[0] == ErrorCode.topic_already_exists and self.describable is not None \
                and name not in self.describable:
            return ErrorCode.topic_authorization_failed, f"not authorized to create topic {name}"
        return result


def create_access(auth: RequestAuth, names: Sequence[str]) -> CreateAccess:
    """The checks of one CreateTopics request over the topics it names."""
    if not auth.enabled:
        return CreateAccess()
    creatable = (None if auth.may_cluster(AclOperation.CREATE, audit=False)
                 else auth.names(AclOperation.CREATE, ResourceType.TOPIC, names))
    return CreateAccess(creatable, auth.names(AclOperation.DESCRIBE, ResourceType.TOPIC, names,
                                              audit=False))


def _denied(auth: RequestAuth, operation: AclOperation, names: Iterable[str | None],
            verb: str) -> dict[str, _Result]:
    """TOPIC_AUTHORIZATION_FAILED of each named topic on which ``operation`` is refused."""
    if not auth.enabled:
        return {}
    wanted = [n for n in names if n is not None]
    allowed = auth.names(operation, ResourceType.TOPIC, wanted)
    return {n: (ErrorCode.topic_authorization_failed, f"not authorized to {verb} topic {n}")
            for n in wanted if n not in allowed}


def deleted_topic_names(request: DeleteTopicsRequest) -> list[str | None]:
    """The version-dependent field of a DeleteTopicsRequest: v6 names each topic in
    ``topics`` (a null name: deletion by topic id), v1-5 in ``topic_names``."""
    if isinstance(request, kio.schema.delete_topics.v6.DeleteTopicsRequest):
        return [t.name for t in request.topics]
    return list(request.topic_names)


async def create_topics(services: Services, ctx: RequestContext,
                        request: CreateTopicsRequest) -> CreateTopicsResponse:
    """Create each topic (or, with ``validate_only``, only check it); on a replicating node,
    in the cluster (:func:`create_cluster_topics`)."""
    if services.cluster is not None:
        return await create_cluster_topics(services, services.cluster, ctx, request)
    manager = services.manager
    check_new = new_partitions_check(services)
    default = manager.config["num.partitions"]
    validate_only = bool(request.validate_only)
    asked: Sequence[CreatableTopic] = request.topics
    access = create_access(request_auth(services, ctx), [t.name for t in asked])
    results = await services.run_blocking(lambda: [
        access.answer(t.name, access.refused(t.name)
                      or create_topic(manager, t, default, validate_only, check_new))
        for t in asked])
    cls: type[CreateTopicsResponse] = ctx.response_type
    result_t = nested(cls, "CreatableTopicResult")
    topics = []
    for topic, (code, message) in zip(asked, results, strict=True):
        parts = manager.partitions(topic.name) if code == ErrorCode.none else []
        topic_id = manager.log(topic.name, parts[0]).topic_id if parts else None
        topics.append(make(result_t, name=topic.name, topic_id=topic_uuid(topic_id),
                           error_code=code, error_message=message,
                           topic_config_error_code=0,
                           num_partitions=len(parts) if parts else -1,
                           replication_factor=1 if parts else -1, configs=()))
    return make(cls, throttle_time=_NO_THROTTLE, topics=tuple(topics))


async def create_cluster_topics(services: Services, cluster: ClusterNode, ctx: RequestContext,
                                request: CreateTopicsRequest) -> CreateTopicsResponse:
    """Create each topic in the cluster store: its replicas assigned over the live nodes
    (``replication_factor`` -1: ``default.replication.factor``), each replica's log made by
    its node at its next poll."""
    manager = services.manager
    cls: type[CreateTopicsResponse] = ctx.response_type
    result_t = nested(cls, "CreatableTopicResult")
    access = create_access(request_auth(services, ctx), [t.name for t in request.topics])
    topics = []
    for topic in request.topics:
        count = len(topic.assignments) if topic.assignments else int(topic.num_partitions)
        count = int(manager.config["num.partitions"]) if count == -1 else count
        configs = {c.name: c.value for c in topic.configs if c.value is not None}
        factor = int(topic.replication_factor)

        def check(topic: CreatableTopic = topic, count: int = count,
                  configs: dict[str, str] = configs) -> None:
            validate_topic(topic.name)
            if refusal(topic.name, AdminChange.CREATE_PARTITIONS) is not None:
                raise InvalidTopicError(f"{topic.name} is an internal topic")
            if count < 1:
                raise ConfigError("num_partitions", f"must be positive, got {count}")
            check_topic_config(manager.config.topic_defaults.with_overrides(configs))

        refused = access.refused(topic.name)
        code, message = (refused if refused is not None
                         else await services.run_blocking(lambda: _attempt(check)))
        if code == ErrorCode.none and topic.assignments:
            code, message = (ErrorCode.invalid_request,
                             ("manual replica assignments are not supported: the controller "
                              "assigns replicas"))
        if code == ErrorCode.none and not request.validate_only:
            try:
                await cluster.create_topic(topic.name, count, factor, configs)
            except Exception as exc:  # noqa: BLE001 - an item's own error code
                code, message = error_code_for(exc), error_message(exc)
        code, message = access.answer(topic.name, (code, message))
        record = cluster.view.topics.get(topic.name) if code == ErrorCode.none else None
        topics.append(make(result_t, name=topic.name,
                           topic_id=topic_uuid(None if record is None else record.topic_id),
                           error_code=code, error_message=message, topic_config_error_code=0,
                           num_partitions=count if code == ErrorCode.none else -1,
                           replication_factor=(len(record.assignment[0]) if record else -1),
                           configs=()))
    return make(cls, throttle_time=_NO_THROTTLE, topics=tuple(topics))


def _delete_one(manager: LogManager, name: str | None) -> _Result:
    if name is None:
        return ErrorCode.unknown_topic_id, "deleting by topic id is not supported: name the topic"
    refused = refusal(name, AdminChange.DELETE_TOPIC)
    if refused is not None:
        return refused
    return _attempt(partial(manager.delete_topic, name))


async def _delete_in_cluster(cluster: ClusterNode, name: str | None) -> _Result:
    """One topic deleted from the cluster store (answered once stored; every replica deletes
    its logs at its next poll)."""
    if name is None:
        return ErrorCode.unknown_topic_id, "deleting by topic id is not supported: name the topic"
    refused = refusal(name, AdminChange.DELETE_TOPIC)
    if refused is not None:
        return refused
    try:
        await cluster.delete_topic(name)
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc)
    return _OK


async def delete_topics(services: Services, ctx: RequestContext,
                        request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    """Delete each named topic (internal topics are refused; each needs DELETE on it)."""
    manager = services.manager
    names = deleted_topic_names(request)
    denied = _denied(request_auth(services, ctx), AclOperation.DELETE, names, "delete")
    if services.cluster is not None:
        results = [await _delete_in_cluster(services.cluster, n) if n not in denied
                   else denied[n] for n in names]
    else:
        results = await services.run_blocking(lambda: [
            denied[n] if n in denied else _delete_one(manager, n) for n in names])
    results = [denied.get(n, r) if n is not None else r
               for n, r in zip(names, results, strict=True)]
    cls: type[DeleteTopicsResponse] = ctx.response_type
    result_t = nested(cls, "DeletableTopicResult")
    return make(cls, throttle_time=_NO_THROTTLE, responses=tuple(
        make(result_t, name=name, topic_id=topic_uuid(None), error_code=code,
             error_message=message)
        for name, (code, message) in zip(names, results, strict=True)))


def _grow(manager: LogManager, name: str, count: int, validate_only: bool,
          check_new: Callable[[int], None]) -> _Result:
    """One CreatePartitions item: ``name`` grown to ``count`` partitions."""
    if (refused := refusal(name, AdminChange.CREATE_PARTITIONS)) is not None:
        return refused
    current = manager.partitions(name)
    if not current:
        return ErrorCode.unknown_topic_or_partition, f"unknown topic {name}"
    if count <= len(current):
        return (ErrorCode.invalid_partitions,
                f"topic {name} has {len(current)} partitions; the new count {count} must be larger")
    checked = _attempt(lambda: check_new(count - len(current)))
    if validate_only or checked != _OK:
        return checked
    return _attempt(lambda: manager.create_partitions(name, count))


def _replicas(assignments: Sequence[object] | None) -> list[list[int]] | None:
    """The replica lists of a CreatePartitionsTopic's ``assignments`` (None: none given)."""
    if not assignments:
        return None
    return [[int(b) for b in getattr(a, "broker_ids", ())] for a in assignments]


async def _grow_in_cluster(cluster: ClusterNode, name: str, count: int,
                           assignments: list[list[int]] | None, validate_only: bool) -> _Result:
    """One CreatePartitions item on a replicating node: the topic's record grown in the
    cluster store (answered once stored; each replica creates its new logs at its next
    poll)."""
    if (refused := refusal(name, AdminChange.CREATE_PARTITIONS)) is not None:
        return refused
    try:
        await cluster.create_partitions(name, count, assignments, validate_only)
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc)
    return _OK


async def create_partitions(services: Services, ctx: RequestContext,
                            request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    """Grow each topic to its new partition count (each needs ALTER on it)."""
    manager = services.manager
    check_new = new_partitions_check(services)
    validate_only = bool(request.validate_only)
    asked = [(t.name, int(t.count)) for t in request.topics]
    denied = _denied(request_auth(services, ctx), AclOperation.ALTER, (n for n, _ in asked),
                     "alter")
    cluster = services.cluster
    if cluster is not None:
        wanted = {t.name: _replicas(t.assignments) for t in request.topics}
        results = [denied[name] if name in denied
                   else await _grow_in_cluster(cluster, name, count, wanted[name],
                                               validate_only)
                   for name, count in asked]
    else:
        results = await services.run_blocking(lambda: [
            denied[name] if name in denied else _grow(manager, name, count, validate_only,
                                                      check_new)
            for name, count in asked])
    results = [denied.get(n, r) for (n, _), r in zip(asked, results, strict=True)]
    cls: type[CreatePartitionsResponse] = ctx.response_type
    result_t = nested(cls, "CreatePartitionsTopicResult")
    return make(cls, throttle_time=_NO_THROTTLE, results=tuple(
        make(result_t, name=name, error_code=code, error_message=message)
        for (name, _), (code, message) in zip(asked, results, strict=True)))


def _delete_records_before(manager: LogManager, topic: str, partition: int,
                           offset: int) -> tuple[ErrorCode, int]:
    """One DeleteRecords item: (error code, the new low watermark or -1)."""
    if (refused := refusal(topic, AdminChange.DELETE_RECORDS)) is not None:
        return refused[0], -1
    try:
        partition_log = manager.log(topic, partition)
        if offset == -1:
            offset = partition_log.high_watermark
        return ErrorCode.none, partition_log.delete_records_before(offset)
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), -1


async def delete_records(services: Services, ctx: RequestContext,
                         request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    """Move each partition's log start offset up to the offset given (-1: the high
    watermark); each topic needs DELETE on it. On a replicating node only the partition's
    leader does (NOT_LEADER_OR_FOLLOWER elsewhere); its followers move theirs when their next
    fetch answer carries the new log start (the answer does not wait for them)."""
    manager = services.manager
    denied = {name: code for name, (code, _) in _denied(
        request_auth(services, ctx), AclOperation.DELETE, (t.name for t in request.topics),
        "delete records of").items()}
    refused: dict[tuple[str, int], ErrorCode] = {}
    cluster = services.cluster
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, int(p.partition_index))
            if t.name in denied:
                refused[tp] = denied[t.name]
            elif cluster is not None and refusal(t.name, AdminChange.DELETE_RECORDS) is None:
                try:
                    cluster.replicas.leader_role(tp)
                except TierlogError as exc:
                    refused[tp] = error_code_for(exc)
    results = await services.run_blocking(lambda: [
        (t.name, int(p.partition_index),
         *((refused[(t.name, int(p.partition_index))], -1)
           if (t.name, int(p.partition_index)) in refused else
           _delete_records_before(manager, t.name, int(p.partition_index), int(p.offset))))
        for t in request.topics for p in t.partitions])
    cls: type[DeleteRecordsResponse] = ctx.response_type
    topic_t, part_t = (nested(cls, "DeleteRecordsTopicResult"),
                       nested(cls, "DeleteRecordsPartitionResult"))
    return make(cls, throttle_time=_NO_THROTTLE, topics=by_topic(topic_t, "name", (
        (name, make(part_t, partition_index=index, low_watermark=low, error_code=code))
        for name, index, code, low in results)))


def _epoch_end(manager: LogManager, topic: str, partition: int,
               leader_epoch: int) -> tuple[ErrorCode, int, int]:
    """One OffsetsForLeaderEpoch item: (error code, epoch, its end offset)."""
    try:
        partition_log = manager.log(topic, partition)
        epoch, end = partition_log.leader_epoch_cache.end_offset_for(
            leader_epoch, partition_log.log_end_offset)
    except UnknownTopicOrPartitionError as exc:
        return error_code_for(exc), -1, -1
    return ErrorCode.none, epoch, end


async def offsets_for_leader_epoch(
        services: Services, ctx: RequestContext,
        request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    """The end offset of each partition's requested leader epoch (or the largest below); on a
    replicating node only its leader answers, and only to the leader epoch it holds (Kafka's
    ``lastOffsetForLeaderEpoch``: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
    UNKNOWN_LEADER_EPOCH)."""
    manager = services.manager
    cluster = services.cluster
    refused: dict[tuple[str, int], ErrorCode] = {}
    auth = request_auth(services, ctx)
    if auth.enabled and not auth.may_cluster(AclOperation.CLUSTER_ACTION, audit=False):
        for name in _denied(auth, AclOperation.DESCRIBE, (t.topic for t in request.topics),
                            "describe"):
            refused.update({(t.topic, int(p.partition)): ErrorCode.topic_authorization_failed
                            for t in request.topics if t.topic == name for p in t.partitions})
    if cluster is not None:
        for t in request.topics:
            for p in t.partitions:
                if (t.topic, int(p.partition)) in refused:
                    continue
                try:
                    cluster.replicas.leader_role((t.topic, int(p.partition)),
                                                 int(getattr(p, "current_leader_epoch", -1)))
                except TierlogError as exc:
                    refused[(t.topic, int(p.partition))] = error_code_for(exc)
    results = await services.run_blocking(lambda: [
        (t.topic, int(p.partition),
         *((refused[(t.topic, int(p.partition))], -1, -1)
           if (t.topic, int(p.partition)) in refused
           else _epoch_end(manager, t.topic, int(p.partition), int(p.leader_epoch))))
        for t in request.topics for p in t.partitions])
    cls: type[OffsetForLeaderEpochResponse] = ctx.response_type
    topic_t, part_t = (nested(cls, "OffsetForLeaderTopicResult"),
                       nested(cls, "EpochEndOffset"))
    return make(cls, throttle_time=_NO_THROTTLE, topics=by_topic(topic_t, "topic", (
        (name, make(part_t, error_code=code, partition=index, leader_epoch=epoch,
                    end_offset=end))
        for name, index, code, epoch, end in results)))


ENDPOINTS = (
    Endpoint(19, create_topics, 2, 7),
    Endpoint(20, delete_topics, 1, 6),
    Endpoint(37, create_partitions, 0, 3),
    Endpoint(21, delete_records, 0, 2),
    Endpoint(23, offsets_for_leader_epoch, 2, 4),
)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
