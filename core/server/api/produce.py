"""Produce: the engine validates and appends each partition's batches (every codec,
idempotent and transactional producers); errors come back per partition with Kafka's codes.

On a node that is a cluster of one, it is the whole in-sync replica set: the high watermark
follows the append (the flush policy's fsync, ``flush.messages=1``, happens inside it), so
acks=1 and acks=-1 are answered once the append returned, and acks=0 gets no response at all.
On a replicating node (``cluster.metadata.url``) only the partition's leader appends, and
acks=-1 is answered once every in-sync replica holds the records (:func:`replicated`).

Appends that only write to the page cache run on the event loop (see
:mod:`~tierlog.server.api.inline_appends`); the others, an fsync or a roll due, run on the worker
pool.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tierlog.errors import TierlogError, UnknownTopicOrPartitionError
from tierlog.manager.log_manager import LogManager
from tierlog.security.acl import AclOperation, ResourceType
from tierlog.server.api.inline_appends import append_is_nonblocking
from tierlog.server.api.produce_wire import (
    MAX_VERSION,
    MIN_VERSION,
    Outcome,
    encode_produce_response_body,
)
from tierlog.server.authorization import RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.internal_topics import AdminChange, refusal
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import EncodedResponse
from tierlog.server.registry import Endpoint, register
from tierlog.server.replication.leader_appends import replicate
from tierlog.server.replication.node import ClusterNode
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import ProduceRequest

log = logging.getLogger(__name__)

API_KEY = 0


def append_all(manager: LogManager, request: ProduceRequest,
               not_here: Mapping[tuple[str, int], tuple[ErrorCode, str]] | None = None,
               epochs: Mapping[tuple[str, int], int] | None = None) -> list[Outcome]:
    """Append every partition's records (inline or on a worker thread, see
    :func:`appends_inline`); one outcome per partition. A partition in ``not_here`` is
    answered with its error and not appended to (the principal may not write to it, this node
    does not lead it, or its in-sync set is too small for acks=all). On a replicating node
    ``epochs`` holds the leader epoch each append was decided at (a leadership lost since
    refuses it: ``Log.append``'s ``as_leader_at``)."""
    outcomes: list[Outcome] = []
    for topic in request.topic_data:
        refused = refusal(topic.name, AdminChange.PRODUCE)
        for part in topic.partition_data:
            name, index = topic.name, part.index
            if not_here and (name, index) in not_here:
                outcomes.append((name, index, *not_here[(name, index)]))
                continue
            if refused is not None:
                outcomes.append((name, index, *refused))
                continue
            if part.records is None or len(part.records) == 0:
                outcomes.append((name, index, ErrorCode.corrupt_message,
                                 f"no records for {name}-{index}"))
                continue
            try:
                info = manager.log(name, index).append(
                    part.records, as_leader_at=None if epochs is None else epochs.get(
                        (name, index)))
            except Exception as exc:  # noqa: BLE001 - an item's own error code
                outcomes.append((name, index, error_code_for(exc), error_message(exc)))
            else:
                outcomes.append((name, index, info, None))
    return outcomes


def appends_inline(manager: LogManager, request: ProduceRequest, now_ms: int,
                   time_ms: Callable[[], int]) -> bool:
    """Whether every partition's append of ``request`` may run on the event loop (unknown
    partitions fail at once, so they do not stop it)."""
    for topic in request.topic_data:
        for part in topic.partition_data:
            records = part.records
            if not records:
                continue
            try:
                partition_log = manager.log(topic.name, part.index)
            except UnknownTopicOrPartitionError:
                continue
            if not append_is_nonblocking(partition_log, len(records), now_ms, time_ms):
                return False
    return True


async def produce(services: Services, ctx: RequestContext,
                  request: ProduceRequest) -> EncodedResponse | None:
    """Append each partition's records; acks=0 gets no response. The response is written by
    :mod:`~tierlog.server.api.produce_wire` (the version-dependent fields are its business)."""
    manager = services.manager
    acks = int(request.acks)
    if acks not in (0, 1, -1):
        outcomes: list[Outcome] = [(t.name, p.index, ErrorCode.invalid_required_acks,
                                     f"acks must be 0, 1 or -1, got {acks}")
                                    for t in request.topic_data for p in t.partition_data]
    else:
        cluster = services.cluster
        epochs: dict[tuple[str, int], int] | None = None
        not_here = None
        if cluster is not None:
            epochs = {}
            not_here = leader_refusals(cluster, request, acks, epochs)
        auth = request_auth(services, ctx)
        if auth.enabled:
            not_here = {**(not_here or {}), **write_refusals(auth, request)}
        if appends_inline(manager, request, services.time_ms(), services.time_ms):
            outcomes = append_all(manager, request, not_here, epochs)
        else:
            outcomes = await services.run_blocking(
                lambda: append_all(manager, request, not_here, epochs))
        if cluster is None:
            services.appended()
        else:
            outcomes = await replicated(cluster, services, outcomes, acks,
                                        request.timeout.total_seconds())
    services.request_stats.produced(outcomes)
    if acks == 0:
        return None
    return EncodedResponse(ctx.response_type,
                           encode_produce_response_body(ctx.api_version, outcomes))


#: A record batch's attributes (int16) and the bit of a transactional batch (magic v2).
_ATTRIBUTES_AT, _TRANSACTIONAL = 21, 0x10


def has_transactional_records(request: ProduceRequest) -> bool:
    """Whether a partition's first batch is transactional (Kafka's
    ``RequestUtils.hasTransactionalRecords``)."""
    for topic in request.topic_data:
        for part in topic.partition_data:
            data = part.records
            if data is not None and len(data) > _ATTRIBUTES_AT + 1 \
                    and data[_ATTRIBUTES_AT + 1] & _TRANSACTIONAL:
                return True
    return False


def write_refusals(auth: RequestAuth, request: ProduceRequest
                   ) -> dict[tuple[str, int], tuple[ErrorCode, str]]:
    """The partitions the principal may not write to (Kafka's ``handleProduceRequest``):
    every one, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, when the records are transactional and
    WRITE on the transactional id is not allowed; else those of topics without WRITE
    (TOPIC_AUTHORIZATION_FAILED), whether or not they exist."""
    parts = [(t.name, int(p.index)) for t in request.topic_data for p in t.partition_data]
    if has_transactional_records(request):
        txn_id = getattr(request, "transactional_id", None)  # v3+
        if txn_id is None or not auth.may(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                          txn_id):
            denied = (ErrorCode.transactional_id_authorization_failed,
                      f"not authorized to write as transactional id {txn_id}")
            return dict.fromkeys(parts, denied)
    allowed = auth.names(AclOperation.WRITE, ResourceType.TOPIC, (n for n, _ in parts))
    return {(name, index): (ErrorCode.topic_authorization_failed,
                            f"not authorized to write to topic {name}")
            for name, index in parts if name not in allowed}


def leader_refusals(cluster: ClusterNode, request: ProduceRequest, acks: int,
                    epochs: dict[tuple[str, int], int]) -> dict[tuple[str, int],
                                                                 tuple[ErrorCode, str]]:
    """The partitions this node may not append to: those it does not lead
    (NOT_LEADER_OR_FOLLOWER) and, for acks=all, those whose in-sync set is smaller than
    ``min.insync.replicas`` (NOT_ENOUGH_REPLICAS, refused before the append as Kafka does).
    The leader epoch of each it leads goes into ``epochs``."""
    refused: dict[tuple[str, int], tuple[ErrorCode, str]] = {}
    for topic in request.topic_data:
        for part in topic.partition_data:
            tp = (topic.name, int(part.index))
            try:
                role = cluster.replicas.leader_role(tp)
                epochs[tp] = role.leader.leader_epoch
                if acks == -1:
                    role.leader.check_min_isr()
            except TierlogError as exc:
                refused[tp] = (error_code_for(exc), error_message(exc))
    return refused


async def replicated(cluster: ClusterNode, services: Services, outcomes: list[Outcome],
                     acks: int, timeout_s: float) -> list[Outcome]:
    """The outcomes once replicated as ``acks`` asks (:func:`replicate`): a partition still
    short when ``timeout_s`` passes answers REQUEST_TIMED_OUT, one whose leadership moved
    NOT_LEADER_OR_FOLLOWER."""
    required = {(name, index): info.last_offset + 1 for name, index, info, _ in outcomes
                if not isinstance(info, ErrorCode)}
    answers = await replicate(cluster, services.appended, required, timeout_s,
                              wait=acks == -1)
    done: list[Outcome] = []
    for name, index, info, message in outcomes:
        code = answers.get((name, index), ErrorCode.none)
        if code == ErrorCode.none:
            done.append((name, index, info, message))
        else:
            done.append((name, index, code,
                         f"{name}-{index}: acks=all not satisfied ({code.name})"))
    return done


ENDPOINTS = (Endpoint(API_KEY, produce, MIN_VERSION, MAX_VERSION),)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
