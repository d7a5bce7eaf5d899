"""The leader's view of one partition's replicas (Kafka's ``Partition``, leader side): the
in-sync set (ISR), the high watermark, and the rules that move them, as pure logic.

No I/O, no threads, no clock of its own: every call that depends on time is given ``now_ms``.
The caller owns the log and the cluster store: it reports the leader's appends and its
followers' fetches here, and commits each proposed in-sync set change with a compare-and-swap
on the partition's object in the store, then applies it (:meth:`PartitionLeader.apply_isr`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.cluster.replica_state import (
    DEFAULT_REPLICA_LAG_TIME_MAX_MS,
    ReplicaState,
)
from tierlog.errors import (
    ConfigError,
    FencedPartitionEpochError,
    InvalidIsrError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)

__all__ = ["FetchOutcome", "IsrProposal", "PartitionLeader"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class IsrProposal:
    """An in-sync set change the leader wants, not committed yet (Kafka's ``PendingExpandIsr``
    and ``PendingShrinkIsr``)."""

    isr: frozenset[int]
    """The proposed in-sync set, leader included."""
    partition_epoch: int
    """The partition epoch it was proposed against: the store's compare-and-swap expects this
    epoch and writes the next one."""
    added: frozenset[int]
    """The follower that joins (an expansion adds one at a time), or nothing."""
    removed: frozenset[int]
    """The followers that leave (a shrink), or nothing."""


@dataclass(frozen=True, slots=True)
class FetchOutcome:
    """What a follower's fetch changed."""

    high_watermark_moved: bool
    """The high watermark advanced: delayed ``acks=all`` produces may complete."""
    proposal: IsrProposal | None
    """The follower caught up and should join the in-sync set: commit this change."""


def _names(ids: Iterable[int]) -> str:
    return "[" + ",".join(str(i) for i in sorted(ids)) + "]"


class PartitionLeader:
    """The replication state a partition's leader keeps. Not thread-safe: its owner calls it
    under one lock, as Kafka's ``Partition`` does under ``leaderIsrUpdateLock``.

    The rules, as Kafka 3.x/4.0's ``Partition`` and ``Replica``:

    - A follower's log end offset is the offset of its latest fetch; it is *caught up* while
      it reaches the leader's log end offset at least every ``replica.lag.time.max.ms``.
    - The high watermark is the smallest log end offset of the maximal in-sync set (committed
      members plus one whose expansion is in flight, KIP-497) and of the live followers that
      are caught up but not in the set yet (so one catching up is waited for instead of being
      outrun), capped by the leader's own; it never moves backwards, and it does not move
      while the committed set is smaller than ``min.insync.replicas`` (KIP-966).
    - An in-sync follower not caught up for more than ``replica.lag.time.max.ms`` is proposed
      for removal; a live follower outside the set whose log end offset reaches the high
      watermark and the start of the leader's epoch is proposed for addition. One change is
      in flight at a time, and it counts only once applied at the epoch it was proposed at.
    """

    def __init__(self, topic: str, partition: int, *, leader_id: int,
                 replicas: Iterable[int], isr: Iterable[int], leader_epoch: int,
                 partition_epoch: int, log_end_offset: int, high_watermark: int, now_ms: int,
                 replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS,
                 min_insync_replicas: int = 1) -> None:
        """Become the leader (Kafka's ``makeLeader`` of a new leader): the new leader epoch
        starts at the leader's ``log_end_offset``; followers' end offsets are unknown until
        they fetch; ``high_watermark`` is the log's (its checkpoint)."""
        self.topic = topic
        self.partition = partition
        self.leader_id = leader_id
        if not 0 <= high_watermark <= log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self._name}: high watermark {high_watermark} is outside [0, log end offset "
                f"{log_end_offset}]")
        if replica_lag_time_max_ms < 0:
            raise ConfigError("replica.lag.time.max.ms",
                              f"must be >= 0, got {replica_lag_time_max_ms}")
        if min_insync_replicas < 1:
            raise ConfigError("min.insync.replicas", f"must be >= 1, got {min_insync_replicas}")
        self.replica_lag_time_max_ms = replica_lag_time_max_ms
        self.min_insync_replicas = min_insync_replicas
        self._replicas, self._isr = self._checked(replicas, isr)
        self._leader_epoch = leader_epoch
        self._partition_epoch = partition_epoch
        self._log_end_offset = log_end_offset
        self._epoch_start_offset = log_end_offset
        self._high_watermark = high_watermark
        self._pending: IsrProposal | None = None
        self._live: frozenset[int] = frozenset(self._replicas)
        self._followers = {r: ReplicaState.for_new_leader(r in self._isr, now_ms)
                           for r in self._replicas if r != leader_id}
        self.maybe_increment_high_watermark(now_ms)

    @property
    def _name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _checked(self, replicas: Iterable[int],
                 isr: Iterable[int]) -> tuple[tuple[int, ...], frozenset[int]]:
        replica_list = tuple(replicas)
        isr_set = frozenset(isr)
        if len(set(replica_list)) != len(replica_list) or self.leader_id not in replica_list:
            raise InvalidIsrError(f"{self._name}: replicas {list(replica_list)} must be distinct "
                                  f"and include the leader {self.leader_id}")
        self._check_isr(isr_set, replica_list)
        return replica_list, isr_set

    def _check_isr(self, isr: frozenset[int], replicas: tuple[int, ...]) -> None:
        if self.leader_id not in isr or not isr <= set(replicas):
            raise InvalidIsrError(f"{self._name}: in-sync set {_names(isr)} must include the "
                                  f"leader {self.leader_id} and only replicas {list(replicas)}")

    # --- what the leader knows ------------------------------------------------------------

    @property
    def replicas(self) -> tuple[int, ...]:
        """The partition's replicas (broker ids), leader included."""
        return self._replicas

    @property
    def isr(self) -> frozenset[int]:
        """The committed in-sync set, leader included."""
        return self._isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        """The committed set plus a follower whose expansion is in flight (KIP-497): the set
        the high watermark and ``acks=all`` wait for. Adding a member early only makes them
        stricter; removing one early could not be undone, so a shrink counts once applied."""
        if self._pending is not None and self._pending.added:
            return self._isr | self._pending.added
        return self._isr

    @property
    def pending(self) -> IsrProposal | None:
        """The in-sync set change in flight, if any."""
        return self._pending

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @property
    def partition_epoch(self) -> int:
        """The version of the partition's leader and in-sync set; every change bumps it."""
        return self._partition_epoch

    @property
    def log_end_offset(self) -> int:
        """The leader's log end offset."""
        return self._log_end_offset

    @property
    def leader_epoch_start_offset(self) -> int:
        """The leader's log end offset when its current leader epoch began."""
        return self._epoch_start_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def follower(self, replica_id: int) -> ReplicaState:
        """What the leader knows of follower ``replica_id``."""
        try:
            return self._followers[replica_id]
        except KeyError:
            raise NotLeaderOrFollowerError(
                f"{self._name}: broker {replica_id} is not a follower (replicas "
                f"{list(self._replicas)}, leader {self.leader_id})") from None

    def set_live_brokers(self, broker_ids: Iterable[int]) -> None:
        """The brokers the cluster store holds alive: only those may join the in-sync set or
        hold the high watermark back while catching up."""
        self._live = frozenset(broker_ids)

    # --- appends and fetches --------------------------------------------------------------

    def leader_appended(self, log_end_offset: int, now_ms: int) -> bool:
        """The leader's log now ends at ``log_end_offset``; whether the high watermark moved
        (it does at once when the leader is the only member of the in-sync set)."""
        if log_end_offset < self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self._name}: the leader's log end offset cannot go back from "
                f"{self._log_end_offset} to {log_end_offset}")
        self._log_end_offset = log_end_offset
        return self.maybe_increment_high_watermark(now_ms)

    def follower_fetched(self, replica_id: int, fetch_offset: int, leader_leo_at_fetch: int,
                         now_ms: int) -> FetchOutcome:
        """Follower ``replica_id`` fetched at ``fetch_offset`` (its log end offset), received
        at ``now_ms`` when the leader's log ended at ``leader_leo_at_fetch``. Records it,
        proposes the follower for the in-sync set when it qualifies, and moves the high
        watermark (Kafka's ``updateFollowerFetchState``)."""
        state = self.follower(replica_id)
        if not 0 <= fetch_offset <= leader_leo_at_fetch <= self._log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self._name}: fetch by broker {replica_id} at offset {fetch_offset} with the "
                f"leader's log end offset {leader_leo_at_fetch} at the fetch (now "
                f"{self._log_end_offset}): needs 0 <= fetch offset <= that <= now")
        self._followers[replica_id] = state.fetched(fetch_offset, leader_leo_at_fetch, now_ms)
        proposal = self.propose_isr_expand(replica_id)
        moved = (state.log_end_offset != fetch_offset
                 and self.maybe_increment_high_watermark(now_ms))
        return FetchOutcome(moved, proposal)

    # --- the high watermark and acks=all --------------------------------------------------

    def _effective_min_isr(self) -> int:
        # A min.insync.replicas above the replication factor cannot be met; Kafka caps it.
        return min(self.min_insync_replicas, len(self._replicas))

    def maybe_increment_high_watermark(self, now_ms: int) -> bool:
        """Move the high watermark to the smallest log end offset of the maximal in-sync set
        and of the live, caught-up followers outside it, never backwards, and not while the
        committed in-sync set is under ``min.insync.replicas``; whether it moved."""
        if len(self._isr) < self._effective_min_isr():
            return False
        maximal = self.maximal_isr
        new_high_watermark = self._log_end_offset
        for replica_id, state in self._followers.items():
            if state.log_end_offset < new_high_watermark and (
                    replica_id in maximal
                    or (replica_id in self._live and state.is_caught_up(
                        self._log_end_offset, now_ms, self.replica_lag_time_max_ms))):
                new_high_watermark = state.log_end_offset
        if new_high_watermark <= self._high_watermark:
            return False
        logger.debug("%s: high watermark %d -> %d", self._name, self._high_watermark,
                     new_high_watermark)
        self._high_watermark = new_high_watermark
        return True

    def check_min_isr(self) -> None:
        """Before an ``acks=all`` append: NotEnoughReplicasError when the committed in-sync set
        is smaller than ``min.insync.replicas`` (capped by the replication factor)."""
        if len(self._isr) < self._effective_min_isr():
            raise NotEnoughReplicasError(
                f"{self._name}: in-sync set {_names(self._isr)} is smaller than "
                f"min.insync.replicas={self.min_insync_replicas}")

    def acks_all_satisfied(self, required_offset: int) -> bool:
        """Whether an ``acks=all`` produce whose last offset is ``required_offset - 1`` is
        answered: the high watermark reached ``required_offset``, so every member of the
        maximal in-sync set holds it. NotEnoughReplicasAfterAppendError when it did but the set
        has shrunk under ``min.insync.replicas`` meanwhile (Kafka's
        ``checkEnoughReplicasReachOffset``)."""
        if self._high_watermark < required_offset:
            return False
        if len(self.maximal_isr) < self._effective_min_isr():
            raise NotEnoughReplicasAfterAppendError(
                f"{self._name}: offsets below {required_offset} are replicated, but the in-sync "
                f"set {_names(self.maximal_isr)} is smaller than "
                f"min.insync.replicas={self.min_insync_replicas}")
        return True

    # --- in-sync set changes --------------------------------------------------------------

    def out_of_sync_replicas(self, now_ms: int) -> frozenset[int]:
        """In-sync followers not caught up for more than ``replica.lag.time.max.ms``; none
        while a change is in flight."""
        if self._pending is not None:
            return frozenset()
        return frozenset(
            r for r in self._isr - {self.leader_id}
            if not self._followers[r].is_caught_up(self._log_end_offset, now_ms,
                                                   self.replica_lag_time_max_ms))

    def propose_isr_shrink(self, now_ms: int) -> IsrProposal | None:
        """Propose removing the out-of-sync followers (Kafka's ``maybeShrinkIsr``, which a
        broker runs every ``replica.lag.time.max.ms / 2``); None when there are none or a
        change is in flight. The high watermark keeps waiting for them until it is applied."""
        out = self.out_of_sync_replicas(now_ms)
        if not out:
            return None
        self._pending = IsrProposal(self._isr - out, self._partition_epoch, frozenset(), out)
        logger.info("%s: proposing to shrink the in-sync set from %s to %s (high watermark %d, "
                    "log end offset %d; out of sync: %s)", self._name, _names(self._isr),
                    _names(self._pending.isr), self._high_watermark, self._log_end_offset,
                    ", ".join(f"{r} at {self._followers[r].log_end_offset} caught up at "
                              f"{self._followers[r].last_caught_up_time_ms}"
                              for r in sorted(out)))
        return self._pending

    def can_join_isr(self, replica_id: int) -> bool:
        """Whether follower ``replica_id`` qualifies for the in-sync set: no change in flight,
        not a member, alive, and its log end offset reaches the high watermark and the start
        of the leader's epoch (so a follower cannot join, and later lead, without the
        committed data of this epoch; Kafka's ``isFollowerInSync``)."""
        end = self.follower(replica_id).log_end_offset
        return (self._pending is None and replica_id not in self._isr
                and replica_id in self._live
                and end >= self._high_watermark and end >= self._epoch_start_offset)

    def propose_isr_expand(self, replica_id: int) -> IsrProposal | None:
        """Propose adding follower ``replica_id`` when :meth:`can_join_isr`; from now on the
        high watermark and ``acks=all`` wait for it too (the maximal in-sync set)."""
        if not self.can_join_isr(replica_id):
            return None
        added = frozenset({replica_id})
        self._pending = IsrProposal(self._isr | added, self._partition_epoch, added, frozenset())
        logger.info("%s: proposing to expand the in-sync set from %s to %s", self._name,
                    _names(self._isr), _names(self._pending.isr))
        return self._pending

    def apply_isr(self, isr: Iterable[int], partition_epoch: int, now_ms: int) -> bool:
        """The store committed the change in flight, ``isr`` proposed at ``partition_epoch``:
        it becomes the in-sync set and the partition epoch moves to the next; whether the high
        watermark moved. FencedPartitionEpochError when ``partition_epoch`` is not the
        partition's (a change made against an older state), InvalidIsrError when ``isr`` is
        not the change in flight; neither changes anything."""
        isr_set = frozenset(isr)
        if partition_epoch != self._partition_epoch:
            raise FencedPartitionEpochError(
                f"{self._name}: in-sync set {_names(isr_set)} was proposed at partition epoch "
                f"{partition_epoch}, but the partition is at epoch {self._partition_epoch}",
                expected=self._partition_epoch, found=partition_epoch)
        if self._pending is None or self._pending.isr != isr_set:
            in_flight = "none" if self._pending is None else _names(self._pending.isr)
            raise InvalidIsrError(f"{self._name}: in-sync set {_names(isr_set)} is not the "
                                  f"change in flight ({in_flight})")
        self._isr = isr_set
        self._partition_epoch += 1
        self._pending = None
        logger.info("%s: in-sync set is now %s at partition epoch %d", self._name,
                    _names(isr_set), self._partition_epoch)
        return self.maybe_increment_high_watermark(now_ms)

    def abandon_isr_change(self) -> None:
        """The change in flight was certainly not stored (its compare-and-swap lost): back to
        the committed state, so the rules may propose again."""
        self._pending = None

    def update_partition(self, *, replicas: Iterable[int], isr: Iterable[int],
                         leader_epoch: int, partition_epoch: int, now_ms: int) -> bool:
        """The controller's new state of the partition, this broker still its leader (Kafka's
        ``makeLeader`` of a current leader): replaces the replicas and the in-sync set and drops
        any change in flight. A higher ``leader_epoch`` starts a new epoch at the leader's log
        end offset and restarts the followers' caught-up clocks; a lower one is ignored, as
        Kafka does. FencedPartitionEpochError for a ``partition_epoch`` older than the
        partition's. Whether the high watermark moved."""
        if partition_epoch < self._partition_epoch:
            raise FencedPartitionEpochError(
                f"{self._name}: the update at partition epoch {partition_epoch} is older than "
                f"the partition's epoch {self._partition_epoch}",
                expected=self._partition_epoch, found=partition_epoch)
        self._replicas, self._isr = self._checked(replicas, isr)
        followers = {r: self._followers.get(r, ReplicaState())
                     for r in self._replicas if r != self.leader_id}
        if leader_epoch > self._leader_epoch:
            self._leader_epoch = leader_epoch
            self._epoch_start_offset = self._log_end_offset
            followers = {r: s.for_new_leader_epoch(r in self._isr, self._log_end_offset, now_ms)
                         for r, s in followers.items()}
        self._followers = followers
        self._partition_epoch = partition_epoch
        self._pending = None
        return self.maybe_increment_high_watermark(now_ms)

    def __repr__(self) -> str:
        return (f"PartitionLeader({self._name}, leader={self.leader_id}, "
                f"leader_epoch={self._leader_epoch}, partition_epoch={self._partition_epoch}, "
                f"isr={_names(self._isr)}, pending={self._pending}, "
                f"hw={self._high_watermark}, leo={self._log_end_offset})")

