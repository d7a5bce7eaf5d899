"""The built-in segment indexes (offset, time, transaction) as a plugin: registered
through ``tierlog_register_index_types`` like any other index type (the contract is in
:mod:`tierlog.index.index_types`).
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.hookspecs import hookimpl
from tierlog.index.index_types import BUILTIN_INDEX_TYPES, SegmentIndexType


@hookimpl(trylast=True)
def tierlog_register_index_types(register: Callable[[SegmentIndexType], None]) -> None:
    """The built-ins register first (``trylast``), so any plugin registering the same name,
    from an entry point or at runtime, replaces them."""
    for index_type in BUILTIN_INDEX_TYPES.values():
        register(index_type)
