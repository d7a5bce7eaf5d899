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

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.server.replication.node import ClusterNode

__all__ = ["check_topic", "install", "owner_name"]

TopicPartition = tuple[str, int]


def owner_name(node_id: int) -> str:
    """How a node names itself as the owner of the partitions it leads: ``node-<id>``."""
    return f"node-{node_id}"


def install(node: ClusterNode) -> None:
    """Make ``node``'s tier follow its leaderships (registers a role listener)."""
    remote = node.services.manager.remote
    owner = owner_name(node.node_id)

    async def on_role(tp: TopicPartition, leader_epoch: int | None) -> None:
        await node.services.run_blocking(lambda: remote.set_role(tp, leader_epoch, owner))

    node.replicas.role_listeners.append(on_role)


def check_topic(node: ClusterNode, name: str, configs: Mapping[str, str]) -> None:
    """ConfigError when topic ``name`` may not be created with ``configs`` on a replicating
    node: nothing is refused any more (a tiered topic is tiered by each partition's leader);
    kept as the one place a future restriction goes."""
    del node, name, configs
