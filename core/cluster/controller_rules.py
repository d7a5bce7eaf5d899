"""The controller's decisions as pure functions: where a new topic's replicas go, and what a
partition's state becomes when brokers die or come back. The controller (store I/O) applies
each decision as one compare-and-swap on the partition's record; here nothing is read or
written, so every rule is testable against a model.

Kafka's rules (KRaft's ``ReplicationControlManager`` and ``PartitionChangeBuilder``, with
eligible leader replicas off):

- **Assignment** is rack-unaware round robin: partition ``p``'s first replica is the
  ``(start + p)``-th live broker in id order, and the others follow at a shift that grows each
  time the partitions wrap around the brokers, so replicas spread over pairs of brokers.
- **A dead broker** leaves every in-sync set it is in, except that an in-sync set is never
  emptied: its last member stays, so the partition waits for it rather than lose what only it
  holds.
- **A leader** is elected when the partition has none live: the first replica, in preference
  order, that is in the in-sync set and live. With ``unclean.leader.election.enable=false``
  (the default) there is no other: the partition is offline (leader -1) until one returns.
- Every change bumps the partition epoch; a change of leader bumps the leader epoch too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

from tierlog.cluster.keys import NO_LEADER, PartitionRecord
from tierlog.errors import InvalidReplicationFactorError

__all__ = ["assign_replicas", "elect", "new_partition", "on_brokers_changed"]


def assign_replicas(brokers: Collection[int], partitions: int, replication_factor: int, *,
                    start: int = 0, shift: int = 0) -> list[tuple[int, ...]]:
    """The replicas of each of ``partitions`` new partitions over the live ``brokers``
    (``start``, ``shift``: where the round robin begins; Kafka draws them at random).
    InvalidReplicationFactorError when the factor is not 1 to the number of brokers."""
    ids = sorted(brokers)
    n = len(ids)
    if not 1 <= replication_factor <= n:
        raise InvalidReplicationFactorError(
            f"replication factor {replication_factor} is not 1 to the {n} live brokers "
            f"{ids}")
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    assigned = []
    for p in range(partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start + p) % n
        rest = [(first + 1 + (shift + j) % (n - 1)) % n for j in range(replication_factor - 1)]
        assigned.append(tuple(ids[i] for i in (first, *rest)))
    return assigned


def new_partition(replicas: Sequence[int]) -> PartitionRecord:
    """A new partition's state: every replica in sync, the preferred one leading."""
    return PartitionRecord(tuple(replicas), tuple(replicas), replicas[0])


def elect(state: PartitionRecord, live: Collection[int]) -> PartitionRecord:
    """``state`` with a live leader from its in-sync set (the first in preference order), or
    leader -1 when no in-sync replica is live; unchanged when its leader is live already."""
    if state.leader != NO_LEADER and state.leader in live:
        return state
    leader = next((r for r in state.replicas if r in state.isr and r in live), NO_LEADER)
    if leader == state.leader:
        return state
    return replace(state, leader=leader, leader_epoch=state.leader_epoch + 1,
                   partition_epoch=state.partition_epoch + 1)


def on_brokers_changed(state: PartitionRecord, live: Collection[int]) -> PartitionRecord:
    """``state`` after the controller learnt which brokers are ``live``: dead brokers out of
    the in-sync set (never emptying it), then a leader elected if it has no live one. One
    change at most: the partition epoch grows by one when anything changed."""
    kept = tuple(r for r in state.isr if r in live)
    # Never emptied: the member it waits for stays (its leader, else its first).
    isr = kept or ((state.leader,) if state.leader != NO_LEADER else state.isr[:1])
    leader = state.leader if state.leader in isr else NO_LEADER
    shrunk = PartitionRecord(state.replicas, isr, leader, state.leader_epoch,
                             state.partition_epoch)
    elected = elect(shrunk, live)
    if elected.leader != state.leader:
        return replace(elected, leader_epoch=state.leader_epoch + 1,
                       partition_epoch=state.partition_epoch + 1)
    if elected.isr != state.isr:
        return replace(elected, partition_epoch=state.partition_epoch + 1)
    return state
