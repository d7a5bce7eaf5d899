"""``tierlog topics``, ``produce`` and ``consume`` with ``--bootstrap-server`` against a real
``tierlog serve`` subprocess: kafka-topics' verbs through the admin API, a produce/consume
round trip through a consumer group, and the consumer's follow mode seeing a record produced
after it started."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic
from support.server_process import ServerProcess

from tierlog.cli import main
from tierlog.common.partitioner import partition_for_key

SERVER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
                 "transaction.state.log.num.partitions": 1}
DEADLINE_S = 60.0


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
    _code, out, _ = cli(capsys, "topics", *b, "--list")
    names = out.split()
    assert "wt" in names and names.index("wt") < names.index("__consumer_offsets")
    _code, out, _ = cli(capsys, "topics", *b, "--list", "--exclude-internal")
    assert "__consumer_offsets" not in out.split()
    _code, out, _ = cli(capsys, "topics", *b, "--describe", "--topic", "wt")
    lines = out.splitlines()
    assert lines[0].startswith("Topic: wt\tTopicId: ")
    assert lines[0].endswith("PartitionCount: 2\tReplicationFactor: 1\t"
                             "Configs: segment.bytes=1048576")
    assert lines[1:] == [f"\tTopic: wt\tPartition: {p}\tLeader: 1\tReplicas: 1\tIsr: 1"
                         for p in (0, 1)]
    _code, out, _ = cli(capsys, "topics", *b, "--alter", "--topic", "wt", "--partitions", "3",
                        "--add-config", "retention.ms=3600000", "--delete-config",
                        "segment.bytes")
    assert out.splitlines() == ["Altered topic wt: PartitionCount: 3",
                                "Altered topic wt: Configs: retention.ms=3600000"]
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    assert len(admin.list_topics(timeout=30).topics["wt"].partitions) == 3
    assert cli(capsys, "topics", *b, "--create", "--topic", "wt", "--if-not-exists") == (0, "", "")
    assert cli(capsys, "topics", *b, "--delete", "--topic", "wt") == (
        0, "Deleted topic wt.\n", "")
    assert "wt" not in admin.list_topics(timeout=30).topics
    assert cli(capsys, "topics", *b, "--delete", "--topic", "wt", "--if-exists") == (0, "", "")


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


def test_produce_then_consume_from_beginning_as_a_group(
        server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    create(server, "rt", 3)
    lines = tmp_path / "in.txt"
    lines.write_text("".join(f"key-{i}:value {i}\n" for i in range(30)))
    code, out, _ = cli(capsys, "produce", "--bootstrap-server", server.bootstrap, "--topic",
                       "rt", "--key-separator", ":", "--compression", "lz4", "--header",
                       "src=cli", "--file", str(lines))
    assert code == 0 and out.startswith("produced 30 records to rt (compression lz4)\n")
    b = ("--bootstrap-server", server.bootstrap)
    code, out, err = cli(capsys, "consume", *b, "--topic", "rt", "--group", "rt-g",
                         "--from-beginning", "--max-messages", "20", "--print-key",
                         "--print-partition", "--print-headers")
    code2, out2, err2 = cli(capsys, "consume", *b, "--topic", "rt", "--group", "rt-g",
                            "--from-beginning", "--max-messages", "10", "--timeout-ms", "30000",
                            "--print-key",
                            "--print-partition", "--print-headers")
    assert (code, code2) == (0, 0)
    assert err.endswith("Processed a total of 20 messages\n")
    assert err2.endswith("Processed a total of 10 messages\n")
    seen = {}
    assert len((out + out2).splitlines()) == 30
    for line in (out + out2).splitlines():
        partition, headers, key, value = line.split("\t")
        assert headers == "src:cli"
        seen[key] = (int(partition.removeprefix("Partition:")), value)
    # Every record once across the two runs (the first committed what it printed), each in
    # the partition Kafka's Java producer would choose.
    assert seen == {f"key-{i}": (partition_for_key(f"key-{i}".encode(), 3), f"value {i}")
                    for i in range(30)}
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("rt-g")])
    offsets = {tp.partition: tp.offset for tp in committed["rt-g"].result(30).topic_partitions}
    assert sum(offsets.values()) == 30


class Follower:
    """A ``tierlog consume`` subprocess whose stdout lines are read as they come."""

    def __init__(self, server: ServerProcess, topic: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tierlog.cli", "consume", "--bootstrap-server",
             server.bootstrap, "--topic", topic, "--from-beginning", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ},
            # As at a terminal: a test run started in the background (a CI script's `&`)
            # ignores SIGINT, and its children would inherit that. (Only signal() runs
            # between fork and exec: safe with the reader threads.)
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # noqa: PLW1509
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.err = bytearray()
        threading.Thread(target=self._read, daemon=True).start()
        # stderr is drained as it comes: a full pipe would block the consumer's exit.
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):  # type: ignore[union-attr]
            self.err += chunk

    def next_line(self) -> bytes:
        return self.lines.get(timeout=DEADLINE_S)

    def finish(self) -> tuple[int, str]:
        """Exit status and stderr, once it exits by itself (killed after the deadline)."""
        try:
            code = self.proc.wait(DEADLINE_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        self._err_reader.join(DEADLINE_S)
        return code, self.err.decode()


def test_consume_follows_a_record_produced_after_it_started(server: ServerProcess) -> None:
    create(server, "follow", 1)
    producer = ck.Producer({"bootstrap.servers": server.bootstrap})
    producer.produce("follow", value=b"before")
    assert producer.flush(DEADLINE_S) == 0
    follower = Follower(server, "follow", "--group", "follower", "--max-messages", "2",
                        "--timeout-ms", str(int(DEADLINE_S * 1000)))
    assert follower.next_line() == b"before\n"
    producer.produce("follow", value=b"after")  # the consumer is running and caught up
    assert producer.flush(DEADLINE_S) == 0
    assert follower.next_line() == b"after\n"
    code, err = follower.finish()
    assert code == 0 and err.endswith("Processed a total of 2 messages\n")


def test_ctrl_c_stops_following_and_reports_what_was_printed(server: ServerProcess) -> None:
    create(server, "interrupted", 1)
    producer = ck.Producer({"bootstrap.servers": server.bootstrap})
    producer.produce("interrupted", value=b"only")
    assert producer.flush(DEADLINE_S) == 0
    follower = Follower(server, "interrupted")  # no bound: follows until interrupted
    assert follower.next_line() == b"only\n"
    follower.proc.send_signal(signal.SIGINT)
    code, err = follower.finish()
    assert code == 130 and err.endswith("Processed a total of 1 messages\n")


def test_sigterm_stops_as_ctrl_c_does_and_leaves_the_group(server: ServerProcess) -> None:
    create(server, "terminated", 1)
    producer = ck.Producer({"bootstrap.servers": server.bootstrap})
    producer.produce("terminated", value=b"only")
    assert producer.flush(DEADLINE_S) == 0
    follower = Follower(server, "terminated", "--group", "terminated-group")
    assert follower.next_line() == b"only\n"
    follower.proc.send_signal(signal.SIGTERM)
    code, err = follower.finish()
    assert code == 143 and err.endswith("Processed a total of 1 messages\n")
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    [described] = admin.describe_consumer_groups(["terminated-group"]).values()
    assert described.result(DEADLINE_S).members == []  # it left, not waiting out a session


def test_consumer_mistakes_are_one_line(server: ServerProcess,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    b = ("--bootstrap-server", server.bootstrap)
    code, _, err = cli(capsys, "consume", *b, "--topic", "absent", "--timeout-ms", "0")
    assert code == 1 and "unknown topic 'absent'" in err
    code, _, err = cli(capsys, "consume", *b, "--topic", "follow", "--offset", "3")
    assert code == 1 and "--offset needs --partition" in err
    code, _, err = cli(capsys, "consume", "--topic", "follow", "--group", "g")
    assert code == 1 and "--group and --timeout-ms go with --bootstrap-server" in err


def test_without_the_client_library_the_error_says_what_to_install() -> None:
    code = ("import sys\n"
            "sys.modules['confluent_kafka'] = None\n"
            "from tierlog.cli import main\n"
            "sys.exit(main(['topics', '--list', '--bootstrap-server', '127.0.0.1:1']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 1
    assert done.stderr == ("tierlog: error: --bootstrap-server needs the Kafka client library "
                           "confluent-kafka: pip install 'tierlog[cli]'\n")


def test_a_setting_the_client_refuses_names_the_command_config(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "client.properties"
    settings.write_text("no.such.setting=1\n")
    code, _, err = cli(capsys, "topics", "--bootstrap-server", "127.0.0.1:1", "--list",
                       "--command-config", str(settings))
    assert code == 1
    assert err.startswith(f"tierlog: error: --command-config {settings}: No such configuration "
                          "property: \"no.such.setting\"")
