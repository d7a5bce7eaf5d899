"""Open the cluster metadata store of a URL: the tier's remote storage plugin builds the
filesystem (the same storage options as the tier), and the filesystem picks the store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tierlog.cluster.local_store import LocalMetadataStore
from tierlog.cluster.s3_store import S3MetadataStore
from tierlog.cluster.store import MetadataStore
from tierlog.errors import ConfigError
from tierlog.remote.tier.options import backend_for_url, local_directory
from tierlog.remote.tier.storage_from_url import open_storage

__all__ = ["open_metadata_store"]

#: The setting that will name the store (issue 24), named in errors about its URL.
URL_KEY = "cluster.metadata.url"


def open_metadata_store(url: str, storage_options: Mapping[str, Any] | None = None
                        ) -> MetadataStore:
    """The store under ``url`` (an fsspec URL: ``s3://bucket/prefix``, a ``file://`` URL or a
    path) with the tier's ``storage_options``. A local directory is created when missing (the
    first node of a cluster starts with an empty store). ConfigError naming the URL for a
    filesystem without conditional writes (only S3-compatible stores and local directories
    have them)."""
    if backend_for_url(url) == "local":
        os.makedirs(local_directory(url), exist_ok=True)
    tier = open_storage(url, storage_options).tier
    if not tier.supports_exclusive_create:
        raise ConfigError(URL_KEY, f"{url!r}: {type(tier.fs).__name__} offers no conditional "
                               f"writes (the cluster metadata store needs an S3-compatible "
                               f"store or a local directory)")
    if tier.is_local:
        return LocalMetadataStore(tier)
    return S3MetadataStore(tier)
