"""The remote storage contract on the ``s3`` plugin, over HTTP to moto's S3 server, and the
plugin's own behaviour: options, object settings, multipart part size, secrets kept out of logs.
"""

from __future__ import annotations

import logging
import sys
import uuid
from pathlib import Path
from typing import Any

import moto.server  # noqa: F401 - the dev install has these: a missing one fails the suite
import pytest
import s3fs  # noqa: F401
from support.remote_storage_suite import (
    RemoteStorageManagerTests,
    copy_multipart_segment,
    metadata_for,
    write_segment,
)
from support.s3 import S3_ACCESS_KEY as ACCESS_KEY
from support.s3 import S3_BUCKET as BUCKET
from support.s3 import S3_SECRET as SECRET
from support.s3 import s3_client as _client

from tierlog.errors import ConfigError
from tierlog.plugins.s3 import S3Config, create_remote_storage
from tierlog.plugins.s3.plugin import tierlog_register_remote_storage
from tierlog.remote import FsspecRemoteStorageManager, IndexType, TopicIdPartition

TIP = TopicIdPartition("q0Vs7vGvSZ6ljmj-ZmXC1A", "clicks", 0)


@pytest.fixture(scope="session")
def s3_reader_fs(s3_endpoint: str) -> Any:
    """A filesystem of its own (no shared listing cache), as a separate reader has."""
    return _client(s3_endpoint)


@pytest.fixture
def options(s3_options: dict[str, Any]) -> dict[str, Any]:
    return s3_options


@pytest.fixture
def url() -> str:
    """A fresh prefix per test, so every test starts with an empty tier."""
    return f"s3://{BUCKET}/t-{uuid.uuid4().hex[:12]}"


class TestS3RemoteStorage(RemoteStorageManagerTests):
    @pytest.fixture
    def rsm(self, url: str, options: dict[str, Any]) -> FsspecRemoteStorageManager:
        return create_remote_storage(url, options)

    @pytest.fixture
    def reader_fs(self, s3_reader_fs: Any) -> Any:
        return s3_reader_fs


def test_secret_never_logged_nor_shown(url: str, options: dict[str, Any], tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    rsm = create_remote_storage(url, {**options, "token": "session-token-Xy7"})
    seg = write_segment(tmp_path, 0)
    md = metadata_for(TIP, seg)
    rsm.copy_log_segment_data(md, seg.data)
    assert rsm.fetch_log_segment(md, 0, 60).read() == seg.log_bytes[:61]
    assert "s3 remote storage" in caplog.text
    assert SECRET not in caplog.text  # botocore signs with it but never sends it
    # A session token is a request header, which botocore itself logs at DEBUG: only
    # tierlog's own records are checked for it.
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("tierlog"))
    for secret in (SECRET, ACCESS_KEY, "session-token-Xy7"):
        assert secret not in ours
        assert secret not in repr(rsm)
        assert secret not in repr(S3Config.from_url(url, {**options, "token": secret}))
    assert "secret=***" in ours


def test_storage_class_and_encryption_reach_the_objects(url: str, options: dict[str, Any],
                                                        tmp_path: Path) -> None:
    rsm = create_remote_storage(url, {**options, "storage_class": "STANDARD_IA",
                                      "server_side_encryption": "AES256"})
    seg = write_segment(tmp_path, 0)
    md = metadata_for(TIP, seg)
    rsm.copy_log_segment_data(md, seg.data)
    client = rsm.fs
    bucket, key = rsm.object_path(md, ".log").split("/", 1)
    head = client.call_s3("head_object", Bucket=bucket, Key=key)
    assert head["StorageClass"] == "STANDARD_IA"
    assert head["ServerSideEncryption"] == "AES256"


def test_part_size_drives_multipart_uploads(url: str, options: dict[str, Any],
                                            tmp_path: Path) -> None:
    part_size = 5 << 20
    rsm = create_remote_storage(url, {**options, "part_size": str(part_size)})
    assert rsm.fs.default_block_size == part_size
    copied = copy_multipart_segment(rsm, tmp_path, TIP, part_size)
    seg, md, big, head = copied.seg, copied.md, copied.big, copied.head
    assert head["ETag"].strip('"').endswith("-3")  # three parts of at most part_size
    assert head["ContentLength"] == big.stat().st_size
    assert rsm.fetch_index(md, IndexType.OFFSET).read() == seg.data.offset_index.read_bytes()


def test_options_are_validated(url: str, options: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.part_size: must be at least"):
        create_remote_storage(url, {**options, "part_size": 1024})
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.storage_klass"):
        create_remote_storage(url, {**options, "storage_klass": "GLACIER"})
    with pytest.raises(ConfigError, match=r"remote\.storage\.url"):
        create_remote_storage("file:///tmp/x", options)


def test_missing_s3fs_names_the_extra(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "s3fs", None)
    with pytest.raises(ImportError, match=r"Install tierlog\[s3\] to use the s3 remote storage"):
        create_remote_storage(url, {})


def test_plugin_registers_itself_as_s3() -> None:
    registered: dict[str, Any] = {}
    tierlog_register_remote_storage(lambda name, factory: registered.setdefault(name, factory))
    assert registered == {"s3": create_remote_storage}
