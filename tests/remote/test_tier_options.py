"""``tierlog.cli._tier_options``: one way every command finds the remote tier and its storage
options (URL argument and --option, then --set, then --config FILE, then the data dir's
server.properties), and ``tierlog scrub`` using it: a scrub of an S3 tier whose credentials
are in the --config file, or in the data dir's server.properties, needs nothing else."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.cli_runner import tierlog, user_error
from support.s3 import S3_BUCKET

from tierlog import Record
from tierlog.cli import build_parser
from tierlog.cli._common import CliError, settings
from tierlog.cli._tier_options import TierOptions, tier_options
from tierlog.manager.log_manager import LogManager

S3_URL = "s3://bucket/prefix"


def resolve(*argv: str) -> TierOptions:
    """The tier ``tierlog ARGV`` works on (ARGV ends with ``scrub [URL] [options]``)."""
    args = build_parser().parse_args(list(argv))
    return tier_options(settings(args), args.url, args.option)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data dir whose server.properties names an S3 tier and its options."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.properties").write_text(
        f"remote.storage.manager=s3\nremote.storage.url={S3_URL}\n"
        "remote.storage.options.endpoint_url=http://from-data-dir\n"
        "rsm.config.region=eu-west-1\n")  # Kafka's alias of the prefix
    return data


def test_the_data_dir_server_properties_name_the_tier(data_dir: Path) -> None:
    tier = resolve("--data-dir", str(data_dir), "scrub")
    assert (tier.url, tier.manager) == (S3_URL, "s3")
    assert dict(tier.options) == {"endpoint_url": "http://from-data-dir", "region": "eu-west-1"}


def test_config_then_set_then_the_arguments_override(data_dir: Path, tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text("remote.storage.url=s3://other/p\nremote.storage.options.endpoint_url=http://from-file\n"
                     "remote.storage.options.key=AKIAFILE\nremote.storage.options.secret=s\n")
    # --config replaces the data dir's file (as for every setting): its region is not read.
    tier = resolve("--data-dir", str(data_dir), "--config", str(props), "scrub")
    assert (tier.url, tier.manager) == ("s3://other/p", "s3")
    assert dict(tier.options) == {"endpoint_url": "http://from-file", "key": "AKIAFILE",
                                  "secret": "s"}
    tier = resolve("--data-dir", str(data_dir), "--config", str(props), "scrub",
                   "--set", "remote.storage.options.endpoint_url=http://from-set",
                   "--set", "remote.storage.url=s3://set/p")
    assert tier.url == "s3://set/p" and tier.options["endpoint_url"] == "http://from-set"
    tier = resolve("--data-dir", str(data_dir), "--config", str(props), "scrub", "s3://arg/p",
                   "--set", "remote.storage.options.endpoint_url=http://from-set",
                   "-o", "endpoint_url=http://from-option")
    assert tier.url == "s3://arg/p" and tier.options["endpoint_url"] == "http://from-option"
    assert tier.options["key"] == "AKIAFILE"  # the same kind of tier: the file's credentials
    assert "AKIAFILE" not in repr(tier) and "secret" in repr(tier)


def test_a_url_of_another_kind_takes_no_option_of_the_settings(data_dir: Path,
                                                               tmp_path: Path) -> None:
    tier = resolve("--data-dir", str(data_dir), "scrub", str(tmp_path / "tier"))
    assert (tier.url, tier.manager, dict(tier.options)) == (str(tmp_path / "tier"), "local",
                                                           {})


def test_the_settings_and_saved_config_of_a_tier(data_dir: Path) -> None:
    tier = resolve("--data-dir", str(data_dir), "scrub", "-o", "key=AKIA1", "-o", "secret=s")
    assert tier.apply({"segment.bytes": "1024", "rsm.config.region": "x",
                       "remote.storage.url": "s3://old/p"}) == {
        "segment.bytes": "1024", "remote.storage.manager": "s3", "remote.storage.url": S3_URL,
        "remote.storage.options.endpoint_url": "http://from-data-dir",
        "remote.storage.options.region": "eu-west-1",
        "remote.storage.options.key": "AKIA1", "remote.storage.options.secret": "s"}
    assert tier.saved_config() == {
        "remote.storage.manager": "s3", "remote.storage.url": S3_URL,
        "remote.storage.options.endpoint_url": "http://from-data-dir",
        "remote.storage.options.region": "eu-west-1"}
    assert tier.secret_names == ["remote.storage.options.key",
                                 "remote.storage.options.secret"]


def test_no_url_anywhere_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(CliError, match=r"no remote tier to scrub: pass its URL, or set "
                                       r"remote\.storage\.url"):
        args = build_parser().parse_args(["--data-dir", str(tmp_path), "scrub"])
        tier_options(settings(args), None, None, purpose="scrub")
    error = user_error("--data-dir", tmp_path, "scrub")
    assert "no remote tier to scrub" in error


# -- the commands ----------------------------------------------------------------------


def _s3_tier(tmp_path: Path, s3_options: dict[str, Any]) -> tuple[str, Path]:
    """An S3 tier written by a LogManager, and a broker .properties file naming it with
    every storage option (credentials included)."""
    url = f"s3://{S3_BUCKET}/options-{uuid.uuid4().hex[:10]}"
    tier_settings = {"remote.storage.manager": "s3", "remote.storage.url": url,
                     **{f"remote.storage.options.{k}": v for k, v in s3_options.items()}}
    config = {**tier_settings, "remote.storage.enable": "true", "segment.bytes": "4096"}
    with LogManager.open(tmp_path / "data", config, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        for i in range(12):  # about 1 KiB each: three batches a segment
            log.append_records([Record(key=b"k", value=b"%d" % i * 1000)])
        assert mgr.tier_now()
    props = tmp_path / "broker.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in tier_settings.items()))
    return url, props


def test_scrub_reads_the_tier_options_of_config_and_data_dir(tmp_path: Path,
                                                             s3_options: dict[str, Any]
                                                             ) -> None:
    url, props = _s3_tier(tmp_path, s3_options)
    report = json.loads(tierlog("--config", props, "scrub", url, "--deep", "--json",
                                "--quiet").stdout)
    assert report["ok"] and report["segments"] >= 2 and report["url"] == url
    (tmp_path / "data" / "server.properties").write_text(props.read_text())
    report = json.loads(tierlog("--data-dir", tmp_path / "data", "scrub", "--json",
                                "--quiet").stdout)
    assert report["ok"] and report["segments"] >= 2
