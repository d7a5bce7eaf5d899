"""ReplicaManager: this node's role in each partition it replicates (Kafka's
``ReplicaManager.applyDelta``, ``Partition.makeLeader`` and ``makeFollower``), applied from the
partition states the cluster store holds.

- **Leader** (the store names this node): the log's leader epoch is set, the epoch's start
  recorded at the log end in the leader-epoch cache, and a
  :class:`~tierlog.cluster.partition_leader.PartitionLeader` keeps the in-sync set and the
  high watermark from the followers' fetches. In-sync set changes are committed as a
  compare-and-swap on the partition's object at the version this leader last read or wrote
  (a change made meanwhile by the controller wins; the leader re-reads).
- **Follower**: a :class:`~tierlog.server.replication.fetcher.LeaderFetcher` per leader node
  truncates and fetches; its log changes and every role change of its partitions are
  serialized (the fetcher's lock, never held across a request to the leader), so a partition
  is never appended to by its fetcher once it leads, and a leader that stopped answering holds
  up no role change.

Everything here runs on the event loop (``PartitionLeader`` is not thread-safe); log and
store work goes to the worker pool through ``run_blocking``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from kio.schema.errors import ErrorCode

from tierlog.cluster.keys import NO_LEADER, BrokerRecord, PartitionRecord, partition_key
from tierlog.cluster.partition_leader import IsrProposal, PartitionLeader
from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.errors import (
    BrokerConnectionError,
    FencedLeaderEpochError,
    FencedPartitionEpochError,
    MetadataConflictError,
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.server.replication.fetcher import FollowedPartition, LeaderFetcher
from tierlog.server.replication.sasl_client import BrokerSecurity
from tierlog.server.replication.settings import ClusterSettings
from tierlog.server.replication.wire_client import BrokerConnection

__all__ = ["LeaderRole", "ReplicaManager", "RoleListener"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
_T = TypeVar("_T")
RunBlocking = Callable[[Callable[[], _T]], Awaitable[_T]]
#: Told of each change of this node's role in a partition: the leader epoch it now leads at,
#: or None when it no longer leads (it follows, or no longer replicates the partition).
RoleListener = Callable[[TopicPartition, "int | None"], Awaitable[None]]


@dataclass(slots=True)
class LeaderRole:
    """A partition this node leads: the replica rules and the partition's object as this
    leader last read or wrote it (the version its next in-sync change must replace)."""

    leader: PartitionLeader
    record: PartitionRecord
    version: Versioned
    log: Log


@dataclass(frozen=True, slots=True)
class _FollowerRole:
    leader_id: int
    leader_epoch: int
    address: tuple[str, int] | None


class _Fetching:
    """One fetcher and the task that runs its rounds."""

    def __init__(self, fetcher: LeaderFetcher, backoff_s: float) -> None:
        self.fetcher = fetcher
        #: The fetcher's lock: a role change waits for a log change, never for the leader.
        self.lock = fetcher.lock
        self.wake = asyncio.Event()
        self.backoff_s = backoff_s
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        leader = self.fetcher.connection
        while True:
            if not self.fetcher.partitions:
                self.wake.clear()
                await self.wake.wait()
                continue
            try:
                done = await self.fetcher.run_once()
            except BrokerConnectionError as exc:
                log.info("replica fetcher from %s: %s; retrying in %.1f s", leader, exc,
                         self.backoff_s)
                await asyncio.sleep(self.backoff_s)
                continue
            except Exception:
                log.exception("replica fetcher from %s failed a round; retrying", leader)
                await asyncio.sleep(self.backoff_s)
                continue
            if done.errors and not done.appended:
                log.debug("replica fetcher from %s: %s", leader, done.errors)
                await asyncio.sleep(self.backoff_s)

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task
        await self.fetcher.connection.close()


class ReplicaManager:
    """This node's replica roles (see the module docstring)."""

    def __init__(self, node_id: int, manager: LogManager, store: MetadataStore,
                 settings: ClusterSettings, *, run_blocking: RunBlocking[object],
                 time_ms: Callable[[], int], hw_moved: Callable[[TopicPartition], None],
                 security: BrokerSecurity | None = None) -> None:
        self.node_id = node_id
        #: TLS and SASL of the connections to leaders (the inter-broker listener's).
        self.security = security
        self.manager = manager
        self.store = store
        self.settings = settings
        self._run_blocking = run_blocking
        self._time_ms = time_ms
        self._hw_moved_callback = hw_moved
        self.leaders: dict[TopicPartition, LeaderRole] = {}
        self._followers: dict[TopicPartition, _FollowerRole] = {}
        self._fetchers: dict[tuple[int, str, int], _Fetching] = {}
        self._live: frozenset[int] = frozenset()
        self._committing: set[TopicPartition] = set()
        self._lag_ms = int(manager.config["replica.lag.time.max.ms"])
        #: Who moves with leadership (the coordinators, the tier's copier): see RoleListener.
        self.role_listeners: list[RoleListener] = []

    async def _tell(self, tp: TopicPartition, leader_epoch: int | None) -> None:
        """Tell every role listener; one that fails is logged and the others still hear."""
        for listener in self.role_listeners:
            try:
                await listener(tp, leader_epoch)
            except Exception:
                log.exception("%s-%d: a role listener failed on %s", tp[0], tp[1],
                              "a resignation" if leader_epoch is None
                              else f"leader epoch {leader_epoch}")

    async def _blocking(self, fn: Callable[[], _T]) -> _T:
        return await self._run_blocking(fn)  # type: ignore[return-value]

    # -- what the handlers ask -------------------------------------------------------------

    def leader_role(self, tp: TopicPartition, current_leader_epoch: int = -1) -> LeaderRole:
        """The role of a partition this node leads, checked against the epoch a client names
        (-1: none): NotLeaderOrFollowerError when it does not lead it,
        FencedLeaderEpochError / UnknownLeaderEpochError when the client's epoch is older /
        newer than this leader's (Kafka's ``checkCurrentLeaderEpoch``)."""
        role = self.leaders.get(tp)
        if role is None:
            raise NotLeaderOrFollowerError(f"{tp[0]}-{tp[1]}: node {self.node_id} is not its "
                                           f"leader")
        epoch = role.leader.leader_epoch
        if current_leader_epoch >= 0 and current_leader_epoch != epoch:
            if current_leader_epoch < epoch:
                raise FencedLeaderEpochError(f"{tp[0]}-{tp[1]}: leader epoch "
                                             f"{current_leader_epoch} is older than {epoch}")
            raise UnknownLeaderEpochError(f"{tp[0]}-{tp[1]}: leader epoch "
                                          f"{current_leader_epoch} is newer than {epoch}")
        return role

    def appended(self, tp: TopicPartition) -> None:
        """The leader appended to ``tp``: the high watermark may move (at once when this node
        is the whole in-sync set)."""
        role = self.leaders.get(tp)
        if role is not None and role.leader.leader_appended(role.log.log_end_offset,
                                                            self._time_ms()):
            self._hw_moved(tp, role)

    def follower_fetched(self, tp: TopicPartition, replica_id: int, fetch_offset: int,
                         leader_end_at_fetch: int) -> None:
        """Follower ``replica_id`` fetched ``tp`` at ``fetch_offset`` while this leader's log
        ended at ``leader_end_at_fetch``: record it; the high watermark may move and the
        follower may join the in-sync set."""
        role = self.leaders.get(tp)
        if role is None:
            return
        end = role.log.log_end_offset
        if end > role.leader.log_end_offset:  # appends not reported yet (a follower's view)
            role.leader.leader_appended(end, self._time_ms())
        outcome = role.leader.follower_fetched(replica_id, fetch_offset,
                                               min(leader_end_at_fetch, end), self._time_ms())
        if outcome.high_watermark_moved:
            self._hw_moved(tp, role)
        if outcome.proposal is not None:
            self._commit_soon(tp, role, outcome.proposal)

    def acks_state(self, tp: TopicPartition, required_offset: int) -> ErrorCode | None:
        """For the delayed produces: None while pending, NONE once replicated, else why not."""
        role = self.leaders.get(tp)
        if role is None:
            return ErrorCode.not_leader_or_follower
        try:
            return ErrorCode.none if role.leader.acks_all_satisfied(required_offset) else None
        except NotEnoughReplicasAfterAppendError:
            return ErrorCode.not_enough_replicas_after_append

    def _hw_moved(self, tp: TopicPartition, role: LeaderRole) -> None:
        role.log.update_high_watermark(role.leader.high_watermark)
        self._hw_moved_callback(tp)

    # -- in-sync set changes -------------------------------------------------------------------

    def shrink_isr(self) -> None:
        """Propose removing followers not caught up for ``replica.lag.time.max.ms`` (Kafka's
        ``isr-expiration`` task)."""
        now = self._time_ms()
        for tp, role in list(self.leaders.items()):
            proposal = role.leader.propose_isr_shrink(now)
            if proposal is not None:
                self._commit_soon(tp, role, proposal)

    def _commit_soon(self, tp: TopicPartition, role: LeaderRole, proposal: IsrProposal) -> None:
        if tp in self._committing:
            return
        self._committing.add(tp)
        task = asyncio.get_running_loop().create_task(self._commit_isr(tp, role, proposal))
        task.add_done_callback(lambda _: self._committing.discard(tp))

    async def _commit_isr(self, tp: TopicPartition, role: LeaderRole,
                          proposal: IsrProposal) -> None:
        record = role.record
        changed = PartitionRecord(record.replicas,
                                  tuple(r for r in record.replicas if r in proposal.isr),
                                  record.leader, record.leader_epoch, proposal.partition_epoch + 1)
        key = partition_key(*tp)
        expected = role.version
        try:
            version = await self._blocking(
                lambda: self.store.replace(key, changed.to_value(), expected))
        except MetadataConflictError:
            log.info("%s-%d: in-sync set change to %s lost to another change; re-reading",
                     tp[0], tp[1], sorted(proposal.isr))
            role.leader.abandon_isr_change()
            return
        except Exception as exc:  # noqa: BLE001 - the store's failure: try again later
            log.warning("%s-%d: in-sync set change to %s not stored: %s", tp[0], tp[1],
                        sorted(proposal.isr), exc)
            role.leader.abandon_isr_change()
            return
        if self.leaders.get(tp) is not role:
            return
        try:
            moved = role.leader.apply_isr(proposal.isr, proposal.partition_epoch,
                                          self._time_ms())
        except (FencedPartitionEpochError, ValueError) as exc:
            log.warning("%s-%d: in-sync set change stored but not applied: %s", tp[0], tp[1],
                        exc)
            return
        role.record, role.version = changed, version
        if moved:
            self._hw_moved(tp, role)

    # -- roles from the store ------------------------------------------------------------

    async def apply(self, partitions: Mapping[TopicPartition, tuple[PartitionRecord, Versioned]],
                    brokers: Mapping[int, BrokerRecord], live: frozenset[int]) -> None:
        """Take up the role the store gives this node in each partition it replicates (whose
        local log exists), and give up the others."""
        self._live = live
        mine = {tp: state for tp, state in partitions.items()
                if self.node_id in state[0].replicas}
        for tp in [tp for tp in self.leaders if tp not in mine]:
            await self._resign(tp)
        for tp in [tp for tp in self._followers if tp not in mine]:
            await self._unfollow(tp)
            self._followers.pop(tp, None)
        for tp, (record, version) in mine.items():
            try:
                partition_log = self.manager.log(*tp)
            except UnknownTopicOrPartitionError:  # not created here yet: the node does first
                continue
            try:
                if record.leader == self.node_id:
                    await self._lead(tp, record, version, partition_log)
                else:
                    await self._follow(tp, record, brokers, partition_log)
            except Exception:
                log.exception("%s-%d: could not take up its role (%s)", tp[0], tp[1], record)
        for role in self.leaders.values():
            role.leader.set_live_brokers(live)

    async def _lead(self, tp: TopicPartition, record: PartitionRecord, version: Versioned,
                    partition_log: Log) -> None:
        role = self.leaders.get(tp)
        if role is not None and role.version == version:
            return
        now = self._time_ms()
        if role is not None and record.leader_epoch >= role.leader.leader_epoch:
            if record.leader_epoch > role.leader.leader_epoch:
                await self._blocking(lambda: _start_epoch(partition_log, record.leader_epoch))
                role.leader.leader_appended(partition_log.log_end_offset, now)
            try:
                moved = role.leader.update_partition(
                    replicas=record.replicas, isr=record.isr, leader_epoch=record.leader_epoch,
                    partition_epoch=record.partition_epoch, now_ms=now)
            except FencedPartitionEpochError:
                return  # a read older than this leader's own write
            epoch_changed = record.leader_epoch != role.record.leader_epoch
            role.record, role.version = record, version
            if moved:
                self._hw_moved(tp, role)
            if epoch_changed:
                await self._tell(tp, record.leader_epoch)
            return
        await self._unfollow(tp)
        self._followers.pop(tp, None)
        end, high_watermark = await self._blocking(
            lambda: _start_epoch(partition_log, record.leader_epoch))
        leader = PartitionLeader(
            tp[0], tp[1], leader_id=self.node_id, replicas=record.replicas, isr=record.isr,
            leader_epoch=record.leader_epoch, partition_epoch=record.partition_epoch,
            log_end_offset=end, high_watermark=min(high_watermark, end), now_ms=now,
            replica_lag_time_max_ms=self._lag_ms,
            min_insync_replicas=int(partition_log.config["min.insync.replicas"]))
        leader.set_live_brokers(self._live)
        role = LeaderRole(leader, record, version, partition_log)
        self.leaders[tp] = role
        log.info("%s-%d: node %d leads (leader epoch %d from offset %d, in-sync %s)", tp[0],
                 tp[1], self.node_id, record.leader_epoch, end, list(record.isr))
        if leader.high_watermark > partition_log.high_watermark:
            self._hw_moved(tp, role)
        else:  # the waiters of the partition check again against their new leader
            self._hw_moved_callback(tp)
        await self._tell(tp, record.leader_epoch)

    async def _resign(self, tp: TopicPartition) -> None:
        role = self.leaders.pop(tp, None)
        if role is not None:
            role.log.leader_epoch = None
            self._hw_moved_callback(tp)  # waiting acks=all produces answer NOT_LEADER
            await self._tell(tp, None)

    async def _follow(self, tp: TopicPartition, record: PartitionRecord,
                      brokers: Mapping[int, BrokerRecord], partition_log: Log) -> None:
        leader = brokers.get(record.leader) if record.leader != NO_LEADER else None
        address = None if leader is None else (leader.host, leader.port)
        wanted = _FollowerRole(record.leader, record.leader_epoch, address)
        if self._followers.get(tp) == wanted and tp not in self.leaders:
            return
        await self._resign(tp)
        await self._unfollow(tp)
        self._followers[tp] = wanted
        if leader is None or address is None:
            return
        fetching = self._fetching(record.leader, address)
        async with fetching.lock:
            fetching.fetcher.follow(FollowedPartition(tp[0], tp[1], partition_log,
                                                      record.leader_epoch))
        fetching.wake.set()
        log.info("%s-%d: node %d follows node %d (leader epoch %d)", tp[0], tp[1], self.node_id,
                 record.leader, record.leader_epoch)

    def _fetching(self, leader_id: int, address: tuple[str, int]) -> _Fetching:
        key = (leader_id, *address)
        fetching = self._fetchers.get(key)
        if fetching is None:
            settings = self.settings
            connection = BrokerConnection(
                address[0], address[1], client_id=f"tierlog-replica-{self.node_id}",
                timeout_s=settings.socket_timeout_ms / 1000,
                max_response_bytes=settings.fetch_response_max_bytes + (1 << 20),
                security=self.security)
            fetcher = LeaderFetcher(connection, self.node_id,
                                    max_wait_ms=settings.fetch_wait_max_ms,
                                    min_bytes=settings.fetch_min_bytes,
                                    max_bytes=settings.fetch_response_max_bytes,
                                    partition_max_bytes=settings.fetch_max_bytes)
            fetching = _Fetching(fetcher, settings.fetch_backoff_ms / 1000)
            self._fetchers[key] = fetching
        return fetching

    async def _unfollow(self, tp: TopicPartition) -> None:
        for fetching in self._fetchers.values():
            if tp in fetching.fetcher.partitions:
                async with fetching.lock:
                    fetching.fetcher.unfollow(*tp)

    async def close(self) -> None:
        """Stop every fetcher (the logs stay open: the LogManager closes them)."""
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        for fetching in fetchers:
            await fetching.close()
        for role in self.leaders.values():
            role.log.leader_epoch = None
        self.leaders.clear()
        self._followers.clear()


def _start_epoch(partition_log: Log, leader_epoch: int) -> tuple[int, int]:
    """A new leader's epoch: stamped on its appends from now on, and recorded in the
    leader-epoch cache as starting at the log end (Kafka's ``maybeAssignEpochStartOffset``).
    Returns the log end and the high watermark."""
    cache = partition_log.leader_epoch_cache
    latest = cache.latest_epoch
    if latest is None or leader_epoch > latest:
        cache.assign(leader_epoch, partition_log.log_end_offset)
    partition_log.leader_epoch = leader_epoch
    return partition_log.log_end_offset, partition_log.high_watermark
