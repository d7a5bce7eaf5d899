"""The cluster metadata store's contract: ``MetadataStore`` (read, create, replace, every change
a compare-and-swap), ``Versioned`` (a value and its version), its keys and its object format.

Each key is one object, ``<root>/<key>.json``, holding a compact JSON envelope::

    {"format":1,"key":"brokers/1","value":{...},"writeId":"<32 hex digits>"}

``writeId`` is new for every write, so no two writes store the same bytes: an S3 ETag (the MD5
of the bytes) never comes back after the object changed (no ABA), and a writer whose request
outcome it did not hear (a retried PUT, a read-back after a create) recognises its own write.
The store is a base class: ``LocalMetadataStore`` (a local directory) and ``S3MetadataStore``
(S3, MinIO) implement the reads and the replace; ``open_metadata_store`` picks one for a URL.
"""

from __future__ import annotations

import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.errors import (
    CorruptRemoteMetadataError,
    InvalidMetadataKeyError,
    InvalidMetadataValueError,
    MetadataConflictError,
)
from tierlog.remote.api import dumps, load_json_object
from tierlog.remote.tier.object_store import RemoteTier

__all__ = ["FORMAT", "MAX_OBJECT_BYTES", "MetadataStore", "Versioned", "check_key"]

#: The envelope's format number.
FORMAT = 1
#: The largest object the store writes: cluster metadata is small, and a value near this size
#: is a mistake (a log, a list that should be split per key), refused before any write.
MAX_OBJECT_BYTES = 1 << 20
#: Suffix of every object; a key segment may not end with it (nor with another file suffix the
#: store or the tier's writer uses), so that a key never names another key's files.
OBJECT_SUFFIX = ".json"
RESERVED_SUFFIXES = (OBJECT_SUFFIX, ".lock", ".tmp", ".partial")
_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")
_WRITE_ID = re.compile(r"[0-9a-f]{32}")
MAX_KEY_LENGTH = 512


@dataclass(frozen=True, slots=True)
class Versioned:
    """One version of a key's value, as read or as written."""

    key: str
    """The key, e.g. ``brokers/1``."""
    value: dict[str, Any]
    """The JSON object stored (a fresh copy per read: changing it changes nothing stored)."""
    version: str
    """Opaque token of this version, what :meth:`MetadataStore.replace` compares: the
    object's ETag on S3, its ``writeId`` on a local directory."""
    write_id: str
    """The unique id of the write that stored this version."""


def check_key(key: str) -> str:
    """``key`` when it names an object of the store: ``/``-separated segments of
    ``[A-Za-z0-9._-]``, none empty, none starting with a dot (so no ``..``), none ending with a
    reserved suffix (``.json``, ``.lock``, ``.tmp``, ``.partial``), at most MAX_KEY_LENGTH
    characters. InvalidMetadataKeyError naming the key and the problem otherwise."""
    if not isinstance(key, str) or not key:
        raise InvalidMetadataKeyError(f"cluster metadata key {key!r} is empty or not a string")
    if len(key) > MAX_KEY_LENGTH:
        raise InvalidMetadataKeyError(
            f"cluster metadata key {key[:40]!r}... is {len(key)} characters (at most "
            f"{MAX_KEY_LENGTH})")
    if key.startswith("/"):
        raise InvalidMetadataKeyError(
            f"cluster metadata key {key!r} is absolute: a key is relative to the store's root")
    for segment in key.split("/"):
        if not _SEGMENT.fullmatch(segment):
            raise InvalidMetadataKeyError(
                f"cluster metadata key {key!r}: segment {segment!r} is not a name (segments are "
                f"[A-Za-z0-9._-], not empty, not starting with '.', so never '..')")
        if segment.endswith(RESERVED_SUFFIXES):
            raise InvalidMetadataKeyError(
                f"cluster metadata key {key!r}: segment {segment!r} ends with a reserved "
                f"suffix ({', '.join(RESERVED_SUFFIXES)})")
    return key


def encode(key: str, value: Mapping[str, Any]) -> tuple[bytes, str]:
    """The envelope's bytes for a new write of ``value`` under ``key``, and its write id.
    InvalidMetadataValueError naming the key for a value the store does not keep."""
    if not isinstance(value, Mapping):
        raise InvalidMetadataValueError(
            f"cluster metadata {key!r}: the value must be a JSON object (a dict), not "
            f"{type(value).__name__}")
    write_id = uuid.uuid4().hex
    try:
        text = dumps({"format": FORMAT, "key": key, "value": dict(value), "writeId": write_id})
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidMetadataValueError(
            f"cluster metadata {key!r}: the value is not serializable as JSON: {e}") from e
    data = text.encode("utf-8")
    if len(data) > MAX_OBJECT_BYTES:
        raise InvalidMetadataValueError(
            f"cluster metadata {key!r}: the object would hold {len(data)} bytes (at most "
            f"{MAX_OBJECT_BYTES})")
    return data, write_id


def decode(key: str, path: str, data: bytes, etag: str | None) -> Versioned:
    """The Versioned an object's bytes hold (version ``etag``, or its write id when None).
    CorruptRemoteMetadataError naming the key and the object for anything but an envelope of
    this key: not JSON, not an object, another format or key, a bad write id or value."""
    source = f"cluster metadata {key!r} ({path})"
    envelope = load_json_object(data, source)
    write_id, value = envelope.get("writeId"), envelope.get("value")
    if envelope.get("format") != FORMAT:
        raise CorruptRemoteMetadataError(
            f"{source}: format {envelope.get('format')!r:.40} is not {FORMAT}")
    if envelope.get("key") != key:
        raise CorruptRemoteMetadataError(
            f"{source} holds key {envelope.get('key')!r:.80}, not its own")
    if not isinstance(write_id, str) or not _WRITE_ID.fullmatch(write_id):
        raise CorruptRemoteMetadataError(f"{source}: writeId {write_id!r:.60} is not 32 hex "
                                         f"digits")
    if not isinstance(value, dict):
        raise CorruptRemoteMetadataError(f"{source}: the value is not a JSON object")
    return Versioned(key, value, write_id if etag is None else etag, write_id)


class MetadataStore(ABC):
    """Small JSON objects under a tier's root, each changed only by a compare-and-swap:
    :meth:`create` (when absent) and :meth:`replace` (when at an expected version). There is
    no unconditional write. A lost race raises MetadataConflictError naming the key and both
    versions, and stored nothing; a failure whose outcome is unknown (a timeout, a 5xx, a
    connection lost after the request was sent) raises RemoteStorageError, and the write may
    have landed: re-read to learn it. Thread-safe; subclasses say what holds across processes.
    """

    def __init__(self, tier: RemoteTier) -> None:
        self.tier = tier

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.tier!r})"

    def path(self, key: str) -> str:
        """The object of ``key`` (checked by :func:`check_key`)."""
        return self.tier.path(check_key(key) + OBJECT_SUFFIX)

    def read(self, key: str) -> Versioned | None:
        """The key's current version, or None when it does not exist (one GET)."""
        path = self.path(key)
        found = self._read_object(path)
        return None if found is None else decode(key, path, *found)

    def list_keys(self, prefix: str) -> list[str]:
        """The keys of the objects directly under ``prefix`` (``brokers`` gives ``brokers/1``,
        ``brokers/2``, ...), sorted; one LIST. A listing is not linearizable: a key created
        or replaced meanwhile may be missing from it, so it serves discovery only, and each
        key is read to learn its value."""
        directory = self.tier.path(check_key(prefix))
        names = (n.removesuffix(OBJECT_SUFFIX) for n in self.tier.list_names(directory)
                 if n.endswith(OBJECT_SUFFIX))
        return sorted(f"{prefix}/{n}" for n in names if _SEGMENT.fullmatch(n))

    def create(self, key: str, value: Mapping[str, Any]) -> Versioned:
        """Store ``value`` as the key's first version, unless the key exists: then
        MetadataConflictError (found: the current version). One exclusive create
        (``RemoteTier.put_if_absent``: ``If-None-Match: *`` on S3, a hard link on a directory)
        and one read back, which learns the new version; a version replaced between the two
        is reported as a conflict too (this create landed, and another writer already
        changed it)."""
        path = self.path(key)
        data, write_id = encode(key, value)
        created = self.tier.put_if_absent(data, path)
        current = self.read(key)
        if created and current is not None and current.write_id == write_id:
            return current
        found = None if current is None else current.version
        why = ("it was replaced before this create could read it back" if created
               else "it exists")
        raise MetadataConflictError(f"create of cluster metadata {key!r} lost: {why} "
                                    f"(found version {found})", key=key, expected=None,
                                    found=found)

    def swap(self, key: str, value: Mapping[str, Any], expected: Versioned | None) -> Versioned:
        """Store ``value`` if the key is still as read: absent (``expected`` None, a
        :meth:`create`) or at version ``expected`` (a :meth:`replace`); MetadataConflictError
        when it is not."""
        if expected is None:
            return self.create(key, value)
        return self.replace(key, value, expected)

    def replace(self, key: str, value: Mapping[str, Any], expected: Versioned) -> Versioned:
        """Store ``value`` as the key's next version if its current version is still
        ``expected`` (read or written earlier); MetadataConflictError naming both versions if
        it is not (nothing stored). Returns the new version."""
        path = self.path(key)
        if expected.key != key:
            raise InvalidMetadataKeyError(
                f"replace of cluster metadata {key!r} expects a version of {expected.key!r}")
        data, write_id = encode(key, value)
        version = self._replace_object(key, path, data, write_id, expected.version)
        return decode(key, path, data, version)

    @staticmethod
    def conflict(key: str, expected: str, found: Versioned | None) -> MetadataConflictError:
        """The error of a replace that found ``found`` (None: absent) instead of ``expected``."""
        found_version = None if found is None else found.version
        return MetadataConflictError(
            f"replace of cluster metadata {key!r} lost: expected version {expected}, found "
            f"{'no object' if found is None else f'version {found_version}'}", key=key,
            expected=expected, found=found_version)

    @abstractmethod
    def _read_object(self, path: str) -> tuple[bytes, str | None] | None:
        """The object's bytes and version (None: the version is its write id), or None when
        it does not exist."""

    @abstractmethod
    def _replace_object(self, key: str, path: str, data: bytes, write_id: str,
                        expected: str) -> str | None:
        """Write ``data`` to ``path`` if its version is ``expected``: the new version (None:
        its write id), else MetadataConflictError (:meth:`conflict`)."""
