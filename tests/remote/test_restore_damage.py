"""A restore checks what it relies on (issue 21, defect 13): with a segment's ``.log`` cut to
half, or its recorded size one byte short, the restore used to succeed and reads below the
log end then returned nothing. Now it refuses before changing anything, naming the object,
expected vs found (the scrub's cheap checks, ``tierlog.remote.ops.restore_checks``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from support.cli_runner import user_error
from support.restore_world import Source, lose_disks_after, tier_config

from tierlog.errors import TierDamagedError
from tierlog.manager.log_manager import LogManager


@pytest.fixture
def source(tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> Source:
    return lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)


def _logs(tmp_path: Path) -> list[Path]:
    """The tier's ``.log`` objects of orders-0, in offset order."""
    return sorted((tmp_path / "tier").glob("orders-0-*/*.log"))


def _refused(source: Source, clock: Any, match: str, **kwargs: Any) -> str:
    """Restore must raise TierDamagedError matching ``match`` and leave the data dir empty."""
    with LogManager.open(source.data, source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        with pytest.raises(TierDamagedError, match=match) as raised:
            mgr.restore_topic("orders", **kwargs)
        assert mgr.partitions("orders") == []
    assert not list(source.data.glob("orders-*"))
    return str(raised.value)


def test_a_log_cut_to_half_is_refused_naming_the_object(
        source: Source, tmp_path: Path, clock: Any) -> None:
    path = _logs(tmp_path)[1]
    size = path.stat().st_size
    os.truncate(path, size // 2)
    before = {p: p.read_bytes() for p in (tmp_path / "tier").rglob("*") if p.is_file()}
    message = _refused(source, clock, str(path))
    assert f"holds {size // 2} bytes, the metadata records {size}" in message
    assert {p: p.read_bytes() for p in (tmp_path / "tier").rglob("*") if p.is_file()} == before
    line = user_error("restore", source.config["remote.storage.url"], "--data-dir",
                      source.data, "--topic", "orders", "--quiet")
    assert str(path) in line and f"holds {size // 2} bytes" in line


def test_a_recorded_size_one_byte_short_is_refused(
        source: Source, tmp_path: Path, clock: Any) -> None:
    path = _logs(tmp_path)[0]
    size = path.stat().st_size
    segment_id = path.stem.split("-", 1)[1]
    edited = 0
    for meta in (tmp_path / "tier").glob("orders-0-*/**/*.json"):
        text = meta.read_text()
        if segment_id not in text or "segmentSizeInBytes" not in text:
            continue
        data = json.loads(text)
        for md in data.get("segments", [data]):
            if md.get("segmentId") == segment_id:
                md["segmentSizeInBytes"] = size - 1
                edited += 1
        meta.write_text(json.dumps(data))
    assert edited
    message = _refused(source, clock, str(path))
    assert f"holds {size} bytes, the metadata records {size - 1}" in message


def test_the_segment_holding_the_cut_is_checked_too(
        source: Source, tmp_path: Path, clock: Any) -> None:
    cut = source.marks["after-marker"]  # inside the third segment: its bytes are fetched
    path = _logs(tmp_path)[2]
    assert int(path.name.split("-")[0]) < cut
    size = path.stat().st_size
    os.truncate(path, size - 10)
    message = _refused(source, clock, str(path), to_offset=cut, execute=True)
    assert f"holds {size - 10} bytes, the metadata records {size}" in message
