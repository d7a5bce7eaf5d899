"""The remote tier's part in a replicated partition (issue 24, tiered storage): only the
leader copies to the tier and publishes the tail. Built out by the tier-roles work."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tierlog.errors import ConfigError

if TYPE_CHECKING:
    from tierlog.server.replication.node import ClusterNode

__all__ = ["check_topic", "install"]


def install(node: ClusterNode) -> None:
    """Make ``node``'s tier follow its leaderships (registers a role listener)."""
    del node


def check_topic(node: ClusterNode, name: str, configs: Mapping[str, str]) -> None:
    """ConfigError when topic ``name`` may not be created with ``configs`` on a replicating
    node (a tiered topic: leader-only tiering is not built yet)."""
    topic_config = node.services.manager.config.topic_defaults.with_overrides(configs)
    if topic_config["remote.storage.enable"]:
        raise ConfigError("remote.storage.enable",
                          f"topic {name!r}: tiered storage of replicated topics is not "
                          f"built yet (only the leader may copy to the tier); create it "
                          f"without remote.storage.enable on a replicating node")
