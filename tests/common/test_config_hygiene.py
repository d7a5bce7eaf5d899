"""Config and name hygiene: numbers are ASCII and finite, partition numbers fit Kafka's int32,
storage secrets never show in a repr or an error message."""

from __future__ import annotations

import json

import pytest
from support.cli_runner import user_error

from tierlog.common import filenames
from tierlog.config import LogConfig
from tierlog.errors import ConfigError, InvalidTopicError, LogDirectoryError
from tierlog.manager.log_manager import LogManager
from tierlog.manager.manager_config import ManagerConfig
from tierlog.remote.tier.layout import parse_partition_dir_name

SECRET = "hunter2-Zq8vW3nL5p"
TOPIC_ID = "q0Vs7vGvSZ6ljmj-ZmXC1A"


@pytest.mark.parametrize("raw", ["nan", "NaN", "inf", "-inf", float("nan"), float("inf")])
def test_the_dirty_ratio_must_be_a_finite_number(raw: object) -> None:
    with pytest.raises(ConfigError, match=r"min\.cleanable\.dirty\.ratio: expected a finite"):
        LogConfig({"min.cleanable.dirty.ratio": raw})


@pytest.mark.parametrize(("key", "raw"), [
    ("segment.bytes", "\u0661\u0662\u0663\u0664\u0665\u0666\u0667"),  # Arabic-Indic digits
    ("retention.ms", "\uff11\uff12"),  # full-width digits
    ("segment.bytes", "1_048_576"),  # Python's underscores are not Kafka's
    ("min.cleanable.dirty.ratio", "\u0660.\u0665"),
    ("min.cleanable.dirty.ratio", "0_5"),
])
def test_numbers_are_ascii_digits(key: str, raw: str) -> None:
    with pytest.raises(ConfigError, match=rf"{key}: expected"):
        LogConfig({key: raw})


def test_ascii_numbers_still_parse() -> None:
    config = LogConfig({"segment.bytes": " 1048576 ", "min.cleanable.dirty.ratio": "0.25",
                        "retention.ms": "-1"})
    assert config["segment.bytes"] == 1048576
    assert config["min.cleanable.dirty.ratio"] == 0.25
    assert config["retention.ms"] == -1
    assert ManagerConfig({"num.partitions": "3"})["num.partitions"] == 3


@pytest.mark.parametrize("name", ["orders-2147483648", "orders-99999999999999999999",
                                  "orders-\u0661\u0662", "orders-\u00b2", "orders-+1",
                                  "orders-01"])
def test_partition_directory_numbers_are_int32_ascii(name: str) -> None:
    with pytest.raises(LogDirectoryError, match="is not a partition directory"):
        filenames.parse_partition_dir(name)
    assert parse_partition_dir_name(f"{name}-{TOPIC_ID}") is None


def test_largest_partition_number_is_accepted() -> None:
    assert filenames.parse_partition_dir("orders-2147483647") == ("orders", 2147483647)
    assert filenames.parse_partition_dir("orders-0") == ("orders", 0)
    assert parse_partition_dir_name(f"orders-7-{TOPIC_ID}").partition == 7
    with pytest.raises(InvalidTopicError, match="partition"):
        filenames.partition_dir_name("orders", 1 << 31)


def test_segment_names_are_ascii_digits() -> None:
    with pytest.raises(LogDirectoryError):
        filenames.offset_from_filename("\u0660" * 20 + ".log")


def test_manager_skips_a_directory_with_an_oversized_partition(tmp_path) -> None:
    (tmp_path / "orders-2147483648").mkdir()
    with LogManager.open(tmp_path, start_scheduler=False) as mgr:
        assert mgr.topics() == []


def test_storage_secrets_stay_out_of_reprs() -> None:
    config = ManagerConfig({"remote.storage.options.secret": SECRET,
                            "remote.storage.options.key": "AKIAKEY",
                            "rsm.config.token": SECRET + "-token",
                            "remote.storage.options.client_kwargs":
                                json.dumps({"aws_secret_access_key": SECRET})})
    assert config.remote_storage_options["secret"] == SECRET  # the plugin still gets it
    for shown in (repr(config.remote_storage_options), str(config.remote_storage_options),
                  repr(dict(config.remote_storage_options.masked()))):
        assert SECRET not in shown and "AKIAKEY" not in shown


@pytest.mark.parametrize("args", [
    ["--set", f"remote.storage.options.secret:{SECRET}"],
    ["--set", f"remote.storage.options.secret {SECRET}"],
    ["--set", "remote.storage.manager=s3", "--set", "remote.storage.url=s3://b/p",
     "--set", f"remote.storage.options.secrett={SECRET}"],
    ["--set", "remote.storage.manager=s3", "--set", "remote.storage.url=s3://b/p",
     "--set", f"remote.storage.options.client_kwargs={{\"aws_secret_access_key\": {SECRET}"],
    ["--set", f"remote.storage.option.secret={SECRET}"],
])
def test_a_mistyped_storage_setting_never_echoes_the_secret(tmp_path, args) -> None:
    line = user_error("--data-dir", tmp_path, *args, "topics", "--create", "--topic", "t",
                      "--config", "remote.storage.enable=true")
    assert SECRET not in line
