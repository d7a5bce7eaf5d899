"""``tierlog topics``, ``produce`` and ``consume`` with ``--bootstrap-server`` against a real
``tierlog serve`` subprocess: kafka-topics' verbs through the admin API, a produce/consume
round trip through a consumer group, and the consumer's follow mode seeing a record produced
after it started."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic
from server_process import ServerProcess, start
from tierlog.cli import main
from tierlog.partitioner import partition_for_key

CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
          "transaction.state.log.num.partitions": 1}
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with start(tmp_path_factory.mktemp("wire"), CONFIG) as proc:
        yield proc


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``tierlog ARGS`` in this process: exit status, stdout, stderr."""
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def create(server: ServerProcess, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(DEADLINE_S)


def test_topics_create_describe_alter_and_delete(server: ServerProcess,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    b = ("--bootstrap-server", server.bootstrap)
    assert cli(capsys, "topics", *b, "--create", "--topic", "wt", "--partitions", "2",
               "--replication-factor", "1", "--config", "segment.bytes=1048576") == (
        0, "Created topic wt.\n", "")
    code, out, _ = cli(capsys, "topics", *b, "--list")
    names = out.split()
    assert "wt" in names and names.index("wt") < names.index("__consumer_offsets")
    code, out, _ = cli(capsys, "topics", *b, "--list", "--exclude-internal")
    assert "__consumer_offsets" not in out.split()
    code, out, _ = cli(capsys, "topics", *b, "--describe", "--topic", "wt")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: wt\tTopicId: ")
    assert lines[0].endswith("PartitionCount: 2\tReplicationFactor: 1\t"
                             "Configs: segment.bytes=1048576")
    assert lines[1:] == [f"\tTopic: wt\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"
                         for p in (0, 1)]
    code, out, _ = cli(capsys, "topics", *b, "--alter", "--topic", "wt", "--partitions", "3",
                       "--add-config", "retention.ms=3600000", "--delete-config",
                       "segment.bytes")
    assert out.splitlines() == ["Altered topic wt: PartitionCount: 3",
                                "Altered topic wt: Configs: retention.ms=3600000"]
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    assert len(admin.list_topics(timeout=30).topics["wt"].partitions) == 3
    assert cli(capsys, "topics", *b, "--delete", "--topic", "wt") == (
        0, "Deleted topic wt.\n", "")
    assert "wt" not in admin.list_topics(timeout=30).topics


def test_the_broker_refuses_a_replication_factor_it_cannot_place(
        server: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "topics", "--bootstrap-server", server.bootstrap, "--create",
                         "--topic", "r3", "--replication-factor", "3")
    assert code == 1 and out == ""
    assert err == ("tierlog: error: creating topic 'r3': replication factor 3 is larger than "
                   "the 1 available broker (INVALID_REPLICATION_FACTOR)\n")


def test_broker_mistakes_are_one_line(server: ServerProcess,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "topics", "--bootstrap-server", server.bootstrap, "--describe",
                       "--topic", "missing")
    assert code == 1 and "describing topic 'missing'" in err and "UNKNOWN_TOPIC" in err
    code, _, err = cli(capsys, "topics", "--bootstrap-server", server.bootstrap, "--list",
                       "--data-dir", "somewhere")
    assert code == 1 and "--data-dir is for local logs" in err
