"""A follower's fetcher for the partitions one broker leads (Kafka's ``ReplicaFetcherThread``):
each partition first truncates to where its log agrees with the leader's, then fetches the
leader's batches and appends them as they are, with the leader's offsets and epochs.

One round (:meth:`LeaderFetcher.run_once`):

1. **Truncating** partitions (newly followed, or whose leader moved) ask the leader for the end
   of their latest epoch (OffsetsForLeaderEpoch v4) and truncate where
   ``tierlog.cluster.truncation`` says, asking again in the next round until it says done; a
   log with no epoch yet truncates to its high watermark.
2. **Fetching** partitions go in one Fetch v12 with this node's replica id, each from its log
   end. The whole batches of each answer are appended (``origin="replication"``: no
   re-stamping, no checks against this node's limits); the high watermark follows the
   leader's, capped at the log end, and the log start offset follows the leader's.
   OFFSET_OUT_OF_RANGE with the log end below the leader's log start restarts the log empty
   there; otherwise the partition goes back to truncating. OFFSET_MOVED_TO_TIERED_STORAGE
   (the offsets it needs are only in the remote tier) restarts the log from the tier
   (``tierlog.remote.rlm.tier_start``: the tier's last committed offset + 1, its leader
   epochs and producer snapshot there). Another error leaves the partition as it is for the
   next round (the leader moved, or is not ready).

A lost connection (BrokerConnectionError) ends the round; the caller backs off and runs the
next. Log work runs on threads (``asyncio.to_thread``) so the event loop never blocks on disk.
One task drives one fetcher; a partition is appended to only by it.

The fetcher's ``lock`` is held while it changes a log and by whoever changes what it follows
(:meth:`follow`, :meth:`unfollow`), never across a request to the leader (Kafka's
``partitionMapLock``): a leader that stopped answering holds up no role change. An answer is
applied only to a partition still followed as it was when asked (the same
:class:`FollowedPartition`); one followed anew or given up meanwhile ignores it.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_v12
from kio.schema.fetch.v12.response import FetchResponse, PartitionData
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_v4
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from tierlog.cluster.truncation import truncation_offset
from tierlog.errors import RemoteStorageError
from tierlog.log.log import Log
from tierlog.records.batch import iter_batches
from tierlog.remote.rlm.tier_start import start_from_tier
from tierlog.server.replication.wire_client import BrokerConnection

__all__ = ["FetchRound", "FollowedPartition", "LeaderFetcher"]

log = logging.getLogger(__name__)

#: Kafka's replica fetch defaults (``replica.fetch.*``).
DEFAULT_MAX_WAIT_MS = 500
DEFAULT_MIN_BYTES = 1
DEFAULT_MAX_BYTES = 10 << 20
DEFAULT_PARTITION_MAX_BYTES = 1 << 20


@dataclass(slots=True)
class FollowedPartition:
    """One partition this node follows: its log and the leader epoch the cluster gives its
    leader (sent so that a leader of another epoch refuses, once leaders check it)."""

    topic: str
    partition: int
    log: Log
    leader_epoch: int
    truncating: bool = True
    """Whether it must agree with the leader before fetching (new, or its leader moved)."""

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class FetchRound:
    """What one round did."""

    truncated: dict[str, int] = field(default_factory=dict)
    """Partitions truncated, to which offset."""
    appended: dict[str, int] = field(default_factory=dict)
    """Records appended per partition."""
    errors: dict[str, str] = field(default_factory=dict)
    """Partitions the leader answered with an error."""


class LeaderFetcher:
    """Follows the partitions one leader leads, over ``connection``, as replica ``node_id``."""

    def __init__(self, connection: BrokerConnection, node_id: int, *,
                 max_wait_ms: int = DEFAULT_MAX_WAIT_MS, min_bytes: int = DEFAULT_MIN_BYTES,
                 max_bytes: int = DEFAULT_MAX_BYTES,
                 partition_max_bytes: int = DEFAULT_PARTITION_MAX_BYTES) -> None:
        self.connection = connection
        self.node_id = node_id
        self.max_wait_ms, self.min_bytes = max_wait_ms, min_bytes
        self.max_bytes, self.partition_max_bytes = max_bytes, partition_max_bytes
        self.partitions: dict[tuple[str, int], FollowedPartition] = {}
        #: Held while a log changes and while what is followed changes (the module docstring).
        self.lock = asyncio.Lock()

    def _still(self, p: FollowedPartition) -> bool:
        """Whether ``p`` is still followed as it was (not given up or followed anew)."""
        return self.partitions.get((p.topic, p.partition)) is p

    def follow(self, partition: FollowedPartition) -> None:
        """Follow ``partition`` (again: from truncating). The caller holds ``lock``."""
        partition.truncating = True
        self.partitions[(partition.topic, partition.partition)] = partition

    def unfollow(self, topic: str, partition: int) -> None:
        """Stop following the partition. The caller holds ``lock``."""
        self.partitions.pop((topic, partition), None)

    async def run_once(self) -> FetchRound:
        """One round: the truncations due, then one fetch (BrokerConnectionError when the
        leader could not be reached; nothing of the round is half-applied to a log)."""
        done = FetchRound()
        for followed in [p for p in self.partitions.values() if p.truncating]:
            await self._truncate(followed, done)
        fetching = [p for p in self.partitions.values() if not p.truncating]
        if fetching:
            await self._fetch(fetching, done)
        return done

    # -- truncating --------------------------------------------------------------------

    async def _truncate(self, p: FollowedPartition, done: FetchRound) -> None:
        latest = p.log.leader_epoch_cache.latest_epoch
        if latest is None:  # no epoch to agree on: keep what is below the high watermark
            async with self.lock:
                if self._still(p):
                    await self._truncate_to(p, p.log.high_watermark, done)
                    p.truncating = False
            return
        answer = await self.connection.send(epoch_v4.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.node_id), topics=(epoch_v4.OffsetForLeaderTopic(
                topic=TopicName(p.topic), partitions=(epoch_v4.OffsetForLeaderPartition(
                    partition=i32(p.partition), current_leader_epoch=i32(p.leader_epoch),
                    leader_epoch=i32(latest)),)),)), OffsetForLeaderEpochResponse)
        result = answer.topics[0].partitions[0]
        if result.error_code != ErrorCode.none:
            done.errors[p.name] = result.error_code.name
            return
        async with self.lock:
            if self._still(p):
                await self._agree(p, int(result.leader_epoch), int(result.end_offset), done)

    async def _agree(self, p: FollowedPartition, leader_epoch: int, leader_end: int,
                     done: FetchRound) -> None:
        """Truncate where the leader's answer for its epoch says (under ``lock``)."""
        end = p.log.log_end_offset
        step = truncation_offset(
            leader_epoch, leader_end, fetch_offset=p.log.high_watermark,
            log_end_offset=end,
            end_offset_for=lambda epoch: p.log.leader_epoch_cache.end_offset_for(epoch, end))
        await self._truncate_to(p, step.offset, done)
        p.truncating = not step.completed

    async def _truncate_to(self, p: FollowedPartition, offset: int, done: FetchRound) -> None:
        if offset >= p.log.log_end_offset:
            return
        if offset < p.log.high_watermark:  # a clean election never asks this: say so loudly
            log.error("%s: truncating to %d, below the high watermark %d", p.name, offset,
                      p.log.high_watermark)
        await asyncio.to_thread(p.log.truncate_to, offset)
        done.truncated[p.name] = offset
        log.info("%s: truncated to %d to agree with its leader", p.name, offset)

    # -- fetching ----------------------------------------------------------------------

    async def _fetch(self, partitions: Iterable[FollowedPartition], done: FetchRound) -> None:
        by_topic: dict[str, list[FollowedPartition]] = {}
        for p in partitions:
            by_topic.setdefault(p.topic, []).append(p)
        request = fetch_v12.FetchRequest(
            cluster_id=None, replica_id=BrokerId(self.node_id),
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=self.max_wait_ms)),
            min_bytes=i32(self.min_bytes), max_bytes=i32(self.max_bytes),
            isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
            topics=tuple(fetch_v12.FetchTopic(topic=TopicName(topic), partitions=tuple(
                fetch_v12.FetchPartition(
                    partition=i32(p.partition), current_leader_epoch=i32(p.leader_epoch),
                    fetch_offset=i64(p.log.log_end_offset),
                    last_fetched_epoch=i32(_latest(p.log)),
                    log_start_offset=i64(p.log.log_start_offset),
                    partition_max_bytes=i32(self.partition_max_bytes)) for p in followed))
                for topic, followed in by_topic.items()),
            forgotten_topics_data=(), rack_id="")
        asked = {(p.topic, p.partition): p for ps in by_topic.values() for p in ps}
        answer = await self.connection.send(request, FetchResponse)
        async with self.lock:
            for topic in answer.responses:
                for data in topic.partitions:
                    followed = asked.get((str(topic.topic), int(data.partition_index)))
                    if followed is not None and self._still(followed) \
                            and not followed.truncating:
                        await self._apply(followed, data, done)

    async def _apply(self, p: FollowedPartition, data: PartitionData,
                     done: FetchRound) -> None:
        code = data.error_code
        leader_start = int(data.log_start_offset)
        if code == ErrorCode.offset_out_of_range:
            if p.log.log_end_offset < leader_start:  # the leader no longer has what it misses
                await asyncio.to_thread(p.log.truncate_fully_and_start_at, leader_start)
                done.truncated[p.name] = leader_start
            else:  # ahead of the leader: agree on the epochs again
                p.truncating = True
            return
        if code == ErrorCode.offset_moved_to_tiered_storage:
            try:
                start = await asyncio.to_thread(start_from_tier, p.log)
            except (RemoteStorageError, OSError, ValueError) as exc:
                log.warning("%s: cannot start from the remote tier (its leader holds the "
                            "offsets it needs only there); trying again: %s", p.name, exc)
                done.errors[p.name] = code.name
                return
            done.truncated[p.name] = start
            return
        if code != ErrorCode.none:
            done.errors[p.name] = code.name
            return
        records = bytes(data.records or b"")
        whole = sum(b.size_in_bytes for b in iter_batches(records))  # a cut last batch waits
        if whole:
            info = await asyncio.to_thread(p.log.append, memoryview(records)[:whole],
                                           assign_offsets=False, origin="replication")
            done.appended[p.name] = info.last_offset - info.first_offset + 1
        leader_hw = int(data.high_watermark)
        await asyncio.to_thread(_follow_leader, p.log, leader_hw, leader_start)


def _latest(partition_log: Log) -> int:
    latest = partition_log.leader_epoch_cache.latest_epoch
    return -1 if latest is None else latest


def _follow_leader(partition_log: Log, leader_hw: int, leader_start: int) -> None:
    """The follower's high watermark moved to the leader's (capped at its own log end, as
    ``update_high_watermark`` does) and its log start offset raised to the leader's."""
    partition_log.update_high_watermark(min(leader_hw, partition_log.log_end_offset))
    if leader_start > partition_log.log_start_offset:
        partition_log.maybe_increment_log_start_offset(
            min(leader_start, partition_log.high_watermark))
