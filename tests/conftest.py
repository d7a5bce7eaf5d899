"""What several rooms' tests share: a fake clock, the real Kafka log directory (copied), a
LogManager and a local tier (``manager``, ``tier_url``), tiers built from real Logs (``tier``,
``s3_tier``), moto's S3 over HTTP, one local Spark session, and a real ``tierlog serve``
(``server``, for tests/server and tests/cli).

Each room's own conftest.py holds what only that room shares. A shared fixture that must vary
per test module reads a module-level constant (``MANAGER_CONFIG``, ``TIER_SEGMENT_BYTES``,
``SERVER_CONFIG``...) instead of being copied into the module.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pytest
from support.clock import FakeClock
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET, s3_client
from support.server_process import ServerProcess, start

if TYPE_CHECKING:  # imported where used, so a room's tests need no more of the package
    from support.tier_builder import BuiltTier

    from tierlog.manager.log_manager import LogManager

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


# -- a LogManager and a local tier (tests/remote, reader, spark, plugins) -------------------


@pytest.fixture
def tier_url(tmp_path: Path) -> str:
    """The URL of the test's local tier, ``tmp_path/tier``."""
    return (tmp_path / "tier").as_uri()


@pytest.fixture
def manager(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock,
            tier_url: str) -> Iterator[LogManager]:
    """A LogManager over ``tmp_path/data`` on the fake clock, its scheduler not started (the
    test drives it), with the module's ``MANAGER_CONFIG``: a dict (a tiered one tiers to
    ``tier_url`` unless it names its own URL), or a function of ``tier_url`` returning one."""
    from tierlog.manager.log_manager import LogManager

    wanted = getattr(request.module, "MANAGER_CONFIG", {})
    config = dict(wanted(tier_url) if callable(wanted) else wanted)
    if config.get("remote.storage.enable"):
        config.setdefault("remote.storage.url", tier_url)
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    yield mgr
    mgr.close()


def _tier_options(module: ModuleType) -> dict[str, Any]:
    size = getattr(module, "TIER_SEGMENT_BYTES", None)
    return {} if size is None else {"segment_bytes": size}


@pytest.fixture(scope="module")
def tier(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> BuiltTier:
    """A tier built once per module from real Logs on the ``local`` plugin (orders-0/1,
    clicks-0: see support.tier_builder), with the module's ``TIER_SEGMENT_BYTES`` if set."""
    from support.tier_builder import build_tier

    from tierlog.plugins.local import create_remote_storage

    root = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    url = (root / "tier").as_uri()
    return build_tier(root, create_remote_storage(url, {"fsync": False}), url,
                      **_tier_options(request.module))


@pytest.fixture(scope="module")
def s3_tier(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            s3_endpoint: str) -> BuiltTier:
    """The same tier (3 rounds of appends) on the ``s3`` plugin, under a fresh prefix of the
    moto bucket, once per module."""
    from support.tier_builder import build_tier

    from tierlog.plugins.s3 import create_remote_storage

    name = request.module.__name__.rpartition(".")[2]
    url = f"s3://{S3_BUCKET}/{name}-{uuid.uuid4().hex[:12]}"
    options = {"endpoint_url": s3_endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET,
               "region": S3_REGION}
    return build_tier(tmp_path_factory.mktemp("s3"), create_remote_storage(url, options), url,
                      rounds=3, **_tier_options(request.module))


# -- S3 over HTTP: moto's ThreadedMotoServer on loopback, one per test session ---------------

@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
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
def s3_options(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
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


# -- tierlog serve: a real server subprocess for the protocol and wire-CLI tests -------------
#
# A test module tunes its server with module-level constants:
#   SERVER_CONFIG    server.properties keys (default: none)
#   SERVER_ARGS      more ``tierlog serve`` options, e.g. ["--metrics-port", "0"]
#   SERVER_TOPICS    topics (1 partition each) created before the first test
#   SERVER_PER_TEST  True: each test gets a server of its own over its ``tmp_path`` (the
#                    tests restart it, or read its data directory); default: one per module


def _serve(module: ModuleType, tmp: Path) -> Iterator[ServerProcess]:
    config = getattr(module, "SERVER_CONFIG", None)
    with start(tmp, config, args=getattr(module, "SERVER_ARGS", ())) as proc:
        topics = getattr(module, "SERVER_TOPICS", ())
        if topics:
            from kafka import KafkaAdminClient
            from kafka.admin import NewTopic

            admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
            try:
                admin.create_topics([NewTopic(topic, 1, 1) for topic in topics])
            finally:
                admin.close()
        yield proc


@pytest.fixture(scope="module")
def module_server(request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The test module's shared server (what module-scoped fixtures use)."""
    name = request.module.__name__.rpartition(".")[2]
    yield from _serve(request.module, tmp_path_factory.mktemp(name))


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    """The test's server: its own when the module sets ``SERVER_PER_TEST``, else the
    module's shared one."""
    if getattr(request.module, "SERVER_PER_TEST", False):
        yield from _serve(request.module, request.getfixturevalue("tmp_path"))
    else:
        yield request.getfixturevalue("module_server")
