"""The table topic configs (issue 23) through a real ``tierlog serve`` and real admin clients:
CreateTopics, IncrementalAlterConfigs and DescribeConfigs take ``remote.log.table.*`` like any
topic config, a catalog secret is described as sensitive with a null value (as Kafka describes
a password) and never reaches the server's log, and ``remote.log.table.enable`` without remote
storage is refused by name, validate-only included."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)
from support.server_process import ServerProcess, start

SECRET = "wJalrXUtnFEMI-K7MDENG"
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def tiered_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("table-config")
    with start(tmp, {"remote.storage.manager": "local",
                     "remote.storage.url": (Path(tmp) / "tier").as_uri()}) as server:
        yield server


@pytest.fixture(scope="module")
def admin(tiered_server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": tiered_server.bootstrap})


def describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("topic", topic)
    entries: dict[str, ConfigEntry] = admin.describe_configs([resource])[resource].result(
        TIMEOUT_S)
    return entries


def refusal(future: object) -> str:
    with pytest.raises(ck.KafkaException) as caught:
        future.result(TIMEOUT_S)  # type: ignore[attr-defined]
    return str(caught.value)


def test_create_alter_and_describe_with_a_sensitive_catalog_secret(
        tiered_server: ServerProcess, admin: AdminClient) -> None:
    admin.create_topics([NewTopic("clicks", 1, 1, config={
        "remote.storage.enable": "true", "remote.log.table.enable": "true",
        "remote.log.table.catalog.uri": "http://rest:8181",
        "remote.log.table.catalog.s3.secret-access-key": SECRET})])["clicks"].result(TIMEOUT_S)
    entries = describe(admin, "clicks")
    secret = entries["remote.log.table.catalog.s3.secret-access-key"]
    assert secret.is_sensitive and secret.value is None
    uri = entries["remote.log.table.catalog.uri"]
    assert not uri.is_sensitive and uri.value == "http://rest:8181"
    assert entries["remote.log.table.enable"].value == "true"
    assert entries["remote.log.table.orphan.grace.ms"].value == "86400000"
    assert entries["remote.log.table.orphan.grace.ms"].is_default
    assert entries["remote.log.table.snapshot.retention.ms"].value == "3600000"

    alter = ConfigResource("topic", "clicks", incremental_configs=[
        ConfigEntry("remote.log.table.snapshot.retention.ms", "60000",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("remote.log.table.catalog.credential", "client:s3cr3t",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("remote.log.table.catalog.uri", None,
                    incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([alter])[alter].result(TIMEOUT_S)
    entries = describe(admin, "clicks")
    assert entries["remote.log.table.snapshot.retention.ms"].value == "60000"
    assert entries["remote.log.table.catalog.credential"].is_sensitive
    assert entries["remote.log.table.catalog.credential"].value is None
    assert "remote.log.table.catalog.uri" not in entries
    log = tiered_server.log_text()
    assert SECRET not in log and "s3cr3t" not in log


def test_kafka_python_sees_the_secret_as_sensitive(
        tiered_server: ServerProcess, admin: AdminClient) -> None:
    kafka_admin = pytest.importorskip("kafka.admin")
    admin.create_topics([NewTopic("views", 1, 1, config={
        "remote.storage.enable": "true",
        "remote.log.table.catalog.token": SECRET})])["views"].result(TIMEOUT_S)
    client = kafka_admin.KafkaAdminClient(bootstrap_servers=tiered_server.bootstrap)
    try:
        response = client.describe_configs(
            [kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "views")])
    finally:
        client.close()
    entry = response["topic"]["views"]["remote.log.table.catalog.token"]
    assert entry["value"] is None and entry["is_sensitive"], entry


def test_table_enable_without_remote_storage_is_refused(
        tiered_server: ServerProcess, admin: AdminClient) -> None:
    for validate_only in (True, False):
        message = refusal(admin.create_topics(
            [NewTopic("plain", 1, 1, config={"remote.log.table.enable": "true"})],
            validate_only=validate_only)["plain"])
        assert "remote.log.table.enable" in message and "remote.storage.enable" in message
    assert "plain" not in admin.list_topics(timeout=10).topics

    admin.create_topics([NewTopic("local", 1, 1)])["local"].result(TIMEOUT_S)
    for validate_only in (True, False):
        alter = ConfigResource("topic", "local", incremental_configs=[
            ConfigEntry("remote.log.table.enable", "true",
                        incremental_operation=AlterConfigOpType.SET)])
        message = refusal(admin.incremental_alter_configs(
            [alter], validate_only=validate_only)[alter])
        assert "remote.log.table.enable" in message and "remote.storage.enable" in message
    assert describe(admin, "local")["remote.log.table.enable"].value == "false"
