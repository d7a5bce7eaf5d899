"""Server-side encryption of the tier on S3 (SSE-S3, SSE-KMS), over HTTP to moto's S3 and KMS:
every object tierlog writes (a segment and its indexes, the tier's metadata, the topic table's
files, the cluster metadata store's objects, multipart uploads) carries the encryption the
storage options name and reads back; a wrong setting fails at startup naming its key; and the
tier's credentials stay out of reprs, DEBUG logs and the errors of failed S3 calls.
"""

from __future__ import annotations

import json
import logging
import socket
import traceback
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.remote_storage_suite import copy_multipart_segment, metadata_for, write_segment
from support.s3 import S3_ACCESS_KEY, S3_BUCKET, S3_REGION, S3_SECRET

from tierlog import Record
from tierlog.cluster.open_store import open_metadata_store
from tierlog.common.secrets import CREDENTIAL_LOGGERS, CredentialMask, mask_credential_logs
from tierlog.errors import ConfigError, RemoteStorageError
from tierlog.manager.log_manager import LogManager
from tierlog.plugins.metrics import prometheus_text, registry_for
from tierlog.plugins.s3 import create_remote_storage
from tierlog.reader import RemoteTopicReader
from tierlog.remote import TopicIdPartition

TIP = TopicIdPartition("q0Vs7vGvSZ6ljmj-ZmXC1A", "clicks", 0)
#: A session token and a secret access key no other test uses, to look for in what is shown.
TOKEN = "tierlog-session-token-Hk4mW9pQ"
SECRETS = (S3_SECRET, TOKEN)
PART_SIZE = 5 << 20  # S3's smallest multipart part
#: Batches of about 0.8 KiB appended: two closed segments of 2 KiB and the active one.
BATCHES = 7


@pytest.fixture(scope="module")
def kms_key_id(s3_endpoint: str) -> str:
    """A symmetric KMS key created in moto's KMS (the same server as its S3)."""
    import boto3

    kms = boto3.client("kms", endpoint_url=s3_endpoint, region_name=S3_REGION,
                       aws_access_key_id=S3_ACCESS_KEY, aws_secret_access_key=S3_SECRET)
    return str(kms.create_key(Description="tierlog tier")["KeyMetadata"]["KeyId"])


#: How a user asks for each encryption (the options as a .properties file gives them: text),
#: and the (ServerSideEncryption, SSEKMSKeyId) every object must then carry.
ENCRYPTIONS: dict[str, Callable[[str], tuple[dict[str, str], tuple[str, str | None]]]] = {
    "sse-s3": lambda key: ({"server_side_encryption": "AES256"}, ("AES256", None)),
    "sse-kms": lambda key: ({"server_side_encryption": "aws:kms", "sse_kms_key_id": key},
                            ("aws:kms", key)),
    "sse-kms-as-s3fs-kwargs": lambda key: (
        {"s3_additional_kwargs": json.dumps({"ServerSideEncryption": "aws:kms",
                                             "SSEKMSKeyId": key})}, ("aws:kms", key)),
}


@pytest.fixture(params=sorted(ENCRYPTIONS))
def encryption(request: pytest.FixtureRequest, kms_key_id: str
               ) -> tuple[dict[str, str], tuple[str, str | None]]:
    return ENCRYPTIONS[request.param](kms_key_id)


@pytest.fixture
def url() -> str:
    return f"s3://{S3_BUCKET}/sse-{uuid.uuid4().hex[:12]}"


def _records(i: int) -> list[Record]:
    return [Record(key=b"k%d" % (10 * i + j), value=b"v%d-" % (10 * i + j) + b"x" * 60)
            for j in range(10)]


def _tier_a_topic(data: Path, clock: FakeClock, url: str, options: dict[str, str],
                  **settings: object) -> None:
    """A LogManager tiers ``orders`` (2 closed segments, its table on) with ``options``, as
    ``remote.storage.options.<name>`` settings of server.properties."""
    config = {"remote.storage.enable": "true", "remote.storage.url": url,
              "remote.log.table.enable": "true", "segment.bytes": "2048", **settings,
              **{f"remote.storage.options.{k}": v for k, v in options.items()}}
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        (log,) = mgr.create_topic("orders", 1)
        for i in range(BATCHES):
            log.append_records(_records(i))
        assert sum(len(r.copied) for r in mgr.tier_now().values()) >= 2


def _encryption_of_each_object(fs: Any, root: str) -> dict[str, tuple[str, str | None]]:
    found = {}
    for path in fs.find(root):
        bucket, key = path.split("/", 1)
        head = fs.call_s3("head_object", Bucket=bucket, Key=key)
        found[key] = (head.get("ServerSideEncryption"), head.get("SSEKMSKeyId"))
    return found


def test_every_object_of_a_tiering_round_is_encrypted_and_reads_back(
        tmp_path: Path, clock: FakeClock, s3_options: dict[str, str], url: str,
        encryption: tuple[dict[str, str], tuple[str, str | None]]) -> None:
    settings, expected = encryption
    options = {**s3_options, **settings}
    _tier_a_topic(tmp_path / "data", clock, url, options)

    fs = create_remote_storage(url, s3_options).fs  # a filesystem without the settings
    found = _encryption_of_each_object(fs, url.removeprefix("s3://"))
    suffixes = {key.rsplit(".", 1)[-1] for key in found}
    # segments and their indexes, the tier's metadata, the table's data and metadata files
    assert {"log", "index", "timeindex", "snapshot", "parquet", "avro", "json"} <= suffixes
    assert {key: enc for key, enc in found.items() if enc != expected} == {}

    table = RemoteTopicReader(url, options).read_table("orders")
    assert table.column("value").to_pylist() == [r.value for i in range(BATCHES)
                                                for r in _records(i)][:table.num_rows]
    assert table.num_rows >= 20  # the two closed segments' records


def test_the_cluster_metadata_stores_conditional_writes_are_encrypted(
        s3_options: dict[str, str], url: str,
        encryption: tuple[dict[str, str], tuple[str, str | None]]) -> None:
    settings, expected = encryption
    store = open_metadata_store(url, {**s3_options, **settings})
    fs = store.tier.fs
    created = store.create("brokers/1", {"host": "a"})  # PUT If-None-Match: *
    bucket, key = store.path("brokers/1").split("/", 1)
    assert _head(fs, bucket, key) == expected
    store.replace("brokers/1", {"host": "b"}, created)  # PUT If-Match: <etag>
    assert _head(fs, bucket, key) == expected
    read = store.read("brokers/1")
    assert read is not None and read.value["host"] == "b"


def _head(fs: Any, bucket: str, key: str) -> tuple[str, str | None]:
    head = fs.call_s3("head_object", Bucket=bucket, Key=key)
    return head.get("ServerSideEncryption"), head.get("SSEKMSKeyId")


def test_a_multipart_upload_is_encrypted_with_the_kms_key(
        tmp_path: Path, s3_options: dict[str, str], url: str, kms_key_id: str) -> None:
    rsm = create_remote_storage(url, {**s3_options, "part_size": str(PART_SIZE),
                                      "server_side_encryption": "aws:kms",
                                      "sse_kms_key_id": kms_key_id})
    # s3fs sends one PUT below two parts' size
    copied = copy_multipart_segment(rsm, tmp_path, TIP, PART_SIZE)
    md, big, head = copied.md, copied.big, copied.head
    assert head["ETag"].strip('"').endswith("-3")  # three parts: a multipart upload
    assert (head["ServerSideEncryption"], head["SSEKMSKeyId"]) == ("aws:kms", kms_key_id)
    assert rsm.tier.get_bytes(rsm.object_path(md, ".log"), PART_SIZE, PART_SIZE + 100) == \
        big.read_bytes()[PART_SIZE:PART_SIZE + 100]


# -- settings checked at startup ------------------------------------------------------------


#: Each mistake and its error, ``{p}`` standing for the prefix of the front door's names.
MISTAKES: list[tuple[dict[str, Any], str]] = [
    ({"server_side_encryption": "aes256"},
     ("{p}server_side_encryption: server-side encryption must be one of AES256, aws:kms, "
      "aws:kms:dsse, got 'aes256'")),
    ({"s3_additional_kwargs": '{"ServerSideEncryption": "kms"}'},
     ("{p}s3_additional_kwargs: server-side encryption must be one of AES256, aws:kms, "
      "aws:kms:dsse, got 'kms'")),
    ({"sse_kms_key_id": "alias/tier"},
     ("{p}sse_kms_key_id: a KMS key id needs {p}server_side_encryption=aws:kms (or "
      "aws:kms:dsse), got None")),
    ({"server_side_encryption": "AES256", "sse_kms_key_id": "alias/tier"},
     ("{p}sse_kms_key_id: a KMS key id needs {p}server_side_encryption=aws:kms (or "
      "aws:kms:dsse), got 'AES256'")),
    ({"s3_additional_kwargs": {"SSEKMSKeyId": "alias/tier"}},
     ("{p}s3_additional_kwargs: a KMS key id needs {p}server_side_encryption=aws:kms (or "
      "aws:kms:dsse), got None")),
    ({"server_side_encryption": "AES256",
      "s3_additional_kwargs": {"ServerSideEncryption": "aws:kms"}},
     ("{p}server_side_encryption: is 'AES256' but {p}s3_additional_kwargs sets "
      "ServerSideEncryption to 'aws:kms': set it in one place")),
    ({"s3_additional_kwargs.ServerSideEncryption": "aws:kms"},
     ("{p}s3_additional_kwargs.ServerSideEncryption: {p}s3_additional_kwargs is one JSON "
      'object: write {p}s3_additional_kwargs={{"ServerSideEncryption": ...}}')),
]


@pytest.mark.parametrize(("settings", "error"), MISTAKES)
def test_a_wrong_encryption_setting_fails_before_any_request_naming_its_key(
        s3_options: dict[str, str], settings: dict[str, Any], error: str) -> None:
    url, options = f"s3://{S3_BUCKET}/x", {**s3_options, **settings}
    with pytest.raises(ConfigError) as failed:  # the writer's plugin
        create_remote_storage(url, options)
    assert str(failed.value) == error.format(p="remote.storage.options.")
    with pytest.raises(ConfigError) as failed:  # a reader's front door: the same rule
        RemoteTopicReader(url, options)
    assert str(failed.value) == error.format(p="")


def test_the_same_setting_in_both_places_is_accepted(url: str, s3_options: dict[str, str],
                                                     kms_key_id: str) -> None:
    rsm = create_remote_storage(url, {
        **s3_options, "server_side_encryption": "aws:kms",
        "s3_additional_kwargs": {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": kms_key_id}})
    rsm.tier.put_bytes(b"x", rsm.tier.path("one"))
    assert _head(rsm.fs, *rsm.tier.path("one").split("/", 1)) == ("aws:kms", kms_key_id)


# -- secrets out of sight -------------------------------------------------------------------


def test_no_credential_in_reprs_or_in_a_debug_log_of_a_tiering_round(
        tmp_path: Path, clock: FakeClock, s3_options: dict[str, str], url: str,
        kms_key_id: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    options = {**s3_options, "token": TOKEN, "server_side_encryption": "aws:kms",
               "sse_kms_key_id": kms_key_id}
    _tier_a_topic(tmp_path / "data", clock, url, options)
    # every line: tierlog's, s3fs's, botocore's signer and its endpoint (which sign and send
    # the token, and name the access key id in each request's Authorization header)
    assert "x-amz-security-token" in caplog.text.lower()  # botocore did write its lines
    for secret in (*SECRETS, S3_ACCESS_KEY):
        assert secret not in caplog.text
    assert kms_key_id in caplog.text  # a key id is an identifier, not a secret: not masked

    config = {"remote.storage.enable": "true", "remote.storage.url": url,
              **{f"remote.storage.options.{k}": v for k, v in options.items()}}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        rlm = mgr.remote_log_manager
        assert rlm is not None
        shown = [repr(mgr.config), str(mgr.config.remote_storage_options), repr(rlm),
                 repr(rlm.rsm), repr(create_remote_storage(url, options).tier),
                 prometheus_text(registry_for(mgr))]  # the metrics a scrape answers
    for secret in (*SECRETS, S3_ACCESS_KEY):
        assert not [text for text in shown if secret in text]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("where", ["wrong endpoint", "missing bucket"])
def test_the_error_of_a_failed_s3_call_shows_no_credential(
        tmp_path: Path, s3_options: dict[str, str], where: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    options = {**s3_options, "token": TOKEN, "config_kwargs": {"retries": {"max_attempts": 1}}}
    url = f"s3://{S3_BUCKET}/sse-fail"
    if where == "wrong endpoint":
        options["endpoint_url"] = f"http://127.0.0.1:{_closed_port()}"
    else:
        url = f"s3://tierlog-no-such-bucket-{uuid.uuid4().hex[:8]}/p"
    rsm = create_remote_storage(url, options)
    seg = write_segment(tmp_path, 0)
    with pytest.raises(RemoteStorageError) as failed:
        rsm.copy_log_segment_data(metadata_for(TIP, seg), seg.data)
    shown = "".join(traceback.format_exception(failed.value)) + caplog.text
    assert url.removeprefix("s3://").split("/")[0] in shown  # the error names what failed
    for secret in (*SECRETS, S3_ACCESS_KEY):
        assert secret not in shown


def test_the_credential_mask_is_put_once_on_each_logger() -> None:
    mask_credential_logs()
    mask_credential_logs()
    for name in CREDENTIAL_LOGGERS:
        masks = [f for f in logging.getLogger(name).filters if isinstance(f, CredentialMask)]
        assert len(masks) == 1


def test_credentials_inside_object_options_are_masked_in_the_logged_settings(
        url: str, s3_options: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    """botocore takes credentials in ``client_kwargs`` too, and SSE-C's key travels in
    ``s3_additional_kwargs``: the settings the plugin logs mask them as the top level's."""
    caplog.set_level(logging.INFO, logger="tierlog")
    nested = {"aws_secret_access_key": S3_SECRET, "aws_session_token": TOKEN}
    create_remote_storage(url, {
        "endpoint_url": s3_options["endpoint_url"], "region": S3_REGION,
        "client_kwargs": {"aws_access_key_id": S3_ACCESS_KEY, **nested},
        "s3_additional_kwargs": json.dumps({"SSECustomerKey": "sse-c-key-Pq2r"})})
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("tierlog"))
    assert "s3 remote storage" in logged
    for secret in (*SECRETS, S3_ACCESS_KEY, "sse-c-key-Pq2r"):
        assert secret not in logged


def test_tierlog_serve_answers_and_logs_no_credential(
        tmp_path: Path, s3_options: dict[str, str], url: str, kms_key_id: str) -> None:
    """A real ``tierlog serve`` on the encrypted tier: its DescribeConfigs answers (the
    broker's, a topic's) and its log hold none of the tier's credentials."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic
    from support.server_process import start

    options = {**s3_options, "token": TOKEN, "server_side_encryption": "aws:kms",
               "sse_kms_key_id": kms_key_id}
    config = {"remote.storage.enable": "true", "remote.storage.url": url,
              **{f"remote.storage.options.{k}": v for k, v in options.items()}}
    server = start(tmp_path, config)
    try:
        admin = kafka.KafkaAdminClient(bootstrap_servers=server.bootstrap)
        try:
            admin.create_topics([NewTopic("orders", 1, 1)])
            answers = repr(admin.describe_configs([
                ConfigResource(ConfigResourceType.BROKER, "1"),  # node.id's default
                ConfigResource(ConfigResourceType.TOPIC, "orders")],
                include_synonyms=True, config_filter="all"))
        finally:
            admin.close()
    finally:
        server.terminate()
    assert "remote.storage.enable" in answers and "retention.ms" in answers
    assert "s3 remote storage" in server.log_text()  # the tier was built and its settings logged
    for secret in (*SECRETS, S3_ACCESS_KEY):
        assert secret not in answers
        assert secret not in server.log_text()
