"""The group and transaction coordinators over a real LogManager, driven directly (no
sockets): the classic state machine, session expiry and transaction timeouts driven by
virtual time (:class:`ManualTimers`, no sleeps), offsets and transactions surviving a reload
from the internal topics."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.schema.errors import ErrorCode

from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.server.coordinator.coordinator_timers import ManualTimers
from tierlog.server.coordinator.coordinators import Coordinators
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.group.group_model import GroupState
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS, TRANSACTION_STATE
from tierlog.server.coordinator.txn.txn_log_records import TxnStatus

_T = TypeVar("_T")

SETTINGS = {"offsets.topic.num.partitions": 3, "transaction.state.log.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 10}


class Services:
    """A small BrokerServices: the engine and this node, blocking work on a thread; its
    time is the virtual time of the coordinators' :class:`ManualTimers`."""

    def __init__(self, manager: LogManager, timers: ManualTimers) -> None:
        self.manager = manager
        self.timers = timers
        self.node_id, self.host, self.port = 1, "127.0.0.1", 9092
        self.cluster = None

    def appended(self) -> None:
        pass

    def time_ms(self) -> int:
        return 1_700_000_000_000 + self.timers.now_ms

    async def run_blocking(self, fn: Callable[[], _T]) -> _T:
        return await asyncio.to_thread(fn)


def run(tmp_path: Path, scenario: Callable[[Coordinators, LogManager], Any]) -> Any:
    async def main() -> Any:
        manager = LogManager.open(tmp_path / "data")
        timers = ManualTimers()
        coordinators = Coordinators(Services(manager, timers), SETTINGS, timers)
        try:
            await coordinators.start()
            return await scenario(coordinators, manager)
        finally:
            await coordinators.close()
            manager.close()
    return asyncio.run(main())


def timers_of(c: Coordinators) -> ManualTimers:
    """The virtual time driving ``c``'s timers."""
    assert isinstance(c.groups.timers, ManualTimers)
    return c.groups.timers


def join(c: Coordinators, member_id: str = "", protocols: Any = (("range", b"m"),),
         session_ms: int = 10_000, rebalance_ms: int = 5_000) -> Any:
    return c.groups.join("g", member_id, None, "consumer", list(protocols), session_ms,
                         rebalance_ms, "client", "/127.0.0.1", require_known_member_id=True)


def test_join_sync_rebalance_leave(tmp_path: Path) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        first = await join(c)
        assert first.error is ErrorCode.member_id_required and first.member_id
        a = await join(c, first.member_id)
        assert a.error is ErrorCode.none and a.generation_id == 1 and a.leader_id == a.member_id
        assert [m[0] for m in a.members] == [a.member_id]
        sync = await c.groups.sync("g", 1, a.member_id, "consumer", "range",
                                   {a.member_id: b"all"})
        assert sync.error is ErrorCode.none and sync.assignment == b"all"
        assert c.groups.groups["g"].state is GroupState.STABLE
        # A second member joins: the first learns of the rebalance by its heartbeat.
        second_id = (await join(c)).member_id
        b_join = asyncio.ensure_future(join(c, second_id))
        await asyncio.sleep(0)
        assert c.groups.heartbeat("g", 1, a.member_id) is ErrorCode.rebalance_in_progress
        a2 = await join(c, a.member_id)
        b2 = await b_join
        assert a2.generation_id == b2.generation_id == 2
        assert a2.leader_id == a.member_id and len(a2.members) == 2 and b2.members == ()
        b_sync = asyncio.ensure_future(c.groups.sync("g", 2, b2.member_id, None, None, {}))
        a_sync = await c.groups.sync("g", 2, a.member_id, None, None,
                                     {a.member_id: b"p0", b2.member_id: b"p1"})
        assert a_sync.assignment == b"p0" and (await b_sync).assignment == b"p1"
        # Stale generations are refused.
        assert c.groups.heartbeat("g", 1, a.member_id) is ErrorCode.illegal_generation
        _, results = c.groups.leave("g", [(b2.member_id, None)])
        assert results == [(b2.member_id, None, ErrorCode.none)]
        assert c.groups.groups["g"].state is GroupState.PREPARING_REBALANCE
        a3 = await join(c, a.member_id)
        assert a3.generation_id == 3 and [m[0] for m in a3.members] == [a.member_id]
    run(tmp_path, scenario)


def test_session_timeout_removes_a_silent_member(tmp_path: Path) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        mid = (await join(c, session_ms=50)).member_id
        a = await join(c, mid, session_ms=50)
        await c.groups.sync("g", a.generation_id, mid, None, None, {mid: b"x"})
        group = c.groups.groups["g"]
        clock = timers_of(c)
        # A heartbeat just before the deadline keeps the member for another full session.
        clock.advance(49)
        assert c.groups.heartbeat("g", a.generation_id, mid) is ErrorCode.none
        clock.advance(49)
        assert group.state is GroupState.STABLE and mid in group.members
        # No more heartbeats: the session timer fires and the group empties.
        clock.advance(1)
        assert group.state is GroupState.EMPTY and not group.members
        assert group.generation == 2
    run(tmp_path, scenario)


def test_inconsistent_protocols_and_unknown_members(tmp_path: Path) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        mid = (await join(c)).member_id
        await join(c, mid)
        other = await c.groups.join("g", "", None, "consumer", [("roundrobin", b"")], 10_000,
                                    5_000, "c", "h", require_known_member_id=True)
        assert other.error is ErrorCode.inconsistent_group_protocol
        assert (await join(c, "nobody")).error is ErrorCode.unknown_member_id
        assert c.groups.heartbeat("g", 1, "nobody") is ErrorCode.unknown_member_id
        too_short = await join(c, session_ms=1)
        assert too_short.error is ErrorCode.invalid_session_timeout
    run(tmp_path, scenario)


def test_offsets_and_group_survive_a_reload(tmp_path: Path) -> None:
    async def first(c: Coordinators, manager: LogManager) -> None:
        errors = await c.groups.commit_offsets("g", -1, "", {
            ("t", 0): rec.OffsetValue(5, "m", 1), ("t", 1): rec.OffsetValue(9, "", 1)})
        assert set(errors.values()) == {ErrorCode.none}
        errors = await c.groups.commit_offsets("g", -1, "", {("t", 0): rec.OffsetValue(6)})
        too_big = await c.groups.commit_offsets("g", -1, "", {
            ("t", 2): rec.OffsetValue(1, "x" * 5000)})
        assert too_big == {("t", 2): ErrorCode.offset_metadata_too_large}
        assert await c.groups.commit_offsets("g2", 3, "ghost", {("t", 0): rec.OffsetValue(1)}) \
            == {("t", 0): ErrorCode.unknown_member_id}
    run(tmp_path, first)

    async def second(c: Coordinators, manager: LogManager) -> None:
        _, offsets = c.groups.fetch_offsets("g", None, False)
        assert {tp: v.offset for tp, (v, _) in offsets.items() if v} == {("t", 0): 6,
                                                                        ("t", 1): 9}
        assert c.groups.groups["g"].state is GroupState.EMPTY
        assert await c.groups.delete_group("g") is ErrorCode.none
    run(tmp_path, second)

    async def third(c: Coordinators, manager: LogManager) -> None:
        assert "g" not in c.groups.groups
    run(tmp_path, third)


def test_consumer_offsets_holds_kafka_records(tmp_path: Path) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> int:
        await c.groups.commit_offsets("grp", -1, "", {("t", 3): rec.OffsetValue(11, "md", 7)})
        return c.groups.store.partition_of("grp")
    partition = run(tmp_path, scenario)
    log = Log.open(tmp_path / "data" / f"{CONSUMER_OFFSETS}-{partition}")
    try:
        records = [r for r in log.read(0).data.records()]
    finally:
        log.close()
    assert len(records) == 1
    assert rec.decode_key(records[0].key) == rec.OffsetKey("grp", "t", 3)
    assert rec.decode_offset_value(records[0].value).offset == 11


def _txn_topic(manager: LogManager) -> Log:
    if not manager.partitions("data"):
        manager.create_topic("data", 1)
    return manager.log("data", 0)


def test_transaction_commit_abort_and_offsets(tmp_path: Path) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        data = _txn_topic(manager)
        error, pid, epoch = await c.txns.init_producer_id("tx", 60_000)
        assert error is ErrorCode.none and epoch == 0
        assert await c.txns.add_partitions("tx", pid, epoch, [("data", 0)]) == {
            ("data", 0): ErrorCode.none}
        data.append_records([Record(b"k", b"v")], producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, transactional=True)
        assert data.last_stable_offset == 0
        off_part = c.groups.store.partition_of("g")
        await c.txns.add_partitions("tx", pid, epoch, [(CONSUMER_OFFSETS, off_part)])
        await c.groups.commit_txn_offsets("g", pid, epoch, -1, "",
                                          {("data", 0): rec.OffsetValue(1)})
        assert c.groups.fetch_offsets("g", [("data", 0)], True)[1][("data", 0)][1] \
            is ErrorCode.unstable_offset_commit
        assert await c.txns.end_txn("tx", pid, epoch, True) is ErrorCode.none
        assert data.last_stable_offset == data.log_end_offset
        value, _ = c.groups.fetch_offsets("g", [("data", 0)], True)[1][("data", 0)]
        assert value is not None and value.offset == 1
        # A retried EndTxn is fine, a stale epoch is fenced.
        assert await c.txns.end_txn("tx", pid, epoch, True) is ErrorCode.none
        assert await c.txns.end_txn("tx", pid, epoch + 5, True) is ErrorCode.producer_fenced
        # An aborted transaction's offsets are dropped.
        await c.txns.add_partitions("tx", pid, epoch, [(CONSUMER_OFFSETS, off_part)])
        await c.groups.commit_txn_offsets("g", pid, epoch, -1, "",
                                          {("data", 0): rec.OffsetValue(99)})
        assert await c.txns.end_txn("tx", pid, epoch, False) is ErrorCode.none
        value, _ = c.groups.fetch_offsets("g", [("data", 0)], False)[1][("data", 0)]
        assert value is not None and value.offset == 1
    run(tmp_path, scenario)


def test_ongoing_transaction_is_fenced_by_a_new_producer_and_reloaded(tmp_path: Path) -> None:
    async def first(c: Coordinators, manager: LogManager) -> tuple[int, int]:
        data = _txn_topic(manager)
        _, pid, epoch = await c.txns.init_producer_id("tx", 60_000)
        await c.txns.add_partitions("tx", pid, epoch, [("data", 0)])
        data.append_records([Record(b"k", b"v")], producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, transactional=True)
        return pid, epoch
    pid, epoch = run(tmp_path, first)

    async def second(c: Coordinators, manager: LogManager) -> None:
        data = manager.log("data", 0)
        meta = c.txns.txns["tx"]
        assert meta.state.name == "ONGOING" and meta.partitions == {("data", 0)}
        assert data.last_stable_offset == 0
        error, pid2, epoch2 = await c.txns.init_producer_id("tx", 60_000)
        assert error is ErrorCode.none and pid2 == pid and epoch2 == epoch + 2
        assert data.last_stable_offset == data.log_end_offset  # aborted
        assert await c.txns.add_partitions("tx", pid, epoch, [("data", 0)]) == {
            ("data", 0): ErrorCode.producer_fenced}
        # An idempotent producer never gets the transactional producer's id.
        _, idem, _ = await c.txns.init_producer_id(None, 0)
        assert idem != pid
    run(tmp_path, second)


def test_transaction_timeout_aborts_and_fences(tmp_path: Path) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        data = _txn_topic(manager)
        _, pid, epoch = await c.txns.init_producer_id("tx", 1)
        await c.txns.add_partitions("tx", pid, epoch, [("data", 0)])
        data.append_records([Record(b"k", b"v")], producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, transactional=True)
        assert await c.txns.abort_timed_out() == []  # not yet past the 1 ms timeout
        timers_of(c).advance(1)
        assert await c.txns.abort_timed_out() == ["tx"]
        assert data.last_stable_offset == data.log_end_offset
        assert await c.txns.end_txn("tx", pid, epoch, True) is ErrorCode.producer_fenced
    run(tmp_path, scenario)


@pytest.mark.parametrize("topic", [TRANSACTION_STATE, CONSUMER_OFFSETS])
def test_internal_topics_are_compacted(tmp_path: Path, topic: str) -> None:
    async def scenario(c: Coordinators, manager: LogManager) -> list[str]:
        return list(manager.topic_config(topic)["cleanup.policy"])
    assert run(tmp_path, scenario) == ["compact"]


def static_join(c: Coordinators, instance: str, member_id: str = "",
                protocols: Any = (("range", b"m"),)) -> Any:
    return c.groups.join("g", member_id, instance, "consumer", list(protocols), 10_000, 5_000,
                         "client", "/127.0.0.1", require_known_member_id=True)


def test_static_members_rejoin_without_a_rebalance_and_fence_old_ids(tmp_path: Path) -> None:
    async def first(c: Coordinators, manager: LogManager) -> dict[str, str]:
        # A static member joins at once: no MEMBER_ID_REQUIRED round trip (KIP-345).
        a = await static_join(c, "inst-a")
        assert a.error is ErrorCode.none and a.generation_id == 1 and a.leader_id == a.member_id
        await c.groups.sync("g", 1, a.member_id, None, None, {a.member_id: b"A"})
        b_join = asyncio.ensure_future(static_join(c, "inst-b"))
        await asyncio.sleep(0)  # let the join reach the coordinator (no time passes)
        a2 = await static_join(c, "inst-a", a.member_id)
        b = await b_join
        assert a2.generation_id == b.generation_id == 2
        assert sorted(i for _, i, _ in a2.members) == ["inst-a", "inst-b"]
        b_sync = asyncio.ensure_future(c.groups.sync("g", 2, b.member_id, None, None, {}))
        await c.groups.sync("g", 2, a.member_id, None, None,
                            {a.member_id: b"A", b.member_id: b"B"})
        assert (await b_sync).assignment == b"B"
        group = c.groups.groups["g"]
        # inst-b restarts without its member id: it takes the old member's place at once.
        b_new = await static_join(c, "inst-b")
        assert b_new.error is ErrorCode.none and b_new.member_id != b.member_id
        assert b_new.generation_id == 2 and not b_new.skip_assignment and b_new.members == ()
        assert group.state is GroupState.STABLE and group.generation == 2
        assert (await c.groups.sync("g", 2, b_new.member_id, None, None, {}, "inst-b")
                ).assignment == b"B"
        # The old member id is fenced everywhere it could still be used.
        old = b.member_id
        assert c.groups.heartbeat("g", 2, old, "inst-b") is ErrorCode.fenced_instance_id
        assert (await c.groups.sync("g", 2, old, None, None, {}, "inst-b")).error \
            is ErrorCode.fenced_instance_id
        assert (await static_join(c, "inst-b", old)).error is ErrorCode.fenced_instance_id
        assert await c.groups.commit_offsets("g", 2, old, {("t", 0): rec.OffsetValue(1)},
                                             instance_id="inst-b") == {
            ("t", 0): ErrorCode.fenced_instance_id}
        assert c.groups.leave("g", [(old, "inst-b")])[1] == [
            (old, "inst-b", ErrorCode.fenced_instance_id)]
        assert c.groups.heartbeat("g", 2, b_new.member_id, "inst-b") is ErrorCode.none
        # The static leader restarts: it keeps leadership and is told not to reassign.
        a_new = await static_join(c, "inst-a")
        assert a_new.skip_assignment and a_new.leader_id == a_new.member_id
        assert a_new.generation_id == 2 and len(a_new.members) == 2
        assert group.state is GroupState.STABLE and group.leader_id == a_new.member_id
        return {"a": a_new.member_id, "b": b_new.member_id}
    ids = run(tmp_path, first)

    async def second(c: Coordinators, manager: LogManager) -> None:
        group = c.groups.groups["g"]
        assert {m.member_id: m.instance_id for m in group.members.values()} == {
            ids["a"]: "inst-a", ids["b"]: "inst-b"}
        assert group.leader_id == ids["a"] and group.generation == 2
        # A static member leaving by its instance id alone starts a rebalance.
        _, results = c.groups.leave("g", [("", "inst-b")])
        assert results == [(ids["b"], "inst-b", ErrorCode.none)]
        assert group.state is GroupState.PREPARING_REBALANCE
        a = await static_join(c, "inst-a", ids["a"])
        assert a.generation_id == 3 and [i for _, i, _ in a.members] == ["inst-a"]
    run(tmp_path, second)


def test_a_partition_unloaded_and_loaded_again_moves_its_groups(tmp_path: Path) -> None:
    """What a coordinator does when its node stops and starts leading a partition of
    ``__consumer_offsets`` (on a replicating node): its groups' requests answer NOT_COORDINATOR,
    a waiting JoinGroup is told so at once, and a reload brings the committed offsets back
    from the log; a load overtaken by an unload installs nothing."""
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        groups = c.groups
        partition = groups.store.partition_of("g")
        mid = (await join(c)).member_id
        first = await join(c, mid)
        await groups.sync("g", first.generation_id, mid, None, None, {mid: b"x"})
        committed = {("t", 0): rec.OffsetValue(42, "m", 0, -1)}
        assert set((await groups.commit_offsets(
            "g", first.generation_id, mid, committed)).values()) == {ErrorCode.none}
        # A second member's join waits for the first to rejoin; the unload answers it.
        other = (await join(c)).member_id
        waiting = asyncio.ensure_future(join(c, other))
        await asyncio.sleep(0)
        groups.unload_partition(partition)
        assert (await waiting).error is ErrorCode.not_coordinator
        assert groups.heartbeat("g", first.generation_id, mid) is ErrorCode.not_coordinator
        assert groups.fetch_offsets("g", None, False) == (ErrorCode.not_coordinator, {})
        assert "g" not in groups.groups
        # Another group's partition is untouched.
        elsewhere = next(g for g in (f"h{i}" for i in range(100))
                         if groups.store.partition_of(g) != partition)
        assert groups.check(elsewhere) is ErrorCode.none
        # Loaded again (this node leads it again): the offsets are back, from the log.
        await groups.load_partition(partition)
        error, offsets = groups.fetch_offsets("g", None, False)
        assert error is ErrorCode.none
        assert offsets[("t", 0)][0] is not None and offsets[("t", 0)][0].offset == 42
        # A load that an unload overtook installs nothing.
        groups.unload_partition(partition)
        overtaken = asyncio.ensure_future(groups.load_partition(partition))
        await asyncio.sleep(0)
        groups.unload_partition(partition)
        await overtaken
        assert groups.check("g") is ErrorCode.not_coordinator and "g" not in groups.groups
    run(tmp_path, scenario)


def test_a_decided_transaction_is_completed_never_overwritten(tmp_path: Path) -> None:
    """A transaction whose commit is stored (PrepareCommit) but whose markers are not all
    written (a coordinator that lost a partition leader meanwhile): a new producer's
    InitProducerId is answered CONCURRENT_TRANSACTIONS (its client retries) rather than
    forgetting the decision, and completing it commits the records."""
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        data = _txn_topic(manager)
        _, pid, epoch = await c.txns.init_producer_id("tx", 60_000)
        await c.txns.add_partitions("tx", pid, epoch, [("data", 0)])
        data.append_records([Record(b"k", b"decided")], producer_id=pid,
                            producer_epoch=epoch, base_sequence=0, transactional=True)
        meta = c.txns.txns["tx"]
        meta.state = TxnStatus.PREPARE_COMMIT  # stored, then the markers failed
        await c.txns.store.write("tx", meta.value(), 0)
        assert data.last_stable_offset == 0
        error, _, _ = await c.txns.init_producer_id("tx", 60_000)
        assert error is ErrorCode.concurrent_transactions
        assert meta.state is TxnStatus.PREPARE_COMMIT and data.last_stable_offset == 0
        assert await c.txns.complete_decided("tx")
        assert meta.state is TxnStatus.COMPLETE_COMMIT
        assert data.last_stable_offset == data.log_end_offset
        read = data.read(0, 1 << 20, isolation="read_committed")
        assert [r.value for r in read.records()] == [b"decided"]
        error, pid2, epoch2 = await c.txns.init_producer_id("tx", 60_000)
        assert error is ErrorCode.none and (pid2, epoch2) == (pid, epoch + 1)
    run(tmp_path, scenario)


def test_a_marker_reaching_a_loading_partition_settles_its_offsets(tmp_path: Path) -> None:
    """A transaction's marker that reaches a ``__consumer_offsets`` partition while it loads
    (WriteTxnMarkers to a new leader) settles the transaction's offsets once loaded, though
    the replay did not see it."""
    async def scenario(c: Coordinators, manager: LogManager) -> None:
        groups = c.groups
        partition = groups.store.partition_of("g")
        offsets = {("t", 0): rec.OffsetValue(7, "", 0, -1)}
        assert set((await groups.commit_txn_offsets(
            "g", 77, 0, -1, "", offsets)).values()) == {ErrorCode.none}
        groups.unload_partition(partition)
        loading = asyncio.ensure_future(groups.load_partition(partition))
        await asyncio.sleep(0)  # the replay is under way
        assert groups.check("g") is ErrorCode.coordinator_load_in_progress
        groups.complete_txn(77, [partition], True)  # the marker's append came after the replay
        await loading
        error, found = groups.fetch_offsets("g", None, True)
        assert error is ErrorCode.none
        assert found[("t", 0)][0] is not None and found[("t", 0)][0].offset == 7
    run(tmp_path, scenario)
