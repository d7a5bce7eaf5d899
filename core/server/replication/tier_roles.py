"""The remote tier's part in a replicated partition (issue 24, tiered storage): only the
leader copies to the tier and publishes the tail. Built out by the tier-roles work."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.server.replication.node import ClusterNode

__all__ = ["install"]


def install(node: ClusterNode) -> None:
    """Make ``node``'s tier follow its leaderships (registers a role listener)."""
    del node
