"""What an on-call engineer reads (issue 21, item 8): owner times a person can read, a
takeover logged only when it happens, each error once, start-up lines at INFO, one line per
deleted topic, no progress bars off a terminal, summaries that say what happened, the tier's
plugin implied by its URL, SIGTERM handled as Ctrl-C, and plurals that agree."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path
from typing import Any

import fsspec
import pytest
from support.cli_runner import tierlog
from support.process_death import die
from support.restore_world import lose_disks_after, tier_config

from tierlog import Record
from tierlog.cli import main
from tierlog.cli._common import progress_bar
from tierlog.contracts.json_fields import check_json_int
from tierlog.errors import PartitionOwnedError, TierDamagedError
from tierlog.manager.log_manager import LogManager
from tierlog.manager.manager_config import ManagerConfig
from tierlog.records import build_batch
from tierlog.remote.ops.scrub import scrub_tier
from tierlog.remote.tier.object_store import RemoteTier

#: How format_timestamp_ms spells a time: epoch ms, then ISO-8601 UTC in parentheses.
ISO = re.compile(r"since \d+ \(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)")


def messages(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= level]


def test_a_takeover_is_logged_when_it_happens_with_a_readable_time(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    caplog.set_level(logging.DEBUG, logger="tierlog")
    with LogManager.open(tmp_path / "other", source.config, time_ms=clock,
                         start_scheduler=False) as mgr:
        with pytest.raises(PartitionOwnedError) as refused:
            mgr.plan_restore("orders")
        assert ISO.search(str(refused.value)), refused.value
        plan = mgr.plan_restore("orders", force_takeover=True)  # a dry run takes nothing
        assert plan.partitions[0].taken_over is not None
        assert not [m for m in messages(caplog) if "taking over" in m], messages(caplog)
        mgr.apply_restore(plan)
    [taken] = [m for m in messages(caplog) if "taking over" in m]
    assert taken.startswith("orders-0: taking over from LogManager on ") and ISO.search(taken)


def test_an_owned_partition_is_one_note_of_the_scrub_not_a_warning_too(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    tier = RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    caplog.set_level(logging.INFO, logger="tierlog")
    report = scrub_tier(tier, time_ms=clock, repair=True)
    [note] = [n for n in report.notes if "owned by" in n]
    assert ISO.search(note), note
    assert not [m for m in messages(caplog) if "owned by" in m]


def test_a_refused_restore_of_a_damaged_tier_logs_no_error_of_its_own(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest,
        caplog: pytest.LogCaptureFixture) -> None:
    source = lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)
    first = min((tmp_path / "tier").rglob("*.log"))
    first.write_bytes(first.read_bytes()[:100])  # a .log the restore relies on, cut short
    caplog.set_level(logging.INFO, logger="tierlog")
    with LogManager.open(tmp_path / "other", source.config, time_ms=clock,
                         start_scheduler=False) as mgr, \
            pytest.raises(TierDamagedError, match=re.escape(first.name)):
        mgr.plan_restore("orders", force_takeover=True)
    assert messages(caplog, logging.ERROR) == []  # the raised error is reported once


def test_consume_of_damaged_bytes_prints_the_error_once(tmp_path: Path, clock: Any) -> None:
    mgr = LogManager.open(tmp_path, time_ms=clock, start_scheduler=False)
    (log,) = mgr.create_topic("t", 1)
    for i in range(20):
        log.append(build_batch([Record(value=b"v%d" % i)]))
    segment = log.segments.active.path
    die(mgr)  # no clean-shutdown marker
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a flipped byte below the end: damage, not a write in flight
    segment.write_bytes(bytes(data))
    done = tierlog("consume", "--topic", "t", "--from-beginning", "--data-dir", tmp_path,
                   check=False)
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("tierlog: error: t-0: ")


def test_the_metrics_address_is_start_up_information(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tierlog.plugins.metrics import serve_metrics

    caplog.set_level(logging.DEBUG, logger="tierlog")
    with LogManager.open(tmp_path, start_scheduler=False) as mgr:
        served = serve_metrics(mgr, 0)
        served.close()
    [line] = [r for r in caplog.records if "tierlog metrics on" in r.getMessage()]
    assert line.levelno == logging.INFO


def test_a_deleted_topic_left_behind_is_one_line_per_topic(
        tmp_path: Path, clock: Any, caplog: pytest.LogCaptureFixture) -> None:
    config = {"file.delete.delay.ms": 3_600_000}  # still there when the manager closes
    with LogManager.open(tmp_path, config, time_ms=clock, start_scheduler=False) as mgr:
        mgr.create_topic("big.topic-1", 30)
        mgr.delete_topic("big.topic-1")
    assert len(list(tmp_path.glob("*-delete"))) == 30
    caplog.set_level(logging.INFO, logger="tierlog")
    with LogManager.open(tmp_path, config, time_ms=clock, start_scheduler=False):
        pass
    assert not list(tmp_path.glob("*-delete"))
    removed = [m for m in messages(caplog, logging.INFO) if "earlier deletion" in m]
    assert removed == [("removed 30 partition dirs left by an earlier deletion of topic "
                        "big.topic-1")]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_are_drawn_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stderr", io.StringIO())
    with progress_bar(total=1, desc="tier") as bar:
        assert bar.disable
    monkeypatch.setattr("sys.stderr", _Terminal())
    with progress_bar(total=1, desc="tier") as bar:
        assert not bar.disable
    with progress_bar(total=1, desc="tier", quiet=True) as bar:
        assert bar.disable


def test_a_restore_refused_on_the_lock_draws_no_bar(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    err = _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    with LogManager.open(tmp_path / "data", start_scheduler=False):  # the live owner
        code = main(["restore", str(tmp_path / "tier"), "--data-dir", str(tmp_path / "data"),
                     "--topic", "t"])
    assert code == 1
    assert err.getvalue().startswith("tierlog: error: ") and "restore:" not in err.getvalue()


def test_a_read_only_open_of_damage_says_it_left_it(
        tmp_path: Path, clock: Any, caplog: pytest.LogCaptureFixture) -> None:
    mgr = LogManager.open(tmp_path, time_ms=clock, start_scheduler=False)
    (log,) = mgr.create_topic("busy", 1)
    for i in range(20):
        log.append(build_batch([Record(value=b"v%d" % i)]))
    segment = log.segments.active.path
    die(mgr)  # no clean-shutdown marker
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    caplog.set_level(logging.INFO, logger="tierlog")
    with LogManager.open(tmp_path, time_ms=clock, start_scheduler=False, read_only=True):
        pass
    [summary] = [m for m in messages(caplog) if "unclean shutdown" in m]
    assert "1 segment of 1 partition;" in summary
    assert "1 hold invalid bytes, left in place: busy-0" in summary
    assert "recovered" not in summary and "lost" not in summary
    [partition] = [m for m in messages(caplog) if m.startswith(f"{segment.parent}: ")]
    assert "1 with invalid bytes left in place" in partition and "recovered" not in partition


def test_the_tier_url_implies_its_storage_plugin() -> None:
    s3 = ManagerConfig({"remote.storage.url": "s3://bucket/prefix",
                        "remote.storage.options.endpoint_url": "http://127.0.0.1:1"})
    assert s3["remote.storage.manager"] == "s3"
    assert ManagerConfig({"remote.storage.url": "file:///srv/tier"})[
        "remote.storage.manager"] == "local"
    assert ManagerConfig({"remote.storage.url": "s3://b/p", "remote.storage.manager": "local"})[
        "remote.storage.manager"] == "local"  # a manager set is kept


def test_counts_agree_with_their_nouns(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                       ) -> None:
    caplog.set_level(logging.INFO, logger="tierlog")
    with LogManager.open(tmp_path, start_scheduler=False) as mgr:
        mgr.create_topic("small", 1)
    assert "created topic small with 1 partition" in messages(caplog, logging.INFO)
    with pytest.raises(ValueError) as out_of_range:
        check_json_int(-1, "offset", "field 'startOffset'")
    assert "a offset" not in str(out_of_range.value)
    assert "outside the offset range" in str(out_of_range.value)
