"""The controller's pure rules (tierlog.cluster.controller_rules): Kafka's round-robin replica
assignment (its own documented example), and a partition's state after brokers die or return,
checked against its invariants for every state and live set hypothesis draws: the in-sync set
only shrinks and is never emptied, the leader is a live in-sync replica or none, a live in-sync
replica is always elected (never an out-of-sync one), each change bumps the partition epoch by
one and the leader epoch exactly when the leader changes, and the rule is idempotent."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.cluster.controller_rules import (
    assign_replicas,
    elect,
    new_partition,
    on_brokers_changed,
)
from tierlog.cluster.keys import NO_LEADER, PartitionRecord
from tierlog.errors import CorruptRemoteMetadataError, InvalidReplicationFactorError


def test_assignment_follows_kafkas_documented_example() -> None:
    # Kafka's AdminUtils/ReplicaAssignment example: 5 brokers, 10 partitions, 3 replicas,
    # start 0, shift 0: p0 on 0,1,2 ... p5 wraps with the shift grown by one.
    got = assign_replicas([4, 2, 0, 3, 1], 10, 3)
    assert got[0] == (0, 1, 2) and got[4] == (4, 0, 1)
    assert got[5] == (0, 2, 3) and got[8] == (3, 0, 1) and got[9] == (4, 1, 2)
    assert Counter(r[0] for r in got) == dict.fromkeys(range(5), 2)  # leaders spread evenly


@given(st.sets(st.integers(0, 50), min_size=1, max_size=7), st.integers(1, 30),
       st.data())
def test_every_assignment_is_distinct_replicas_of_live_brokers(brokers: set[int],
                                                               partitions: int,
                                                               data: st.DataObject) -> None:
    rf = data.draw(st.integers(1, len(brokers)))
    start = data.draw(st.integers(0, 100))
    got = assign_replicas(brokers, partitions, rf, start=start)
    assert len(got) == partitions
    for replicas in got:
        assert len(replicas) == rf == len(set(replicas)) and set(replicas) <= brokers
    leaders = Counter(r[0] for r in got)
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1


def test_a_replication_factor_above_the_live_brokers_is_refused() -> None:
    with pytest.raises(InvalidReplicationFactorError, match=r"3 .* 2 live brokers \[1, 2\]"):
        assign_replicas([1, 2], 1, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([1, 2], 1, 0)


def test_a_dead_leader_is_replaced_by_the_first_live_in_sync_replica() -> None:
    state = new_partition([1, 2, 3])
    after = on_brokers_changed(state, {2, 3})
    assert (after.leader, after.isr, after.leader_epoch, after.partition_epoch) == (
        2, (2, 3), 1, 1)
    # Only an out-of-sync replica left alive: no unclean election; the ISR keeps its last.
    lone = PartitionRecord((1, 2, 3), (1,), 1, 4, 9)
    offline = on_brokers_changed(lone, {2, 3})
    assert (offline.leader, offline.isr, offline.leader_epoch, offline.partition_epoch) == (
        NO_LEADER, (1,), 5, 10)
    back = on_brokers_changed(offline, {1, 2, 3})  # the last in-sync replica returns
    assert (back.leader, back.isr, back.leader_epoch) == (1, (1,), 6)
    assert elect(back, {1}) is back


def test_a_stored_partition_state_is_checked() -> None:
    good = new_partition([1, 2]).to_value()
    assert PartitionRecord.from_value("partitions/t_x/0", good) == new_partition([1, 2])
    for broken in ({**good, "isr": []}, {**good, "leader": 3}, {**good, "replicas": [1, 1]},
                   {**good, "isr": [True]}, {k: v for k, v in good.items() if k != "leader"}):
        with pytest.raises(CorruptRemoteMetadataError, match="partitions/t_x/0"):
            PartitionRecord.from_value("partitions/t_x/0", broken)


@st.composite
def states(draw: st.DrawFn) -> PartitionRecord:
    replicas = draw(st.lists(st.integers(0, 6), min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), min_size=1, unique=True))
    leader = draw(st.sampled_from([*isr, NO_LEADER]))
    return PartitionRecord(tuple(replicas), tuple(isr), leader, draw(st.integers(0, 99)),
                           draw(st.integers(0, 99)))


@given(states(), st.sets(st.integers(0, 6)))
def test_a_partition_after_brokers_change_keeps_kafkas_invariants(state: PartitionRecord,
                                                                   live: set[int]) -> None:
    after = on_brokers_changed(state, live)
    assert after.problem() is None and after.replicas == state.replicas
    assert set(after.isr) <= set(state.isr)  # the controller only shrinks the in-sync set
    assert after.leader == NO_LEADER or (after.leader in after.isr and after.leader in live)
    if set(state.isr) & live:
        assert after.leader != NO_LEADER and set(after.isr) == set(state.isr) & live
        if state.leader in live and state.leader in state.isr:
            assert after.leader == state.leader  # a live leader keeps its partition
        else:  # the first live in-sync replica in preference order
            assert after.leader == next(r for r in state.replicas
                                        if r in state.isr and r in live)
    else:
        assert after.leader == NO_LEADER and len(after.isr) == 1
    if after == state:
        assert (after.leader_epoch, after.partition_epoch) == (state.leader_epoch,
                                                               state.partition_epoch)
    else:
        assert after.partition_epoch == state.partition_epoch + 1
        assert after.leader_epoch == state.leader_epoch + (after.leader != state.leader)
    assert on_brokers_changed(after, live) == after  # nothing more to change
