"""``tierlog topics`` on a data dir with kafka-topics' habits: ``--replication-factor 1`` is
accepted (a data dir is one node) and more is refused by name, ``--exclude-internal`` leaves
out the coordinators' topics, which otherwise come after the user's (a served data dir holds
50 ``__consumer_offsets`` partitions), ``--alter --partitions`` grows a topic, and
``--if-exists``/``--if-not-exists`` make a script's create or delete idempotent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.cli import main
from tierlog.manager.log_manager import LogManager


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def data(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    with LogManager.open([data], start_scheduler=False) as mgr:
        mgr.create_topic("__consumer_offsets", 3, {"cleanup.policy": "compact"})
        mgr.create_topic("zebra", 1)
        mgr.create_topic("apples", 1)
    return data


def test_replication_factor_one_is_accepted(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topics", "--data-dir", tmp_path / "d", "--create", "--topic",
                       "t", "--partitions", "2", "--replication-factor", "1")
    assert code == 0 and out.startswith("Created topic t with 2 partitions")


def test_a_replication_factor_above_one_is_refused_by_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "topics", "--data-dir", tmp_path / "d", "--create", "--topic",
                         "t", "--replication-factor", "3")
    assert code == 1 and out == ""
    assert "--replication-factor 3: a data dir is one node and cannot replicate" in err
    assert not (tmp_path / "d" / "t-0").exists()


def test_internal_topics_come_last_and_can_be_excluded(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(capsys, "topics", "--data-dir", data, "--list")
    assert out.split() == ["apples", "zebra", "__consumer_offsets"]
    _, out, _ = run(capsys, "topics", "--data-dir", data, "--list", "--exclude-internal")
    assert out.split() == ["apples", "zebra"]
    _, out, _ = run(capsys, "topics", "--data-dir", data, "--describe")
    described = [line.split("\t")[0] for line in out.splitlines() if line.startswith("Topic:")]
    assert described == ["Topic: apples", "Topic: zebra", "Topic: __consumer_offsets"]
    _, out, _ = run(capsys, "topics", "--data-dir", data, "--describe", "--exclude-internal")
    assert "__consumer_offsets" not in out and "Topic: apples" in out


def test_alter_partitions_grows_a_topic(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "topics", "--data-dir", data, "--alter", "--topic", "apples",
                       "--partitions", "3")
    assert code == 0 and out == "Altered topic apples: PartitionCount: 3\n"
    with LogManager.open([data], start_scheduler=False) as mgr:
        assert mgr.partitions("apples") == [0, 1, 2]


def test_if_exists_and_if_not_exists_make_a_script_idempotent(
        data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "topics", "--data-dir", data, "--create", "--topic", "apples",
               "--if-not-exists") == (0, "", "")
    assert run(capsys, "topics", "--data-dir", data, "--delete", "--topic", "pears",
               "--if-exists") == (0, "", "")
    code, _, err = run(capsys, "topics", "--data-dir", data, "--create", "--topic", "apples")
    assert code == 1 and "apples" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--describe", "--replication-factor", "1"], "--config and --replication-factor go with"),
    (["--list", "--partitions", "2"], "--partitions goes with --create or --alter"),
    (["--alter", "--topic", "apples"], "--alter needs --partitions, --add-config or"),
    (["--create", "--topic", "x", "--partitions", "0"], "--partitions must be at least 1"),
    (["--list", "--if-exists"], "--if-exists goes with --alter or --delete"),
])
def test_option_mistakes_are_named(data: Path, capsys: pytest.CaptureFixture[str],
                                   args: list[str], message: str) -> None:
    code, _, err = run(capsys, "topics", "--data-dir", data, *args)
    assert code == 1 and message in err
