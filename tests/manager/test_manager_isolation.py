"""One bad object stops one partition: a corrupt manifest planted in the remote tier makes that
partition's remote reads and tiering report a RemoteStorageError naming the object, while the
LogManager opens and the other partitions read and tier as before."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tierlog import Record
from tierlog.errors import RemoteStorageError
from tierlog.manager.log_manager import LogManager

NESTED = b"[" * 200_000 + b"]" * 200_000  # deep enough to exhaust a recursive parser


def _fill(log, count: int = 40, start: int = 0) -> None:
    for i in range(start, start + count):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 100)])


def _open(tmp_path: Path, clock) -> LogManager:
    config = {"remote.storage.url": (tmp_path / "tier").as_uri(), "segment.bytes": 1024,
              "local.retention.bytes": 1}
    return LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)


@pytest.mark.parametrize("corrupt", [NESTED, b'{"version": 0, "segments": ' * 3, b"\xff\xfe"])
def test_a_corrupt_manifest_fails_only_its_partition(tmp_path: Path, clock, corrupt: bytes,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    with _open(tmp_path, clock) as mgr:
        mgr.create_topic("orders", 2, {"remote.storage.enable": True})
        mgr.create_topic("clicks", 1, {"remote.storage.enable": True})
        for tp in (("orders", 0), ("orders", 1), ("clicks", 0)):
            _fill(mgr.log(*tp))
        results = mgr.tier_now()
        assert all(r.copied and not r.errors for r in results.values())
        bad_dir = mgr.log("orders", 1).directory.name
    manifests = list((tmp_path / "tier").glob("orders-1-*/_manifest.json"))
    assert len(manifests) == 1
    manifests[0].write_bytes(corrupt)
    # The local cache of the tier's metadata would hide the corruption: a fresh node has none.
    for cache in (tmp_path / "data").glob("remote-log-metadata-cache"):
        for f in cache.rglob("*"):
            if f.is_file():
                f.unlink()

    caplog.set_level(logging.ERROR, logger="tierlog")
    with _open(tmp_path, clock) as mgr:
        assert mgr.topics() == ["clicks", "orders"]
        logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert any(bad_dir in m and "_manifest.json" in m for m in logged), logged
        error = mgr.remote_unavailable("orders", 1)
        assert isinstance(error, RemoteStorageError) and "_manifest.json" in str(error)
        assert mgr.remote_unavailable("orders", 0) is None

        # Remote reads of the bad partition report the object; the others read from the tier.
        with pytest.raises(RemoteStorageError, match=r"orders-1: .*_manifest\.json"):
            mgr.log("orders", 1).read(0)
        for tp in (("orders", 0), ("clicks", 0)):
            res = mgr.log(*tp).read(0)
            assert res.from_remote and next(iter(res.records())).key == b"k0"
        # Local data of the bad partition is still served.
        bad = mgr.log("orders", 1)
        assert bad.read(bad.log_end_offset - 1).records()

        # Tiering goes on for the others and reports the error for the bad one.
        for tp in (("orders", 0), ("orders", 1), ("clicks", 0)):
            _fill(mgr.log(*tp), start=40)
        results = mgr.tier_now()
        assert results["orders-0"].copied and not results["orders-0"].errors
        assert results["clicks-0"].copied and not results["clicks-0"].errors
        assert results["orders-1"].copied == []
        assert any("_manifest.json" in e for e in results["orders-1"].errors)
        # Nothing local of the bad partition was deleted on the word of a tier it cannot read.
        assert bad.local_log_start_offset <= 40


def test_the_partition_attaches_again_once_the_object_is_repaired(tmp_path: Path,
                                                                  clock) -> None:
    with _open(tmp_path, clock) as mgr:
        mgr.create_topic("orders", 1, {"remote.storage.enable": True})
        _fill(mgr.log("orders", 0))
        mgr.tier_now()
    manifest = next((tmp_path / "tier").glob("orders-0-*/_manifest.json"))
    good = manifest.read_bytes()
    manifest.write_bytes(NESTED)
    for f in (tmp_path / "data").glob("remote-log-metadata-cache/**/*"):
        if f.is_file():
            f.unlink()
    with _open(tmp_path, clock) as mgr:
        assert mgr.remote_unavailable("orders", 0) is not None
        manifest.write_bytes(good)
        results = mgr.tier_now()
        assert not results["orders-0"].errors
        assert mgr.remote_unavailable("orders", 0) is None
        assert mgr.log("orders", 0).read(0).from_remote
