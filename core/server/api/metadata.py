"""Metadata: on a node that is a cluster of one, it leads every partition; on a replicating
node, the cluster's brokers and partition states as its last poll of the store saw them.
Unknown topics are created when ``auto.create.topics.enable`` and the request allow it (as
Kafka does). With an authorizer, a list of every topic holds only those the principal may
DESCRIBE; a topic named that it may not describe (or, missing, not create) answers
TOPIC_AUTHORIZATION_FAILED and nothing else about it."""

from __future__ import annotations

import datetime
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import kio.schema.metadata.v0
import kio.schema.metadata.v1
import kio.schema.metadata.v2
import kio.schema.metadata.v3
from kio.schema.errors import ErrorCode

from tierlog.checkpoint.partition_metadata import topic_id_to_bytes
from tierlog.errors import TierlogError, TopicExistsError, UnknownTopicOrPartitionError
from tierlog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from tierlog.server.authorization import UNKNOWN_OPERATIONS, RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.internal_topics import is_internal
from tierlog.server.error_codes import error_code_for
from tierlog.server.framing import make, nested
from tierlog.server.partition_limits import new_partitions_check
from tierlog.server.registry import Endpoint, register
from tierlog.server.replication.node import ClusterNode
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import MetadataRequest, MetadataResponse

log = logging.getLogger(__name__)

API_KEY = 3
MIN_VERSION, MAX_VERSION = 0, 12
#: The cluster id a single tierlog node reports.
CLUSTER_ID = "tierlog"
ZERO_UUID = uuid.UUID(int=0)
#: The requests without ``allow_auto_topic_creation`` (v4 added it).
_V0_TO_V3 = (kio.schema.metadata.v0.MetadataRequest, kio.schema.metadata.v1.MetadataRequest,
             kio.schema.metadata.v2.MetadataRequest, kio.schema.metadata.v3.MetadataRequest)


def topic_uuid(topic_id: str | None) -> uuid.UUID:
    """A topic id (Kafka's base64 text) as the UUID the protocol carries."""
    if not topic_id:
        return ZERO_UUID
    return uuid.UUID(bytes=topic_id_to_bytes(topic_id))


def leader_epoch_of(services: Services, topic: str, partition: int) -> int:
    """The partition's leader epoch as Metadata and ListOffsets report it (-1, unknown,
    until the engine has one: clients then skip epoch validation; also for a partition that
    another request deleted meanwhile)."""
    try:
        epoch = services.manager.log(topic, partition).leader_epoch
    except UnknownTopicOrPartitionError:
        return -1
    return -1 if epoch is None else epoch


async def ensure_topic(services: Services, name: str) -> bool:
    """Create ``name`` with the broker's defaults if it does not exist; whether it exists."""
    manager = services.manager
    if manager.partitions(name):
        return True
    check_new = new_partitions_check(services)

    def create() -> None:
        check_new(int(manager.config["num.partitions"]))
        manager.create_topic(name)

    try:
        await services.run_blocking(create)
        log.info("auto-created topic %s", name)
    except TopicExistsError:
        pass
    return bool(manager.partitions(name))


def requested_topics(request: MetadataRequest, version: int) -> tuple[list[str] | None, bool]:
    """The version-dependent fields of a MetadataRequest, read in one place: the topics asked
    for (None: every topic; v0 says so with an empty list, later versions with null) and
    whether unknown ones may be auto-created (v4+ asks; before, a request always could)."""
    if request.topics is None or (version == 0 and not request.topics):
        return None, False
    names: list[str] = [t.name for t in request.topics if t.name is not None]
    if isinstance(request, _V0_TO_V3):
        return names, True
    return names, request.allow_auto_topic_creation


@dataclass(frozen=True, slots=True)
class TopicAccess:
    """What one Metadata request may see and do (Kafka's ``handleTopicMetadataRequest``):
    the topics it may describe, those it may auto-create, and whether it asked for the
    authorized operations."""

    auth: RequestAuth
    describable: set[str]
    creatable: set[str] | None
    """None: CREATE on the cluster (any topic); else the topics it may create."""
    topic_operations: bool
    cluster_operations: bool

    def may_create(self, name: str) -> bool:
        return self.creatable is None or name in self.creatable

    def topic_ops(self, name: str) -> int:
        return (self.auth.operations(ResourceType.TOPIC, name) if self.topic_operations
                else UNKNOWN_OPERATIONS)

    def cluster_ops(self) -> int:
        return (self.auth.operations(ResourceType.CLUSTER, CLUSTER_NAME)
                if self.cluster_operations else UNKNOWN_OPERATIONS)


def topic_access(services: Services, ctx: RequestContext, request: MetadataRequest,
                 names: list[str], missing: Callable[[str], bool] | None) -> TopicAccess:
    """The checks of a Metadata request over ``names`` (a list-all's topics are filtered, so
    its denials are not logged); CREATE is asked, of the topics ``missing`` says do not
    exist, only when topics may be auto-created (``missing`` not None)."""
    auth = request_auth(services, ctx)
    listed = requested_topics(request, ctx.api_version)[0] is not None
    describable = auth.names(AclOperation.DESCRIBE, ResourceType.TOPIC, names, audit=listed)
    creatable: set[str] | None = None
    if missing is not None and auth.enabled \
            and not auth.may_cluster(AclOperation.CREATE, audit=False):
        creatable = auth.names(AclOperation.CREATE, ResourceType.TOPIC,
                               [n for n in describable if missing(n)])
    return TopicAccess(auth, describable, creatable,
                       bool(getattr(request, "include_topic_authorized_operations", False)),
                       bool(getattr(request, "include_cluster_authorized_operations", False)))


@dataclass(frozen=True, slots=True)
class _Asked:
    """The topics a Metadata request is answered about, and what it may see and create."""

    names: list[str]
    access: TopicAccess
    auto: bool
    """Whether unknown topics are auto-created (the request and the broker allow it)."""

    def refused(self, name: str, exists: bool) -> bool:
        """Whether ``name`` is answered TOPIC_AUTHORIZATION_FAILED: not describable, or
        missing and not creatable when it would be created."""
        return name not in self.access.describable or (
            self.auto and not exists and not self.access.may_create(name))


def _asked(services: Services, ctx: RequestContext, request: MetadataRequest,
           every_topic: list[str], exists: Callable[[str], bool]) -> _Asked:
    """The topics to answer (``every_topic`` filtered to the describable ones for a list-all,
    else those named) and the request's access to them; one home for both kinds of node."""
    wanted, may_create = requested_topics(request, ctx.api_version)
    names = every_topic if wanted is None else wanted
    auto = may_create and services.config.auto_create_topics
    access = topic_access(services, ctx, request, names,
                          (lambda n: not exists(n)) if auto else None)
    if wanted is None:
        names = [n for n in names if n in access.describable]
    return _Asked(names, access, auto)


def _refused_topic(topic_t: type[object], name: str) -> object:
    """A topic this principal may not describe (or not create): TOPIC_AUTHORIZATION_FAILED,
    nothing about it disclosed (not even whether it is internal, as Kafka answers)."""
    return make(topic_t, error_code=ErrorCode.topic_authorization_failed, name=name,
                topic_id=ZERO_UUID, is_internal=False, partitions=(),
                topic_authorized_operations=UNKNOWN_OPERATIONS)


async def cluster_metadata(services: Services, cluster: ClusterNode, ctx: RequestContext,
                           request: MetadataRequest) -> MetadataResponse:
    """The cluster as this node's last poll of the store saw it: every live node, the
    controller, and each topic's partitions with their leader, leader epoch, replicas, in-sync
    set and offline replicas (a partition without a leader: LEADER_NOT_AVAILABLE)."""
    cls: type[MetadataResponse] = ctx.response_type
    broker_t, topic_t, part_t = (nested(cls, "MetadataResponseBroker"),
                                 nested(cls, "MetadataResponseTopic"),
                                 nested(cls, "MetadataResponsePartition"))
    view = cluster.view
    asked = _asked(services, ctx, request, sorted(view.topics), view.topics.__contains__)
    access = asked.access
    topics: list[object] = []
    for name in asked.names:
        error = ErrorCode.none
        if asked.refused(name, name in view.topics):
            topics.append(_refused_topic(topic_t, name))
            continue
        if name not in view.topics and asked.auto and not is_internal(name):
            try:
                await cluster.create_topic(name, int(services.manager.config["num.partitions"]),
                                           -1, {})
                log.info("auto-created topic %s", name)
            except TopicExistsError:
                await cluster.refresh()
            except TierlogError as exc:
                error = error_code_for(exc)
            view = cluster.view
        record = view.topics.get(name)
        parts = []
        for p in range(len(record.assignment) if record is not None else 0):
            state = view.partition(name, p)
            if state is None:
                continue
            parts.append(make(
                part_t, partition_index=p, leader_id=state.leader,
                error_code=(ErrorCode.leader_not_available if state.leader < 0
                            else ErrorCode.none),
                leader_epoch=state.leader_epoch, replica_nodes=state.replicas,
                isr_nodes=state.isr,
                offline_replicas=tuple(r for r in state.replicas if r not in view.live)))
        if record is None and error == ErrorCode.none:
            error = ErrorCode.unknown_topic_or_partition
        topics.append(make(topic_t, error_code=error, name=name,
                           topic_id=topic_uuid(None if record is None else record.topic_id),
                           is_internal=is_internal(name), partitions=tuple(parts),
                           topic_authorized_operations=access.topic_ops(name)))
    brokers = tuple(make(broker_t, node_id=n, host=b.endpoint(ctx.listener)[0],
                         port=b.endpoint(ctx.listener)[1], rack=b.rack)
                    for n, b in sorted(view.brokers.items()) if n in view.live)
    return make(cls, throttle_time=datetime.timedelta(0), brokers=brokers,
                cluster_id=CLUSTER_ID, controller_id=view.controller_id,
                topics=tuple(topics), cluster_authorized_operations=access.cluster_ops())


async def metadata(services: Services, ctx: RequestContext,
                   request: MetadataRequest) -> MetadataResponse:
    """This node, and each requested topic with its partitions (all led by this node); on a
    replicating node, the cluster (:func:`cluster_metadata`)."""
    if services.cluster is not None:
        return await cluster_metadata(services, services.cluster, ctx, request)
    manager = services.manager
    cls: type[MetadataResponse] = ctx.response_type
    broker_t, topic_t, part_t = (nested(cls, "MetadataResponseBroker"),
                                 nested(cls, "MetadataResponseTopic"),
                                 nested(cls, "MetadataResponsePartition"))
    asked = _asked(services, ctx, request, list(manager.topics()),
                   lambda n: bool(manager.partitions(n)))
    access = asked.access
    topics: list[object] = []
    for name in asked.names:
        error = ErrorCode.none
        if asked.refused(name, bool(manager.partitions(name))):
            topics.append(_refused_topic(topic_t, name))
            continue
        if not manager.partitions(name) and asked.auto:
            try:
                await ensure_topic(services, name)
            except TierlogError as exc:
                error = error_code_for(exc)
        node = services.node_id
        try:
            partitions = manager.partitions(name)
            parts = tuple(make(part_t, error_code=ErrorCode.none, partition_index=p,
                               leader_id=node,
                               leader_epoch=leader_epoch_of(services, name, p),
                               replica_nodes=(node,), isr_nodes=(node,),
                               offline_replicas=())
                          for p in partitions)
            topic_id = manager.log(name, partitions[0]).topic_id if partitions else None
        except UnknownTopicOrPartitionError:  # deleted meanwhile, by another request
            partitions, parts, topic_id = [], (), None
        if not partitions and error == ErrorCode.none:
            error = ErrorCode.unknown_topic_or_partition
        topics.append(make(topic_t, error_code=error, name=name,
                           topic_id=topic_uuid(topic_id), is_internal=is_internal(name),
                           partitions=parts, topic_authorized_operations=access.topic_ops(name)))
    host, port = services.advertised(ctx.listener)  # the listener it came through
    broker = make(broker_t, node_id=services.node_id, host=host, port=port, rack=None)
    return make(cls, throttle_time=datetime.timedelta(0), brokers=(broker,),
                cluster_id=CLUSTER_ID, controller_id=services.node_id,
                topics=tuple(topics), cluster_authorized_operations=access.cluster_ops())


ENDPOINTS = (Endpoint(API_KEY, metadata, MIN_VERSION, MAX_VERSION),)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
