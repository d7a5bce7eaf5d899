"""Which partitions of its internal topic a coordinator coordinates (Kafka's
``CoordinatorRuntime`` partition states, reduced to what tierlog needs).

A node coordinates the keys (group ids, transactional ids) whose internal partition it
leads. On a node that is a cluster of one it leads them all, loaded once at start; on a
replicating node each is loaded when the node becomes its leader and unloaded when it stops
leading it. A request for a key answers from here: NOT_COORDINATOR when this node does not
coordinate the key's partition (the client asks FindCoordinator again),
COORDINATOR_LOAD_IN_PROGRESS while it loads it (the client retries).

Each load takes a ticket: an unload, or a newer load, of the partition makes older tickets
stale, so a load that finishes after its partition was given up does not install its state.
"""

from __future__ import annotations

from enum import Enum

from kio.schema.errors import ErrorCode

__all__ = ["OwnedPartitions", "PartitionState"]


class PartitionState(Enum):
    LOADING = "loading"
    LOADED = "loaded"


class OwnedPartitions:
    """The partitions one coordinator coordinates, and their load state."""

    def __init__(self) -> None:
        self._states: dict[int, PartitionState] = {}
        self._tickets: dict[int, int] = {}
        self._epochs: dict[int, int] = {}
        self._next_ticket = 0

    def check(self, partition: int) -> ErrorCode:
        """NONE when ``partition`` is loaded here, COORDINATOR_LOAD_IN_PROGRESS while it
        loads, NOT_COORDINATOR when this node does not coordinate it."""
        state = self._states.get(partition)
        if state is PartitionState.LOADED:
            return ErrorCode.none
        if state is PartitionState.LOADING:
            return ErrorCode.coordinator_load_in_progress
        return ErrorCode.not_coordinator

    def owns(self, partition: int) -> bool:
        """Whether ``partition`` is loaded here."""
        return self._states.get(partition) is PartitionState.LOADED

    @property
    def loading(self) -> bool:
        """Whether any partition is still loading."""
        return PartitionState.LOADING in self._states.values()

    @property
    def loaded(self) -> frozenset[int]:
        return frozenset(p for p, s in self._states.items() if s is PartitionState.LOADED)

    def begin_load(self, partition: int, leader_epoch: int = 0) -> int:
        """Mark ``partition`` loading, led at ``leader_epoch``; returns the load's ticket."""
        self._next_ticket += 1
        self._tickets[partition] = self._next_ticket
        self._epochs[partition] = leader_epoch
        self._states[partition] = PartitionState.LOADING
        return self._next_ticket

    def epoch(self, partition: int) -> int:
        """The leader epoch ``partition`` is coordinated at here (Kafka's coordinator epoch:
        it fences the markers of an older coordinator); -1 when not coordinated here."""
        return self._epochs.get(partition, -1) if partition in self._states else -1

    def held(self, partition: int) -> bool:
        """Whether ``partition`` is loaded or loading here (not given up)."""
        return partition in self._states

    def current(self, partition: int, ticket: int) -> bool:
        """Whether the load holding ``ticket`` is still the partition's latest (not unloaded
        or reloaded meanwhile)."""
        return self._tickets.get(partition) == ticket

    def finish_load(self, partition: int, ticket: int) -> bool:
        """Mark ``partition`` loaded if ``ticket`` is still current; returns whether it was."""
        if not self.current(partition, ticket):
            return False
        self._states[partition] = PartitionState.LOADED
        return True

    def unload(self, partition: int) -> bool:
        """Forget ``partition`` (its pending loads go stale); returns whether it was owned
        or loading."""
        self._tickets.pop(partition, None)
        self._epochs.pop(partition, None)
        return self._states.pop(partition, None) is not None
