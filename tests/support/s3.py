"""The moto S3 server's bucket and dummy credentials, and an s3fs client on it (the
``s3_endpoint`` fixture starts the server)."""

from __future__ import annotations

from typing import Any

S3_BUCKET = "tierlog-tests"
S3_ACCESS_KEY = "AKIATIERLOGTESTKEY01"
S3_SECRET = "tierlog-secret-Zq8vW3nL5pR7tY2u"  # a dummy, but must never be logged
S3_REGION = "us-east-1"


def s3_client(endpoint: str) -> Any:
    import s3fs

    return s3fs.S3FileSystem(key=S3_ACCESS_KEY, secret=S3_SECRET, endpoint_url=endpoint,
                             client_kwargs={"region_name": S3_REGION}, skip_instance_cache=True)
