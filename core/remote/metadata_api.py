"""The segment metadata store's contract under its public name (docs/plugins.md): what the
RemoteLogManager, the remote reader and the LogManager call on a store.

Its home is :mod:`tierlog.contracts.remote_metadata`, below the engine, where the hook specs can
name ``RemoteLogMetadataFactory`` without importing the remote room.
"""

from __future__ import annotations

from tierlog.contracts.remote_metadata import RemoteLogMetadataFactory, RemoteLogMetadataStore

__all__ = ["RemoteLogMetadataFactory", "RemoteLogMetadataStore"]
