"""PartitionLeader, rule by rule: the high watermark is the smallest log end offset of the
in-sync set and never moves back; a follower leaves the set once it lags more than
replica.lag.time.max.ms and rejoins at the high watermark and the epoch's start; a change counts
only when applied at its partition epoch; acks=all waits for every in-sync member; fewer members
than min.insync.replicas refuses. The model test (test_partition_leader_model) checks the same
rules over random histories."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from tierlog.cluster.partition_leader import FetchOutcome, PartitionLeader
from tierlog.errors import (
    ConfigError,
    FencedPartitionEpochError,
    InvalidIsrError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
)
from tierlog.manager.manager_config import ManagerConfig

LAG = 30_000


def leader(*, isr: Iterable[int] = (1, 2, 3), log_end_offset: int = 0, high_watermark: int = 0,
           min_isr: int = 1, now_ms: int = 0) -> PartitionLeader:
    """Broker 1 leading orders-0 on brokers 1, 2 and 3, at leader and partition epoch 0."""
    return PartitionLeader("orders", 0, leader_id=1, replicas=(1, 2, 3), isr=isr, leader_epoch=0,
                           partition_epoch=0, log_end_offset=log_end_offset,
                           high_watermark=high_watermark, now_ms=now_ms,
                           replica_lag_time_max_ms=LAG, min_insync_replicas=min_isr)


def test_high_watermark_is_the_smallest_end_offset_of_the_isr() -> None:
    p = leader()
    assert not p.leader_appended(10, 1)  # the followers' ends are unknown yet
    assert not p.follower_fetched(2, 7, 10, 2).high_watermark_moved
    assert p.high_watermark == 0
    assert p.follower_fetched(3, 4, 10, 3).high_watermark_moved
    assert p.high_watermark == 4
    p.follower_fetched(3, 9, 10, 4)
    assert p.high_watermark == 7  # follower 2 is the smallest now
    p.follower_fetched(2, 10, 10, 5)
    p.follower_fetched(3, 10, 10, 6)
    assert p.high_watermark == 10  # capped by the leader's end


def test_a_lone_leader_moves_the_high_watermark_on_append() -> None:
    p = leader(isr=(1,))
    assert p.leader_appended(5, 1)
    assert p.high_watermark == 5


def test_high_watermark_never_moves_back() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    p.follower_fetched(2, 10, 10, 1)
    p.follower_fetched(3, 10, 10, 1)
    p.leader_appended(20, 2)
    p.follower_fetched(2, 20, 20, 3)
    p.follower_fetched(3, 15, 20, 3)
    assert p.high_watermark == 15
    # The controller puts a fresh replica's set in place: follower 3 is behind the mark, and
    # a new leader epoch forgets nothing of the followers' ends; the mark stays.
    assert not p.update_partition(replicas=(1, 2, 3), isr=(1, 2, 3), leader_epoch=1,
                                  partition_epoch=1, now_ms=4)
    assert p.high_watermark == 15


def test_a_lagging_follower_leaves_after_exactly_the_lag_and_not_before() -> None:
    p = leader(log_end_offset=10, high_watermark=10, now_ms=0)
    p.follower_fetched(2, 10, 10, 1_000)  # caught up at 1000
    p.leader_appended(20, 2_000)  # follower 3 never fetches: caught up at 0 (the election)
    assert p.out_of_sync_replicas(LAG) == frozenset()
    assert p.propose_isr_shrink(LAG) is None
    assert p.out_of_sync_replicas(LAG + 1) == {3}
    assert p.out_of_sync_replicas(1_000 + LAG) == {3}
    assert p.out_of_sync_replicas(1_000 + LAG + 1) == {2, 3}
    proposal = p.propose_isr_shrink(LAG + 1)
    assert proposal is not None
    assert (proposal.isr, proposal.removed, proposal.partition_epoch) == ({1, 2}, {3}, 0)
    assert p.out_of_sync_replicas(1_000 + LAG + 1) == frozenset()  # one change at a time


def test_a_follower_at_the_leaders_end_never_lags() -> None:
    p = leader(isr=(1, 2), log_end_offset=10, high_watermark=10)
    p.follower_fetched(2, 10, 10, 1)
    assert p.out_of_sync_replicas(100 * LAG) == frozenset()


def test_shrunk_follower_still_holds_the_high_watermark_until_applied() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    p.follower_fetched(2, 10, 10, 1)
    p.follower_fetched(3, 10, 10, 1)
    p.leader_appended(20, 2)
    p.follower_fetched(2, 20, 20, 3)
    proposal = p.propose_isr_shrink(LAG + 10)
    assert proposal is not None and proposal.removed == {3}
    assert p.high_watermark == 10  # a shrink that might fail must not let the mark pass 3
    assert p.apply_isr(proposal.isr, proposal.partition_epoch, LAG + 11)
    assert (p.isr, p.partition_epoch, p.high_watermark) == ({1, 2}, 1, 20)


def test_a_follower_rejoins_at_the_high_watermark_and_the_epoch_start() -> None:
    # A new leader at end 10 whose high watermark is 5: follower 3, out of the set, must reach
    # both the mark and 10 (the epoch's start) before it may join.
    p = leader(isr=(1, 2), log_end_offset=10, high_watermark=5)
    p.follower_fetched(2, 10, 10, 1)
    assert p.high_watermark == 10
    p.leader_appended(12, 2)
    p.follower_fetched(2, 12, 12, 2)
    assert p.follower_fetched(3, 9, 12, 3).proposal is None  # below both
    p.set_live_brokers((1, 2))
    assert p.follower_fetched(3, 12, 12, 4).proposal is None  # caught up, but not alive
    p.set_live_brokers((1, 2, 3))
    p.leader_appended(14, 5)
    outcome = p.follower_fetched(3, 13, 14, 6)
    proposal = outcome.proposal
    assert proposal is not None and proposal.added == {3} and proposal.isr == {1, 2, 3}
    # While the expansion is in flight the mark waits for follower 3 too (the maximal set).
    assert p.maximal_isr == {1, 2, 3} and p.isr == {1, 2}
    p.follower_fetched(2, 14, 14, 7)
    assert p.high_watermark == 13
    assert not p.apply_isr({1, 2, 3}, 0, 8)
    assert (p.isr, p.pending, p.partition_epoch) == ({1, 2, 3}, None, 1)


def test_below_the_epoch_start_a_follower_cannot_join() -> None:
    p = leader(isr=(1, 2), log_end_offset=10, high_watermark=5)
    assert p.follower_fetched(3, 7, 10, 1).proposal is None  # >= the mark, < the epoch start
    assert p.follower_fetched(3, 10, 10, 2).proposal is not None


def test_a_caught_up_follower_outside_the_isr_holds_the_high_watermark() -> None:
    # Kafka waits for a live follower that is caught up but not in the set yet, so that the
    # leader does not outrun it (it would never reach the mark and join).
    p = leader(isr=(1,), log_end_offset=10, high_watermark=10)
    p.follower_fetched(2, 10, 10, 1)
    p.abandon_isr_change()
    p.leader_appended(20, 2)
    assert p.high_watermark == 10
    p.set_live_brokers((1, 3))  # a dead follower is not waited for
    assert p.leader_appended(21, 3)
    assert p.high_watermark == 21


def test_a_stale_partition_epoch_is_refused_and_changes_nothing() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    p.follower_fetched(2, 10, 10, 1)
    proposal = p.propose_isr_shrink(LAG + 1)
    assert proposal is not None and proposal.partition_epoch == 0
    # The controller changed the partition meanwhile (follower 3 fenced): epoch 1.
    p.update_partition(replicas=(1, 2, 3), isr=(1, 2), leader_epoch=0, partition_epoch=1,
                       now_ms=LAG + 2)
    with pytest.raises(FencedPartitionEpochError, match=r"orders-0.*epoch 0.*epoch 1") as e:
        p.apply_isr(proposal.isr, proposal.partition_epoch, LAG + 3)
    assert (e.value.expected, e.value.found) == (1, 0)
    assert (p.isr, p.partition_epoch, p.pending) == ({1, 2}, 1, None)
    with pytest.raises(FencedPartitionEpochError):
        p.update_partition(replicas=(1, 2, 3), isr=(1, 2, 3), leader_epoch=0,
                           partition_epoch=0, now_ms=LAG + 4)
    assert p.isr == {1, 2}


def test_an_applied_change_cannot_be_applied_twice() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    proposal = p.propose_isr_shrink(LAG + 1)
    assert proposal is not None
    p.apply_isr(proposal.isr, 0, LAG + 2)
    with pytest.raises(FencedPartitionEpochError):
        p.apply_isr(proposal.isr, 0, LAG + 3)
    with pytest.raises(InvalidIsrError, match=r"\[1\] is not the change in flight \(none\)"):
        p.apply_isr({1}, 1, LAG + 3)
    assert (p.isr, p.partition_epoch) == ({1}, 1)


def test_an_abandoned_change_lets_the_rules_propose_again() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    first = p.propose_isr_shrink(LAG + 1)
    assert first is not None and p.propose_isr_shrink(LAG + 1) is None
    p.abandon_isr_change()
    assert p.pending is None and p.isr == {1, 2, 3}
    assert p.propose_isr_shrink(LAG + 1) == first


def test_acks_all_waits_for_every_isr_member() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    p.follower_fetched(2, 10, 10, 1)
    p.follower_fetched(3, 10, 10, 1)
    p.check_min_isr()
    p.leader_appended(15, 2)  # a batch at offsets 10..14
    assert not p.acks_all_satisfied(15)
    assert p.follower_fetched(2, 15, 15, 3) == FetchOutcome(False, None)
    assert not p.acks_all_satisfied(15)
    assert p.follower_fetched(3, 15, 15, 4).high_watermark_moved
    assert p.acks_all_satisfied(15)


def test_fewer_isr_than_min_insync_replicas_refuses() -> None:
    p = leader(isr=(1,), log_end_offset=10, high_watermark=10, min_isr=2)
    with pytest.raises(NotEnoughReplicasError, match=r"orders-0.*\[1\].*min.insync.replicas=2"):
        p.check_min_isr()
    # Under the minimum the high watermark does not move either (KIP-966).
    assert not p.leader_appended(12, 1)
    assert p.high_watermark == 10


def test_min_insync_replicas_above_the_replication_factor_is_capped() -> None:
    p = leader(log_end_offset=10, high_watermark=10, min_isr=5)
    p.check_min_isr()  # three replicas, all in sync: the most there can be


def test_an_isr_shrunk_under_the_minimum_after_the_append_is_reported() -> None:
    p = leader(log_end_offset=10, high_watermark=10, min_isr=2)
    p.follower_fetched(2, 10, 10, 1)
    p.follower_fetched(3, 10, 10, 1)
    p.check_min_isr()
    p.leader_appended(11, 2)
    p.follower_fetched(2, 11, 11, 3)
    p.follower_fetched(3, 11, 11, 3)
    assert p.acks_all_satisfied(11)
    p.leader_appended(12, 4)  # the next batch; then both followers stop fetching
    proposal = p.propose_isr_shrink(10 * LAG)
    assert proposal is not None and proposal.isr == {1}
    p.apply_isr(proposal.isr, proposal.partition_epoch, 10 * LAG)
    with pytest.raises(NotEnoughReplicasAfterAppendError, match="orders-0"):
        p.acks_all_satisfied(11)


def test_bad_input_is_refused_naming_it() -> None:
    p = leader(log_end_offset=10, high_watermark=10)
    with pytest.raises(NotLeaderOrFollowerError, match="broker 7 is not a follower"):
        p.follower_fetched(7, 0, 10, 1)
    with pytest.raises(NotLeaderOrFollowerError, match="broker 1"):
        p.follower_fetched(1, 0, 10, 1)  # the leader does not fetch from itself
    with pytest.raises(OffsetOutOfRangeError, match="broker 2 at offset 11"):
        p.follower_fetched(2, 11, 10, 1)
    with pytest.raises(OffsetOutOfRangeError, match="end offset 12"):
        p.follower_fetched(2, 5, 12, 1)  # the leader never had end 12
    with pytest.raises(OffsetOutOfRangeError, match="from 10 to 9"):
        p.leader_appended(9, 1)
    with pytest.raises(InvalidIsrError, match=r"\[2,3\] must include the leader 1"):
        p.update_partition(replicas=(1, 2, 3), isr=(2, 3), leader_epoch=0, partition_epoch=1,
                           now_ms=1)
    with pytest.raises(InvalidIsrError, match="only replicas"):
        leader(isr=(1, 4))
    with pytest.raises(OffsetOutOfRangeError, match="high watermark 11"):
        leader(log_end_offset=10, high_watermark=11)
    with pytest.raises(ConfigError, match=r"min\.insync\.replicas"):
        leader(min_isr=0)
    assert p.follower(2).log_end_offset == -1  # nothing recorded by the refused calls


def test_the_broker_reads_replica_lag_time_max_ms_with_kafkas_default() -> None:
    assert ManagerConfig()["replica.lag.time.max.ms"] == LAG
    assert ManagerConfig({"replica.lag.time.max.ms": "10000"})["replica.lag.time.max.ms"] == 10_000
    with pytest.raises(ConfigError, match=r"replica\.lag\.time\.max\.ms"):
        ManagerConfig({"replica.lag.time.max.ms": "-1"})
