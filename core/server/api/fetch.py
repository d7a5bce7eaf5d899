"""Fetch: reads up to the high watermark (read_uncommitted) or the last stable offset with
the aborted transactions of the range (read_committed), long-polls until ``min.bytes`` are
there or ``max.wait.ms`` passes (woken by appends), keeps incremental fetch sessions, and
sends local record data with sendfile (a SplicedResponse); remote-tier reads go through
``Log.read`` on the worker pool and travel as bytes.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import kio.schema.fetch.v4
import kio.schema.fetch.v5
import kio.schema.fetch.v6
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records as KioRecords

from tierlog.errors import (
    FetchSessionError,
    RemoteFetchQuotaExceededError,
    RemoteFetchTimeoutError,
    RemoteReaderBusyError,
    TierlogError,
)
from tierlog.log.fetch_info import FetchDataInfo
from tierlog.manager.log_manager import LogManager
from tierlog.records.file_records import FileSlice, Records
from tierlog.security.acl import AclOperation, ResourceType
from tierlog.server.api.fetch_sessions import (
    FINAL_EPOCH,
    FetchContext,
    TopicPartition,
    must_answer,
)
from tierlog.server.authorization import RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, HandlerResult, RequestContext
from tierlog.server.error_codes import error_code_for
from tierlog.server.framing import SplicedResponse, by_topic, make, nested, new_marker
from tierlog.server.registry import Endpoint, register
from tierlog.server.replication.node import ClusterNode
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import FetchRequest

log = logging.getLogger(__name__)

API_KEY = 1
MIN_VERSION, MAX_VERSION = 4, 12
ISOLATION = {0: "read_uncommitted", 1: "read_committed"}
#: The requests without fetch sessions (KIP-227 came with v7).
_SESSIONLESS = (kio.schema.fetch.v4.FetchRequest, kio.schema.fetch.v5.FetchRequest,
                kio.schema.fetch.v6.FetchRequest)


@dataclass(slots=True)
class PartitionRead:
    """One partition's read: its data or error and the offsets the response reports."""

    tp: TopicPartition
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    data: FetchDataInfo | None = None

    @property
    def size(self) -> int:
        return 0 if self.data is None else self.data.size_in_bytes


#: Remote reads that may succeed on the next fetch, answered as an empty partition.
_REMOTE_NOT_NOW = (RemoteFetchTimeoutError, RemoteReaderBusyError, RemoteFetchQuotaExceededError)


def read_partitions(manager: LogManager, ctx: FetchContext, isolation: str,
                    max_bytes: int,
                    refused: Mapping[TopicPartition, ErrorCode] | None = None,
                    *, from_follower: bool = False) -> list[PartitionRead]:
    """Read every partition of the fetch (on a worker thread) within the response's byte
    budget: the first partition with data may exceed it by one batch (as Kafka's
    min-one-message rule), the others read what is left. A partition in ``refused`` is
    answered with its error (this node does not lead it, or the epoch named is not its).
    A follower's fetch of offsets only the remote tier holds is answered
    OFFSET_MOVED_TO_TIERED_STORAGE with the offsets and no data (Kafka's leader: the
    follower starts its log from the tier, ``tierlog.remote.rlm.tier_start``)."""
    reads: list[PartitionRead] = []
    remaining = max_bytes
    for tp, state in ctx.partitions:
        if refused and tp in refused:
            reads.append(PartitionRead(tp, refused[tp]))
            continue
        try:
            partition_log = manager.log(*tp)
            high_watermark = partition_log.high_watermark
            lso = partition_log.last_stable_offset
            start = partition_log.log_start_offset
            if from_follower and partition_log.remote_storage_enabled \
                    and start <= state.fetch_offset < partition_log.local_log_start_offset:
                reads.append(PartitionRead(tp, ErrorCode.offset_moved_to_tiered_storage,
                                           high_watermark, lso, start))
                continue
            limit = min(state.max_bytes, max(remaining, 0))
            first = remaining == max_bytes
            if limit <= 0 and not first:
                data = FetchDataInfo.empty(state.fetch_offset, high_watermark, isolation)
            else:
                try:
                    data = partition_log.read(state.fetch_offset, max(limit, 1),
                                              isolation=isolation, min_one_message=first)
                except _REMOTE_NOT_NOW:
                    # As Kafka answers a remote read that timed out (remote.fetch.max.wait.ms)
                    # or is over the fetch quota: no data and no error; the client fetches again.
                    data = FetchDataInfo.empty(state.fetch_offset, high_watermark, isolation)
        except Exception as exc:  # noqa: BLE001 - an item's own error code
            reads.append(PartitionRead(tp, error_code_for(exc)))
            continue
        read = PartitionRead(tp, ErrorCode.none, high_watermark, lso, start, data)
        remaining -= read.size
        reads.append(read)
    return reads


def _records_field(data: FetchDataInfo | None,
                   slices: dict[bytes, Records]) -> KioRecords:
    if data is None or data.size_in_bytes == 0:
        return KioRecords(b"")
    records = data.data
    if isinstance(records, FileSlice):
        marker = new_marker()
        slices[bytes(marker)] = records
        return marker
    return KioRecords(records.to_bytes())


def build_response(response_type: type[Any], ctx: FetchContext, reads: list[PartitionRead],
                   error: ErrorCode = ErrorCode.none) -> SplicedResponse:
    """The FetchResponse of ``reads`` (an incremental session leaves out what is unchanged)."""
    topic_t, part_t, aborted_t = (nested(response_type, "FetchableTopicResponse"),
                                  nested(response_type, "PartitionData"),
                                  nested(response_type, "AbortedTransaction"))
    states = dict(ctx.partitions)
    slices: dict[bytes, Records] = {}
    partitions: list[tuple[str, Any]] = []
    for read in reads:
        has_error = read.error != ErrorCode.none
        state = states.get(read.tp)
        if ctx.session is not None and state is not None:
            answer = must_answer(state, read.high_watermark, read.last_stable_offset,
                                 read.log_start_offset, read.size > 0, has_error)
            if ctx.incremental and not answer:
                continue
        aborted = None
        if read.data is not None and read.data.aborted_transactions is not None:
            aborted = tuple(make(aborted_t, producer_id=t.producer_id,
                                 first_offset=t.first_offset)
                            for t in read.data.aborted_transactions)
        part = make(part_t, partition_index=read.tp[1], error_code=read.error,
                    high_watermark=read.high_watermark,
                    last_stable_offset=read.last_stable_offset,
                    log_start_offset=read.log_start_offset, aborted_transactions=aborted,
                    preferred_read_replica=-1, records=_records_field(read.data, slices))
        partitions.append((read.tp[0], part))
    response = make(response_type, throttle_time=datetime.timedelta(0), error_code=error,
                    session_id=ctx.session_id,
                    responses=by_topic(topic_t, "topic", partitions))
    return SplicedResponse(response, slices)


@dataclass(frozen=True, slots=True)
class FetchArgs:
    """What a FetchRequest asks, whatever its version."""

    isolation: str
    #: (partition, fetch offset, partition max bytes) of each partition listed.
    wanted: Sequence[tuple[TopicPartition, int, int]]
    forgotten: Sequence[TopicPartition]
    session_id: int
    session_epoch: int
    #: The fetching follower's node id; -1 for a consumer (Kafka's CONSUMER_REPLICA_ID).
    replica_id: int = -1
    #: The leader epoch each listed partition names (v9+; -1: none, not checked).
    leader_epochs: Mapping[TopicPartition, int] = field(default_factory=dict)


def fetch_args(request: FetchRequest) -> FetchArgs:
    """The version-dependent fields of a FetchRequest, read in one place: the incremental
    session fields came with v7 (before: a sessionless fetch, id 0 and epoch -1), the
    partitions' current leader epoch with v9."""
    wanted = [((t.topic, int(p.partition)), int(p.fetch_offset), int(p.partition_max_bytes))
              for t in request.topics for p in t.partitions]
    epochs: dict[TopicPartition, int] = {
        (str(t.topic), int(p.partition)): int(getattr(p, "current_leader_epoch", -1))
        for t in request.topics for p in t.partitions}
    isolation = ISOLATION.get(int(request.isolation_level), "read_uncommitted")
    replica_id = int(request.replica_id)
    if isinstance(request, _SESSIONLESS):
        return FetchArgs(isolation, wanted, [], 0, FINAL_EPOCH, replica_id, epochs)
    forgotten = [(t.topic, int(p)) for t in request.forgotten_topics_data for p in t.partitions]
    return FetchArgs(isolation, wanted, forgotten, int(request.session_id),
                     int(request.session_epoch), replica_id, epochs)


def read_refusals(auth: RequestAuth, ctx: FetchContext, args: FetchArgs
                  ) -> dict[TopicPartition, ErrorCode]:
    """The partitions the principal may not read (Kafka's ``handleFetchRequest``): a
    follower's fetch (replica_id >= 0) needs CLUSTER_ACTION on the cluster, else every
    partition answers TOPIC_AUTHORIZATION_FAILED; a consumer's needs READ on each topic."""
    if not auth.enabled:
        return {}
    if args.replica_id >= 0:
        if auth.may_cluster(AclOperation.CLUSTER_ACTION):
            return {}
        return {tp: ErrorCode.topic_authorization_failed for tp, _ in ctx.partitions}
    allowed = auth.names(AclOperation.READ, ResourceType.TOPIC, (tp[0] for tp, _ in ctx.partitions))
    return {tp: ErrorCode.topic_authorization_failed
            for tp, _ in ctx.partitions if tp[0] not in allowed}


def refusals(cluster: ClusterNode, ctx: FetchContext, args: FetchArgs
             ) -> dict[TopicPartition, ErrorCode]:
    """The partitions of a fetch this node may not answer with data, and why: it does not
    lead them, the epoch named is not its leader epoch, or the fetching replica is not one of
    their followers (Kafka's ``fetchOnlyFromLeader`` and ``checkCurrentLeaderEpoch``)."""
    refused: dict[TopicPartition, ErrorCode] = {}
    for tp, _ in ctx.partitions:
        try:
            role = cluster.replicas.leader_role(tp, args.leader_epochs.get(tp, -1))
            if args.replica_id >= 0:
                role.leader.follower(args.replica_id)
        except TierlogError as exc:
            refused[tp] = error_code_for(exc)
    return refused


async def fetch(services: Services, ctx: RequestContext, request: FetchRequest) -> HandlerResult:
    """Read each partition from its fetch offset, waiting up to ``max_wait`` for ``min_bytes``
    (a SplicedResponse; a session error is answered as a plain response)."""
    manager = services.manager
    args = fetch_args(request)
    try:
        reading = services.fetch_sessions.context(args.session_id, args.session_epoch,
                                                  args.wanted, args.forgotten)
    except FetchSessionError as exc:
        empty = FetchContext([], 0, False)
        return build_response(ctx.response_type, empty, [], ErrorCode(exc.code)).response
    max_bytes = int(request.max_bytes) if int(request.max_bytes) > 0 else 1
    min_bytes = int(request.min_bytes)
    deadline = time.monotonic() + max(request.max_wait.total_seconds(), 0.0)
    cluster = services.cluster
    # A follower reads to the log end; a consumer to the high watermark (or the LSO).
    isolation = "log_end" if args.replica_id >= 0 else args.isolation
    denied = read_refusals(request_auth(services, ctx), reading, args)
    while True:
        seen = services.appends  # an append during the read below wakes the wait after it
        refused = denied if cluster is None else {**refusals(cluster, reading, args), **denied}
        ends = ({} if cluster is None or args.replica_id < 0
                else {tp: cluster.replicas.leaders[tp].log.log_end_offset
                      for tp, _ in reading.partitions if tp not in refused})
        reads = await services.run_blocking(
            partial(read_partitions, manager, reading, isolation, max_bytes, refused,
                    from_follower=args.replica_id >= 0))
        if cluster is not None and ends:
            followed_fetch(cluster, reading, args.replica_id, reads, ends)
        total = sum(r.size for r in reads)
        errors = any(r.error != ErrorCode.none for r in reads)
        left = deadline - time.monotonic()
        if total >= min_bytes or errors or left <= 0:
            break
        await services.wait_appended(left, since=seen)
    services.request_stats.fetched(reads)
    return build_response(ctx.response_type, reading, reads)


def followed_fetch(cluster: ClusterNode, ctx: FetchContext, replica_id: int,
                   reads: Sequence[PartitionRead], ends: Mapping[TopicPartition, int]) -> None:
    """Tell each partition's leader rules that follower ``replica_id`` fetched it at its fetch
    offset while the log ended at ``ends[tp]`` (the end before the read, so appends after it
    do not keep the follower out of sync; Kafka's ``updateFollowerFetchState``)."""
    offsets = {tp: state.fetch_offset for tp, state in ctx.partitions}
    for read in reads:
        if read.error != ErrorCode.none or read.tp not in ends:
            continue
        try:
            cluster.replicas.follower_fetched(read.tp, replica_id, offsets[read.tp],
                                              ends[read.tp])
        except TierlogError as exc:
            read.error = error_code_for(exc)
            read.data = None


ENDPOINTS = (Endpoint(API_KEY, fetch, MIN_VERSION, MAX_VERSION),)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
