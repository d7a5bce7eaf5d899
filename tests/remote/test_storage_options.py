"""One set of storage option names for every front door: the writer (``remote.storage.options.*``
and Kafka's ``rsm.config.*`` through a LogManager), the reader (``RemoteTopicReader``) and Spark
(``storage.*`` / ``fsspec.*``), each tried with ``region``, ``client_kwargs`` and path-style
``config_kwargs`` against moto's S3 server over HTTP; missing credentials name what to add."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET

from tierlog import Record
from tierlog.errors import ConfigError
from tierlog.manager.log_manager import LogManager
from tierlog.manager.manager_config import ManagerConfig
from tierlog.plugins.s3 import create_remote_storage
from tierlog.reader import RemoteTopicReader
from tierlog.spark import TierlogOptions

PATH_STYLE = {"s3": {"addressing_style": "path"}}


def _url() -> str:
    return f"s3://{S3_BUCKET}/opts-{uuid.uuid4().hex[:12]}"


def _user_options(endpoint: str) -> dict[str, Any]:
    """Every option in the shape a user writes it: text, as in a .properties file."""
    return {"endpoint_url": endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET,
            "region": S3_REGION, "client_kwargs": json.dumps({"api_version": "2006-03-01"}),
            "config_kwargs": json.dumps(PATH_STYLE), "verify": "false", "use_ssl": "false"}


def _write_tier(tmp_path, url: str, options: dict[str, Any], prefix: str, clock) -> int:
    """Create a tiered topic through a LogManager whose options use ``prefix``, append, tier;
    the number of copied segments."""
    config = {"remote.storage.manager": "s3", "remote.storage.url": url,
              **{prefix + k: v for k, v in options.items()}}
    with LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1, {"remote.storage.enable": True,
                                             "segment.bytes": 2048})[0]
        fs = mgr.remote_log_manager.rsm.fs
        assert fs.config_kwargs == PATH_STYLE
        assert fs.client_kwargs == {"api_version": "2006-03-01", "region_name": S3_REGION,
                                    "verify": False}
        for i in range(20):
            log.append_records([Record(key=b"k%d" % i, value=b"v" * 200)])
        copied = mgr.tier_now()["orders-0"].copied
        assert copied
        return len(copied)


@pytest.mark.parametrize("prefix", ["remote.storage.options.", "rsm.config."])
def test_writer_reader_and_spark_take_the_same_names(tmp_path, s3_endpoint, s3_options, clock,
                                                     prefix: str) -> None:
    url = _url()
    options = _user_options(s3_endpoint)
    copied = _write_tier(tmp_path, url, options, prefix, clock)
    # The reader, with the very same names and text values.
    reader = RemoteTopicReader(url, options)
    assert reader.list_topics() == ["orders"]
    rows = reader.read_table("orders").to_pylist()
    assert len(rows) >= copied and [r["key"] for r in rows] == [b"k%d" % i
                                                                  for i in range(len(rows))]
    # Spark's storage.<name> (and the fsspec.<name> alias), as Spark hands them over.
    parsed = TierlogOptions.parse({"path": url, "subscribe": "orders",
                                   **{f"storage.{k}": v for k, v in options.items()
                                      if k != "use_ssl"},
                                   "fsspec.use_ssl": "false"})
    assert parsed.storage_options["config_kwargs"] == PATH_STYLE
    assert parsed.storage_options["region"] == S3_REGION
    spark_reader = RemoteTopicReader(parsed.url, parsed.storage_options)
    assert spark_reader.read_table("orders").to_pylist() == rows


def test_one_translation_into_s3fs_arguments() -> None:
    from tierlog.remote.tier.options import filesystem_kwargs, s3fs_kwargs

    kwargs = s3fs_kwargs({"region": "eu-west-1", "verify": "/etc/ca.pem",
                          "client_kwargs": {"connect_timeout": 3}, "part_size": 5 << 20,
                          "storage_class": "STANDARD_IA", "anon": True})
    assert kwargs == {"client_kwargs": {"connect_timeout": 3, "region_name": "eu-west-1",
                                        "verify": "/etc/ca.pem"},
                      "default_block_size": 5 << 20, "anon": True,
                      "s3_additional_kwargs": {"StorageClass": "STANDARD_IA"}}
    parsed = filesystem_kwargs("s3://b/p", {"anon": "true", "verify": "false",
                                            "config_kwargs": '{"s3": {"addressing_style": '
                                                             '"path"}}'})
    assert parsed == {"anon": True, "client_kwargs": {"verify": False},
                      "config_kwargs": PATH_STYLE}
    assert filesystem_kwargs("file:///tmp/tier", {"fsync": "false"}) == {}


@pytest.mark.parametrize(("front_door", "key"), [
    ("writer", "remote.storage.options.regoin"),
    ("alias", "remote.storage.options.regoin"),  # named by the option's documented name
    ("reader", "regoin"),
    ("spark", "storage.regoin"),
])
def test_an_unknown_name_is_refused_at_every_front_door(s3_endpoint, front_door: str,
                                                        key: str) -> None:
    url = _url()
    with pytest.raises(ConfigError, match=rf"^{key}: unknown option of the s3 remote storage; "
                                          r"known options: .*region"):
        if front_door in ("writer", "alias"):
            given = "rsm.config.regoin" if front_door == "alias" else key
            cfg = ManagerConfig({given: "eu-west-1", "remote.storage.url": url})
            create_remote_storage(url, cfg.remote_storage_options)
        elif front_door == "reader":
            RemoteTopicReader(url, {"regoin": "eu-west-1"})
        else:
            TierlogOptions.parse({"path": url, "subscribe": "t", key: "eu-west-1"})


def test_the_alias_and_the_option_may_not_disagree() -> None:
    with pytest.raises(ConfigError, match=r"rsm\.config\.region: conflicts with "
                                          r"remote\.storage\.options\.region"):
        ManagerConfig({"remote.storage.options.region": "a", "rsm.config.region": "b"})
    same = ManagerConfig({"remote.storage.options.region": "a", "rsm.config.region": "a"})
    assert dict(same.remote_storage_options) == {"region": "a"}


@pytest.mark.parametrize(("options", "missing"), [
    ({"key": S3_ACCESS_KEY}, "secret"),
    ({"secret": S3_SECRET}, "key"),
    ({"token": "t0ken"}, "key"),
])
def test_a_half_given_credential_names_the_missing_setting(s3_endpoint, options,
                                                           missing: str) -> None:
    url = _url()
    options = {"endpoint_url": s3_endpoint, **options}
    with pytest.raises(ConfigError, match=rf"^remote\.storage\.options\.{missing}: is missing"
                                          ) as info:
        create_remote_storage(url, options)
    assert S3_SECRET not in str(info.value)
    with pytest.raises(ConfigError, match=rf"^storage\.{missing}: is missing"):
        TierlogOptions.parse({"path": url, "subscribe": "t",
                              **{f"storage.{k}": v for k, v in options.items()}})
    with pytest.raises(ConfigError, match=rf"^{missing}: is missing"):
        RemoteTopicReader(url, options)


def test_no_credentials_at_all_says_what_to_add(s3_endpoint, monkeypatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    url = _url()
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.key: no S3 credentials "
                                          r"found: add remote\.storage\.options\.key and "
                                          r"remote\.storage\.options\.secret"):
        create_remote_storage(url, {"endpoint_url": s3_endpoint})
    with pytest.raises(ConfigError, match=r"storage\.key: no S3 credentials found"):
        TierlogOptions.parse({"path": url, "subscribe": "t",
                              "storage.endpoint_url": s3_endpoint})
    # A public bucket needs none.
    create_remote_storage(url, {"endpoint_url": s3_endpoint, "anon": "true"})


def test_bad_values_name_the_option_and_hide_secrets(s3_endpoint) -> None:
    url = _url()
    base = {"endpoint_url": s3_endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET}
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.use_ssl: must be true "
                                          r"or false, got 'maybe'"):
        create_remote_storage(url, {**base, "use_ssl": "maybe"})
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.config_kwargs: must be "
                                          r"a JSON object"):
        create_remote_storage(url, {**base, "config_kwargs": "[1, 2]"})
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.client_kwargs") as info:
        create_remote_storage(url, {**base, "client_kwargs":
                                    '{"aws_secret_access_key": "' + S3_SECRET})
    assert S3_SECRET not in str(info.value)
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.secret: must be a "
                                          r"string$"):
        create_remote_storage(url, {**base, "secret": 12345})
