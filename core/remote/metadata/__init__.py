"""Remote log segment metadata: the store kept in the tier or a log dir,
its per-epoch cache, and the stores registered as plugins.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.remote.metadata.metadata import PartitionMetadataStore, RemoteLogMetadataManager

_EXPORTS = {
    "PartitionMetadataStore": "tierlog.remote.metadata.metadata",
    "RemoteLogMetadataManager": "tierlog.remote.metadata.metadata",
}


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = ["PartitionMetadataStore", "RemoteLogMetadataManager"]
