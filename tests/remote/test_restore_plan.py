"""A restore cannot empty a bucket by mistake (issue 21, defect 3): a restore that would
delete from the tier is planned (per partition: the cut, the segments and records deleted)
and changes nothing unless executed; one leaving a partition empty needs ``allow_empty`` too;
``to_topic`` restores a point in time into a new topic without touching the source's tier
data. Library and ``tierlog restore`` alike."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pytest
from support.cli_runner import tierlog, user_error
from support.restore_world import (
    T0,
    Source,
    lose_disks_after,
    manager_tier,
    raw_batches,
    tier_config,
)

from tierlog.errors import (
    ConfigError,
    RestoreNotConfirmedError,
    TierDamagedError,
    TopicExistsError,
)
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.remote.api import RemoteLogSegmentState
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions

#: Before any record of the tests' topics (2020-01-01T00:00:00Z): the operator's typo.
TYPO = "2020-01-01T00:00:00Z"


def tier_files(root: Path, under: str = "") -> dict[str, str]:
    """Every object under ``root`` (optionally under one prefix), by path: its SHA-256."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()
            and str(p.relative_to(root)).startswith(under)}


@pytest.fixture
def source(tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> Source:
    return lose_disks_after(tmp_path, tier_config("local", tmp_path, request), clock)


def _open(source: Source, clock: Any, data: Path | None = None) -> LogManager:
    return LogManager.open(data or source.data, source.config, time_ms=clock,
                           start_scheduler=False)


def _tier_root(tmp_path: Path) -> Path:
    return tmp_path / "tier"


def _committed(tmp_path: Path, topic: str) -> list[Any]:
    """The committed segments of ``topic``'s partition 0, read with nothing but the tier."""
    tier = RemoteTier(fsspec.filesystem("file"), str(_tier_root(tmp_path)))
    tip = topic_partitions(tier, topic)[0]
    return sorted(load_partition(tier, tip)[0].committed, key=lambda m: m.start_offset)


def test_a_plan_says_what_a_cut_deletes_and_changes_nothing(
        source: Source, tmp_path: Path, clock: Any) -> None:
    cut = source.marks["seg3"]
    before = tier_files(_tier_root(tmp_path))
    with _open(source, clock) as mgr:
        plan = mgr.plan_restore("orders", to_offset=cut)
        (state,) = plan.partitions
        above = [m for m in _committed(tmp_path, "orders") if m.end_offset >= cut]
        assert (state.cut, state.log_start_offset) == (cut, 0)
        assert {m.segment_id for m in state.dropped} == {m.segment_id for m in above}
        assert state.deleted_records == source.tier_end - cut and plan.deletes
        line = (f"orders-0: cut at offset {cut} (log start 0); deletes {len(above)} segments "
                f"({source.tier_end - cut} records) from the tier")
        assert plan.describe() == [line]
        # Not told to execute: refused, naming what it would delete; nothing changed.
        with pytest.raises(RestoreNotConfirmedError, match="--execute") as e:
            mgr.restore_topic("orders", to_offset=cut)
        assert f"{len(above)} segments ({source.tier_end - cut} records)" in str(e.value)
        assert mgr.partitions("orders") == [] and not list(source.data.glob("orders-*"))
        assert tier_files(_tier_root(tmp_path)) == before
        # Without a cut nothing is deleted: no execute needed.
        assert not mgr.plan_restore("orders").deletes
        (log,) = mgr.apply_restore(mgr.plan_restore("orders", to_offset=cut), execute=True)
        assert log.log_end_offset == cut
    assert max(m.end_offset for m in _committed(tmp_path, "orders")) == cut - 1


def test_a_cut_before_any_data_needs_allow_empty_too(
        source: Source, tmp_path: Path, clock: Any) -> None:
    before = tier_files(_tier_root(tmp_path))
    with _open(source, clock) as mgr:
        plan = mgr.plan_restore("orders", to_timestamp=T0 - 1)
        assert [p.tip.partition for p in plan.emptied] == [0]
        assert plan.describe()[0].endswith("leaving the partition EMPTY")
        with pytest.raises(RestoreNotConfirmedError, match=r"orders-0 EMPTY.*allow_empty"):
            mgr.restore_topic("orders", to_timestamp=T0 - 1, execute=True)
        assert tier_files(_tier_root(tmp_path)) == before
        assert not list(source.data.glob("orders-*"))
        (log,) = mgr.restore_topic("orders", to_timestamp=T0 - 1, execute=True,
                                   allow_empty=True)
        assert (log.log_start_offset, log.log_end_offset) == (0, 0)
    assert _committed(tmp_path, "orders") == []


def _two_topics(tmp_path: Path, clock: Any, request: pytest.FixtureRequest
                ) -> tuple[dict[str, Any], Path]:
    config = tier_config("local", tmp_path, request)
    data = tmp_path / "data"
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        for name in ("a", "b"):
            for lg in mgr.create_topic(name, 3, {"remote.storage.enable": True}):
                for i in range(3):
                    lg.append_records([Record(b"k", b"v%d" % i, timestamp=T0 + i)])
                    lg.roll()
                lg.update_high_watermark(lg.log_end_offset)
        mgr.tier_now()
    shutil.rmtree(data)
    return config, data


def test_the_operators_typo_prints_a_plan_and_deletes_nothing(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> None:
    """The issue's command, word for word: a dry run that shows every partition emptied."""
    config, _ = _two_topics(tmp_path, clock, request)
    url = config["remote.storage.url"]
    before = tier_files(_tier_root(tmp_path))
    other = tmp_path / "other"
    done = tierlog("restore", url, "--data-dir", other, "--all", "--force-takeover",
                   "--to-timestamp", TYPO, "--quiet")
    for topic in "ab":
        for p in range(3):
            assert (f"{topic}-{p}: cut at offset 0 (log start 0); deletes 3 segments "
                    f"(3 records) from the tier, leaving the partition EMPTY") in done.stdout
    assert "dry run: nothing was restored or deleted" in done.stdout
    assert "--allow-empty" in done.stdout and "restored" not in done.stdout.split("dry run")[0]
    assert tier_files(_tier_root(tmp_path)) == before
    assert not list(other.glob("a-*")) and not list(other.glob("b-*"))
    # --execute alone: refused before any topic is restored, one line naming --allow-empty.
    line = user_error("restore", url, "--data-dir", other, "--all", "--force-takeover",
                      "--to-timestamp", TYPO, "--quiet", "--execute")
    assert "EMPTY" in line and "--allow-empty" in line
    assert tier_files(_tier_root(tmp_path)) == before
    assert not list(other.glob("a-*")) and not list(other.glob("b-*"))
    # Both flags: done, and the run says what it deleted.
    done = tierlog("restore", url, "--data-dir", other, "--all", "--force-takeover",
                   "--to-timestamp", TYPO, "--quiet", "--execute", "--allow-empty")
    assert "a-0: deleted 3 segments (3 records) from the tier" in done.stdout
    assert "restored 2 topics (6 partitions)" in done.stdout


def test_restore_all_confirms_every_topic_before_restoring_any(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> None:
    config, data = _two_topics(tmp_path, clock, request)
    before = tier_files(_tier_root(tmp_path))
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        with pytest.raises(RestoreNotConfirmedError, match="'a'"):
            mgr.restore_all(to_timestamp=T0 + 1)
        with pytest.raises(RestoreNotConfirmedError, match="allow_empty"):
            mgr.restore_all(to_timestamp=T0 - 1, execute=True)
        assert mgr.partitions("a") == mgr.partitions("b") == []
        assert tier_files(_tier_root(tmp_path)) == before
        restored = mgr.restore_all(to_timestamp=T0 + 1, execute=True)
        assert {lg.log_end_offset for logs in restored.values() for lg in logs} == {2}


def test_a_restore_to_a_new_topic_leaves_the_source_untouched(
        source: Source, tmp_path: Path, clock: Any) -> None:
    cut = source.marks["after-marker"]  # inside a tier segment: its prefix is uploaded
    (src_dir,) = [p.name for p in _tier_root(tmp_path).iterdir() if p.name.startswith("orders-0-")]
    before = tier_files(_tier_root(tmp_path), src_dir)
    below = [b for b in source.batches if int.from_bytes(b[:8], "big") < cut]
    with _open(source, clock, tmp_path / "fork") as mgr:
        # Nothing of the source is deleted, so no execute is needed; its owner is not asked.
        (log,) = mgr.restore_topic("orders", to_offset=cut, to_topic="orders_at")
        assert log.topic == "orders_at" and log.topic_id != source.topic_id
        assert log.log_end_offset == cut and raw_batches(log, 0, cut) == below
        with pytest.raises(TopicExistsError, match="orders_at"):
            mgr.restore_topic("orders", to_offset=cut, to_topic="orders_at")
        with pytest.raises(ConfigError, match="to_topic"):  # it would shadow the source
            mgr.restore_topic("orders", to_offset=cut, to_topic="orders")
    assert tier_files(_tier_root(tmp_path), src_dir) == before  # byte-identical
    new = _committed(tmp_path, "orders_at")
    assert [(m.start_offset, m.end_offset) for m in new][-1][1] == cut - 1
    assert all(m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in new)
    # Its tier data is its own: another data dir restores it from the tier alone.
    with _open(source, clock, tmp_path / "again") as mgr:
        (log,) = mgr.restore_topic("orders_at", force_takeover=True)
        assert log.topic_id != source.topic_id and log.log_end_offset == cut
        assert raw_batches(log, 0, cut) == below
    # And the source still restores whole.
    with _open(source, clock, tmp_path / "whole") as mgr:
        (log,) = mgr.restore_topic("orders", force_takeover=True)
        assert log.log_end_offset == source.tier_end
        assert raw_batches(log, 0, source.tier_end) == source.batches


def test_the_cli_restores_to_a_new_topic(source: Source, tmp_path: Path) -> None:
    cut = source.marks["seg3"]
    url = source.config["remote.storage.url"]
    before = tier_files(_tier_root(tmp_path))
    done = tierlog("restore", url, "--data-dir", tmp_path / "fork", "--topic", "orders",
                   "--to-offset", str(cut), "--to-topic", "orders_old", "--quiet")
    assert f"orders_old-0: offsets 0-{cut - 1}" in done.stdout
    assert "as new topic 'orders_old'" in done.stdout and "plan" not in done.stdout
    after = tier_files(_tier_root(tmp_path))
    assert {k: v for k, v in after.items() if k in before} == before
    line = user_error("restore", url, "--data-dir", tmp_path / "y", "--all", "--to-topic", "x")
    assert "--to-topic needs --topic" in line


def test_on_s3_a_new_topic_leaves_the_source_untouched_and_damage_is_refused(
        tmp_path: Path, clock: Any, request: pytest.FixtureRequest) -> None:
    source = lose_disks_after(tmp_path, tier_config("s3", tmp_path, request), clock)
    cut = source.marks["after-marker"]
    below = [b for b in source.batches if int.from_bytes(b[:8], "big") < cut]
    with _open(source, clock, tmp_path / "fork") as mgr:
        assert mgr.tier_topics() == ["orders"]
        tier = manager_tier(mgr)
        (src,) = [p for p in tier.fs.ls(tier.root, refresh=True) if "/orders-0-" in p]

        def objects() -> dict[str, bytes]:
            tier.fs.invalidate_cache()
            return {p: tier.fs.cat_file(p) for p in tier.fs.find(src)}

        before = objects()
        (log,) = mgr.restore_topic("orders", to_offset=cut, to_topic="orders_b")
        assert log.log_end_offset == cut and raw_batches(log, 0, cut) == below
        assert objects() == before  # byte-identical
        first = min(p for p in before if p.endswith(".log"))
        tier.fs.pipe_file(first, before[first][:len(before[first]) // 2])
        with pytest.raises(TierDamagedError, match=first.rsplit("/", 1)[-1]):
            mgr.plan_restore("orders", force_takeover=True)
