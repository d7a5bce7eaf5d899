"""What a partition's leader knows of one follower (Kafka's ``ReplicaState``): its log end
offset, learnt from its fetches, and the last time it was caught up with the leader.

Pure values: each fetch makes a new :class:`ReplicaState`; times are milliseconds passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_REPLICA_LAG_TIME_MAX_MS", "NEVER_MS", "UNKNOWN_OFFSET", "ReplicaState"]

#: Kafka's default ``replica.lag.time.max.ms``: a follower not caught up with the leader's log
#: end offset for longer than this leaves the in-sync set.
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
#: A follower's log end offset before its first fetch to this leader (Kafka's UnknownOffset).
UNKNOWN_OFFSET = -1
#: "Never" as a time: Kafka writes 0, which on its wall clock is long ago; here clocks are
#: passed in and may start at 0 (a monotonic clock, a test's), so never is older than any.
NEVER_MS = -(1 << 62)


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """The leader's record of one follower. Immutable; thread-safe."""

    log_end_offset: int = UNKNOWN_OFFSET
    """The follower's log end offset: the offset of its last fetch (UNKNOWN_OFFSET before)."""
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    """The leader's log end offset when the follower's previous fetch was received."""
    last_fetch_time_ms: int = NEVER_MS
    """When the follower's previous fetch was received."""
    last_caught_up_time_ms: int = NEVER_MS
    """The latest time t such that the follower's latest fetch offset reached the leader's log
    end offset at time t: how long it has lagged, hence whether it stays in the in-sync set."""

    @classmethod
    def for_new_leader(cls, in_sync: bool, now_ms: int) -> ReplicaState:
        """The state a newly elected leader starts from: the follower's end offset unknown, and
        caught up now if it is in the in-sync set (so it is not dropped before it can fetch),
        never otherwise (so it does not hold the high watermark back)."""
        return cls(last_caught_up_time_ms=now_ms if in_sync else NEVER_MS)

    def for_new_leader_epoch(self, in_sync: bool, epoch_start_offset: int,
                             now_ms: int) -> ReplicaState:
        """The state when the same leader starts a new leader epoch: the follower's end offset
        is kept; its fetch and caught-up times restart as :meth:`for_new_leader`'s."""
        return ReplicaState(
            log_end_offset=self.log_end_offset,
            last_fetch_leader_log_end_offset=epoch_start_offset,
            last_fetch_time_ms=now_ms if in_sync else NEVER_MS,
            last_caught_up_time_ms=now_ms if in_sync else NEVER_MS)

    def fetched(self, fetch_offset: int, leader_log_end_offset: int,
                fetch_time_ms: int) -> ReplicaState:
        """The state after a fetch at ``fetch_offset`` received at ``fetch_time_ms``, when the
        leader's log end offset was ``leader_log_end_offset``.

        The follower was caught up at this fetch's time if it fetched at the leader's end, or
        else at the previous fetch's time if it fetched at the leader's end as of then: so a
        follower that always trails a stream of small appends by one fetch still counts as
        caught up (Kafka's ``Replica.updateFetchStateOrThrow``)."""
        if fetch_offset >= leader_log_end_offset:
            caught_up = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            caught_up = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        else:
            caught_up = self.last_caught_up_time_ms
        return ReplicaState(
            log_end_offset=fetch_offset,
            last_fetch_leader_log_end_offset=max(leader_log_end_offset,
                                                 self.last_fetch_leader_log_end_offset),
            last_fetch_time_ms=fetch_time_ms,
            last_caught_up_time_ms=caught_up)

    def is_caught_up(self, leader_log_end_offset: int, now_ms: int,
                     replica_lag_time_max_ms: int) -> bool:
        """Whether the follower is at the leader's end, or was caught up at most
        ``replica_lag_time_max_ms`` ago (so it is dropped only once the lag is exceeded)."""
        return (self.log_end_offset == leader_log_end_offset
                or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms)
