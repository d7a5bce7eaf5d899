"""A cluster of real ``tierlog serve`` processes on 127.0.0.1 sharing one metadata store (a
local directory, as several nodes on one machine share a ``file://`` tier), for the
replication tests and the Jepsen-style harness.

Timeouts are short so that a failover takes seconds: sessions of ``SESSION_MS``, heartbeats
and polls a fraction of it. Every wait is on a condition, bounded (:func:`wait_until`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Self, TypeVar

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_request
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i32

from support.server_process import ServerProcess
from tierlog.errors import BrokerConnectionError
from tierlog.server.replication.wire_client import BrokerConnection

_T = TypeVar("_T")

SESSION_MS = 3000
#: The settings every node of a test cluster runs with (Kafka's names, and tierlog's for the
#: store).
FAST_CLUSTER: dict[str, Any] = {
    "broker.session.timeout.ms": SESSION_MS,
    "broker.heartbeat.interval.ms": 300,
    "cluster.metadata.poll.ms": 100,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.backoff.ms": 100,
    "replica.fetch.wait.max.ms": 200,
}


def wait_until(check: Callable[[], _T | None], what: str, timeout_s: float = 30.0) -> _T:
    """``check()``'s first truthy answer, polled until ``timeout_s`` (then AssertionError
    naming ``what``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)  # polling a condition, bounded by the deadline


def consume_exactly(bootstrap: str, topic: str, count: int, partition: int = 0
                    ) -> list[bytes]:
    """The values of ``partition`` from its start until ``count`` are read (bounded: a minute),
    checking that nothing more follows (an extra record would be a duplicate)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    extra = consumer.poll(1.0)
    consumer.close()
    assert extra is None or extra.error() is not None, extra.value()
    return got


class Cluster:
    """``n`` nodes (ids 1..n) over ``root``: each its own data dir, all one store."""

    def __init__(self, root: Path, n: int = 3, config: Mapping[str, Any] | None = None) -> None:
        self.root = Path(root)
        self.store_url = str(self.root / "cluster-metadata")
        common = {"cluster.metadata.url": self.store_url, **FAST_CLUSTER, **(config or {})}
        self.nodes = {i: ServerProcess(self.root / f"node-{i}", {**common, "node.id": i})
                      for i in range(1, n + 1)}

    def start(self) -> Cluster:
        for node in self.nodes.values():
            node.start()
        return self

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.alive():
                node.terminate()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def bootstrap(self) -> str:
        """Every node's address (the dead ones too: a client tries the next)."""
        return ",".join(n.bootstrap for n in self.nodes.values())

    def live_bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes.values() if n.alive())

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.live_bootstrap()})

    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Mapping[str, str] | None = None) -> None:
        """Create ``topic`` and wait until every partition's whole replica set is in sync."""
        wait_until(lambda: len(self.live_brokers()) >= replication_factor,
                   f"{replication_factor} live nodes")
        admin = self.admin()  # kept: the futures need their client alive
        futures = admin.create_topics([NewTopic(
            topic, partitions, replication_factor, config=dict(config or {}))])
        for future in futures.values():
            future.result(30)
        for p in range(partitions):
            wait_until(lambda p=p: len(self.isr(topic, p)) == replication_factor,
                       f"{topic}-{p} fully in sync")

    def partition_state(self, topic: str, partition: int = 0
                        ) -> tuple[int, list[int], list[int]] | None:
        """(leader, replicas, in-sync set) of a partition as a live node's Metadata says."""
        try:
            found = self.admin().list_topics(topic, timeout=5).topics.get(topic)
        except Exception:  # noqa: BLE001 - no node answered yet: not known
            return None
        if found is None or found.error is not None or partition not in found.partitions:
            return None
        meta = found.partitions[partition]
        return meta.leader, list(meta.replicas), list(meta.isrs)

    def isr(self, topic: str, partition: int = 0) -> list[int]:
        """The partition's in-sync set as a live node's Metadata says ([] when unknown)."""
        state = self.partition_state(topic, partition)
        return [] if state is None else state[2]

    def leader(self, topic: str, partition: int = 0) -> int:
        """The partition's leader once it has a live one that has taken the role up (the store
        names a leader a poll before the node itself acts on it)."""
        def led() -> int | None:
            state = self.partition_state(topic, partition)
            if state is None or state[0] < 0 or not self.nodes[state[0]].alive():
                return None
            return state[0] if self.leads(state[0], topic, partition) else None
        return wait_until(led, f"a live leader of {topic}-{partition}")

    def leads(self, node_id: int, topic: str, partition: int = 0) -> bool:
        """Whether node ``node_id`` answers for the partition as its leader (its
        OffsetForLeaderEpoch is not NOT_LEADER_OR_FOLLOWER)."""
        request = epoch_request.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(-1), topics=(epoch_request.OffsetForLeaderTopic(
                topic=TopicName(topic), partitions=(epoch_request.OffsetForLeaderPartition(
                    partition=i32(partition), current_leader_epoch=i32(-1),
                    leader_epoch=i32(0)),)),))

        async def ask() -> OffsetForLeaderEpochResponse:
            connection = BrokerConnection("127.0.0.1", self.nodes[node_id].port,
                                          client_id="cluster-procs", timeout_s=5)
            try:
                return await connection.send(request, OffsetForLeaderEpochResponse)
            finally:
                await connection.close()
        try:
            answer = asyncio.run(ask())
        except BrokerConnectionError:
            return False
        return answer.topics[0].partitions[0].error_code == ErrorCode.none

    def live_brokers(self) -> list[int]:
        """The nodes a live node's Metadata lists ([] when none answers)."""
        try:
            return sorted(self.admin().list_topics(timeout=5).brokers)
        except Exception:  # noqa: BLE001 - no node answered: none known
            return []

    def data_dir(self, node_id: int) -> Path:
        return self.nodes[node_id].data_dir
