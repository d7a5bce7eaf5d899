"""The ``local`` remote storage: the tier is a local or NFS directory, through fsspec's "file"
filesystem made durable (fsync before rename, directories fsynced after every change).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from fsspec.implementations.local import LocalFileSystem

from tierlog.common.atomic import fsync_dir
from tierlog.errors import ConfigError
from tierlog.hookspecs import hookimpl
from tierlog.remote.api import RemoteStorageFactory
from tierlog.remote.tier.fsspec_storage import FsspecRemoteStorageManager
from tierlog.remote.tier.options import parse_options

NAME = "local"
URL_KEY = "remote.storage.url"


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DurableLocalFileSystem(LocalFileSystem):  # type: ignore[misc]
    """A LocalFileSystem whose writes are durable once they return: written files are fsynced
    (before the tier renames them into place), and a directory is fsynced after an entry in it
    is created, renamed or removed. Thread-safe like LocalFileSystem."""

    def put_file(self, path1: str, path2: str, callback: object = None, **kwargs: object
                 ) -> None:
        super().put_file(path1, path2, callback=callback, **kwargs)
        _fsync_file(self._strip_protocol(path2))

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: object
                  ) -> None:
        super().pipe_file(path, value, mode=mode, **kwargs)
        _fsync_file(self._strip_protocol(path))

    def mv(self, path1: str, path2: str, recursive: bool = True, **kwargs: object) -> None:
        super().mv(path1, path2, recursive=recursive, **kwargs)
        source_dir = os.path.dirname(self._strip_protocol(path1))
        target_dir = os.path.dirname(self._strip_protocol(path2))
        fsync_dir(target_dir)
        if source_dir != target_dir:
            fsync_dir(source_dir)

    def rm_file(self, path: str) -> None:
        super().rm_file(path)
        fsync_dir(os.path.dirname(self._strip_protocol(path)))

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        created = []
        missing = path
        while missing and not os.path.isdir(missing):
            created.append(missing)
            parent = os.path.dirname(missing)
            if parent == missing:
                break
            missing = parent
        super().makedirs(path, exist_ok=exist_ok)
        for directory in reversed(created):
            fsync_dir(os.path.dirname(directory))


def tier_directory(url: str) -> str:
    """The absolute directory a ``file://`` URL or a plain path names."""
    scheme = urlsplit(url).scheme
    if scheme not in ("", "file", "local") or not url:
        raise ConfigError(URL_KEY, f"the local remote storage needs a file:// URL or a path, "
                                   f"got {url!r}")
    return str(LocalFileSystem._strip_protocol(url))


def create_remote_storage(url: str, options: Mapping[str, Any]) -> FsspecRemoteStorageManager:
    """An FsspecRemoteStorageManager on the directory ``url`` names (created if missing)."""
    durable = parse_options(NAME, options).get("fsync", True)
    fs = DurableLocalFileSystem() if durable else LocalFileSystem()
    root = tier_directory(url)
    fs.makedirs(root, exist_ok=True)
    return FsspecRemoteStorageManager(fs, root)


@hookimpl
def tierlog_register_remote_storage(register: Callable[[str, RemoteStorageFactory], None]) -> None:
    register(NAME, create_remote_storage)
