"""Built-in plugin: registers the ``delete`` and ``compact`` cleanup policies."""

from __future__ import annotations

from collections.abc import Callable

from tierlog.cleaner.policy import CleanupPolicy
from tierlog.hookspecs import hookimpl


@hookimpl
def tierlog_register_cleanup_policies(register: Callable[[str, CleanupPolicy], None]) -> None:
    from tierlog.cleaner.retention import DeletePolicy

    register(DeletePolicy.name, DeletePolicy())
    from tierlog.cleaner.compactor import CompactPolicy

    register(CompactPolicy.name, CompactPolicy())
