"""The remote tier's part in a replicated partition (issue 24, tiered storage): only the
leader copies to the tier, publishes the tail and applies remote retention.

:func:`install` registers a role listener with the node's replica manager: each leadership
this node takes up (or gives up) is passed to the manager's remote part
(``ManagerRemote.set_role``), which claims the partition's tier at the leader epoch
(``_owner.json`` version 2 and the manifest, both by compare-and-swap) before it copies
anything. Followers only read the tier (how far the leader tiered, to drop local segments;
the tier's state, to start an empty replica from it: ``tierlog.remote.rlm.tier_start``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.server.replication.node import ClusterNode

__all__ = ["install", "owner_name"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]


def owner_name(node_id: int) -> str:
    """How a node names itself as the owner of the partitions it leads: ``node-<id>``."""
    return f"node-{node_id}"


def install(node: ClusterNode) -> None:
    """Make ``node``'s tier follow its leaderships (registers a role listener). Each change
    is handed to the tier in the background, in order per partition: a claim makes round
    trips to the tier and waits for a tiering run of the partition, and the node's other
    role changes must not wait for it (copying waits for the claim; the tier fences a
    superseded leader by itself)."""
    remote = node.services.manager.remote
    owner = owner_name(node.node_id)
    in_order: dict[TopicPartition, asyncio.Lock] = {}
    running: set[asyncio.Task[None]] = set()

    async def hand_over(tp: TopicPartition, leader_epoch: int | None) -> None:
        async with in_order.setdefault(tp, asyncio.Lock()):
            try:
                await node.services.run_blocking(
                    lambda: remote.set_role(tp, leader_epoch, owner))
            except Exception:
                log.exception("%s-%d: the tier did not take up this node's role (leader epoch "
                              "%s)", tp[0], tp[1], leader_epoch)

    async def on_role(tp: TopicPartition, leader_epoch: int | None) -> None:
        task = asyncio.get_running_loop().create_task(hand_over(tp, leader_epoch))
        running.add(task)
        task.add_done_callback(running.discard)

    node.replicas.role_listeners.append(on_role)
