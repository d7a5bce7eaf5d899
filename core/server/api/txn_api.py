"""The producer-id and transaction APIs on the wire: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit (kio in, :class:`TxnCoordinator` and
:class:`GroupCoordinator` calls, kio out).

Each checks the transactional id's (and its group's and topics') ACLs first, as Kafka's
KafkaApis does (``tierlog.server.authorization``).

KIP-588: a fenced producer is told PRODUCER_FENCED from the versions that know it
(InitProducerId 4, AddPartitionsToTxn 2, AddOffsetsToTxn 2, EndTxn 2, TxnOffsetCommit 3) and
INVALID_PRODUCER_EPOCH before them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import kio.schema.init_producer_id.v0
import kio.schema.init_producer_id.v1
import kio.schema.init_producer_id.v2
import kio.schema.txn_offset_commit.v0
import kio.schema.txn_offset_commit.v1
import kio.schema.txn_offset_commit.v2
from kio.schema.errors import ErrorCode

from tierlog.security.acl import AclOperation, Action, ResourceType
from tierlog.server.authorization import RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS
from tierlog.server.coordinator.txn.txn import TxnCoordinator
from tierlog.server.framing import by_topic, duration_ms, make, nested
from tierlog.server.registry import Endpoint, register

if TYPE_CHECKING:
    from tierlog.server.api.messages import (
        AddOffsetsToTxnRequest,
        AddOffsetsToTxnResponse,
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        EndTxnRequest,
        EndTxnResponse,
        InitProducerIdRequest,
        InitProducerIdResponse,
        TxnOffsetCommitRequest,
        TxnOffsetCommitResponse,
    )

# The versions before a field came (read in one function per API, narrowed by these).
_INIT_WITHOUT_CURRENT = (kio.schema.init_producer_id.v0.InitProducerIdRequest,
                         kio.schema.init_producer_id.v1.InitProducerIdRequest,
                         kio.schema.init_producer_id.v2.InitProducerIdRequest)
_TXN_COMMIT_WITHOUT_EPOCH = (kio.schema.txn_offset_commit.v0.TxnOffsetCommitRequest,
                             kio.schema.txn_offset_commit.v1.TxnOffsetCommitRequest)

_NO_THROTTLE = datetime.timedelta(0)

#: API key -> the first version that knows PRODUCER_FENCED (KIP-588).
FIRST_FENCED_VERSION = {
    22: 4,  # InitProducerId
    24: 2,  # AddPartitionsToTxn
    25: 2,  # AddOffsetsToTxn
    26: 2,  # EndTxn
    28: 3,  # TxnOffsetCommit
}


def for_version(error: ErrorCode, ctx: RequestContext) -> ErrorCode:
    """PRODUCER_FENCED as the request's version knows it (KIP-588)."""
    if error is ErrorCode.producer_fenced and ctx.api_version < FIRST_FENCED_VERSION[ctx.api_key]:
        return ErrorCode.invalid_producer_epoch
    return error


@dataclass(frozen=True, slots=True)
class TxnApis:
    """What the transaction APIs serve from: the transaction coordinator, and the group
    coordinator that AddOffsetsToTxn and TxnOffsetCommit name."""

    txns: TxnCoordinator
    groups: GroupCoordinator


def _auth(apis: TxnApis, ctx: RequestContext) -> RequestAuth:
    return request_auth(apis.groups.services, ctx)


def _txn_action(transactional_id: str) -> Action:
    return Action(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


async def producer_id_refusal(apis: TxnApis, auth: RequestAuth,
                              transactional_id: str | None) -> ErrorCode | None:
    """Why InitProducerId is refused (Kafka's ``handleInitProducerIdRequest``), or None: a
    transactional producer needs WRITE on its transactional id; an idempotent one
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if not auth.enabled:
        return None
    if transactional_id is not None:
        return (None if auth.allowed([_txn_action(transactional_id)])[0]
                else ErrorCode.transactional_id_authorization_failed)
    if auth.may_cluster(AclOperation.IDEMPOTENT_WRITE, audit=False) \
            or await apis.groups.services.run_blocking(
                lambda: auth.any_allowed(AclOperation.WRITE, ResourceType.TOPIC)):
        return None
    return ErrorCode.cluster_authorization_failed


async def init_producer_id(apis: TxnApis, ctx: RequestContext,
                           request: InitProducerIdRequest) -> InitProducerIdResponse:
    """A producer id and epoch (a transactional producer's is bumped, fencing the old one);
    v3+ names the producer's current id and epoch (KIP-360), before it is -1, -1."""
    current = ((-1, -1) if isinstance(request, _INIT_WITHOUT_CURRENT)
               else (int(request.producer_id), int(request.producer_epoch)))
    cls: type[InitProducerIdResponse] = ctx.response_type
    refused = await producer_id_refusal(apis, _auth(apis, ctx), request.transactional_id)
    if refused is not None:
        return make(cls, throttle_time=_NO_THROTTLE, error_code=refused, producer_id=-1,
                    producer_epoch=-1)
    error, pid, epoch = await apis.txns.init_producer_id(
        request.transactional_id, duration_ms(request.transaction_timeout), *current)
    return make(cls, throttle_time=_NO_THROTTLE, error_code=for_version(error, ctx),
                producer_id=pid, producer_epoch=epoch)


async def add_partitions_to_txn(
        apis: TxnApis, ctx: RequestContext,
        request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    """Add partitions to the producer's transaction (WRITE on the transactional id, then on
    each topic: one refused, the others are not attempted)."""
    cls: type[AddPartitionsToTxnResponse] = ctx.response_type
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    txn_id = request.v3_and_below_transactional_id
    topics = list(dict.fromkeys(t for t, _ in wanted))
    answers = _auth(apis, ctx).allowed(
        [_txn_action(txn_id), *(Action(AclOperation.WRITE, ResourceType.TOPIC, t)
                                for t in topics)])
    writable = {t for t, ok in zip(topics, answers[1:], strict=True) if ok}
    errors: Mapping[tuple[str, int], ErrorCode]
    if not answers[0]:
        errors = dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
    elif len(writable) < len(topics):
        errors = {tp: ErrorCode.operation_not_attempted if tp[0] in writable
                  else ErrorCode.topic_authorization_failed for tp in wanted}
    else:
        errors = await apis.txns.add_partitions(
            txn_id, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
            wanted)
    topic_t = nested(cls, "AddPartitionsToTxnTopicResult")
    part_t = nested(cls, "AddPartitionsToTxnPartitionResult")
    return make(cls, throttle_time=_NO_THROTTLE, results_by_topic_v3_and_below=by_topic(
        topic_t, "name", ((topic, make(part_t, partition_index=partition,
                                       partition_error_code=for_version(error, ctx)))
                          for (topic, partition), error in errors.items()),
        "results_by_partition"))


async def add_offsets_to_txn(apis: TxnApis, ctx: RequestContext,
                             request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    """Add the group's ``__consumer_offsets`` partition to the transaction (WRITE on the
    transactional id, READ on the group)."""
    cls: type[AddOffsetsToTxnResponse] = ctx.response_type
    txn_ok, group_ok = _auth(apis, ctx).allowed([
        _txn_action(request.transactional_id),
        Action(AclOperation.READ, ResourceType.GROUP, request.group_id)])
    if not (txn_ok and group_ok):
        error = (ErrorCode.transactional_id_authorization_failed if not txn_ok
                 else ErrorCode.group_authorization_failed)
        return make(cls, throttle_time=_NO_THROTTLE, error_code=error)
    partition = apis.groups.store.partition_of(request.group_id)
    errors = await apis.txns.add_partitions(request.transactional_id, request.producer_id,
                                            request.producer_epoch,
                                            [(CONSUMER_OFFSETS, partition)])
    error = next(iter(errors.values()))
    return make(cls, throttle_time=_NO_THROTTLE, error_code=for_version(error, ctx))


async def end_txn(apis: TxnApis, ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    """Commit or abort the producer's transaction (WRITE on the transactional id)."""
    if _auth(apis, ctx).allowed([_txn_action(request.transactional_id)])[0]:
        error = await apis.txns.end_txn(request.transactional_id, request.producer_id,
                                        request.producer_epoch, bool(request.committed))
    else:
        error = ErrorCode.transactional_id_authorization_failed
    cls: type[EndTxnResponse] = ctx.response_type
    return make(cls, throttle_time=_NO_THROTTLE, error_code=for_version(error, ctx))


@dataclass(frozen=True, slots=True)
class _TxnCommit:
    """What a TxnOffsetCommitRequest asks, whatever its version."""

    offsets: dict[tuple[str, int], rec.OffsetValue]
    generation_id: int
    member_id: str
    instance_id: str | None


def txn_commit(request: TxnOffsetCommitRequest, now_ms: int) -> _TxnCommit:
    """The version-dependent fields of a TxnOffsetCommitRequest, read in one place: the
    committed leader epoch came with v2, the member's generation, id and instance id with v3
    (KIP-447)."""
    offsets: dict[tuple[str, int], rec.OffsetValue]
    if isinstance(request, _TXN_COMMIT_WITHOUT_EPOCH):
        offsets = {(t.name, int(p.partition_index)): rec.OffsetValue(
            p.committed_offset, p.committed_metadata or "", now_ms, -1)
            for t in request.topics for p in t.partitions}
        return _TxnCommit(offsets, -1, "", None)
    offsets = {(t.name, int(p.partition_index)): rec.OffsetValue(
        p.committed_offset, p.committed_metadata or "", now_ms, p.committed_leader_epoch)
        for t in request.topics for p in t.partitions}
    if isinstance(request, kio.schema.txn_offset_commit.v2.TxnOffsetCommitRequest):
        return _TxnCommit(offsets, -1, "", None)
    return _TxnCommit(offsets, int(request.generation_id), request.member_id,
                      request.group_instance_id)


async def txn_offset_commit(apis: TxnApis, ctx: RequestContext,
                            request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    """Offsets committed with the transaction (visible when it commits): WRITE on the
    transactional id, READ on the group and on each topic."""
    cls: type[TxnOffsetCommitResponse] = ctx.response_type
    asked = txn_commit(request, apis.groups.services.time_ms())
    topics = list(dict.fromkeys(t for t, _ in asked.offsets))
    answers = _auth(apis, ctx).allowed([
        _txn_action(request.transactional_id),
        Action(AclOperation.READ, ResourceType.GROUP, request.group_id),
        *(Action(AclOperation.READ, ResourceType.TOPIC, t) for t in topics)])
    readable = {t for t, ok in zip(topics, answers[2:], strict=True) if ok}
    errors: dict[tuple[str, int], ErrorCode]
    error = (ErrorCode.transactional_id_authorization_failed if not answers[0]
             else ErrorCode.group_authorization_failed if not answers[1]
             else apis.txns.check_producer(request.transactional_id, request.producer_id,
                                           request.producer_epoch))
    if error is not ErrorCode.none:
        errors = dict.fromkeys(asked.offsets, error)
    else:
        errors = {tp: ErrorCode.topic_authorization_failed
                  for tp in asked.offsets if tp[0] not in readable}
        allowed = {tp: v for tp, v in asked.offsets.items() if tp not in errors}
        if allowed:
            errors.update(await apis.groups.commit_txn_offsets(
                request.group_id, request.producer_id, request.producer_epoch,
                asked.generation_id, asked.member_id, allowed, instance_id=asked.instance_id))
    topic_t = nested(cls, "TxnOffsetCommitResponseTopic")
    part_t = nested(cls, "TxnOffsetCommitResponsePartition")
    return make(cls, throttle_time=_NO_THROTTLE, topics=by_topic(topic_t, "name", (
        (topic, make(part_t, partition_index=partition, error_code=for_version(perr, ctx)))
        for (topic, partition), perr in errors.items())))


ENDPOINTS = (
    Endpoint(22, init_producer_id, 0, 4),
    Endpoint(24, add_partitions_to_txn, 0, 3),
    Endpoint(25, add_offsets_to_txn, 0, 3),
    Endpoint(26, end_txn, 0, 3),
    Endpoint(28, txn_offset_commit, 0, 3),
)


def install(registry: HandlerRegistry, txns: TxnCoordinator, groups: GroupCoordinator) -> None:
    """Register the transaction APIs' handlers."""
    register(registry, TxnApis(txns, groups), ENDPOINTS)
