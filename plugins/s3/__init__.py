"""Remote tier on S3 or MinIO through s3fs (installed with ``tierlog[s3]``)."""

from __future__ import annotations

from tierlog.plugins.s3.plugin import S3Config, create_remote_storage

__all__ = ["S3Config", "create_remote_storage"]
