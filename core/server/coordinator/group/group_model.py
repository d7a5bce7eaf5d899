"""The classic consumer group's state, as its coordinator (tierlog.server.coordinator.group.groups)
keeps it: the group's state machine states, its members with their protocols, sessions and pending
join or sync, its committed and transactional offsets, and the rules a group answers by itself
(which protocol every member supports, whether a static member's id is fenced).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.server.coordinator.coordinator_config import setting_int
from tierlog.server.coordinator.coordinator_timers import TimerHandle
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.offsets_topic import TopicPartitionKey


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The group coordinator's settings, in Kafka's names and defaults."""

    min_session_timeout_ms: int = 6_000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_metadata_bytes: int = 4096

    @classmethod
    def from_properties(cls, values: Mapping[str, Any]) -> GroupSettings:
        d = cls()
        return cls(
            setting_int(values, "group.min.session.timeout.ms", d.min_session_timeout_ms, 1),
            setting_int(values, "group.max.session.timeout.ms", d.max_session_timeout_ms, 1),
            setting_int(values, "group.initial.rebalance.delay.ms",
                        d.initial_rebalance_delay_ms),
            setting_int(values, "offset.metadata.max.bytes", d.max_metadata_bytes),
        )


@dataclass(frozen=True, slots=True)
class JoinResult:
    error: ErrorCode
    member_id: str
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    #: (member id, group instance id, metadata) of every member: for the leader only.
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    #: A static leader rejoined a Stable group: it must not compute a new assignment.
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    timer: TimerHandle | None = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""


@dataclass(eq=False, slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    #: Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (with their timers).
    pending: dict[str, TimerHandle] = field(default_factory=dict)
    offsets: dict[TopicPartitionKey, rec.OffsetValue] = field(default_factory=dict)
    #: producer id -> offsets of its open transaction.
    pending_txn: dict[int, dict[TopicPartitionKey, rec.OffsetValue]] = field(
        default_factory=dict)
    rebalance_timer: TimerHandle | None = None
    initial_delay: bool = False
    state_timestamp: int = -1

    def static_member(self, instance_id: str | None) -> Member | None:
        """The member holding group instance id ``instance_id`` (None: none or dynamic)."""
        if instance_id is None:
            return None
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Whether ``member_id`` is a stale id of static member ``instance_id`` (KIP-345:
        FENCED_INSTANCE_ID), i.e. the instance id now belongs to another member id."""
        current = self.static_member(instance_id)
        return current is not None and current.member_id != member_id

    def all_joined(self) -> bool:
        return not self.pending and all(m.join_future is not None
                                        for m in self.members.values())

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order."""
        members = list(self.members.values())
        if not members:
            return []
        names = [n for n, _ in members[0].protocols]
        return [n for n in names if all(any(p == n for p, _ in m.protocols)
                                        for m in members[1:])]

    def supports(self, protocol_type: str, protocols: Sequence[tuple[str, bytes]]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        wanted = {n for n, _ in protocols}
        return any(n in wanted for n in self.candidate_protocols())

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        votes = dict.fromkeys(candidates, 0)
        for member in self.members.values():
            choice = next(n for n, _ in member.protocols if n in votes)
            votes[choice] += 1
        return max(candidates, key=lambda n: votes[n])
