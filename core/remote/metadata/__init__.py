"""Remote log segment metadata: the store kept in the tier or a log dir,
its per-epoch cache, and the stores registered as plugins.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog.remote.metadata.metadata import PartitionMetadataStore, RemoteLogMetadataManager

_EXPORTS = {
    "PartitionMetadataStore": "tierlog.remote.metadata.metadata",
    "RemoteLogMetadataManager": "tierlog.remote.metadata.metadata",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = ["PartitionMetadataStore", "RemoteLogMetadataManager"]
