"""A point-in-time restore whose tier fails part way (a real ``faultfs://`` tier that goes
down at its N-th write, for every N the restore makes): no record below the cut ever leaves
the tier, the restore is undone locally, and the same restore run again once the tier heals
lands on the same cut with the same bytes and producer state."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import pytest
from support.fault_fs import Faults, fault_storage
from support.restore_world import IDEM, Source, lose_disks_after, raw_batches
from support.txn_layouts import consumer_view

from tierlog.errors import TierlogError
from tierlog.manager.log_manager import LogManager
from tierlog.remote.api import RemoteLogSegmentMetadata, RemoteLogSegmentState
from tierlog.remote.tier.manifest import list_remote_partitions, read_partition_manifest

#: The FaultFS methods that write to (or remove from) the tier.
WRITES = ("pipe_file", "put_file", "rm_file", "_rm", "mv")


def segments(tier: Path) -> list[RemoteLogSegmentMetadata]:
    """Every segment of orders-0 the tier records, read with nothing but fsspec."""
    fs, root = fsspec.core.url_to_fs(f"file://{tier}")
    (tip,) = [p for p in list_remote_partitions(fs, root) if p.topic == "orders"]
    return list(read_partition_manifest(fs, root, tip).segments)


def covered(tier: Path) -> int:
    """One past the last offset the tier's committed segments hold without a gap from 0."""
    offset = 0
    for m in sorted((m for m in segments(tier)
                     if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED),
                    key=lambda m: m.start_offset):
        if m.start_offset > offset:
            break
        offset = max(offset, m.end_offset + 1)
    return offset


def down_from_write(faults: Faults, n: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """From its ``n``-th write on (1-based), every write to the tier fails; returns a list
    holding the count of writes attempted so far."""
    count = [0]
    before: Callable[[str, Any], None] = faults.before

    def counting(method: str, path: Any = "") -> None:
        if method in WRITES:
            count[0] += 1
            if count[0] == n:
                for name in WRITES:
                    faults.fail(name)
        before(method, path)

    monkeypatch.setattr(faults, "before", counting)
    return count


@pytest.fixture
def base(tmp_path: Path, clock: Any) -> tuple[Source, Path]:
    """orders tiered to ``tmp_path/base`` (a plain directory under faultfs) and its disks
    lost."""
    url = f"faultfs://{tmp_path}/base"
    config = {"segment.bytes": 1 << 20, "local.retention.bytes": 0,
              "remote.storage.manager": "fsspec", "remote.storage.url": url}
    with fault_storage():
        return lose_disks_after(tmp_path, config, clock), tmp_path / "base"


def test_a_tier_failing_at_any_write_loses_no_record_below_the_cut(
        base: tuple[Source, Path], tmp_path: Path, clock: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    source, base_tier = base
    cut = source.marks["after-marker"]  # inside a tier segment: its prefix is uploaded
    below = [b for b in source.batches if int.from_bytes(b[:8], "big") < cut]
    failed_after_prefix = failed_after_marks = failures = 0
    n = 0
    while True:
        n += 1
        tier = tmp_path / f"tier-{n}"
        shutil.copytree(base_tier, tier)
        config = {**source.config, "remote.storage.url": f"faultfs://{tier}"}
        with fault_storage() as faults, LogManager.open(
                source.data, config, time_ms=clock, start_scheduler=False) as mgr:
            writes = down_from_write(faults, n, monkeypatch)
            try:
                mgr.restore_topic("orders", to_offset=cut, execute=True)
            except (TierlogError, OSError):
                failures += 1
                assert mgr.partitions("orders") == []  # undone locally
                assert not list(source.data.glob("orders-*"))
            finished = writes[0] < n  # the tier never went down: every step ran
            faults.heal()
            monkeypatch.undo()
            # The tier alone holds every record below the cut, whatever step failed.
            assert covered(tier) >= cut, f"write {n}"
            states = segments(tier)
            if any(m.end_offset == cut - 1 and m.state is RemoteLogSegmentState.
                   COPY_SEGMENT_FINISHED for m in states) and any(
                       m.start_offset < cut <= m.end_offset and m.state is
                       RemoteLogSegmentState.COPY_SEGMENT_FINISHED for m in states):
                failed_after_prefix += 1  # the prefix committed, its source not yet marked
            if any(m.state is RemoteLogSegmentState.DELETE_SEGMENT_STARTED for m in states):
                failed_after_marks += 1
            if not mgr.partitions("orders"):  # the retry, on the healed tier
                mgr.restore_topic("orders", to_offset=cut, execute=True)
            log = mgr.log("orders", 0)
            assert log.log_end_offset == cut, f"write {n}"
            assert raw_batches(log, 0, cut) == below, f"write {n}"
            # read_committed: the prefix's transaction index, in the tier or rebuilt locally.
            assert consumer_view(log, 0, cut) == [(o, k) for o, k in source.view if o < cut]
            records, seq = source.last_idem  # the producer state is the one at the cut
            info = log.append_records(records, producer_id=IDEM, producer_epoch=0,
                                      base_sequence=seq)
            assert not info.duplicate and info.first_offset == cut
            assert covered(tier) == cut  # nothing above the cut is left committed
        shutil.rmtree(source.data)
        if finished:
            break
    # Every write the restore makes was failed once: those up to the marks undo the
    # restore; a failed object delete only leaves its segment DELETE_STARTED for the next
    # tiering run (the restore itself succeeds).
    assert failures >= 5 and n - 1 > failures
    assert failed_after_prefix and failed_after_marks


def _objects(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_restore_to_a_new_topic_failing_at_any_write_leaves_the_source_untouched(
        base: tuple[Source, Path], tmp_path: Path, clock: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``to_topic``: whichever write fails (every third one is tried), the source's objects
    are byte-identical, nothing is left locally, and the retry on the healed tier is not
    refused for what the failed one left."""
    source, base_tier = base
    cut = source.marks["after-marker"]  # inside a tier segment: its prefix is uploaded too
    below = [b for b in source.batches if int.from_bytes(b[:8], "big") < cut]
    (original,) = [p.name for p in base_tier.iterdir() if p.name.startswith("orders-0-")]
    before = _objects(base_tier / original)
    n, failures = 1, 0
    while True:
        tier = tmp_path / f"fork-{n}"
        shutil.copytree(base_tier, tier)
        config = {**source.config, "remote.storage.url": f"faultfs://{tier}"}
        with fault_storage() as faults, LogManager.open(
                source.data, config, time_ms=clock, start_scheduler=False) as mgr:
            writes = down_from_write(faults, n, monkeypatch)
            try:
                mgr.restore_topic("orders", to_offset=cut, to_topic="orders_at")
            except (TierlogError, OSError):
                failures += 1
                assert mgr.partitions("orders_at") == []
                assert not list(source.data.glob("orders_at-*"))
            finished = writes[0] < n
            faults.heal()
            monkeypatch.undo()
            assert _objects(tier / original) == before, f"write {n}"
            if not mgr.partitions("orders_at"):
                mgr.restore_topic("orders", to_offset=cut, to_topic="orders_at")
            log = mgr.log("orders_at", 0)
            assert log.log_end_offset == cut and log.topic_id != source.topic_id
            assert raw_batches(log, 0, cut) == below, f"write {n}"
            assert _objects(tier / original) == before, f"write {n}"
        shutil.rmtree(source.data)
        if finished:
            break
        n += 3
    assert failures >= 3
