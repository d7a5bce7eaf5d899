"""A replicating node's tiering follows its leaderships (issue 24), driven through two
LogManagers over one tier, as two nodes of a cluster (``auto.high.watermark=false``):
nothing is tiered until the node is told it leads (``ManagerRemote.set_role``); a follower
learns the tiered offset from the leader's manifest; once another node leads at a newer
epoch, the old leader's tail publish and tiering run fail their compare-and-swaps, commit
nothing, and it stops tiering the partition for good."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.remote.tier.manifest import load_partition, remote_partitions
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.ownership import PartitionOwner, read_owner
from tierlog.remote.tier.tail_manifest import read_tail_manifest

TOPIC_CONFIG = {"remote.storage.enable": True, "segment.bytes": 1024,
                "remote.log.tail.ms": 0}
TOPIC_ID = "a6aNOwnsT0GOjEPVJZEMgA"
TP = ("orders", 0)


@pytest.fixture
def nodes(tmp_path: Path, clock: Any) -> Iterator[tuple[LogManager, LogManager]]:
    config = {"auto.high.watermark": False, "remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    a = LogManager.open(tmp_path / "a", config, time_ms=clock, start_scheduler=False)
    b = LogManager.open(tmp_path / "b", config, time_ms=clock, start_scheduler=False)
    for manager in (a, b):
        manager.create_topic("orders", 1, TOPIC_CONFIG, topic_id=TOPIC_ID)
    yield a, b
    a.close()
    b.close()


def _append(manager: LogManager, epoch: int, count: int) -> None:
    log = manager.log(*TP)
    log.leader_epoch = epoch
    for i in range(count):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 200)])
    log.update_high_watermark(log.log_end_offset)


def _tier(tmp_path: Path) -> RemoteTier:
    return RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))


def _committed_ends(tmp_path: Path) -> list[int]:
    tier = _tier(tmp_path)
    (tip,) = remote_partitions(tier)
    return [m.end_offset for m in load_partition(tier, tip)[0].committed]


def test_only_the_claimed_leader_tiers_and_a_superseded_one_stops(
        nodes: tuple[LogManager, LogManager], tmp_path: Path) -> None:
    a, b = nodes
    _append(a, 1, 30)
    assert not any(r.copied for r in a.remote.tier_now().values())  # not led yet
    assert a.remote.set_role(TP, 1, "node-1")
    assert sum(len(r.copied) for r in a.remote.tier_now().values()) > 2
    assert a.remote.publish_tail_now() == {"orders-0": True}
    tiered = _committed_ends(tmp_path)
    tier = _tier(tmp_path)
    (tip,) = remote_partitions(tier)
    assert read_owner(tier, tip) == PartitionOwner("node-1", read_owner(tier, tip).since_ms, 1)

    b.remote.tier_now()  # a follower: it only learns how far its leader has tiered
    assert b.log(*TP).highest_offset_in_remote == tiered[-1]
    assert b.remote.set_role(TP, 2, "node-2")  # the new leader claims the tier
    owner = read_owner(tier, tip)
    assert owner is not None and (owner.owner, owner.leader_epoch) == ("node-2", 2)
    generation = read_tail_manifest(tier, tip)

    _append(a, 1, 20)  # the old leader, not told yet, goes on
    assert a.remote.publish_tail_now() == {"orders-0": False}  # its swap lost
    assert a.remote.leading_logs() == []
    assert read_tail_manifest(tier, tip) == generation
    results = a.remote.tier_now()  # it reads its role again: a newer epoch owns the tier
    assert not any(r.copied for r in results.values())
    assert a.remote.leading_logs() == []
    assert _committed_ends(tmp_path) == tiered


def test_only_the_leader_deletes_a_deleted_topics_tier(nodes: tuple[LogManager, LogManager],
                                                      tmp_path: Path) -> None:
    a, b = nodes
    _append(a, 1, 30)
    assert a.remote.set_role(TP, 1, "node-1")
    a.remote.tier_now()
    tiered = _committed_ends(tmp_path)
    assert tiered
    b.delete_topic("orders")  # a follower's replica goes; the tier stays for its leader
    assert _committed_ends(tmp_path) == tiered
    a.remote.set_role(TP, None, "node-1")  # a node gives up a deleted topic's leadership
    a.delete_topic("orders")  # then deletes it: as its last leader, it deletes the tier
    tier = _tier(tmp_path)
    assert all(not load_partition(tier, tip)[0].committed for tip in remote_partitions(tier))
