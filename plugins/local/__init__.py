"""Remote tier on a local or NFS directory."""

from __future__ import annotations

from tierlog.plugins.local.plugin import DurableLocalFileSystem, create_remote_storage

__all__ = ["DurableLocalFileSystem", "create_remote_storage"]
