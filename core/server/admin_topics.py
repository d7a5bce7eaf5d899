"""(being written)"""

from __future__ import annotations

from tierlog.server.registry import Registry
from tierlog.server.services import Services


def install(registry: Registry, services: Services) -> None:
    pass
