"""Tiered storage of replicated partitions between real ``tierlog serve`` processes (issue 24):
three nodes share one metadata store and one ``file://`` tier; a tiered topic is replicated
on all of them.

Only the leader copies to the tier (``_owner.json`` names it at its leader epoch, and only its
log says it copied), followers drop the local segments the tier holds, a new leader goes on
from where the tier is, an old leader stopped and resumed cannot corrupt the tier, and an
empty follower starts its log from the tier and can then lead, serving the old offsets from
the tier. Local ``file://`` tier only: a node opens its cluster store with the tier's
storage options, so an S3 tier needs an S3 cluster store too, which moto does not serialize;
the tier's compare-and-swap on S3 is covered by ``tests/remote/test_tier_fencing.py`` on moto.
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Any

import fsspec
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.cluster_procs import Cluster, wait_until

from tierlog.cluster.keys import PartitionRecord, partition_key
from tierlog.cluster.open_store import open_metadata_store
from tierlog.remote.api import RemoteLogSegmentMetadata
from tierlog.remote.tier.manifest import PartitionManifest, load_partition, remote_partitions
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.ownership import PartitionOwner, read_owner

TOPIC = "tiered"
SEGMENT_BYTES = 4096
TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": "1", "file.delete.delay.ms": "0",
                "min.insync.replicas": "1"}


def _cluster_config(tier_dir: Path) -> dict[str, Any]:
    return {"remote.storage.manager": "local", "remote.storage.url": tier_dir.as_uri(),
            "remote.log.manager.task.interval.ms": 100,
            "log.retention.check.interval.ms": 100, "file.delete.delay.ms": 0,
            # A follower's fetch from a stopped leader gives up in 2 s, not Kafka's 30 s.
            "replica.socket.timeout.ms": 2000}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path, 3, _cluster_config(tmp_path / "tier")) as running:
        running.create_topic(TOPIC, 1, 3, TOPIC_CONFIG)
        yield running


def _tier(cluster: Cluster) -> RemoteTier:
    return RemoteTier(fsspec.filesystem("file"), str(cluster.root / "tier"))


def _manifest(cluster: Cluster) -> PartitionManifest | None:
    tier = _tier(cluster)
    found = [p for p in remote_partitions(tier) if p.topic == TOPIC]
    return load_partition(tier, found[0])[0] if found else None


def _owner(cluster: Cluster) -> PartitionOwner | None:
    tier = _tier(cluster)
    found = [p for p in remote_partitions(tier) if p.topic == TOPIC]
    return read_owner(tier, found[0]) if found else None


def _tiered_end(cluster: Cluster) -> int:
    manifest = _manifest(cluster)
    return -1 if manifest is None else max((m.end_offset for m in manifest.committed),
                                           default=-1)


def _leader_epoch(cluster: Cluster) -> int:
    store = open_metadata_store(cluster.store_url, {})
    key = partition_key(TOPIC, 0)
    found = store.read(key)
    assert found is not None
    return PartitionRecord.from_value(key, found.value).leader_epoch


def _local_start(cluster: Cluster, node_id: int) -> int:
    """The base offset of the node's first local segment of the partition."""
    bases = [int(p.name.removesuffix(".log"))
             for p in (cluster.data_dir(node_id) / f"{TOPIC}-0").glob("*.log")]
    return min(bases, default=-1)


def _produce(cluster: Cluster, first: int, count: int, bootstrap: str | None = None) -> None:
    producer = Producer({"bootstrap.servers": bootstrap or cluster.live_bootstrap(),
                         "acks": "all",
                         "linger.ms": 0, "batch.num.messages": 10,
                         "enable.idempotence": True})
    for i in range(first, first + count):
        producer.produce(TOPIC, value=b"record-%05d" % i + b"." * 60)
    assert producer.flush(60) == 0


def _consume_all(cluster: Cluster, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": cluster.live_bootstrap(),
                         "group.id": f"check-{os.urandom(4).hex()}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    try:
        wait_until(lambda: _poll_into(consumer, values) >= count,
                   f"{count} records consumed from offset 0", 60)
    finally:
        consumer.close()
    return values


def _poll_into(consumer: Consumer, values: list[bytes]) -> int:
    for message in consumer.consume(100, 0.5):
        if message.error() is None:
            values.append(message.value())
    return len(values)


def _check_tier(cluster: Cluster) -> list[RemoteLogSegmentMetadata]:
    """The tier's committed segments form one chain (no overlap, no gap) and each one's
    objects exist: nothing committed points at missing data."""
    manifest = _manifest(cluster)
    assert manifest is not None
    committed = sorted(manifest.committed, key=lambda m: m.start_offset)
    for before, after in pairwise(committed):
        assert after.start_offset == before.end_offset + 1, (before, after)
    tier = _tier(cluster)
    names = set()
    for directory, _, files in os.walk(tier.root):
        names |= {f"{directory}/{f}" for f in files}
    for m in committed:
        uuid_part = str(m.remote_log_segment_id.id)
        assert any(uuid_part in n and n.endswith(".log") for n in names), m
    return committed


def _expected(count: int) -> list[bytes]:
    return [b"record-%05d" % i + b"." * 60 for i in range(count)]


def test_only_the_leader_tiers_and_a_new_leader_goes_on_from_the_tier(
        cluster: Cluster) -> None:
    _produce(cluster, 0, 400)
    leader = cluster.leader(TOPIC)
    epoch = _leader_epoch(cluster)
    wait_until(lambda: _tiered_end(cluster) > 100, "segments tiered")
    assert _owner(cluster) == PartitionOwner(f"node-{leader}", _owner_since(cluster), epoch)
    followers = [n for n in cluster.nodes if n != leader]
    for node_id in followers:  # their local retention drops what the tier holds
        wait_until(lambda n=node_id: _local_start(cluster, n) > 0,
                   f"node {node_id} dropping tiered local segments")
    assert "to the remote tier" in cluster.nodes[leader].log_text()
    for node_id in followers:
        assert "copied segment" not in cluster.nodes[node_id].log_text()
    before = _tiered_end(cluster)

    cluster.nodes[leader].kill()
    new_leader = cluster.leader(TOPIC)
    assert new_leader != leader
    _produce(cluster, 400, 200)
    wait_until(lambda: _tiered_end(cluster) > before + 50, "the new leader tiering")
    owner = _owner(cluster)
    assert owner is not None and owner.owner == f"node-{new_leader}"
    assert owner.leader_epoch == _leader_epoch(cluster) > epoch
    _check_tier(cluster)
    wait_until(lambda: _local_start(cluster, new_leader) > 0, "the new leader's local start")
    assert _consume_all(cluster, 600)[:600] == _expected(600)


def _owner_since(cluster: Cluster) -> int:
    owner = _owner(cluster)
    assert owner is not None
    return owner.since_ms


def test_a_stopped_and_resumed_old_leader_cannot_corrupt_the_tier(cluster: Cluster) -> None:
    _produce(cluster, 0, 300)
    leader = cluster.leader(TOPIC)
    wait_until(lambda: _tiered_end(cluster) > 100, "segments tiered")
    old = cluster.nodes[leader]
    assert old.proc is not None
    old.proc.send_signal(signal.SIGSTOP)
    try:
        new_leader = wait_until(
            lambda: (s := cluster.partition_state(TOPIC)) is not None and s[0] != leader
            and s[0] > 0 and s[0], "leadership moving off the stopped node")
        others = ",".join(n.bootstrap for i, n in cluster.nodes.items() if i != leader)
        _produce(cluster, 300, 300, others)
        wait_until(lambda: (o := _owner(cluster)) is not None
                   and o.owner == f"node-{new_leader}", "the new leader's claim")
    finally:
        old.proc.send_signal(signal.SIGCONT)
    before = _tiered_end(cluster)
    _produce(cluster, 600, 200)
    wait_until(lambda: _tiered_end(cluster) > before + 50, "tiering after the resume")
    owner = _owner(cluster)
    assert owner is not None and owner.owner == f"node-{cluster.leader(TOPIC)}"
    _check_tier(cluster)
    assert _consume_all(cluster, 800)[:800] == _expected(800)


def test_an_empty_follower_starts_from_the_tier_joins_the_isr_and_can_lead(
        cluster: Cluster) -> None:
    _produce(cluster, 0, 400)
    leader = cluster.leader(TOPIC)
    wait_until(lambda: _local_start(cluster, leader) > 0, "the leader dropping tiered segments")
    empty = next(n for n in cluster.nodes if n != leader)
    cluster.nodes[empty].terminate()
    shutil.rmtree(cluster.data_dir(empty) / f"{TOPIC}-0")
    _produce(cluster, 400, 100)
    cluster.nodes[empty].start()
    wait_until(lambda: sorted(cluster.isr(TOPIC)) == [1, 2, 3], "the empty follower in sync",
               60)
    start = _local_start(cluster, empty)
    assert start > 0  # it never copied the tiered history to its disk
    assert "started from the remote tier" in cluster.nodes[empty].log_text()
    for node_id in [n for n in cluster.nodes if n != empty]:
        cluster.nodes[node_id].kill()
    wait_until(lambda: cluster.leads(empty, TOPIC), "the rebuilt node leading", 60)
    assert _consume_all(cluster, 500)[:500] == _expected(500)
