"""Raising a tiered log's start offset before its segments were copied (DeleteRecords, a
restore's seeding): the segments wholly below the new start are not copied (their records
are deleted; the leader-epoch cache, truncated from the start as Kafka does, no longer
covers them) and go from the local disk uncopied, as Kafka's RemoteLogManager copies from
the local log start and ``deletableSegments`` lets a segment below the log start go. The
segment the new start falls in is copied with the epoch moved to the new start.

Before, the next tiering run failed for good with "segment 0-1 has no leader epoch"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.log.log_removals import last_offset_off_local
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.topics import topic_partitions

T0 = 1_700_000_000_000


def _tier(mgr: LogManager) -> Any:
    rlm = mgr.remote_log_manager
    assert rlm is not None
    return rlm.rsm.tier  # type: ignore[attr-defined]


@pytest.mark.parametrize("where", ["mid-segment", "segment-boundary", "log-end"])
def test_raising_the_log_start_before_tiering_keeps_tiering_going(
        tmp_path: Path, clock: Any, where: str) -> None:
    config = {"segment.bytes": 1 << 20, "local.retention.bytes": 0,
              "remote.storage.manager": "local",
              "remote.storage.url": f"file://{tmp_path}/tier"}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.create_topic("t", 1, {"remote.storage.enable": True})
        for i in range(3):  # segments [0, 2), [2, 4), [4, 6), then the active one
            log.append_records([Record(key=b"k%d" % i, value=b"v", timestamp=T0)] * 2)
            log.roll()
        log.append_records([Record(key=b"k", value=b"v", timestamp=T0)])
        log.update_high_watermark(log.log_end_offset)
        start = {"mid-segment": 3, "segment-boundary": 4, "log-end": 7}[where]
        log.delete_records_before(start)
        assert log.leader_epoch_cache.entries()[0].start_offset == start  # moved, kept

        results = mgr.tier_now()
        assert not results["t-0"].errors
        mgr.scheduler.run_due()  # local retention: below the start, or copied
        assert not mgr.tier_now()["t-0"].errors

        tip = topic_partitions(_tier(mgr), "t")[0]
        committed = sorted(load_partition(_tier(mgr), tip)[0].committed,
                           key=lambda m: m.start_offset)
        # Nothing wholly below the start went to the tier; the rest of the closed log did,
        # each segment with the epoch starting at its first offset not below the start.
        assert [(m.start_offset, m.end_offset) for m in committed] == [
            (b, b + 1) for b in (2, 4) if b + 2 > start]
        assert [m.segment_leader_epochs for m in committed] == [
            {0: max(start, m.start_offset)} for m in committed]
        # Nothing wholly below the start stayed on the disk either.
        segments = log.segments.values()
        assert all(nxt.base_offset > start for nxt in segments[1:])
        assert log.log_start_offset == start
        if start < log.log_end_offset:
            assert next(iter(log.read(start).records())).offset == start


@given(highest=st.integers(-1, 50), log_start=st.integers(0, 50), base=st.integers(0, 50),
       size=st.integers(1, 10))
def test_a_segment_is_off_local_once_copied_or_wholly_below_the_log_start(
        highest: int, log_start: int, base: int, size: int) -> None:
    """The one rule of copy candidates and tiered local retention, for a segment
    [base, base + size): done locally iff the tier holds its last offset or the log start
    offset is past it."""
    last = base + size - 1
    off = last <= last_offset_off_local(highest, log_start)
    assert off == (last <= highest or base + size <= log_start)
