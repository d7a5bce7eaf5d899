"""The ``s3`` remote storage: the tier is a bucket prefix on S3 or an S3-compatible store
(MinIO, ...), through s3fs. Only builds and tunes the filesystem.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tierlog.common.secrets import MASK, mask_credential_logs
from tierlog.errors import ConfigError
from tierlog.hookspecs import hookimpl
from tierlog.remote.api import RemoteStorageFactory
from tierlog.remote.tier.fsspec_storage import FsspecRemoteStorageManager
from tierlog.remote.tier.options import (
    OPTIONS_PREFIX,
    mask_secrets,
    parse_options,
    require_s3_credentials,
    s3fs_kwargs,
)

log = logging.getLogger(__name__)

NAME = "s3"
URL_KEY = "remote.storage.url"


@dataclass(frozen=True, slots=True, repr=False)
class S3Config:
    """The s3 remote storage's settings, from ``remote.storage.url`` (``s3://bucket/prefix``)
    and the storage options (names and their translation: :mod:`tierlog.remote.tier.options`).
    Credentials left unset come from the usual AWS sources (environment, shared
    config/``profile``, instance metadata). The repr masks secrets."""

    bucket: str
    prefix: str
    options: Mapping[str, Any] = field(default_factory=dict)
    """The parsed options, by their user-facing names (``region``, ``part_size``, ...)."""

    @classmethod
    def from_url(cls, url: str, options: Mapping[str, Any], *,
                 prefix: str = OPTIONS_PREFIX) -> S3Config:
        parts = urlsplit(url)
        if parts.scheme not in ("s3", "s3a") or not parts.netloc:
            raise ConfigError(URL_KEY, f"the s3 remote storage needs s3://bucket[/prefix], "
                                       f"got {url!r}")
        return cls(bucket=parts.netloc, prefix=parts.path.strip("/"),
                   options=parse_options(NAME, options, prefix=prefix))

    def __repr__(self) -> str:
        # mask_secrets masks inside object options too (client_kwargs' aws_secret_access_key)
        shown = ", ".join(f"{name}={MASK if value == MASK else repr(value)}"
                          for name, value in mask_secrets(self.options).items())
        return f"S3Config(bucket={self.bucket!r}, prefix={self.prefix!r}" + (
            f", {shown})" if shown else ")")

    @property
    def root(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    @property
    def part_size(self) -> int | None:
        """Multipart part size in bytes (s3fs ``default_block_size`` and upload ``chunksize``)."""
        return self.options.get("part_size")

    def filesystem_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``s3fs.S3FileSystem``."""
        return s3fs_kwargs(self.options)


def create_remote_storage(url: str, options: Mapping[str, Any]) -> FsspecRemoteStorageManager:
    """An FsspecRemoteStorageManager on ``s3://bucket/prefix`` (the bucket must exist)."""
    try:
        import s3fs
    except ImportError as e:
        raise ImportError("Install tierlog[s3] to use the s3 remote storage") from e
    config = S3Config.from_url(url, options)
    require_s3_credentials(config.options)
    mask_credential_logs()
    log.info("s3 remote storage: %r", config)
    fs = s3fs.S3FileSystem(**config.filesystem_kwargs())
    put_options = {} if config.part_size is None else {"chunksize": config.part_size}
    # One GET per whole-object read: s3fs otherwise sends a HEAD first to split large reads.
    return FsspecRemoteStorageManager(fs, config.root, put_options=put_options,
                                      get_options={"max_concurrency": 1})


@hookimpl
def tierlog_register_remote_storage(register: Callable[[str, RemoteStorageFactory], None]) -> None:
    register(NAME, create_remote_storage)
