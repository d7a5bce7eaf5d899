"""``tierlog produce``, ``consume`` and ``topics`` run as a user runs them, plus the config
file parser and Kafka's partitioner."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2
from support.cli_runner import tierlog, user_error

from tierlog.cli import main
from tierlog.cli._common import CliError, read_properties
from tierlog.common.partitioner import murmur2, partition_for_key
from tierlog.manager.log_manager import LogManager


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return tmp_path / "data"


def _create(data: Path, topic: str, partitions: int = 1, *configs: str) -> None:
    args = ["--data-dir", data, "topics", "--create", "--topic", topic,
            "--partitions", str(partitions)]
    for config in configs:
        args += ["--config", config]
    created = tierlog(*args).stdout
    assert created.startswith(f"Created topic {topic} with {partitions} partition")


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def test_text_round_trip_with_keys_headers_and_compression(data: Path) -> None:
    _create(data, "orders", 3)
    lines = "".join(f"key-{i}:value {i}\n" for i in range(40))
    out = tierlog("produce", "--data-dir", data, "--topic", "orders", "--key-separator", ":",
                  "--compression", "zstd", "--header", "src=cli", "--header", "env=test",
                  "--header", "env=ci",
                  stdin=lines).stdout
    assert out.startswith("produced 40 records to orders (compression zstd)")
    done = tierlog("consume", "--data-dir", data, "--topic", "orders", "--print-partition",
                   "--print-key", "--print-headers")
    assert done.stderr.strip() == "Processed a total of 40 messages"
    seen = {}
    for line in done.stdout.splitlines():
        partition, headers, key, value = line.split("\t")
        assert headers == "src:cli,env:test,env:ci"
        seen[key] = (int(partition.removeprefix("Partition:")), value)
    assert seen == {f"key-{i}": (partition_for_key(f"key-{i}".encode(), 3), f"value {i}")
                    for i in range(40)}
    dump = tierlog("dump-log", data / "orders-0").stdout
    assert "compresscodec: zstd" in dump and "compresscodec: none" not in dump


def test_json_round_trip_keeps_binary_keys_headers_timestamps_and_nulls(data: Path) -> None:
    _create(data, "events", 2)
    records = [
        {"key": "a", "value": {"n": 1}, "headers": {"h": "1"}, "timestamp": 1_700_000_000_000,
         "partition": 1},
        {"key_base64": base64.b64encode(b"\xff\x00").decode(), "value": "bin key",
         "headers": [["x", "1"], ["x", None]], "timestamp": 1_700_000_000_005, "partition": 0},
        {"value_base64": base64.b64encode(b"\x80\x81").decode(), "key": None,
         "headers": [{"key": "b", "value_base64": base64.b64encode(b"\xfe").decode()}],
         "timestamp": 1_700_000_000_009, "partition": 0},
        {"value": None, "timestamp": 1_700_000_000_010, "partition": 1},
    ]
    stdin = "\n".join(json.dumps(r) for r in records) + "\n\n"
    tierlog("produce", "--data-dir", data, "--topic", "events", "--json", stdin=stdin)
    first = tierlog("consume", "--data-dir", data, "--topic", "events", "--format", "json").stdout
    got = _json_lines(first)
    assert [(r["partition"], r["offset"]) for r in got] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    p0, p1 = got[:2], got[2:]
    assert p0[0]["key_base64"] == base64.b64encode(b"\xff\x00").decode()
    assert p0[0]["headers"] == [{"key": "x", "value": "1"}, {"key": "x", "value": None}]
    assert p0[1]["key"] is None and p0[1]["value_base64"] == base64.b64encode(b"\x80\x81").decode()
    assert p0[1]["headers"] == [{"key": "b", "value_base64": base64.b64encode(b"\xfe").decode()}]
    assert p1[0] == {"topic": "events", "partition": 1, "offset": 0,
                     "timestamp": 1_700_000_000_000, "timestampType": "CreateTime",
                     "key": "a", "value": '{"n":1}', "headers": [{"key": "h", "value": "1"}]}
    assert p1[1]["value"] is None and p1[1]["key"] is None
    # consume's JSON is produce's JSON: copying a topic through the pipe changes nothing.
    _create(data, "copy", 2)
    tierlog("produce", "--data-dir", data, "--topic", "copy", "--json", stdin=first)
    again = tierlog("consume", "--data-dir", data, "--topic", "copy", "--format", "json").stdout
    assert [{**r, "topic": "events"} for r in _json_lines(again)] == got


def test_consume_from_an_offset_a_timestamp_and_with_a_limit(data: Path) -> None:
    _create(data, "t", 1)
    stdin = "".join(json.dumps({"value": f"v{i}", "timestamp": 1000 + 10 * i}) + "\n"
                    for i in range(20))
    tierlog("produce", "--data-dir", data, "--topic", "t", "--json", "--batch-size", "3",
            stdin=stdin)

    def values(*args: str) -> list[str]:
        return tierlog("consume", "--data-dir", data, "--topic", "t", *args).stdout.split()

    assert values("--offset", "7", "--max-messages", "3") == ["v7", "v8", "v9"]
    assert values("--from-timestamp", "1155") == [f"v{i}" for i in range(16, 20)]
    assert values("--from-beginning", "--max-messages", "2") == ["v0", "v1"]
    assert values("--offset", "latest") == []
    assert values("--from-timestamp", "99999") == []
    offsets = tierlog("consume", "--data-dir", data, "--topic", "t", "--offset", "18",
                      "--print-offset", "--print-timestamp").stdout.splitlines()
    assert offsets == ["CreateTime:1180\tOffset:18\tv18", "CreateTime:1190\tOffset:19\tv19"]


def test_read_committed_skips_an_aborted_transaction(data: Path) -> None:
    from tierlog import Record

    with LogManager.open(data) as mgr:
        log = mgr.create_topic("txn", 1)[0]
        log.append_records([Record(value=b"before")])
        log.append_records([Record(value=b"aborted-%d" % i) for i in range(3)],
                           producer_id=7, producer_epoch=0, base_sequence=0, transactional=True)
        log.append_marker(7, 0, commit=False)
        log.append_records([Record(value=b"after")])

    def values(isolation: str) -> list[str]:
        return tierlog("consume", "--data-dir", data, "--topic", "txn", "--isolation-level",
                       isolation).stdout.split()

    assert values("read_uncommitted") == ["before", "aborted-0", "aborted-1", "aborted-2",
                                          "after"]
    assert values("read_committed") == ["before", "after"]


def test_topics_create_list_and_describe(data: Path) -> None:
    _create(data, "alpha", 2, "segment.bytes=1048576", "cleanup.policy=compact")
    _create(data, "beta", 1)
    tierlog("produce", "--data-dir", data, "--topic", "alpha", "--partition", "1",
            stdin="x\ny\nz\n")
    assert tierlog("--data-dir", data, "topics", "--list").stdout.split() == ["alpha", "beta"]
    out = tierlog("--data-dir", data, "topics", "--describe", "--topic", "alpha").stdout
    header, p0, p1 = out.splitlines()
    assert header.startswith("Topic: alpha\tTopicId: ")
    assert header.endswith("PartitionCount: 2\tConfigs: cleanup.policy=compact,"
                           "segment.bytes=1048576")
    fields = dict(part.split(": ", 1) for part in p1.strip().split("\t"))
    assert fields["Partition"] == "1"
    assert (fields["LogStartOffset"], fields["LocalLogStartOffset"], fields["LogEndOffset"],
            fields["HighWatermark"], fields["LastStableOffset"]) == ("0", "0", "3", "3", "3")
    assert fields["LocalSegments"] == "1" and fields["RemoteSegments"] == "0"
    assert int(fields["LocalBytes"].split()[0]) > 0
    assert "LogEndOffset: 0" in p0
    both = tierlog("--data-dir", data, "topics", "--describe").stdout
    assert both.count("PartitionCount") == 2


def test_a_config_file_sets_log_dirs_and_defaults(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "# broker\n"
        "! another comment\n"
        f"log.dirs = {tmp_path / 'from-config'}\n"
        "log.segment.bytes: 2048\n"
        "num.partitions \\\n"
        "    3\n")
    tierlog("--config", props, "topics", "--create", "--topic", "t")
    assert sorted(p.name for p in (tmp_path / "from-config").iterdir()
                  if p.is_dir()) == ["t-0", "t-1", "t-2"]
    tierlog("produce", "--config", props, "--topic", "t", "--partition", "0",
            stdin="".join(f"{'x' * 100}\n" for _ in range(60)))
    with LogManager.open(tmp_path / "from-config") as mgr:
        assert len(mgr.log("t", 0).segments) > 1  # log.segment.bytes=2048 applied


def test_read_properties_follows_javas_format(tmp_path: Path) -> None:
    path = tmp_path / "a.properties"
    path.write_text("a=1\n  b : two words  \nc three\n# x=1\nd=\\\n  continued\\\\\n"
                    "e=tab\\there\nf\\=g=h\nempty=\n\\u0041=unicode\n")
    assert read_properties(path) == {"a": "1", "b": "two words  ", "c": "three",
                                     "d": "continued\\", "e": "tab\there", "f=g": "h",
                                     "empty": "", "A": "unicode"}
    with pytest.raises(CliError, match="does not exist"):
        read_properties(tmp_path / "missing.properties")


def test_murmur2_matches_kafka() -> None:
    keys = [b"", b"a", b"ab", b"abc", b"abcd", b"user-12345", bytes(range(256))]
    for key in keys:
        assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(key) & 0x7FFFFFFF


def test_keyless_records_fill_one_partition_per_batch(data: Path) -> None:
    _create(data, "k", 2)
    out = tierlog("produce", "--data-dir", data, "--topic", "k", "--batch-size", "5",
                  stdin="".join(f"{i}\n" for i in range(20))).stdout
    assert "partition 0: 10 records at offsets 0-9" in out
    assert "partition 1: 10 records at offsets 0-9" in out


@pytest.mark.parametrize("command", ["produce", "consume", "topics", "tier", "dump-log",
                                     "plugins", "demo"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert f"usage: tierlog {command}" in capsys.readouterr().out


def test_plugins_lists_the_builtin_remote_storages() -> None:
    out = tierlog("plugins").stdout
    assert "remote storage:" in out
    storages = out.split("remote storage:")[1].split()
    assert "local," in storages and "s3" in storages


# -- user mistakes: one line, exit 1, no traceback -------------------------------------------


@pytest.fixture
def one_topic(data: Path) -> Path:
    with LogManager.open(data) as mgr:
        mgr.create_topic("t", 2)
    return data


@pytest.mark.parametrize(("args", "stdin", "expected"), [
    (["topics", "--list", "--set", "segment.bytez=1"], None,
     "segment.bytez: unknown configuration key"),
    (["topics", "--list", "--set", "log.segment.bytes=lots"], None,
     "segment.bytes: expected an integer, got 'lots'"),
    (["topics", "--create", "--topic", "u", "--config", "retention.ms=-5"], None,
     "retention.ms: -5 is below the minimum -1"),
    (["topics", "--create", "--topic", "t"], None, "topic 't' already exists"),
    (["topics", "--create", "--topic", "../x"], None, "../x"),
    (["topics", "--describe", "--topic", "nope"], None, "unknown topic 'nope' (topics: t)"),
    (["consume", "--topic", "nope"], None, "unknown topic 'nope'"),
    (["consume", "--topic", "t", "--partition", "5"], None, "topic 't' has no partition 5"),
    (["consume", "--topic", "t", "--partition", "0", "--offset", "7"], None,
     "offset 7 is out of range [0, 0]"),
    (["consume", "--topic", "t", "--offset", "3"], None,
     "--offset with a number needs --partition"),
    (["consume", "--topic", "t", "--partition", "0", "--offset", "soon"], None,
     "--offset must be a number"),
    (["produce", "--topic", "t", "--json"], '{"value": "ok"}\n{"value": nope}\n',
     "<stdin>, line 2: not valid JSON: Expecting value (column 11) (records written before it: 1)"),
    (["produce", "--topic", "t", "--json"], '["a"]\n', "line 1: expected a JSON object"),
    (["produce", "--topic", "t", "--json"], '{"vaule": "x"}\n', "unknown field 'vaule'"),
    (["produce", "--topic", "t", "--json"], '{"value": "x", "partition": 9}\n',
     "line 1: topic 't' has no partition 9"),
    (["produce", "--topic", "t", "--key-separator", ":"], "a:b\nno separator\n",
     "line 2: no key separator ':' in the line"),
    (["produce", "--topic", "t", "--file", "/nonexistent/input.txt"], None,
     "/nonexistent/input.txt: No such file or directory"),
    (["produce", "--topic", "t", "--header", "novalue"], "x\n", "--header expects KEY=VALUE"),
    (["tier"], None, "no topic has remote.storage.enable=true"),
])
def test_user_mistakes_print_one_line(one_topic: Path, args: list[str], stdin: str | None,
                                      expected: str) -> None:
    assert expected in user_error("--data-dir", one_topic, *args, stdin=stdin)


def test_missing_data_dir_and_config_file_are_named(tmp_path: Path) -> None:
    assert "data directory" in user_error("--data-dir", tmp_path / "none", "topics", "--list")
    assert not (tmp_path / "none").exists()
    assert "config file" in user_error("--config", tmp_path / "x.properties", "topics", "--list")


def test_usage_errors_exit_2_without_traceback(tmp_path: Path) -> None:
    done = tierlog("consume", check=False)
    assert done.returncode == 2 and "--topic" in done.stderr and "Traceback" not in done.stderr
    done = tierlog("topics", "--list", "--describe", check=False)
    assert done.returncode == 2 and "not allowed with" in done.stderr
