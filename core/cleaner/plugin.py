"""Built-in plugin: registers the ``delete`` and ``compact`` cleanup policies."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tierlog.hookspecs import hookimpl

if TYPE_CHECKING:
    from tierlog.cleaner.policy import LogCleanupPolicy


@hookimpl
def tierlog_register_cleanup_policies(register: Callable[[str, LogCleanupPolicy], None]) -> None:
    from tierlog.cleaner.retention import DeletePolicy

    register(DeletePolicy.name, DeletePolicy())
    from tierlog.cleaner.compactor import CompactPolicy

    register(CompactPolicy.name, CompactPolicy())
