"""Topic changes in the cluster store (tierlog.cluster.topic_changes, on a local directory):
deletion leaves a tombstone that every reader takes for an absent topic and marks the
partitions; a crash between the two never shows a live topic; a topic created again gets a new
id, remembers the old one and never starts from the old partitions' states; growth keeps the
old partitions and assigns the new ones (round robin or as asked); config changes are a
compare-and-swap of the record; a stale writer never gives a new topic an old one's state."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from support.clock import FakeClock

from tierlog.cluster.controller import Controller, create_topic, partition_states, read_topics
from tierlog.cluster.keys import (
    DELETED_PARTITION,
    PartitionRecord,
    TopicRecord,
    partition_key,
    topic_key,
)
from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.store import MetadataStore
from tierlog.cluster.topic_changes import (
    alter_topic_configs,
    create_partitions,
    delete_topic,
    grown,
    mark_partitions_deleted,
    read_topic,
    write_first_states,
)
from tierlog.errors import (
    CorruptRemoteMetadataError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)

LIVE = {1, 2, 3}


@pytest.fixture
def store(tmp_path: Path) -> MetadataStore:
    return open_metadata_store(str(tmp_path / "cluster"))


def _states(store: MetadataStore) -> dict[tuple[str, int], PartitionRecord | None]:
    return {(t, p): (s if v is not None else None) for t, p, s, v in partition_states(store)}


def _shrink_isr(store: MetadataStore, topic: str, partition: int) -> None:
    """What a leader does: its in-sync set shrunk, by compare-and-swap."""
    key = partition_key(topic, partition)
    found = store.read(key)
    assert found is not None
    state = PartitionRecord.from_value(key, found.value)
    store.replace(key, PartitionRecord(state.replicas, (state.leader,), state.leader,
                                       state.leader_epoch, state.partition_epoch + 1).to_value(),
                  found)


def test_a_deleted_topic_is_gone_for_readers_and_its_partitions_are_marked(
        store: MetadataStore) -> None:
    create_topic(store, "orders", "id-old", 2, 3, LIVE, rng=random.Random(1))
    create_topic(store, "other", "id-other", 1, 1, LIVE)
    tombstone = delete_topic(store, "orders")
    assert tombstone.deleted and tombstone.topic_id == "id-old"
    assert set(read_topics(store)) == {"other"}
    assert set(_states(store)) == {("other", 0)}
    for p in (0, 1):
        found = store.read(partition_key("orders", p))
        assert found is not None and found.value == dict(DELETED_PARTITION)
    with pytest.raises(UnknownTopicOrPartitionError, match="orders"):
        delete_topic(store, "orders")
    with pytest.raises(UnknownTopicOrPartitionError, match="never"):
        delete_topic(store, "never")


def test_a_crash_between_tombstone_and_marks_never_shows_the_topic_and_creation_again_starts_fresh(
        store: MetadataStore) -> None:
    create_topic(store, "orders", "id-old", 2, 3, LIVE, rng=random.Random(1))
    _shrink_isr(store, "orders", 0)  # the old partition moved on: epochs and in-sync set
    found = read_topic(store, "orders")
    assert found is not None
    # The deleter stopped after its tombstone: the partitions still hold the old states.
    store.replace(topic_key("orders"), TopicRecord(
        "id-old", found[0].assignment, deleted=True).to_value(), found[1])
    assert read_topics(store) == {} and _states(store) == {}
    record = create_topic(store, "orders", "id-new", 3, 2, LIVE, rng=random.Random(2))
    assert record.previous_ids == ("id-old",)
    states = _states(store)
    assert set(states) == {("orders", p) for p in range(3)}
    for p, state in states.items():  # every partition at its first state, none the old one's
        assert state is not None
        assert (state.replicas, state.isr, state.leader, state.partition_epoch) == (
            record.assignment[p[1]], record.assignment[p[1]], record.assignment[p[1]][0], 0)
    delete_topic(store, "orders")
    again = create_topic(store, "orders", "id-third", 1, 1, LIVE)
    assert again.previous_ids == ("id-old", "id-new")
    with pytest.raises(TopicExistsError):
        create_topic(store, "orders", "id-fourth", 1, 1, LIVE)


def test_marking_stops_once_the_topic_is_created_again(store: MetadataStore) -> None:
    create_topic(store, "orders", "id-old", 1, 1, LIVE)
    delete_topic(store, "orders")
    create_topic(store, "orders", "id-new", 1, 1, LIVE)
    mark_partitions_deleted(store, "orders", "id-old")  # a slow deleter, too late
    assert _states(store)[("orders", 0)] is not None


def test_a_stale_writer_never_gives_a_new_topic_the_old_ones_first_state(
        store: MetadataStore) -> None:
    create_topic(store, "orders", "id-old", 1, 1, {1})
    delete_topic(store, "orders")
    create_topic(store, "orders", "id-new", 1, 1, {2})
    # A controller that read the old topic writes "its" missing first state: refused by id.
    assert write_first_states(store, "orders", "id-old", [(1,)], [0]) == []
    state = _states(store)[("orders", 0)]
    assert state is not None and state.replicas == (2,)
    # Nor under a tombstone.
    delete_topic(store, "orders")
    assert write_first_states(store, "orders", "id-new", [(2,)], [0]) == []


def test_the_controller_writes_the_first_states_a_creator_left_marked(
        store: MetadataStore) -> None:
    create_topic(store, "orders", "id-old", 2, 1, {1})
    delete_topic(store, "orders")
    # A creator that stopped after its record: the partitions are still deleted markers.
    found = read_topic(store, "orders")
    assert found is not None
    store.replace(topic_key("orders"), TopicRecord("id-new", ((1,), (1,))).to_value(), found[1])
    assert _states(store) == {("orders", 0): None, ("orders", 1): None}
    step = Controller(store, 1, session_timeout_ms=9000, time_ms=FakeClock()).step()
    assert {(t, p) for t, p, _ in step.changed} == {("orders", 0), ("orders", 1)}
    assert all(s is not None and s.leader == 1 for s in _states(store).values())


def test_growth_keeps_the_old_partitions_and_assigns_the_new_ones(store: MetadataStore) -> None:
    create_topic(store, "orders", "id", 2, 2, LIVE, rng=random.Random(3))
    _shrink_isr(store, "orders", 1)
    before = _states(store)
    record = create_partitions(store, "orders", 5, LIVE, rng=random.Random(4))
    assert len(record.assignment) == 5 and record.topic_id == "id"
    assert all(len(r) == 2 and len(set(r)) == 2 and set(r) <= LIVE for r in record.assignment)
    after = _states(store)
    assert {k: after[k] for k in before} == before  # the old partitions untouched
    for p in (2, 3, 4):
        state = after[("orders", p)]
        assert state is not None and state.leader == record.assignment[p][0]
        assert state.isr == record.assignment[p]
    explicit = create_partitions(store, "orders", 6, LIVE, [[3, 1]])
    assert explicit.assignment[5] == (3, 1)
    with pytest.raises(InvalidPartitionsError, match="6 partitions"):
        create_partitions(store, "orders", 6, LIVE)
    with pytest.raises(UnknownTopicOrPartitionError):
        create_partitions(store, "nope", 6, LIVE)


@pytest.mark.parametrize(("assignments", "problem"), [
    ([[1, 2], [2, 3]], "2 replica assignments for the 1 new"),
    ([[1]], "not 2 distinct"),
    ([[1, 1]], "not 2 distinct"),
    ([[1, 9]], r"nodes \[9\] that are not live"),
])
def test_an_explicit_assignment_kafka_refuses_is_refused(
        assignments: list[list[int]], problem: str) -> None:
    record = TopicRecord("id", ((1, 2),))
    with pytest.raises(InvalidReplicaAssignmentError, match=problem):
        grown(record, "orders", 2, LIVE, assignments)


def test_growth_needs_as_many_live_nodes_as_the_replication_factor() -> None:
    with pytest.raises(InvalidReplicationFactorError):
        grown(TopicRecord("id", ((1, 2, 3),)), "orders", 2, {1, 2})


def test_config_changes_replace_the_record_and_keep_the_rest(store: MetadataStore) -> None:
    create_topic(store, "orders", "id", 2, 1, LIVE, configs={"retention.ms": "1000"})
    after = alter_topic_configs(store, "orders",
                                lambda c: {**c, "cleanup.policy": "compact"})
    assert dict(after.configs) == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert read_topics(store)["orders"] == after

    def refuse(_: object) -> dict[str, str]:
        raise ValueError("refused")

    with pytest.raises(ValueError, match="refused"):
        alter_topic_configs(store, "orders", refuse)
    assert read_topics(store)["orders"] == after
    delete_topic(store, "orders")
    with pytest.raises(UnknownTopicOrPartitionError):
        alter_topic_configs(store, "orders", dict)


def test_a_topic_record_round_trips_and_a_bad_one_names_its_key() -> None:
    record = TopicRecord("id", ((1, 2),), {"a": "b"}, deleted=True, previous_ids=("x", "y"))
    assert TopicRecord.from_value("topics/t_x", record.to_value()) == record
    plain = TopicRecord("id", ((1,),))
    assert "deleted" not in plain.to_value() and "previousTopicIds" not in plain.to_value()
    for bad in ({"deleted": "yes"}, {"previousTopicIds": [1]}):
        with pytest.raises(CorruptRemoteMetadataError, match="topics/t_x"):
            TopicRecord.from_value("topics/t_x", {**plain.to_value(), **bad})
