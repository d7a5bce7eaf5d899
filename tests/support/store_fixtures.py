"""Metadata-store fixtures shared by every room whose state lives in the cluster store (the
cluster room, the security room's credentials and ACLs): moto's S3 behind a front that
serializes its request handling (``serialized_s3``, see ``support.moto_front``: moto stores a
conditional PUT without a lock after checking its condition, real S3 does not), and a metadata
store on a local directory or on that S3 (``store``, parametrized, so one test function runs on
both). A conftest imports these names to offer them.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support.moto_front import SerializedS3, SerializingFront
from support.s3 import S3_BUCKET
from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.store import MetadataStore


@pytest.fixture(scope="session")
def serialized_s3(s3_endpoint: str) -> Iterator[SerializedS3]:
    """A second moto server on loopback, sharing the session's moto backends (its bucket
    included), whose requests pass through a :class:`SerializingFront`."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    front = SerializingFront(DomainDispatcherApplication(create_backend_app))
    server = make_server("127.0.0.1", 0, front, threaded=True,
                         request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield SerializedS3(f"http://{host}:{port}", front)
    server.shutdown()
    thread.join(timeout=10)


@pytest.fixture
def front(serialized_s3: SerializedS3) -> Iterator[SerializingFront]:
    """The serializing front, its injections cleared after the test."""
    yield serialized_s3.front
    serialized_s3.front.reset()


@pytest.fixture
def s3_store(serialized_s3: SerializedS3, s3_options: dict[str, str]) -> MetadataStore:
    """A fresh store under a new prefix of moto's S3, reached through the serializing front."""
    options = {**s3_options, "endpoint_url": serialized_s3.endpoint}
    return open_metadata_store(f"s3://{S3_BUCKET}/cluster-{uuid.uuid4().hex[:12]}", options)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MetadataStore:
    """A fresh store on a local directory, or on moto's S3 (``s3_store``)."""
    if request.param == "local":
        return open_metadata_store(str(tmp_path / "cluster"))
    s3: MetadataStore = request.getfixturevalue("s3_store")
    return s3
