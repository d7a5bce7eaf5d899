"""The classic consumer-group protocol's coordinator: group state machine, rebalances,
session timeouts and committed offsets (Kafka's GroupCoordinator for one node).

A group moves Empty -> PreparingRebalance -> CompletingRebalance -> Stable (and back to
PreparingRebalance when a member joins, leaves or times out; Dead once deleted). A rebalance
completes when every known member has rejoined, or when the longest rebalance timeout of the
members expires (members that did not rejoin are removed). New members without an id are
given one and told MEMBER_ID_REQUIRED (KIP-394) from JoinGroup v4. Static members (KIP-345,
``group.instance.id``) join at once; one rejoining without its member id takes its old
member's place under a new id, keeping its assignment without a rebalance when the group is
Stable, and the old member id is then FENCED_INSTANCE_ID wherever it is used. Each member's session
is an asyncio timer on the server's loop, reset by its heartbeats, joins and syncs; a member
waiting in a join or a sync does not expire. Group metadata (at each completed sync and
when a group empties) and committed offsets are written to ``__consumer_offsets`` before a
response says they are stored.

The coordinator lives on the server's event loop; its only blocking work (appends, the load)
runs through ``services.run_blocking``. Results are Kafka error codes and plain values; the
handlers of :mod:`tierlog.server.api.groups_api` turn requests and responses into kio objects.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.errors import TierlogError
from tierlog.server.context import BrokerServices
from tierlog.server.coordinator.coordinator_timers import LoopTimers, Timers
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.group_model import (
    Group,
    GroupSettings,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from tierlog.server.coordinator.group.offsets_topic import (
    OffsetsTopic,
    TopicPartitionKey,
    offset_records,
    tombstones,
)
from tierlog.server.coordinator.internal_log import coordinator_error
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS
from tierlog.server.coordinator.owned_partitions import OwnedPartitions

log = logging.getLogger(__name__)


class GroupCoordinator:
    """Every consumer group of this node, in memory and in ``__consumer_offsets``."""

    def __init__(self, services: BrokerServices, store: OffsetsTopic,
                 settings: GroupSettings | None = None, timers: Timers | None = None) -> None:
        self.services = services
        #: Sessions, rebalance deadlines and pending members run on these timers (the
        #: event loop's unless a test drives them).
        self.timers: Timers = timers or LoopTimers()
        self.store = store
        self.settings = settings or GroupSettings()
        self.groups: dict[str, Group] = {}
        #: The partitions of ``__consumer_offsets`` whose groups this node coordinates.
        self.owned = OwnedPartitions()
        #: Per partition loading now: the markers (producer id, commit) that reached it.
        self._settled_while_loading: dict[int, list[tuple[int, bool]]] = {}
        #: One writer at a time per partition of ``__consumer_offsets`` (its records keep the
        #: order of the changes); the partitions' writes wait for their replicas side by side.
        self._write_locks: dict[int, asyncio.Lock] = {}

    # -- load and close --------------------------------------------------------------

    def check(self, group_id: str) -> ErrorCode:
        """NONE when this node coordinates ``group_id`` and has loaded it, else the error to
        answer (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS)."""
        return self.owned.check(self.store.partition_of(group_id))

    @property
    def loaded(self) -> bool:
        """Whether every partition this node coordinates is loaded (none is loading)."""
        return not self.owned.loading

    async def load(self) -> None:
        """A node that is a cluster of one: create ``__consumer_offsets`` if missing and load
        every group from it."""
        await self.services.run_blocking(self.store.ensure)
        for partition in range(self.store.partitions):
            await self.load_partition(partition)

    async def load_partition(self, partition: int) -> None:
        """Load the groups of ``partition`` (this node now leads it); their requests are
        answered COORDINATOR_LOAD_IN_PROGRESS meanwhile."""
        ticket = self.owned.begin_load(partition)
        self._settled_while_loading[partition] = []
        loaded = await self.services.run_blocking(lambda: self.store.load_partition(partition))
        if not self.owned.current(partition, ticket):
            return  # unloaded (or loaded again) meanwhile
        for group_id, item in loaded.items():
            group = Group(group_id, offsets=dict(item.offsets),
                          pending_txn={p: dict(o) for p, o in item.pending.items()})
            meta = item.metadata
            if meta is not None:
                group.protocol_type = meta.protocol_type or None
                group.protocol_name = meta.protocol
                group.generation = meta.generation
                group.leader_id = meta.leader
                group.state_timestamp = meta.current_state_timestamp
                for m in meta.members:
                    member = Member(m.member_id, m.group_instance_id, m.client_id,
                                    m.client_host, m.session_timeout, m.rebalance_timeout,
                                    meta.protocol_type,
                                    [(meta.protocol or "", m.subscription)], m.assignment)
                    group.members[m.member_id] = member
                    self._schedule_session(group, member)
                group.state = GroupState.STABLE if group.members else GroupState.EMPTY
            old = self.groups.pop(group_id, None)
            if old is not None:
                self._cancel_timers(old)
            self.groups[group_id] = group
        # Markers that reached the partition while it loaded (their replay may have missed
        # them; settling again what the replay settled is a no-op).
        for producer_id, commit in self._settled_while_loading.pop(partition, []):
            self._settle(producer_id, {partition}, commit)
        self.owned.finish_load(partition, ticket)
        log.info("loaded %d consumer groups from %s-%d", len(loaded), CONSUMER_OFFSETS,
                 partition)

    def unload_partition(self, partition: int) -> None:
        """This node no longer leads ``partition``: drop its groups (their members are told
        NOT_COORDINATOR and find the new coordinator)."""
        self._settled_while_loading.pop(partition, None)
        if not self.owned.unload(partition):
            return
        gone = [g for g in self.groups.values() if self.store.partition_of(g.group_id)
                == partition]
        for group in gone:
            self._cancel_timers(group)
            for member in group.members.values():
                if member.join_future is not None and not member.join_future.done():
                    member.join_future.set_result(JoinResult(ErrorCode.not_coordinator,
                                                             member.member_id))
                if member.sync_future is not None and not member.sync_future.done():
                    member.sync_future.set_result(SyncResult(ErrorCode.not_coordinator))
            del self.groups[group.group_id]
        log.info("unloaded %d consumer groups of %s-%d: this node no longer leads it",
                 len(gone), CONSUMER_OFFSETS, partition)

    def close(self) -> None:
        for group in self.groups.values():
            self._cancel_timers(group)

    @staticmethod
    def _cancel_timers(group: Group) -> None:
        for member in group.members.values():
            if member.timer is not None:
                member.timer.cancel()
        for timer in group.pending.values():
            timer.cancel()
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()

    # -- JoinGroup -------------------------------------------------------------------

    async def join(self, group_id: str, member_id: str, instance_id: str | None,
                   protocol_type: str, protocols: Sequence[tuple[str, bytes]],
                   session_timeout_ms: int, rebalance_timeout_ms: int, client_id: str,
                   client_host: str, *, require_known_member_id: bool) -> JoinResult:
        """Kafka's JoinGroup: waits until the rebalance completes (or fails at once)."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return JoinResult(error, member_id)
        if not group_id:
            return JoinResult(ErrorCode.invalid_group_id, member_id)
        s = self.settings
        if not s.min_session_timeout_ms <= session_timeout_ms <= s.max_session_timeout_ms:
            return JoinResult(ErrorCode.invalid_session_timeout, member_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return JoinResult(ErrorCode.unknown_member_id, member_id)
            group = self.groups[group_id] = Group(group_id)
        if group.state is GroupState.DEAD:
            return JoinResult(ErrorCode.coordinator_not_available, member_id)
        if not group.supports(protocol_type, protocols):
            return JoinResult(ErrorCode.inconsistent_group_protocol, member_id)
        if member_id and group.fenced(member_id, instance_id):
            return JoinResult(ErrorCode.fenced_instance_id, member_id)
        joining = Member(member_id, instance_id, client_id, client_host, session_timeout_ms,
                         rebalance_timeout_ms if rebalance_timeout_ms >= 0
                         else session_timeout_ms, protocol_type,
                         [(n, bytes(m)) for n, m in protocols])
        if not member_id:
            return await self._join_new(group, joining, client_id, require_known_member_id)
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            return await self._add_and_rebalance(group, joining)
        known = group.members.get(member_id)
        if known is None:
            return JoinResult(ErrorCode.unknown_member_id, member_id)
        return await self._rejoin(group, known, joining)

    async def _join_new(self, group: Group, joining: Member, client_id: str,
                        require_known_member_id: bool) -> JoinResult:
        """A JoinGroup without a member id: a static member replacing its old self, a new
        member told its id first (KIP-394, v4+), or a new member joining at once."""
        instance_id = joining.instance_id
        new_id = f"{instance_id or client_id or 'member'}-{uuid.uuid4()}"
        member = dataclasses.replace(joining, member_id=new_id)
        old = group.static_member(instance_id)
        if old is not None:
            member.assignment = old.assignment
            return await self._replace_static(group, old, member)
        if require_known_member_id and instance_id is None:
            group.pending[new_id] = self.timers.call_later(
                joining.session_timeout_ms / 1000, self._expire_pending, group, new_id)
            return JoinResult(ErrorCode.member_id_required, new_id)
        return await self._add_and_rebalance(group, member)

    async def _rejoin(self, group: Group, member: Member, joining: Member) -> JoinResult:
        """A known member joined again: answered at once when nothing changed, otherwise a
        rebalance it waits for."""
        same = member.protocols == joining.protocols
        member.session_timeout_ms = joining.session_timeout_ms
        member.rebalance_timeout_ms = joining.rebalance_timeout_ms
        if group.state is GroupState.COMPLETING_REBALANCE and same:
            self._schedule_session(group, member)
            return self._join_result(group, member)
        if (group.state is GroupState.STABLE and same
                and member.member_id != group.leader_id):
            self._schedule_session(group, member)
            return self._join_result(group, member)
        member.protocols = joining.protocols
        future = self._await_join(member)
        if group.state is not GroupState.PREPARING_REBALANCE:
            self._prepare_rebalance(group, f"member {member.member_id} rejoined")
        else:
            self._try_complete_join(group)
        return await future

    async def _replace_static(self, group: Group, old: Member, member: Member) -> JoinResult:
        """A static member rejoined without its member id: ``member`` takes ``old``'s place
        (and leadership); ``old``'s waiting requests are fenced. A Stable group with the same
        protocols keeps its generation and assignment (no rebalance); otherwise it rebalances."""
        log.info("group %s: static member %s replaces member %s", group.group_id,
                 member.instance_id, old.member_id)
        group.members.pop(old.member_id, None)
        if old.timer is not None:
            old.timer.cancel()
        if old.join_future is not None and not old.join_future.done():
            old.join_future.set_result(JoinResult(ErrorCode.fenced_instance_id, old.member_id))
        self._finish_sync(old, SyncResult(ErrorCode.fenced_instance_id))
        group.members[member.member_id] = member
        was_leader = group.leader_id == old.member_id
        if was_leader:
            group.leader_id = member.member_id
        self._schedule_session(group, member)
        if group.state is GroupState.STABLE and old.protocols == member.protocols:
            error = await self._persist_group(group)
            if error is not ErrorCode.none:
                return JoinResult(error, member.member_id)
            result = self._join_result(group, member)
            return JoinResult(result.error, result.member_id, result.generation_id,
                              result.protocol_type, result.protocol_name, result.leader_id,
                              result.members, skip_assignment=was_leader)
        future = self._await_join(member)
        if group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)
        else:
            self._prepare_rebalance(group, f"static member {member.instance_id} rejoined")
        return await future

    def _await_join(self, member: Member) -> asyncio.Future[JoinResult]:
        if member.join_future is not None and not member.join_future.done():
            # A second join of the same member replaces the first (its client gave up on it).
            member.join_future.set_result(JoinResult(ErrorCode.unknown_member_id,
                                                     member.member_id))
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        member.join_future = future
        return future

    async def _add_and_rebalance(self, group: Group, member: Member) -> JoinResult:
        if not group.members:
            group.protocol_type = member.protocol_type
        group.members[member.member_id] = member
        future = self._await_join(member)
        self._schedule_session(group, member)
        if group.state in (GroupState.EMPTY, GroupState.STABLE,
                           GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, f"member {member.member_id} joined")
        else:
            self._try_complete_join(group)
        return await future

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.instance_id, m.metadata(group.protocol_name))
                            for m in group.members.values())
        return JoinResult(ErrorCode.none, member.member_id, group.generation,
                          group.protocol_type, group.protocol_name, group.leader_id or "",
                          members)

    # -- rebalancing -----------------------------------------------------------------

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.state is GroupState.COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
                self._finish_sync(m, SyncResult(ErrorCode.rebalance_in_progress))
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        delay = self.settings.initial_rebalance_delay_ms
        if group.state is GroupState.EMPTY and delay > 0:
            group.initial_delay = True
            timeout_ms = min(delay, self._rebalance_timeout_ms(group))
            group.rebalance_timer = self.timers.call_later(
                timeout_ms / 1000, self._end_initial_delay, group, group.generation)
        else:
            group.initial_delay = False
            group.rebalance_timer = self.timers.call_later(
                self._rebalance_timeout_ms(group) / 1000, self._rebalance_expired, group,
                group.generation)
        log.info("group %s: preparing to rebalance (generation %d): %s", group.group_id,
                 group.generation, reason)
        group.state = GroupState.PREPARING_REBALANCE
        self._try_complete_join(group)

    @staticmethod
    def _rebalance_timeout_ms(group: Group) -> int:
        return max((m.rebalance_timeout_ms for m in group.members.values()), default=0)

    def _end_initial_delay(self, group: Group, generation: int) -> None:
        if group.state is not GroupState.PREPARING_REBALANCE or group.generation != generation:
            return
        group.initial_delay = False
        group.rebalance_timer = self.timers.call_later(
            self._rebalance_timeout_ms(group) / 1000, self._rebalance_expired, group,
            generation)
        self._try_complete_join(group)

    def _rebalance_expired(self, group: Group, generation: int) -> None:
        if group.state is GroupState.PREPARING_REBALANCE and group.generation == generation:
            self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if (group.state is GroupState.PREPARING_REBALANCE and not group.initial_delay
                and group.all_joined()):
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        group.initial_delay = False
        for member in [m for m in group.members.values() if m.join_future is None]:
            log.info("group %s: removing member %s, which did not rejoin in time",
                     group.group_id, member.member_id)
            self._drop_member(group, member)
        for member_id in list(group.pending):
            group.pending.pop(member_id).cancel()
        group.generation += 1
        group.state_timestamp = self.services.time_ms()
        if not group.members:
            group.state = GroupState.EMPTY
            group.protocol_name = None
            group.leader_id = None
            log.info("group %s is empty at generation %d", group.group_id, group.generation)
            self._spawn(self._persist_group(group))
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.state = GroupState.COMPLETING_REBALANCE
        log.info("group %s: generation %d with %d members (protocol %s, leader %s)",
                 group.group_id, group.generation, len(group.members), group.protocol_name,
                 group.leader_id)
        for member in group.members.values():
            future, member.join_future = member.join_future, None
            if future is not None and not future.done():
                future.set_result(self._join_result(group, member))
            self._schedule_session(group, member)

    # -- SyncGroup -------------------------------------------------------------------

    async def sync(self, group_id: str, generation: int, member_id: str,
                   protocol_type: str | None, protocol_name: str | None,
                   assignments: Mapping[str, bytes],
                   instance_id: str | None = None) -> SyncResult:
        if (error := self.check(group_id)) is not ErrorCode.none:
            return SyncResult(error)
        group = self.groups.get(group_id)
        if group is not None and group.fenced(member_id, instance_id):
            return SyncResult(ErrorCode.fenced_instance_id)
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or group.state in (GroupState.EMPTY,
                                                               GroupState.DEAD):
            return SyncResult(ErrorCode.unknown_member_id)
        if generation != group.generation:
            return SyncResult(ErrorCode.illegal_generation)
        if ((protocol_type and protocol_type != group.protocol_type)
                or (protocol_name and protocol_name != group.protocol_name)):
            return SyncResult(ErrorCode.inconsistent_group_protocol)
        if group.state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.rebalance_in_progress)
        self._schedule_session(group, member)
        if group.state is GroupState.STABLE:
            return self._sync_result(group, member)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        member.sync_future = future
        if member_id == group.leader_id:
            for m in group.members.values():
                m.assignment = bytes(assignments.get(m.member_id, b""))
            error = await self._persist_group(group)
            if group.state is GroupState.COMPLETING_REBALANCE and group.generation == generation:
                if error is not ErrorCode.none:
                    for m in group.members.values():
                        m.assignment = b""
                        self._finish_sync(m, SyncResult(error))
                    self._prepare_rebalance(group, "its metadata could not be stored")
                else:
                    group.state = GroupState.STABLE
                    group.state_timestamp = self.services.time_ms()
                    for m in group.members.values():
                        self._finish_sync(m, self._sync_result(group, m))
        return await future

    @staticmethod
    def _sync_result(group: Group, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, member.assignment, group.protocol_type,
                          group.protocol_name)

    def _finish_sync(self, member: Member, result: SyncResult) -> None:
        future, member.sync_future = member.sync_future, None
        if future is not None and not future.done():
            future.set_result(result)

    # -- Heartbeat and LeaveGroup ----------------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None = None) -> ErrorCode:
        if (error := self.check(group_id)) is not ErrorCode.none:
            return error
        group = self.groups.get(group_id)
        if group is not None and group.fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        member = group.members.get(member_id) if group is not None else None
        if group is None or member is None or group.state in (GroupState.EMPTY,
                                                               GroupState.DEAD):
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        self._schedule_session(group, member)
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]
              ) -> tuple[ErrorCode, list[tuple[str, str | None, ErrorCode]]]:
        """LeaveGroup: the group's error and one error per member."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return error, []
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.unknown_member_id, [(m, i, ErrorCode.unknown_member_id)
                                                 for m, i in members]
        results = []
        for member_id, instance_id in members:
            if member_id in group.pending:
                group.pending.pop(member_id).cancel()
                results.append((member_id, instance_id, ErrorCode.none))
                self._try_complete_join(group)
                continue
            if member_id and group.fenced(member_id, instance_id):
                results.append((member_id, instance_id, ErrorCode.fenced_instance_id))
                continue
            member = group.members.get(member_id) or group.static_member(instance_id)
            if member is None:
                results.append((member_id, instance_id, ErrorCode.unknown_member_id))
                continue
            log.info("group %s: member %s left", group.group_id, member.member_id)
            self._remove_and_update(group, member, "a member left")
            results.append((member.member_id, instance_id, ErrorCode.none))
        return ErrorCode.none, results

    def _drop_member(self, group: Group, member: Member) -> None:
        group.members.pop(member.member_id, None)
        if member.timer is not None:
            member.timer.cancel()
        if member.join_future is not None and not member.join_future.done():
            member.join_future.set_result(JoinResult(ErrorCode.unknown_member_id,
                                                     member.member_id))
        self._finish_sync(member, SyncResult(ErrorCode.unknown_member_id))

    def _remove_and_update(self, group: Group, member: Member, reason: str) -> None:
        self._drop_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason)
        elif group.state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group)

    # -- sessions --------------------------------------------------------------------

    def _schedule_session(self, group: Group, member: Member) -> None:
        if member.timer is not None:
            member.timer.cancel()
        member.timer = self.timers.call_later(
            member.session_timeout_ms / 1000, self._expire_session, group, member)

    def _expire_session(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.join_future is not None or member.sync_future is not None:
            self._schedule_session(group, member)  # waiting on the coordinator: alive
            return
        log.info("group %s: member %s's session of %d ms expired", group.group_id,
                 member.member_id, member.session_timeout_ms)
        self._remove_and_update(group, member, f"member {member.member_id}'s session expired")

    def _expire_pending(self, group: Group, member_id: str) -> None:
        if group.pending.pop(member_id, None) is not None:
            self._try_complete_join(group)

    # -- persistence -----------------------------------------------------------------

    def _group_value(self, group: Group) -> rec.GroupValue:
        members = tuple(
            rec.MemberMetadata(m.member_id, m.client_id, m.client_host, m.session_timeout_ms,
                               m.rebalance_timeout_ms, m.metadata(group.protocol_name),
                               m.assignment, m.instance_id)
            for m in group.members.values())
        return rec.GroupValue(group.protocol_type or "", group.generation, group.protocol_name,
                              group.leader_id, group.state_timestamp, members)

    async def _persist_group(self, group: Group) -> ErrorCode:
        value = rec.encode_group_value(self._group_value(group))
        records: list[tuple[bytes, bytes | None]] = [
            (rec.encode_key(rec.GroupKey(group.group_id)), value)]
        return await self._write(group.group_id, records)

    async def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]], *,
                     producer_id: int = -1, producer_epoch: int = -1) -> ErrorCode:
        now = self.services.time_ms()
        lock = self._write_locks.setdefault(self.store.partition_of(group_id), asyncio.Lock())
        async with lock:
            try:
                await self.store.write(group_id, records, now, producer_id=producer_id,
                                       producer_epoch=producer_epoch)
            except (TierlogError, OSError) as exc:
                code = coordinator_error(exc)
                if code in (ErrorCode.invalid_producer_epoch, ErrorCode.producer_fenced):
                    return ErrorCode.producer_fenced
                log.warning("group %s: writing to __consumer_offsets failed: %s", group_id, exc)
                return code
        return ErrorCode.none

    def _spawn(self, coro: Coroutine[object, object, object]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        _BACKGROUND.add(task)
        task.add_done_callback(_BACKGROUND.discard)

    # -- offsets ---------------------------------------------------------------------

    def _check_commit(self, group: Group | None, generation: int, member_id: str,
                      instance_id: str | None = None) -> ErrorCode:
        if group is not None and group.fenced(member_id, instance_id):
            return ErrorCode.fenced_instance_id
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.none if generation < 0 else ErrorCode.unknown_member_id
        if generation < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.none
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def _valid_offsets(self, offsets: Mapping[TopicPartitionKey, rec.OffsetValue]
                       ) -> tuple[dict[TopicPartitionKey, rec.OffsetValue],
                                  dict[TopicPartitionKey, ErrorCode]]:
        ok, errors = {}, {}
        for tp, value in offsets.items():
            if len(value.metadata.encode()) > self.settings.max_metadata_bytes:
                errors[tp] = ErrorCode.offset_metadata_too_large
            else:
                ok[tp] = value
        return ok, errors

    async def commit_offsets(self, group_id: str, generation: int, member_id: str,
                             offsets: Mapping[TopicPartitionKey, rec.OffsetValue], *,
                             instance_id: str | None = None
                             ) -> dict[TopicPartitionKey, ErrorCode]:
        """OffsetCommit: an error per partition (all the same unless a metadata is too big)."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        if not group_id:
            return dict.fromkeys(offsets, ErrorCode.invalid_group_id)
        group = self.groups.get(group_id)
        error = self._check_commit(group, generation, member_id, instance_id)
        if error is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id)
        if member_id in group.members:
            self._schedule_session(group, group.members[member_id])
        ok, errors = self._valid_offsets(offsets)
        if ok:
            error = await self._write(group_id, offset_records(group_id, ok))
            if error is ErrorCode.none:
                group.offsets.update(ok)
        return {**dict.fromkeys(ok, error), **errors}

    async def commit_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                                 generation: int, member_id: str,
                                 offsets: Mapping[TopicPartitionKey, rec.OffsetValue], *,
                                 instance_id: str | None = None
                                 ) -> dict[TopicPartitionKey, ErrorCode]:
        """TxnOffsetCommit: written as the producer's transactional records, pending until
        its transaction's marker (:meth:`complete_txn`)."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return dict.fromkeys(offsets, error)
        group = self.groups.get(group_id)
        if generation >= 0 or member_id:
            error = self._check_commit(group, generation, member_id, instance_id)
            if error is not ErrorCode.none:
                return dict.fromkeys(offsets, error)
        if group is None or group.state is GroupState.DEAD:
            group = self.groups[group_id] = Group(group_id)
        ok, errors = self._valid_offsets(offsets)
        if ok:
            error = await self._write(group_id, offset_records(group_id, ok),
                                      producer_id=producer_id, producer_epoch=producer_epoch)
            if error is ErrorCode.none:
                group.pending_txn.setdefault(producer_id, {}).update(ok)
        return {**dict.fromkeys(ok, error), **errors}

    def complete_txn(self, producer_id: int, partitions: Iterable[int], commit: bool) -> None:
        """A transaction's marker reached these ``__consumer_offsets`` partitions: its
        pending offsets count (commit) or are dropped (abort); a partition still loading
        settles them once loaded."""
        wanted = set(partitions)
        for partition in wanted:
            if partition in self._settled_while_loading:
                self._settled_while_loading[partition].append((producer_id, commit))
        self._settle(producer_id, wanted, commit)

    def _settle(self, producer_id: int, wanted: set[int], commit: bool) -> None:
        for group in self.groups.values():
            if self.store.partition_of(group.group_id) not in wanted:
                continue
            pending = group.pending_txn.pop(producer_id, None)
            if pending and commit:
                group.offsets.update(pending)

    def fetch_offsets(self, group_id: str, partitions: Sequence[TopicPartitionKey] | None,
                      require_stable: bool
                      ) -> tuple[ErrorCode, dict[TopicPartitionKey,
                                                 tuple[rec.OffsetValue | None, ErrorCode]]]:
        """OffsetFetch: each partition's committed offset (None: none); all committed
        partitions when ``partitions`` is None."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return error, {}
        group = self.groups.get(group_id)
        committed = group.offsets if group is not None else {}
        pending: set[TopicPartitionKey] = set()
        if group is not None and require_stable:
            for offsets in group.pending_txn.values():
                pending.update(offsets)
        keys = sorted(committed) if partitions is None else list(partitions)
        out: dict[TopicPartitionKey, tuple[rec.OffsetValue | None, ErrorCode]] = {}
        for tp in keys:
            if tp in pending:
                out[tp] = (None, ErrorCode.unstable_offset_commit)
            else:
                out[tp] = (committed.get(tp), ErrorCode.none)
        return ErrorCode.none, out

    async def delete_offsets(self, group_id: str, partitions: Sequence[TopicPartitionKey],
                             subscribed: Callable[[Group], set[str]]
                             ) -> tuple[ErrorCode, dict[TopicPartitionKey, ErrorCode]]:
        """OffsetDelete: partitions of topics the group is subscribed to are refused."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return error, {}
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}
        topics = set() if group.state is GroupState.EMPTY else subscribed(group)
        refused = {tp: ErrorCode.group_subscribed_to_topic for tp in partitions
                   if tp[0] in topics}
        doomed = [tp for tp in partitions if tp not in refused]
        error = ErrorCode.none
        if doomed:
            error = await self._write(group_id, tombstones(group_id, doomed, group=False))
            if error is ErrorCode.none:
                for tp in doomed:
                    group.offsets.pop(tp, None)
        return ErrorCode.none, {**dict.fromkeys(doomed, error), **refused}

    async def delete_group(self, group_id: str) -> ErrorCode:
        """DeleteGroups for one group: only an empty group, with its offsets."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            return error
        group = self.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group
        error = await self._write(group_id, tombstones(group_id, list(group.offsets),
                                                       group=True))
        if error is ErrorCode.none and group.state is GroupState.EMPTY:
            group.state = GroupState.DEAD
            self._cancel_timers(group)
            del self.groups[group_id]
        return error


_BACKGROUND: set[asyncio.Task[Any]] = set()
