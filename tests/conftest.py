"""Shared pytest fixtures: a fake clock, the real Kafka log directory (copied), record factories."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET, s3_client

# Public test data written by a real Kafka 3.7 broker, kept in the repository (see its README).
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kafka-3.7-logdir"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def kafka_logdir(tmp_path: Path) -> Path:
    """A writable copy of the real Kafka 3.7 broker log directory."""
    if not FIXTURES.is_dir():
        pytest.fail(f"Kafka fixture directory not found at {FIXTURES}")
    target = tmp_path / "kafka-logdir"
    shutil.copytree(FIXTURES, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


# -- S3 over HTTP: moto's ThreadedMotoServer on loopback, one per test session ---------------

@pytest.fixture(scope="session")
def s3_endpoint():
    """moto's S3 over real HTTP on an ephemeral loopback port, with the test bucket created."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    s3_client(endpoint).call_s3("create_bucket", Bucket=S3_BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture
def s3_options(s3_endpoint, monkeypatch):
    """Storage options of the s3 plugin for the moto server; real AWS config kept away."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-dummy-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-dummy-secret")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    return {"endpoint_url": s3_endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET,
            "region": S3_REGION}


# -- Spark: one real local[2] session for the whole test run (it takes ~10-15 s to start) ------


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """``tierlog.spark.session``'s local session (the data source registered, Python errors on
    the first line of Spark's message), on two cores; a failed task is retried once, as on a
    cluster (tests of retried tasks rely on it)."""
    import tierlog.spark

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        mp.setenv("PYSPARK_DRIVER_PYTHON", sys.executable)
        session = tierlog.spark.session("tierlog-tests", "local[2,2]",  # a failed task retries once
                                        **{"spark.sql.shuffle.partitions": "2"})
        session.sparkContext.setLogLevel("ERROR")
        yield session
        session.stop()
