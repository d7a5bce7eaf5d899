"""The table topic configs (issue 23) through ``tierlog topics`` on a data dir: created, altered
and described like any topic config, ``remote.log.table.catalog.*`` passed through, its secrets
never shown or logged, and ``remote.log.table.enable`` refused without remote storage (naming
both keys), at create and at alter, leaving nothing changed."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.fault_fs import fault_storage

from tierlog.cli import main
from tierlog.manager.log_manager import LogManager

SECRET = "wJalrXUtnFEMI-K7MDENG"


def run(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def props(tmp_path: Path) -> Path:
    props = tmp_path / "broker.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=local\n"
                     f"remote.storage.url={(tmp_path / 'tier').as_uri()}\n")
    return props


def configs_line(out: str) -> str:
    return next(line for line in out.splitlines() if "Configs: " in line).split(
        "Configs: ", 1)[1]


def test_create_describe_and_alter_the_table_configs(
        props: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    code, out, _ = run(capsys, "--config", props, "topics", "--create", "--topic", "clicks",
                       "--config", "remote.storage.enable=true",
                       "--config", "remote.log.table.enable=true",
                       "--config", "remote.log.table.catalog.uri=http://rest:8181",
                       "--config", f"remote.log.table.catalog.s3.secret-access-key={SECRET}")
    assert code == 0, out
    _, out, _ = run(capsys, "--config", props, "topics", "--describe", "--topic", "clicks")
    assert configs_line(out) == ("remote.log.table.catalog.s3.secret-access-key=null,"
                                 "remote.log.table.catalog.uri=http://rest:8181,"
                                 "remote.log.table.enable=true,remote.storage.enable=true")
    code, out, _ = run(capsys, "--config", props, "topics", "--alter", "--topic", "clicks",
                       "--add-config", "remote.log.table.orphan.grace.ms=60000,"
                                       "remote.log.table.catalog.token=t0k3n",
                       "--delete-config", "remote.log.table.catalog.uri")
    assert code == 0
    assert configs_line(out) == ("remote.log.table.catalog.s3.secret-access-key=null,"
                                 "remote.log.table.catalog.token=null,"
                                 "remote.log.table.enable=true,"
                                 "remote.log.table.orphan.grace.ms=60000,"
                                 "remote.storage.enable=true")
    assert SECRET not in caplog.text and "t0k3n" not in caplog.text
    with LogManager.open([props.parent / "data"], {
            "remote.storage.url": (props.parent / "tier").as_uri()},
            start_scheduler=False, read_only=True) as mgr:
        config = mgr.topic_config("clicks")
        # The secrets are kept (the catalog needs them), only never shown.
        assert config.table_catalog_properties == {"s3.secret-access-key": SECRET,
                                                   "token": "t0k3n"}
        assert config["remote.log.table.orphan.grace.ms"] == 60_000
        assert config["remote.log.table.snapshot.retention.ms"] == 3_600_000
        assert SECRET not in repr(config)


def test_table_enable_without_remote_storage_is_refused_at_create(
        props: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "--config", props, "topics", "--create", "--topic", "clicks",
                         "--config", "remote.log.table.enable=true")
    assert code == 1 and out == ""
    assert "remote.log.table.enable" in err and "remote.storage.enable=true" in err
    assert not (props.parent / "data" / "clicks-0").exists()


def test_table_enable_without_remote_storage_is_refused_at_alter(
        props: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "--config", props, "topics", "--create", "--topic", "clicks")[0] == 0
    code, _, err = run(capsys, "--config", props, "topics", "--alter", "--topic", "clicks",
                       "--add-config", "remote.log.table.enable=true")
    assert code == 1
    assert "remote.log.table.enable" in err and "remote.storage.enable=true" in err
    _, out, _ = run(capsys, "--config", props, "topics", "--describe", "--topic", "clicks")
    assert configs_line(out) == ""
    code, _, _ = run(capsys, "--config", props, "topics", "--alter", "--topic", "clicks",
                     "--add-config", "remote.storage.enable=true,remote.log.table.enable=true")
    assert code == 0


def test_a_catalog_prefix_without_a_property_name_is_refused(
        props: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--config", props, "topics", "--create", "--topic", "clicks",
                       "--config", "remote.storage.enable=true",
                       "--config", "remote.log.table.catalog.=x")
    assert code == 1 and "remote.log.table.catalog." in err and "property name" in err


def test_a_tier_without_exclusive_create_needs_a_catalog(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # faultfs:// is an object store (neither S3 nor a directory) with no exclusive create.
    props = tmp_path / "broker.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\nremote.storage.manager=fsspec\n"
                     f"remote.storage.url=faultfs://{tmp_path}/tier\n")
    create = ("--config", props, "topics", "--create", "--config", "remote.storage.enable=true",
              "--config", "remote.log.table.enable=true")
    with fault_storage():
        code, _, err = run(capsys, *create, "--topic", "clicks")
        assert code == 1
        assert "offers no exclusive create" in err and "remote.log.table.catalog.*" in err
        assert not (tmp_path / "data" / "clicks-0").exists()
        code, _, err = run(capsys, *create, "--topic", "views",
                           "--config", "remote.log.table.catalog.uri=http://rest:8181")
        assert code == 0, err
        code, _, err = run(capsys, "--config", props, "topics", "--alter", "--topic", "views",
                           "--delete-config", "remote.log.table.catalog.uri")
        assert code == 1 and "offers no exclusive create" in err
