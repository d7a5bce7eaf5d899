"""The cluster metadata store on a local directory: the embedded default, several nodes on one
machine sharing a ``file://`` tier.

A replace is a compare-and-swap under an exclusive ``flock`` of the key's lock file
``<key>.lock``: lock, read the current object, compare its write id with the expected
version, write ``<key>.json.tmp``, fsync, rename over the object, fsync the directory
(``tierlog.common.atomic``), unlock. ``flock`` (not ``fcntl``'s per-process record locks) is
held per open file, so it excludes threads of one process as well as other processes, and the
kernel drops it when a holder dies, so a killed node never leaves a key locked. A create is the
tier's exclusive create (a hard link, which never replaces); readers take no lock, since a
rename is atomic and they see the old object or the new one, whole. The version token is the
object's write id. This holds on one machine's filesystem; NFS locks are not relied on.
"""

from __future__ import annotations

import contextlib
import os

from tierlog.cluster.store import OBJECT_SUFFIX, MetadataStore, decode
from tierlog.common.atomic import atomic_write_bytes
from tierlog.errors import RemoteResourceNotFoundError
from tierlog.remote.tier.object_store import exclusive_lock, translate_errors

__all__ = ["LocalMetadataStore"]

LOCK_SUFFIX = ".lock"


class LocalMetadataStore(MetadataStore):
    """:class:`MetadataStore` on a local directory (the tier's filesystem must be local).
    Compare-and-swap holds across threads and processes of one machine."""

    def _read_object(self, path: str) -> tuple[bytes, str | None] | None:
        try:
            return self.tier.get_bytes(path), None
        except RemoteResourceNotFoundError:
            return None

    def _replace_object(self, key: str, path: str, data: bytes, write_id: str,
                        expected: str) -> str | None:
        if not os.path.isdir(os.path.dirname(path)):  # nothing to lock: the key is absent
            raise self.conflict(key, expected, None)
        with self._locked(path):
            found = self._read_object(path)
            current = None if found is None else decode(key, path, *found)
            if current is None or current.version != expected:
                raise self.conflict(key, expected, current)
            with translate_errors("replace", path):
                self.tier.stats.record("puts")
                atomic_write_bytes(path, data)
        return None

    def _locked(self, path: str) -> contextlib.AbstractContextManager[None]:
        """Hold the exclusive flock of the lock file next to ``path``'s object."""
        return exclusive_lock(path.removesuffix(OBJECT_SUFFIX) + LOCK_SUFFIX)
