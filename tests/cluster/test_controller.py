"""The controller (tierlog.cluster.controller) on a local directory and on S3 (moto): one node
claims the role and renews it; another takes it over, with the next epoch, only once the claim
has been silent for a session by the taker's own clock, and the deposed node learns it at its
next step. While it holds the claim, the controller fences a silent broker and moves every
partition it was in: out of the in-sync set, a new leader elected from it, epochs bumped, each
a compare-and-swap; a topic whose creator stopped before writing its partitions gets them."""

from __future__ import annotations

import random

import pytest
from support.clock import FakeClock

from tierlog.cluster.controller import Controller, create_topic, partition_states
from tierlog.cluster.keys import CONTROLLER, NO_LEADER, ControllerRecord, TopicRecord, topic_key
from tierlog.cluster.registry import BrokerRegistration, read_brokers
from tierlog.cluster.store import MetadataStore
from tierlog.errors import InvalidReplicationFactorError, TopicExistsError

SESSION_MS = 9_000


def _controller(store: MetadataStore, node_id: int, clock: FakeClock) -> Controller:
    return Controller(store, node_id, session_timeout_ms=SESSION_MS, time_ms=clock)


def _claim(store: MetadataStore) -> ControllerRecord:
    found = store.read(CONTROLLER)
    assert found is not None
    return ControllerRecord.from_value(CONTROLLER, found.value)


def test_one_node_claims_and_another_takes_over_only_after_a_silent_session(
        store: MetadataStore) -> None:
    one_clock, two_clock = FakeClock(), FakeClock(7)
    one, two = _controller(store, 1, one_clock), _controller(store, 2, two_clock)
    assert one.step().controller and _claim(store).controller_epoch == 1
    assert not two.step().controller  # a claim it sees for the first time is alive
    two_clock.advance(SESSION_MS - 1)
    assert one.step().controller  # renewed
    assert not two.step().controller
    two_clock.advance(SESSION_MS)  # node 1 silent for a whole session, by node 2's clock
    taken = two.step()
    assert taken.controller and taken.epoch == 2
    assert (_claim(store).node_id, _claim(store).controller_epoch) == (2, 2)
    assert not one.step().controller and not one.active  # deposed: its renewal lost


def test_a_silent_broker_is_fenced_and_its_partitions_move_to_in_sync_replicas(
        store: MetadataStore) -> None:
    clock = FakeClock()
    nodes = {n: BrokerRegistration(store, n, host="127.0.0.1", port=9090 + n,
                                   dirs_id=f"disks-{n}", session_timeout_ms=SESSION_MS,
                                   time_ms=clock, wall_ms=clock) for n in (1, 2, 3)}
    for node in nodes.values():
        node.register()
    create_topic(store, "orders", "id-orders", 3, 3, {1, 2, 3}, rng=random.Random(5))
    controller = _controller(store, 1, clock)
    first = controller.step()
    assert first.controller and not first.fenced and not first.changed
    before = {p: s for _, p, s, _ in partition_states(store)}
    led_by_3 = [p for p, s in before.items() if s.leader == 3]
    assert led_by_3 and all(s.isr == s.replicas for s in before.values())

    clock.advance(SESSION_MS)  # 1 and 2 heartbeat, 3 stays silent
    nodes[1].heartbeat()
    nodes[2].heartbeat()
    done = controller.step()
    assert done.fenced == [3] and read_brokers(store)[3][0].fenced
    after = {p: s for _, p, s, _ in partition_states(store)}
    for p, state in after.items():
        old = before[p]
        assert 3 not in state.isr and set(state.isr) == {1, 2}
        assert state.partition_epoch == old.partition_epoch + 1
        if p in led_by_3:  # the first in-sync replica in preference order leads now
            assert state.leader == next(r for r in old.replicas if r != 3)
            assert state.leader_epoch == old.leader_epoch + 1
        else:
            assert (state.leader, state.leader_epoch) == (old.leader, old.leader_epoch)
    assert controller.step().changed == []  # nothing more to do

    clock.advance(SESSION_MS)  # now only node 1 lives: no unclean election, ISR keeps one
    nodes[1].heartbeat()
    controller.step()
    for _, _, state, _ in partition_states(store):
        assert state.isr == (1,) and state.leader == 1


def test_a_topic_whose_creator_stopped_gets_its_partitions_from_the_controller(
        store: MetadataStore) -> None:
    clock = FakeClock()
    BrokerRegistration(store, 1, host="h", port=9092, dirs_id="d", time_ms=clock,
                       wall_ms=clock).register()
    store.create(topic_key("half"), TopicRecord("id-half", ((1,), (1,))).to_value())
    assert [s for _, _, _, s in partition_states(store)] == [None, None]
    done = _controller(store, 1, clock).step()
    assert [(t, p) for t, p, _ in done.changed] == [("half", 0), ("half", 1)]
    assert all(v is not None and s.leader == 1 for _, _, s, v in partition_states(store))


def test_creating_a_topic_twice_or_with_too_many_replicas_is_refused(
        store: MetadataStore) -> None:
    create_topic(store, "t", "id-t", 1, 2, {1, 2})
    with pytest.raises(TopicExistsError, match="'t'"):
        create_topic(store, "t", "id-t2", 1, 1, {1, 2})
    with pytest.raises(InvalidReplicationFactorError):
        create_topic(store, "u", "id-u", 1, 3, {1, 2})
    assert store.read(topic_key("u")) is None
    assert [(t, s.leader != NO_LEADER) for t, _, s, _ in partition_states(store)] == [
        ("t", True)]
