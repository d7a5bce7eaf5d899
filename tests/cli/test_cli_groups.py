"""``tierlog groups`` (kafka-consumer-groups) against a real ``tierlog serve`` subprocess: the
lag ``--describe`` prints is what confluent-kafka's admin client reads (committed offsets and
log end offsets), ``--reset-offsets`` changes nothing without ``--execute`` and commits its
plan with it, refuses a group with an active member, and ``--delete`` deletes; ``--members``
and ``--state`` show the group's members and state as kafka-consumer-groups does."""

from __future__ import annotations

import time

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from support.server_process import ServerProcess

from tierlog.cli import main
from tierlog.cli.wire_reset import _duration_ms

SERVER_CONFIG = {"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 2,
                 "transaction.state.log.num.partitions": 1}
DEADLINE_S = 60.0
PARTITIONS = 3


@pytest.fixture(scope="module")
def admin(module_server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": module_server.bootstrap})


def cli(capsys: pytest.CaptureFixture[str], server: ServerProcess,
        *args: str) -> tuple[int, str, str]:
    code = main(["groups", "--bootstrap-server", server.bootstrap, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def topic_with_commits(server: ServerProcess, admin: AdminClient, topic: str, group: str,
                       commits: dict[int, int]) -> None:
    """``topic`` with 10, 11, 12 records in partitions 0, 1, 2 and ``group``'s ``commits``."""
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(DEADLINE_S)
    producer = Producer({"bootstrap.servers": server.bootstrap})
    for partition in range(PARTITIONS):
        for i in range(10 + partition):
            producer.produce(topic, value=b"%d" % i, partition=partition)
    assert producer.flush(DEADLINE_S) == 0
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, offset)
                                                    for p, offset in commits.items()])]
    admin.alter_consumer_group_offsets(request)[group].result(DEADLINE_S)


def committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    return {(tp.topic, tp.partition): tp.offset
            for tp in listed[group].result(DEADLINE_S).topic_partitions}


def rows(out: str) -> list[list[str]]:
    """The table's rows (after its header line), split into cells."""
    lines = [line.split() for line in out.splitlines() if line.strip()]
    return lines[1:]


def test_describe_prints_the_lag_the_admin_api_gives(
        server: ServerProcess, admin: AdminClient, capsys: pytest.CaptureFixture[str]) -> None:
    topic_with_commits(server, admin, "lagging", "lag-group", {0: 4, 1: 11, 2: 0})
    code, out, err = cli(capsys, server, "--describe", "--group", "lag-group")
    assert code == 0
    assert "Consumer group 'lag-group' has no active members." in err
    header = out.strip().splitlines()[0].split()
    assert header == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "HOST", "CLIENT-ID"]
    current = committed(admin, "lag-group")
    ends = {(tp.topic, tp.partition): f.result(DEADLINE_S).offset for tp, f in admin.list_offsets(
        {TopicPartition("lagging", p): OffsetSpec.latest() for p in range(PARTITIONS)}).items()}
    expected = [["lag-group", "lagging", str(p), str(current[("lagging", p)]),
                 str(ends[("lagging", p)]), str(ends[("lagging", p)] - current[("lagging", p)]),
                 "-", "-", "-"] for p in range(PARTITIONS)]
    assert rows(out) == expected
    assert [r[5] for r in expected] == ["6", "0", "12"]  # the commits above, against 10/11/12


def test_describe_names_the_member_consuming_a_partition(
        server: ServerProcess, admin: AdminClient, capsys: pytest.CaptureFixture[str]) -> None:
    topic_with_commits(server, admin, "live", "live-group", {0: 1})
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "live-group",
                         "client.id": "the-member", "enable.auto.commit": False})
    consumer.subscribe(["live"])
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(consumer.assignment()) < PARTITIONS:  # bounded: the join's rebalance
            assert time.monotonic() < deadline, "the member was never assigned its partitions"
            consumer.poll(0.1)
        code, out, _ = cli(capsys, server, "--describe", "--group", "live-group")
        assert code == 0
        table = rows(out)
        assert [r[2] for r in table] == ["0", "1", "2"]
        assert {r[8] for r in table} == {"the-member"}
        assert [r[3] for r in table] == ["1", "-", "-"]  # only partition 0 has a commit
        code, out, _ = cli(capsys, server, "--describe", "--group", "live-group", "--members")
        [member] = rows(out)
        assert (member[0], member[3:]) == ("live-group", ["the-member", "3"])
        assert member[1] == table[0][6]  # the member id of the offsets view
        code, out, _ = cli(capsys, server, "--describe", "--group", "live-group", "--state")
        assert rows(out) == [["live-group", server.bootstrap, "(1)", "range", "Stable", "1"]]
        code, _, err = cli(capsys, server, "--reset-offsets", "--group", "live-group",
                           "--all-topics", "--to-earliest", "--execute")
        assert code == 1
        assert "the group 'live-group' is inactive, but the current state is Stable" in err
    finally:
        consumer.close()


def test_reset_offsets_is_a_dry_run_unless_execute(
        server: ServerProcess, admin: AdminClient, capsys: pytest.CaptureFixture[str]) -> None:
    topic_with_commits(server, admin, "resets", "reset-group", {0: 5, 1: 5, 2: 5})
    before = committed(admin, "reset-group")
    code, out, err = cli(capsys, server, "--reset-offsets", "--group", "reset-group",
                         "--topic", "resets:0,2", "--shift-by", "-3")
    assert code == 0 and "nothing was changed (no --execute)" in err
    assert rows(out) == [["reset-group", "resets", "0", "2"], ["reset-group", "resets", "2", "2"]]
    assert committed(admin, "reset-group") == before

    code, out, _ = cli(capsys, server, "--reset-offsets", "--group", "reset-group",
                       "--all-topics", "--to-offset", "11", "--execute")
    assert code == 0
    plan = {("resets", int(r[2])): int(r[3]) for r in rows(out)}
    assert plan == {("resets", 0): 10, ("resets", 1): 11, ("resets", 2): 11}  # within 0..end
    assert committed(admin, "reset-group") == plan

    code, out, _ = cli(capsys, server, "--reset-offsets", "--group", "reset-group",
                       "--topic", "resets", "--to-datetime", "2000-01-01T00:00:00", "--execute")
    assert code == 0 and committed(admin, "reset-group") == {
        ("resets", p): 0 for p in range(PARTITIONS)}


def test_list_and_delete(server: ServerProcess, admin: AdminClient,
                         capsys: pytest.CaptureFixture[str]) -> None:
    topic_with_commits(server, admin, "doomed", "doomed-group", {0: 1})
    code, out, _ = cli(capsys, server, "--list", "--state")
    assert ["doomed-group", "Empty"] in rows(out)
    code, out, _ = cli(capsys, server, "--delete", "--group", "doomed-group")
    assert out == "Deletion of requested consumer groups ('doomed-group') was successful.\n"
    code, out, _ = cli(capsys, server, "--list")
    assert "doomed-group" not in out.split()
    code, _, err = cli(capsys, server, "--delete", "--group", "doomed-group")
    assert code == 1 and "GROUP_ID_NOT_FOUND" in err
    code, _, err = cli(capsys, server, "--describe", "--group", "doomed-group")
    assert code == 1 and "consumer group 'doomed-group' does not exist" in err


def test_by_duration_reads_kafkas_iso_durations() -> None:
    assert _duration_ms("PT15M") == 15 * 60_000
    assert _duration_ms("P1DT2H30M5.5S") == ((24 + 2) * 3600 + 30 * 60 + 5.5) * 1000
    for bad in ("1H", "P", "PT", "P1DT", "PT-5M"):
        with pytest.raises(Exception, match="ISO 8601 duration"):
            _duration_ms(bad)


def test_broker_options_are_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["groups", "--list"])
    assert exit_info.value.code == 2
    assert "--bootstrap-server" in capsys.readouterr().err
