"""Consumer groups with confluent-kafka (librdkafka) against a real ``tierlog serve``: two
members of one group rebalance when the second joins and when one leaves (``close()``
sends LeaveGroup), every record is consumed exactly once across them (each is committed
synchronously before the next poll), and the commits are what an admin client's
OffsetFetch (``list_consumer_group_offsets``) reports."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.server_process import ServerProcess

from tierlog.log.log import Log
from tierlog.server.coordinator.coordinator_wire import partition_for
from tierlog.server.coordinator.group import offsets_topic_records as rec

SERVER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3,
                 "transaction.state.log.num.partitions": 1}
SERVER_PER_TEST = True  # each test restarts its server or reads its data
TOPIC, GROUP, PARTITIONS = "cg", "confluent-group", 4
DEADLINE_S = 60.0


def produce(bootstrap: str, start_at: int, count: int) -> None:
    """``count`` records, round-robin over the partitions, valued by their index."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(start_at, start_at + count):
        producer.produce(TOPIC, value=b"%d" % i, partition=i % PARTITIONS)
    assert producer.flush(DEADLINE_S) == 0


class Member:
    """One confluent consumer in the group, recording what it consumed."""

    def __init__(self, bootstrap: str, name: str) -> None:
        self.name = name
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": GROUP, "client.id": name,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 200})
        self.consumer.subscribe([TOPIC])
        self.seen: list[tuple[int, int, bytes]] = []

    def poll(self) -> None:
        message = self.consumer.poll(0.1)
        if message is None:
            return
        assert message.error() is None, message.error()
        self.seen.append((message.partition(), message.offset(), message.value()))
        self.consumer.commit(message=message, asynchronous=False)

    def partitions(self) -> set[int]:
        return {tp.partition for tp in self.consumer.assignment()}


def poll_until(members: list[Member], done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        for member in members:
            member.poll()


def test_two_confluent_members_rebalance_and_consume_each_record_once(
        server: ServerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(DEADLINE_S)
    produce(server.bootstrap, 0, 20)
    everyone = set(range(PARTITIONS))
    first = Member(server.bootstrap, "first")
    second: Member | None = None
    try:
        poll_until([first], lambda: len(first.seen) == 20 and first.partitions() == everyone,
                   "the first member to read everything")
        # The second member joins: the range assignor splits the partitions 2 + 2.
        second = Member(server.bootstrap, "second")
        both = [first, second]
        poll_until(both, lambda: len(first.partitions()) == len(second.partitions()) == 2,
                   "the rebalance after the second member joined")
        assert first.partitions() | second.partitions() == everyone
        produce(server.bootstrap, 20, 20)
        poll_until(both, lambda: len(first.seen) + len(second.seen) == 40,
                   "both members to read the new records")
        assert {p for p, _, _ in second.seen} == second.partitions()  # it read its own share
        assert {p for p, _, _ in first.seen[20:]} == first.partitions()
        # The second member leaves: the first takes every partition back and resumes at the
        # second's commits.
        second.consumer.close()
        left, second = second, None
        poll_until([first], lambda: first.partitions() == everyone,
                   "the rebalance after the second member left")
        produce(server.bootstrap, 40, 20)
        poll_until([first], lambda: len(first.seen) + len(left.seen) == 60,
                   "the first member to read the rest")
        records = first.seen + left.seen
        assert sorted(int(v) for _, _, v in records) == list(range(60))  # each exactly once
        assert len({(p, o) for p, o, _ in records}) == 60
    finally:
        first.consumer.close()
        if second is not None:
            second.consumer.close()
    # Every partition's commit is the offset after its last record (60 / 4 = 15 each).
    request = [ConsumerGroupTopicPartitions(GROUP, [TopicPartition(TOPIC, p)
                                                    for p in range(PARTITIONS)])]
    listed = admin.list_consumer_group_offsets(request)[GROUP].result(DEADLINE_S)
    assert listed.group_id == GROUP
    assert {tp.partition: tp.offset for tp in listed.topic_partitions} == dict.fromkeys(
        range(PARTITIONS), 15)
    assert all(tp.error is None for tp in listed.topic_partitions)


def test_a_static_member_restarts_without_a_rebalance(server: ServerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    for future in admin.create_topics([NewTopic("static", 2, 1)]).values():
        future.result(DEADLINE_S)

    def member() -> Consumer:
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "statics",
                             "group.instance.id": "worker-1", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 200, "enable.auto.commit": False})
        consumer.subscribe(["static"])
        deadline = time.monotonic() + DEADLINE_S
        while len(consumer.assignment()) < 2:
            assert time.monotonic() < deadline, "the static member got no assignment"
            consumer.poll(0.1)
        return consumer

    member().close()  # a static member's close() sends no LeaveGroup (KIP-345)
    again = member()
    try:
        described = admin.describe_consumer_groups(["statics"])["statics"].result(DEADLINE_S)
        assert [m.group_instance_id for m in described.members] == ["worker-1"]
    finally:
        again.close()
    # The group's metadata in __consumer_offsets: the restarted member replaced the first
    # under a new member id in the same generation (no rebalance).
    server.terminate()
    partition = partition_for("statics", SERVER_CONFIG["offsets.topic.num.partitions"])
    log = Log.open(server.data_dir / f"__consumer_offsets-{partition}")
    try:
        values = [rec.decode_group_value(r.value) for r in log.read(0, 1 << 20).data.records()
                  if r.key is not None and r.value is not None
                  and rec.decode_key(r.key) == rec.GroupKey("statics")]
    finally:
        log.close()
    stable = [v for v in values if v.members]
    assert {v.generation for v in stable} == {1}
    assert [m.group_instance_id for v in stable for m in v.members] == ["worker-1"] * len(stable)
    assert len({v.members[0].member_id for v in stable}) == 2
