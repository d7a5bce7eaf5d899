"""Node registration in the cluster store (tierlog.cluster.registry), on a local directory and on
S3 (moto): a node registers and heartbeats; a restart on the same disks takes its id over at
once with the next broker epoch, and the old life's heartbeat learns it was fenced; another
node may take a live id only after the holder has been silent for the session timeout, as the
newcomer's own clock observes; the controller's fence stops a node's heartbeat; and an
observer's live set follows who changed their record within the timeout."""

from __future__ import annotations

import pytest
from support.clock import FakeClock

from tierlog.cluster.keys import BrokerRecord, broker_key, node_id_of, partition_key, topic_key
from tierlog.cluster.registry import (
    BrokerRegistration,
    LivenessTracker,
    fence,
    live_brokers,
    read_brokers,
)
from tierlog.cluster.store import MetadataStore
from tierlog.errors import (
    BrokerFencedError,
    CorruptRemoteMetadataError,
    InvalidTopicError,
    NodeIdInUseError,
)

SESSION_MS = 9_000


def _node(store: MetadataStore, clock: FakeClock, node_id: int = 1, *, dirs: str = "disks-a",
          port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(store, node_id, host="127.0.0.1", port=port, dirs_id=dirs,
                              session_timeout_ms=SESSION_MS, time_ms=clock, wall_ms=clock)


def test_a_node_registers_and_heartbeats(store: MetadataStore) -> None:
    clock = FakeClock()
    node = _node(store, clock)
    record = node.register()
    assert (record.node_id, record.port, record.broker_epoch, record.fenced) == (1, 9092, 1,
                                                                                False)
    clock.advance(2_000)
    beat = node.heartbeat()
    assert beat.heartbeat_ms == clock.now and beat.incarnation == record.incarnation
    found = read_brokers(store)
    assert list(found) == [1] and found[1][0] == beat


def test_a_restart_on_the_same_disks_takes_the_id_over_and_fences_its_old_life(
        store: MetadataStore) -> None:
    clock = FakeClock()
    old = _node(store, clock)
    first = old.register()
    new = _node(store, clock)  # the same data directories: the old life is over
    second = new.register()
    assert second.broker_epoch == first.broker_epoch + 1
    assert second.incarnation != first.incarnation
    with pytest.raises(BrokerFencedError, match="took the id over"):
        old.heartbeat()
    new.heartbeat()


def test_a_live_id_is_taken_over_only_after_its_holder_is_silent_for_a_session(
        store: MetadataStore) -> None:
    holder_clock, newcomer_clock = FakeClock(), FakeClock(5)  # each node its own clock
    holder = _node(store, holder_clock)
    holder.register()
    newcomer = _node(store, newcomer_clock, dirs="disks-b", port=9093)
    with pytest.raises(NodeIdInUseError, match=r"127\.0\.0\.1:9092"):
        newcomer.register()
    newcomer_clock.advance(SESSION_MS - 1)
    holder.heartbeat()  # a heartbeat within the session: still in use
    with pytest.raises(NodeIdInUseError):
        newcomer.register()
    newcomer_clock.advance(SESSION_MS - 1)
    with pytest.raises(NodeIdInUseError):  # silent for less than a session since it changed
        newcomer.register()
    newcomer_clock.advance(1)
    taken = newcomer.register()  # silent for a whole session, as the newcomer observed it
    assert (taken.port, taken.broker_epoch) == (9093, 2)
    with pytest.raises(BrokerFencedError):
        holder.heartbeat()


def test_the_controllers_fence_stops_a_nodes_heartbeat_and_it_registers_again(
        store: MetadataStore) -> None:
    clock = FakeClock()
    node = _node(store, clock)
    node.register()
    _, version = read_brokers(store)[1]
    fenced = fence(store, 1, version)
    assert BrokerRecord.from_value(broker_key(1), fenced.value).fenced
    with pytest.raises(BrokerFencedError, match="fenced it"):
        node.heartbeat()
    again = node.register()  # a fenced record is taken at once
    assert again.broker_epoch == 2 and not again.fenced


def test_an_observers_live_set_follows_who_changed_within_the_session(
        store: MetadataStore) -> None:
    clock = FakeClock()
    one, two = _node(store, clock, 1), _node(store, clock, 2, dirs="disks-b", port=9093)
    one.register()
    two.register()
    watch = FakeClock(clock.now)  # the observer's own clock
    observer = LivenessTracker(SESSION_MS, watch)
    assert set(live_brokers(read_brokers(store), observer)) == {1, 2}  # first seen: alive
    watch.advance(SESSION_MS - 1)
    two.heartbeat()
    assert set(live_brokers(read_brokers(store), observer)) == {1, 2}
    watch.advance(1)  # node 1 unchanged for a whole session; node 2 changed a moment ago
    assert set(live_brokers(read_brokers(store), observer)) == {2}
    _, version = read_brokers(store)[2]
    fence(store, 2, version)
    assert live_brokers(read_brokers(store), observer) == {}


def test_a_stored_record_is_checked_field_by_field() -> None:
    good = BrokerRecord(3, "h", 9092, "i" * 32, "d", 4).to_value()
    assert BrokerRecord.from_value("brokers/3", good).broker_epoch == 4
    for broken, match in (({**good, "port": True}, "port"), ({**good, "port": 0}, "port 0"),
                          ({k: v for k, v in good.items() if k != "dirsId"}, "dirsId"),
                          (good, "node 3")):
        key = "brokers/4" if broken is good else "brokers/3"
        with pytest.raises(CorruptRemoteMetadataError, match=match):
            BrokerRecord.from_value(key, broken)


def test_key_names() -> None:
    assert broker_key(7) == "brokers/7" and node_id_of("brokers/7") == 7
    assert node_id_of("brokers/07") is None and node_id_of("controller") is None
    assert topic_key(".metrics") == "topics/t_.metrics"  # a dot-led topic is a legal key
    assert partition_key("orders", 3) == "partitions/t_orders/3"
    for bad in ("", ".", "..", "a/b", "x" * 250):
        with pytest.raises(InvalidTopicError):
            topic_key(bad)
    with pytest.raises(ValueError):
        broker_key(-1)
