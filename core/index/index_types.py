"""Segment index types: the built-in offset, time and transaction index types (registered by
:mod:`tierlog.index.plugin`), and :func:`resolve_index_types`, the one place a log's index
types are chosen from the registry. The contract an index implementation follows
(``SegmentIndexType``, ``SegmentIndex``) is :mod:`tierlog.contracts.segment_index`, below the
hook specs that name it; it keeps its public name here.

Every segment opens its indexes through the registry entries: the three roles (``offset``,
``time``, ``transaction``) by name, so a plugin registering one of those names replaces the
built-in (it must produce a subclass of the built-in's class, under the same file suffix); any
other name is an extra index, opened per segment, fed every appended batch, rebuilt on recovery.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, overload

from tierlog.common import filenames
from tierlog.contracts.segment_index import SegmentIndex, SegmentIndexType
from tierlog.errors import PluginError
from tierlog.index.offset_index import OffsetIndex
from tierlog.index.time_index import TimeIndex
from tierlog.index.transaction_index import TransactionIndex

if TYPE_CHECKING:
    from tierlog.config import LogConfig

__all__ = [
    "BUILTIN_INDEX_TYPES",
    "DEFAULT_INDEX_TYPES",
    "OFFSET_INDEX",
    "TIME_INDEX",
    "TRANSACTION_INDEX",
    "BuiltinIndexType",
    "RoleIndex",
    "SegmentIndex",
    "SegmentIndexType",
    "SegmentIndexTypes",
    "resolve_index_types",
]

#: The index of one of a segment's three roles: the built-in's class (or a subclass of it).
RoleIndex: TypeAlias = OffsetIndex | TimeIndex | TransactionIndex


@dataclass(frozen=True, slots=True)
class BuiltinIndexType:
    """A built-in index (offset, time, transaction): which file it is, whether it travels to
    the remote tier, and the class ``open`` instantiates, ``index_class(path, base_offset,
    max_index_size)`` (the transaction index takes no size)."""

    name: str
    suffix: str
    index_class: type[RoleIndex]
    uploaded_to_remote: bool = True
    builtin: bool = True

    def enabled_for(self, config: LogConfig) -> bool:
        return True

    def open(self, path: Path, base_offset: int, config: LogConfig, *,
             max_index_size: int | None = None) -> Any:  # noqa: ANN401 - see the docstring
        """The segment's index of this role (a ``RoleIndex``); ``max_index_size`` defaults
        to the log's ``segment.index.bytes``. Typed Any: a built-in index is fed by its
        segment, not through ``on_append``, so it is not the ``SegmentIndex`` this type's
        protocol (``SegmentIndexType``) promises."""
        if issubclass(self.index_class, TransactionIndex):
            return TransactionIndex(path, base_offset)
        if max_index_size is None:
            max_index_size = config["segment.index.bytes"]
        return self.index_class(path, base_offset, max_index_size)


OFFSET_INDEX = BuiltinIndexType("offset", filenames.INDEX_SUFFIX, OffsetIndex)
TIME_INDEX = BuiltinIndexType("time", filenames.TIME_INDEX_SUFFIX, TimeIndex)
TRANSACTION_INDEX = BuiltinIndexType("transaction", filenames.TXN_INDEX_SUFFIX, TransactionIndex)
#: The roles every segment has, by registry name: the built-in type of each.
BUILTIN_INDEX_TYPES: Mapping[str, BuiltinIndexType] = {
    t.name: t for t in (OFFSET_INDEX, TIME_INDEX, TRANSACTION_INDEX)
}


@dataclass(frozen=True, slots=True)
class SegmentIndexTypes:
    """The index types a log's segments are opened with, resolved from the registry.

    ``offset``, ``time`` and ``transaction`` fill the three roles (the built-ins unless a
    plugin replaced one); ``extras`` are the other enabled types, in registration order.
    """

    offset: SegmentIndexType = OFFSET_INDEX
    time: SegmentIndexType = TIME_INDEX
    transaction: SegmentIndexType = TRANSACTION_INDEX
    extras: tuple[SegmentIndexType, ...] = ()

    @property
    def replaced(self) -> bool:
        """True when a plugin fills one of the roles: then no hot path may write the
        built-in index maps directly (the Log does not arm the plain appender)."""
        return (self.offset is not OFFSET_INDEX or self.time is not TIME_INDEX
                or self.transaction is not TRANSACTION_INDEX)

    @property
    def all(self) -> tuple[SegmentIndexType, ...]:
        """Every type, roles first: the files a segment has besides its ``.log``."""
        return (self.offset, self.time, self.transaction, *self.extras)

    @overload
    def open_role(self, name: Literal["offset"], path: Path, base_offset: int,
                  config: LogConfig, max_index_size: int) -> OffsetIndex: ...

    @overload
    def open_role(self, name: Literal["time"], path: Path, base_offset: int,
                  config: LogConfig, max_index_size: int) -> TimeIndex: ...

    @overload
    def open_role(self, name: Literal["transaction"], path: Path, base_offset: int,
                  config: LogConfig, max_index_size: int) -> TransactionIndex: ...

    def open_role(self, name: str, path: Path, base_offset: int, config: LogConfig,
                  max_index_size: int) -> RoleIndex:
        """Open the index of role ``name`` and check it can serve that role: an instance of
        the built-in's class (PluginError naming the type otherwise)."""
        index_type = getattr(self, name)
        builtin = BUILTIN_INDEX_TYPES[name]
        if index_type is builtin:
            opened: RoleIndex = builtin.open(path, base_offset, config,
                                             max_index_size=max_index_size)
            return opened
        index = index_type.open(path, base_offset, config, max_index_size=max_index_size)
        if not isinstance(index, builtin.index_class):
            with contextlib.suppress(Exception):
                index.close()
            raise PluginError(
                f"index type {name!r} ({type(index_type).__name__}) opened "
                f"{type(index).__name__} for {path}, which is not a "
                f"{builtin.index_class.__name__}: a replacement of a built-in index must "
                f"subclass it"
            )
        return index


DEFAULT_INDEX_TYPES = SegmentIndexTypes()


def resolve_index_types(registry: Mapping[str, SegmentIndexType], config: LogConfig
                        ) -> SegmentIndexTypes:
    """The index types of a log with ``config``: each role from the registry entry of its name
    (the latest registration wins, so a plugin can replace a built-in), every other registered
    type that is ``enabled_for(config)`` as an extra. PluginError when a role's replacement
    changes the file suffix (the file names are Kafka's)."""
    roles: dict[str, SegmentIndexType] = {}
    for name, builtin in BUILTIN_INDEX_TYPES.items():
        index_type = registry.get(name, builtin)
        if index_type.suffix != builtin.suffix:
            raise PluginError(
                f"index type {name!r} ({type(index_type).__name__}) has suffix "
                f"{index_type.suffix!r}; a replacement of the built-in {name} index must keep "
                f"{builtin.suffix!r}"
            )
        roles[name] = index_type
    extras = tuple(t for name, t in registry.items()
                   if name not in BUILTIN_INDEX_TYPES and t.enabled_for(config))
    return SegmentIndexTypes(roles["offset"], roles["time"], roles["transaction"], extras)
