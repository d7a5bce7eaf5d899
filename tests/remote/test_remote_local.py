"""The remote storage contract on the ``local`` plugin (a tier in a temporary directory), and
the plugin's own behaviour: URL and option parsing, atomic and durable publication."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem
from support.remote_storage_suite import RemoteStorageManagerTests, metadata_for, write_segment

from tierlog.errors import ConfigError
from tierlog.plugins.local import DurableLocalFileSystem, create_remote_storage
from tierlog.plugins.local.plugin import tierlog_register_remote_storage
from tierlog.remote import FsspecRemoteStorageManager, RemoteStorageManager, TopicIdPartition

TIP = TopicIdPartition("q0Vs7vGvSZ6ljmj-ZmXC1A", "clicks", 0)


class TestLocalRemoteStorage(RemoteStorageManagerTests):
    @pytest.fixture
    def rsm(self, tmp_path: Path) -> FsspecRemoteStorageManager:
        return create_remote_storage((tmp_path / "tier").as_uri(), {})

    @pytest.fixture
    def reader_fs(self) -> fsspec.AbstractFileSystem:
        return fsspec.filesystem("file")


def test_factory_builds_a_durable_manager_on_the_url_directory(tmp_path: Path) -> None:
    rsm = create_remote_storage(f"file://{tmp_path}/a/b", {})
    assert isinstance(rsm, RemoteStorageManager)
    assert isinstance(rsm.fs, DurableLocalFileSystem)
    assert rsm.root == f"{tmp_path}/a/b"
    assert (tmp_path / "a" / "b").is_dir()
    assert create_remote_storage(str(tmp_path / "plain"), {"fsync": "false"}).root \
        == f"{tmp_path}/plain"


def test_fsync_can_be_turned_off(tmp_path: Path) -> None:
    rsm = create_remote_storage(str(tmp_path), {"fsync": False})
    assert type(rsm.fs) is LocalFileSystem


@pytest.mark.parametrize("url", ["s3://bucket/x", "http://example.com/tier", ""])
def test_factory_rejects_non_local_urls(url: str) -> None:
    with pytest.raises(ConfigError, match=r"remote\.storage\.url"):
        create_remote_storage(url, {})


def test_factory_rejects_unknown_and_malformed_options(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.fsnyc.*known options: fsync"):
        create_remote_storage(str(tmp_path), {"fsnyc": True})
    with pytest.raises(ConfigError, match=r"remote\.storage\.options\.fsync: must be true or"):
        create_remote_storage(str(tmp_path), {"fsync": "yes"})


def test_plugin_registers_itself_as_local() -> None:
    registered: dict[str, Any] = {}
    tierlog_register_remote_storage(lambda name, factory: registered.setdefault(name, factory))
    assert registered == {"local": create_remote_storage}


def test_publication_fsyncs_files_and_directories(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seg = write_segment(tmp_path / "local", 0)
    rsm = create_remote_storage(str(tmp_path / "tier"), {})
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    md = metadata_for(TIP, seg)
    rsm.copy_log_segment_data(md, seg.data)
    partition_dir = str(tmp_path / "tier" / f"clicks-0-{TIP.topic_id}")
    log_object = rsm.object_path(md, ".log")
    assert log_object + ".partial" in synced  # the data, before its rename
    assert synced.count(partition_dir) >= 6  # every rename made durable
    assert str(tmp_path / "tier") in synced  # the new partition directory's entry


def test_no_partial_objects_remain_after_a_copy(tmp_path: Path) -> None:
    seg = write_segment(tmp_path / "local", 0)
    rsm = create_remote_storage(str(tmp_path / "tier"), {})
    rsm.copy_log_segment_data(metadata_for(TIP, seg), seg.data)
    names = os.listdir(tmp_path / "tier" / f"clicks-0-{TIP.topic_id}")
    assert len(names) == 6
    assert not [n for n in names if n.endswith(".partial")]
