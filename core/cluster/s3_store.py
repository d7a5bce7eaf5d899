"""The cluster metadata store on S3 and MinIO: reads learn the ETag with the bytes (one GET),
a replace is one PUT with ``If-Match: <etag>``.

The PUT goes to s3fs's aiobotocore client directly (not ``call_s3``, whose retries would hide
that an attempt was repeated): a 412 (PreconditionFailed) or 404 (the object is gone) on a
request botocore sent once is a lost race; after a repeated send, an earlier attempt may have
landed, so the store reads the object back: its own write id is a success, another writer's
an unknown outcome (RemoteStorageError). A 409 (ConditionalRequestConflict: another
conditional write of the key was in flight) stored nothing and is sent again, up to
``conflict_retries`` times, then reported as a conflict. S3 serializes conditional writes of
one key; moto does not (its server checks the condition, then stores without a lock), which
only a test harness must make up for.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tierlog.cluster.store import MetadataStore
from tierlog.errors import MetadataConflictError, RemoteStorageError
from tierlog.remote.tier.object_store import (
    RemoteTier,
    s3_resent,
    s3_status,
    s3_translated,
    translate_errors,
)

__all__ = ["S3MetadataStore"]

#: How often a PUT answered 409 is sent again, and the pause before the n-th resend (n x it).
CONFLICT_RETRIES = 3
CONFLICT_BACKOFF_S = 0.05
_CONTENT_TYPE = "application/json"


class S3MetadataStore(MetadataStore):
    """:class:`MetadataStore` on an S3-compatible store through the tier's s3fs filesystem.
    Compare-and-swap holds between any writers the store serves (S3 and MinIO evaluate
    ``If-Match`` and ``If-None-Match`` atomically per key). ``sleep`` paces 409 resends."""

    def __init__(self, tier: RemoteTier, *, conflict_retries: int = CONFLICT_RETRIES,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(tier)
        self.conflict_retries = conflict_retries
        self._sleep = sleep

    def _client_call(self, path: str, method: str, **kwargs: object) -> dict[str, Any]:
        """One call of the S3 client on ``path``'s bucket and key (``RemoteTier.s3_call``)."""
        return self.tier.s3_call(path, method, **kwargs)

    def _read_object(self, path: str) -> tuple[bytes, str | None] | None:
        """The object and its ETag in one GET (``RemoteTier.read_versioned``, the one home
        of a versioned read on S3)."""
        return self.tier.read_versioned(path)

    def _replace_object(self, key: str, path: str, data: bytes, write_id: str,
                        expected: str) -> str | None:
        from botocore.exceptions import ClientError

        for attempt in range(self.conflict_retries + 1):
            if attempt:
                self._sleep(CONFLICT_BACKOFF_S * attempt)
            with translate_errors(f"replace of cluster metadata {key!r} (outcome unknown) at",
                                  path):
                self.tier.stats.record("puts")
                try:
                    response = self._client_call(path, "put_object", Body=data,
                                                 IfMatch=expected, ContentType=_CONTENT_TYPE)
                    return str(response["ETag"])
                except ClientError as e:
                    status, resent = _status(e), _resent(e)
                    if status not in (404, 409, 412):
                        raise _translated(e) from e
            if status == 409 and not resent:
                continue
            return self._after_refusal(key, path, write_id, expected, status, resent)
        raise MetadataConflictError(
            f"replace of cluster metadata {key!r}: the store answered 409 (a concurrent "
            f"conditional write) {self.conflict_retries + 1} times; nothing stored",
            key=key, expected=expected, found=None)

    def _after_refusal(self, key: str, path: str, write_id: str, expected: str, status: int,
                       resent: bool) -> str:
        """What a refused replace means: a conflict, unless the request was sent more than once
        (then the write landed if the object holds it, and its outcome is unknown if not)."""
        current = self.read(key)
        if not resent:
            raise self.conflict(key, expected, current)
        if current is not None and current.write_id == write_id:
            return current.version
        raise RemoteStorageError(
            f"replace of cluster metadata {key!r} at {path}: answered {status} after the "
            f"request was sent again, and the object holds another write (version "
            f"{None if current is None else current.version}): an earlier attempt may have "
            f"landed and been replaced since; outcome unknown")


_status, _resent, _translated = s3_status, s3_resent, s3_translated
