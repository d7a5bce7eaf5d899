"""The producer-id and transaction APIs on the wire: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit (kio in, :class:`TxnCoordinator` and
:class:`GroupCoordinator` calls, kio out).

KIP-588: a fenced producer is told PRODUCER_FENCED from the versions that know it
(InitProducerId 4, AddPartitionsToTxn 2, AddOffsetsToTxn 2, EndTxn 2, TxnOffsetCommit 3) and
INVALID_PRODUCER_EPOCH before them.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS
from tierlog.server.coordinator.txn.txn import TxnCoordinator
from tierlog.server.framing import by_topic, duration_ms, make, nested

_NO_THROTTLE = datetime.timedelta(0)

#: API key -> (min version, max version, first version with PRODUCER_FENCED).
VERSIONS = {
    22: (0, 4, 4),  # InitProducerId
    24: (0, 3, 2),  # AddPartitionsToTxn
    25: (0, 3, 2),  # AddOffsetsToTxn
    26: (0, 3, 2),  # EndTxn
    28: (0, 3, 3),  # TxnOffsetCommit
}


def for_version(error: ErrorCode, ctx: RequestContext) -> ErrorCode:
    """PRODUCER_FENCED as the request's version knows it (KIP-588)."""
    if error is ErrorCode.producer_fenced and ctx.api_version < VERSIONS[ctx.api_key][2]:
        return ErrorCode.invalid_producer_epoch
    return error


def install(registry: HandlerRegistry, txns: TxnCoordinator, groups: GroupCoordinator) -> None:
    """Register the transaction APIs' handlers."""

    async def init_producer_id(ctx: RequestContext, req: Any) -> Any:
        error, pid, epoch = await txns.init_producer_id(
            req.transactional_id, duration_ms(req.transaction_timeout),
            int(getattr(req, "producer_id", -1)), int(getattr(req, "producer_epoch", -1)))
        return make(ctx.response_type, throttle_time=_NO_THROTTLE,
                    error_code=for_version(error, ctx), producer_id=pid, producer_epoch=epoch)

    async def add_partitions(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        tid, pid, epoch, topics = (req.v3_and_below_transactional_id,
                                   req.v3_and_below_producer_id,
                                   req.v3_and_below_producer_epoch, req.v3_and_below_topics)
        wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
        errors = await txns.add_partitions(tid, pid, epoch, wanted)
        topic_t = nested(cls, "AddPartitionsToTxnTopicResult")
        part_t = nested(cls, "AddPartitionsToTxnPartitionResult")
        return make(cls, throttle_time=_NO_THROTTLE, results_by_topic_v3_and_below=by_topic(
            topic_t, "name", ((topic, make(part_t, partition_index=partition,
                                           partition_error_code=for_version(error, ctx)))
                              for (topic, partition), error in errors.items()),
            "results_by_partition"))

    async def add_offsets(ctx: RequestContext, req: Any) -> Any:
        partition = groups.store.partition_of(req.group_id)
        errors = await txns.add_partitions(req.transactional_id, req.producer_id,
                                           req.producer_epoch, [(CONSUMER_OFFSETS, partition)])
        error = next(iter(errors.values()))
        return make(ctx.response_type, throttle_time=_NO_THROTTLE,
                    error_code=for_version(error, ctx))

    async def end_txn(ctx: RequestContext, req: Any) -> Any:
        error = await txns.end_txn(req.transactional_id, req.producer_id, req.producer_epoch,
                                   bool(req.committed))
        return make(ctx.response_type, throttle_time=_NO_THROTTLE,
                    error_code=for_version(error, ctx))

    async def txn_offset_commit(ctx: RequestContext, req: Any) -> Any:
        cls = ctx.response_type
        now = groups.services.time_ms()
        offsets = {(t.name, int(p.partition_index)): rec.OffsetValue(
            p.committed_offset, p.committed_metadata or "", now,
            getattr(p, "committed_leader_epoch", -1))
            for t in req.topics for p in t.partitions}
        error = txns.check_producer(req.transactional_id, req.producer_id, req.producer_epoch)
        if error is ErrorCode.none:
            errors = await groups.commit_txn_offsets(
                req.group_id, req.producer_id, req.producer_epoch,
                int(getattr(req, "generation_id", -1)), getattr(req, "member_id", ""),
                offsets, instance_id=getattr(req, "group_instance_id", None))
        else:
            errors = dict.fromkeys(offsets, error)
        topic_t = nested(cls, "TxnOffsetCommitResponseTopic")
        part_t = nested(cls, "TxnOffsetCommitResponsePartition")
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), perr in errors.items():
            by_topic.setdefault(topic, []).append(make(
                part_t, partition_index=partition, error_code=for_version(perr, ctx)))
        return make(cls, throttle_time=_NO_THROTTLE, topics=tuple(
            make(topic_t, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()))

    for key, handler in ((22, init_producer_id), (24, add_partitions), (25, add_offsets),
                         (26, end_txn), (28, txn_offset_commit)):
        low, high, _ = VERSIONS[key]
        registry.add(key, handler, min_version=low, max_version=high)
