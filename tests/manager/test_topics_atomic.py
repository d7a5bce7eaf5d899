"""``tierlog topics``: creating a topic is all or nothing (tried with bad S3 credentials against
moto's S3 server over HTTP), ``--delete`` and ``--alter`` exist, and listing and describing
local topics work while the bucket refuses every request."""

from __future__ import annotations

import contextlib
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli_runner import tierlog, user_error
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET

from tierlog.errors import ConfigError
from tierlog.manager.log_manager import LogManager


@contextlib.contextmanager
def bad_credentials(endpoint: str) -> Iterator[None]:
    """moto checks credentials from now on: ours are unknown to it, so every S3 request is
    refused with 403 InvalidAccessKeyId, as a real bucket answers bad credentials."""
    def reset(count: str) -> None:
        request = urllib.request.Request(f"{endpoint}/moto-api/reset-auth",
                                         data=count.encode(), method="POST",
                                         headers={"Content-Type": "text/plain"})
        urllib.request.urlopen(request, timeout=10).read()

    reset("0")
    try:
        yield
    finally:
        reset("inf")


@pytest.fixture
def s3_props(tmp_path: Path, s3_endpoint: str, s3_options) -> Path:
    props = tmp_path / "broker.properties"
    props.write_text(
        f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=s3\n"
        f"remote.storage.url=s3://{S3_BUCKET}/topics-{uuid.uuid4().hex[:12]}\n"
        f"remote.storage.options.endpoint_url={s3_endpoint}\n"
        f"remote.storage.options.key={S3_ACCESS_KEY}\n"
        f"remote.storage.options.secret={S3_SECRET}\n"
        f"remote.storage.options.region={S3_REGION}\n")
    return props


def _partition_dirs(data: Path) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.name.startswith("orders")) \
        if data.is_dir() else []


def _create(props: Path, *extra: str):
    return ("--config", props, "topics", "--create", "--topic", "orders", "--partitions", "3",
            "--config", "remote.storage.enable=true", "--config", "segment.bytes=4096", *extra)


def test_a_create_refused_by_the_bucket_leaves_no_topic(tmp_path: Path, s3_props: Path,
                                                        s3_endpoint: str) -> None:
    data = tmp_path / "data"
    with bad_credentials(s3_endpoint):
        error = user_error(*_create(s3_props))
        assert "orders-0" in error and ("denied" in error or "InvalidAccessKeyId" in error)
        assert S3_SECRET not in error
        assert _partition_dirs(data) == []
        assert tierlog("--config", s3_props, "topics", "--list").stdout == ""
    # The retry is a plain create, not "already exists".
    out = tierlog(*_create(s3_props)).stdout
    assert "Created topic orders with 3 partitions" in out
    assert _partition_dirs(data) == ["orders-0", "orders-1", "orders-2"]


def test_list_and_describe_while_the_bucket_refuses(tmp_path: Path, s3_props: Path,
                                                    s3_endpoint: str) -> None:
    tierlog(*_create(s3_props))
    tierlog("--config", s3_props, "topics", "--create", "--topic", "local-only")
    tierlog("--config", s3_props, "produce", "--topic", "orders",
            stdin="".join(f"v{i}\n" for i in range(300)))
    with bad_credentials(s3_endpoint):
        listed = tierlog("--config", s3_props, "topics", "--list")
        assert listed.stdout.split() == ["local-only", "orders"]
        done = tierlog("--config", s3_props, "topics", "--describe")
        lines = done.stdout.splitlines()
        orders = [line for line in lines if "Topic: orders\tPartition:" in line]
        assert len(orders) == 3
        assert all("RemoteSegments: unavailable\tRemoteBytes: unavailable" in line
                   for line in orders)
        assert sum(int(line.split("LogEndOffset: ")[1].split()[0]) for line in orders) == 300
        assert any("Topic: local-only\tPartition: 0" in line and "RemoteSegments: 0" in line
                   for line in lines)
        assert "orders-0: remote tier unavailable" in done.stderr
        assert S3_SECRET not in done.stderr
        # Deleting needs the tier (the remote segments go first): refused, nothing lost.
        error = user_error("--config", s3_props, "topics", "--delete", "--topic", "orders")
        assert "cannot delete topic orders" in error
    assert "orders" in tierlog("--config", s3_props, "topics", "--list").stdout.split()


def test_delete_removes_the_topic_locally_and_in_the_tier(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    props = tmp_path / "broker.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=local\n"
                     f"remote.storage.url={tier.as_uri()}\n")
    tierlog("--config", props, "topics", "--create", "--topic", "orders", "--partitions", "2",
            "--config", "remote.storage.enable=true", "--config", "segment.bytes=1024")
    tierlog("--config", props, "produce", "--topic", "orders", "--batch-size", "10",
            stdin="".join(f"value {i}\n" for i in range(400)))
    assert "copied 0 segments" not in tierlog("--config", props, "tier").stdout
    assert any(p.name.startswith("orders-") for p in tier.iterdir())
    assert tierlog("--config", props, "topics", "--delete", "--topic", "orders"
                   ).stdout == "Deleted topic orders.\n"
    assert tierlog("--config", props, "topics", "--list").stdout == ""
    assert not any(p.name.startswith("orders-") and list((p / "_metadata").glob("*.json"))
                   for p in tier.iterdir())
    # The deleted partitions' dirs wait, renamed, for the next process that opens the data
    # dir for writing (a read-only command such as topics --list removes nothing).
    assert all(p.name.endswith("-delete") for p in (tmp_path / "data").iterdir()
               if p.name.startswith("orders-"))
    tierlog("--config", props, "topics", "--create", "--topic", "after")
    assert not any(p.name.startswith("orders-") for p in (tmp_path / "data").iterdir())
    tierlog("--config", props, "topics", "--create", "--topic", "orders")
    error = user_error("--config", props, "topics", "--delete", "--topic", "nope")
    assert "unknown topic 'nope'" in error


def test_alter_sets_and_deletes_overrides(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tierlog("--data-dir", data, "topics", "--create", "--topic", "orders", "--partitions", "2",
            "--config", "segment.bytes=1048576", "--config", "retention.ms=1000")
    out = tierlog("--data-dir", data, "topics", "--alter", "--topic", "orders",
                  "--add-config", "retention.ms=3600000,cleanup.policy=[compact,delete]",
                  "--delete-config", "segment.bytes").stdout
    assert out == ("Altered topic orders: Configs: cleanup.policy=compact,delete,"
                   "retention.ms=3600000\n")
    described = tierlog("--data-dir", data, "topics", "--describe", "--topic", "orders").stdout
    assert "Configs: cleanup.policy=compact,delete,retention.ms=3600000" in described
    for p in (0, 1):
        text = (data / f"orders-{p}" / "topic-config.properties").read_text()
        assert text == "cleanup.policy=compact,delete\nretention.ms=3600000\n"
    # A bad value changes nothing, and says which key.
    error = user_error("--data-dir", data, "topics", "--alter", "--topic", "orders",
                       "--add-config", "retention.ms=3600001,segment.bytes=lots")
    assert "segment.bytes: expected an integer, got 'lots'" in error
    error = user_error("--data-dir", data, "topics", "--alter", "--topic", "orders",
                       "--delete-config", "segment.bites")
    assert "segment.bites: unknown topic configuration key" in error
    assert "retention.ms=3600000" in (data / "orders-0" / "topic-config.properties").read_text()
    error = user_error("--data-dir", data, "topics", "--alter", "--topic", "orders")
    assert "--alter needs --partitions, --add-config or --delete-config" in error


def test_alter_applies_to_the_live_logs(tmp_path: Path, clock) -> None:
    with LogManager.open(tmp_path, time_ms=clock, start_scheduler=False) as mgr:
        mgr.create_topic("orders", 2, {"retention.ms": 1000})
        config = mgr.alter_topic_config("orders", {"retention.ms": "5000",
                                                   "max.message.bytes": 2048})
        assert config["retention.ms"] == 5000
        for p in (0, 1):
            live = mgr.log("orders", p)
            assert live.config["retention.ms"] == 5000
            assert live.config["max.message.bytes"] == 2048
        mgr.alter_topic_config("orders", delete_configs=["retention.ms"])
        assert mgr.log("orders", 1).config["retention.ms"] == 604_800_000
        assert mgr.topic_overrides("orders") == {"max.message.bytes": 2048}
        with pytest.raises(ConfigError, match=r"min\.cleanable\.dirty\.ratio: expected a finite"):
            mgr.alter_topic_config("orders", {"min.cleanable.dirty.ratio": "nan"})
        assert mgr.topic_overrides("orders") == {"max.message.bytes": 2048}
    with LogManager.open(tmp_path, start_scheduler=False) as mgr:
        assert mgr.log("orders", 0).config["max.message.bytes"] == 2048


def test_remote_storage_cannot_be_disabled(tmp_path: Path) -> None:
    with LogManager.open(tmp_path / "data",
                         {"remote.storage.url": (tmp_path / "tier").as_uri()},
                         start_scheduler=False) as mgr:
        mgr.create_topic("orders", 1, {"remote.storage.enable": True})
        with pytest.raises(ConfigError, match=r"remote\.storage\.enable: cannot be disabled"):
            mgr.alter_topic_config("orders", {"remote.storage.enable": False})
        mgr.create_topic("plain", 1)
        mgr.alter_topic_config("plain", {"remote.storage.enable": True})
        assert mgr.log("plain", 0).remote is not None
