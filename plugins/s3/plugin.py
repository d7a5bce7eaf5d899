"""The ``s3`` remote storage: the tier is a bucket prefix on S3 or an S3-compatible store
(MinIO, ...), through s3fs. Only builds and tunes the filesystem.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from tierlog.errors import ConfigError
from tierlog.hookspecs import hookimpl
from tierlog.remote.fsspec_storage import FsspecRemoteStorageManager
from tierlog.remote.options import MASK, StorageOptions

log = logging.getLogger(__name__)

NAME = "s3"
URL_KEY = "remote.storage.url"
#: S3's multipart limits: parts of 5 MiB to 5 GiB (the last part may be smaller).
MIN_PART_SIZE = 5 << 20
MAX_PART_SIZE = 5 << 30
SECRET_FIELDS = frozenset({"key", "secret", "token"})


@dataclass(frozen=True, slots=True, repr=False)
class S3Config:
    """The s3 remote storage's settings, from ``remote.storage.url`` (``s3://bucket/prefix``)
    and ``remote.storage.options.*``. Credentials left unset come from the usual AWS sources
    (environment, shared config/``profile``, instance metadata). The repr masks secrets."""

    bucket: str
    prefix: str
    endpoint_url: str | None = None
    """An S3-compatible endpoint such as MinIO's ``http://127.0.0.1:9000``."""
    region: str | None = None
    key: str | None = None
    secret: str | None = None
    token: str | None = None
    profile: str | None = None
    part_size: int | None = None
    """Multipart part size in bytes (s3fs ``default_block_size`` and upload ``chunksize``)."""
    storage_class: str | None = None
    """``StorageClass`` of uploaded objects, e.g. ``STANDARD_IA``."""
    server_side_encryption: str | None = None
    """``ServerSideEncryption``: ``AES256`` or ``aws:kms``."""
    sse_kms_key_id: str | None = None
    """``SSEKMSKeyId`` when ``server_side_encryption`` is ``aws:kms``."""

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any]) -> S3Config:
        parts = urlsplit(url)
        if parts.scheme not in ("s3", "s3a") or not parts.netloc:
            raise ConfigError(URL_KEY, f"the s3 remote storage needs s3://bucket[/prefix], "
                                       f"got {url!r}")
        known = [f.name for f in fields(cls) if f.name not in ("bucket", "prefix")]
        opts = StorageOptions(NAME, options, known)
        values: dict[str, Any] = {name: opts.get_str(name) for name in known
                                  if name != "part_size"}
        values["part_size"] = opts.get_int("part_size", minimum=MIN_PART_SIZE,
                                           maximum=MAX_PART_SIZE)
        return cls(bucket=parts.netloc, prefix=parts.path.strip("/"), **values)

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f.name}={MASK if f.name in SECRET_FIELDS and value is not None else repr(value)}"
            for f in fields(self) if (value := getattr(self, f.name)) is not None)
        return f"S3Config({shown})"

    @property
    def root(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def filesystem_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``s3fs.S3FileSystem``."""
        extra = {name: value for name, value in (
            ("StorageClass", self.storage_class),
            ("ServerSideEncryption", self.server_side_encryption),
            ("SSEKMSKeyId", self.sse_kms_key_id),
        ) if value is not None}
        kwargs: dict[str, Any] = {
            "key": self.key, "secret": self.secret, "token": self.token,
            "endpoint_url": self.endpoint_url,
            "client_kwargs": {"region_name": self.region} if self.region else {},
            "s3_additional_kwargs": extra,
        }
        if self.part_size is not None:
            kwargs["default_block_size"] = self.part_size
        if self.profile is not None:
            kwargs["profile"] = self.profile
        return kwargs


def create_remote_storage(url: str, options: Mapping[str, Any]) -> FsspecRemoteStorageManager:
    """An FsspecRemoteStorageManager on ``s3://bucket/prefix`` (the bucket must exist)."""
    try:
        import s3fs
    except ImportError as e:
        raise ImportError("Install tierlog[s3] to use the s3 remote storage") from e
    config = S3Config.from_url(url, options)
    log.info("s3 remote storage: %r", config)
    fs = s3fs.S3FileSystem(**config.filesystem_kwargs())
    put_options = {} if config.part_size is None else {"chunksize": config.part_size}
    # One GET per whole-object read: s3fs otherwise sends a HEAD first to split large reads.
    return FsspecRemoteStorageManager(fs, config.root, put_options=put_options,
                                      get_options={"max_concurrency": 1})


@hookimpl
def tierlog_register_remote_storage(register: Callable[[str, Any], None]) -> None:
    register(NAME, create_remote_storage)
