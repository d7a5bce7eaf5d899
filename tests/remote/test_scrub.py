"""``tierlog.remote.ops.scrub``: a clean tier (local and S3 over moto) reports nothing; each
injected fault is found and named; ``repair`` fixes orphans and stuck states and nothing
else; without ``deep`` the bytes read stay bounded."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.cli_runner import tierlog
from support.s3 import S3_BUCKET

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.records import iter_batches
from tierlog.remote import (
    RemoteLogMetadataManager,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.remote.ops.scrub import DEFAULT_GRACE_MS, FindingKind, scrub_tier
from tierlog.remote.tier.layout import (
    partition_dir_name,
    segment_object_key,
    staged_chunk_key,
    tail_manifest_key,
)
from tierlog.remote.tier.manifest import load_partition, remote_partitions
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.storage_from_url import open_storage
from tierlog.remote.tier.tail_manifest import read_tail_manifest

STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
HOUR_MS = 3600 * 1000
#: Segments much larger than what a quick scrub reads of each (its head and its last
#: index interval), with many index entries.
TIER_CONFIG = {"segment.bytes": 64 << 10, "index.interval.bytes": 2048,
               "remote.log.tail.ms": 1000}


def _fill(mgr: LogManager, clock: Any, batches: int = 260) -> None:
    log = mgr.create_topic("orders", 1)[0]
    for i in range(batches):
        clock.advance(1000)
        log.append_records([Record(key=b"k%d-%d" % (i, j), value=os.urandom(60).hex().encode())
                            for j in range(8)], compression="none")
    mgr.tier_now()
    mgr.publish_tail_now()


@pytest.fixture
def tier(tmp_path: Path, clock: Any) -> RemoteTier:
    """A local tier written by a LogManager: several committed segments and a tail."""
    config = {**TIER_CONFIG, "remote.storage.enable": True, "remote.storage.manager": "local",
              "remote.storage.url": f"file://{tmp_path}/tier"}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    try:
        _fill(mgr, clock)
    finally:
        mgr.close()
    return open_storage(str(tmp_path / "tier")).tier


@pytest.fixture
def tip(tier: RemoteTier) -> TopicIdPartition:
    (found,) = remote_partitions(tier)
    return found


def committed(tier: RemoteTier, tip: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
    manifest, _ = load_partition(tier, tip)
    return list(manifest.committed)


def local_path(tier: RemoteTier, md: RemoteLogSegmentMetadata, suffix: str) -> Path:
    return Path(tier.path(segment_object_key(md, suffix)))


def scrub(tier: RemoteTier, clock: Any, **kwargs: Any):
    """A scrub two hours after the tier was written (past the grace period)."""
    return scrub_tier(tier, time_ms=lambda: clock.now + 2 * HOUR_MS, **kwargs)


def kinds(report) -> set[FindingKind]:
    return {f.kind for f in report.findings}


# -- a clean tier ------------------------------------------------------------------------


def test_a_clean_local_tier_reports_nothing(tier: RemoteTier, tip, clock) -> None:
    assert len(committed(tier, tip)) >= 4
    assert read_tail_manifest(tier, tip) is not None
    for deep in (False, True):
        report = scrub(tier, clock, deep=deep)
        assert report.findings == [], report.findings
        assert report.ok and report.partitions == 1
        assert report.segments == len(committed(tier, tip))


def test_a_clean_s3_tier_reports_nothing_and_the_cli_exits_0(tmp_path, clock, s3_options
                                                             ) -> None:
    url = f"s3://{S3_BUCKET}/scrub-{uuid.uuid4().hex[:10]}"
    config = {**TIER_CONFIG, "remote.storage.enable": True, "remote.storage.manager": "s3",
              "remote.storage.url": url,
              **{f"remote.storage.options.{k}": v for k, v in s3_options.items()}}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    try:
        _fill(mgr, clock, batches=120)
    finally:
        mgr.close()
    for deep in (False, True):
        report = scrub_tier(url, storage_options=s3_options, deep=deep)
        assert report.findings == [] and report.segments >= 2
    options = [a for k, v in s3_options.items() for a in ("--option", f"{k}={v}")]
    done = tierlog("scrub", url, "--json", "--quiet", *options)
    assert json.loads(done.stdout)["ok"] is True


def test_without_deep_the_bytes_read_are_bounded(tier: RemoteTier, tip, clock) -> None:
    segments = committed(tier, tip)
    log_bytes = sum(m.segment_size_in_bytes for m in segments)
    quick = scrub(tier, clock)
    deep = scrub(tier, clock, deep=True)
    assert deep.requests["bytes"] > log_bytes
    # Per segment: a 16 KiB head, an 8-byte index entry and the last index interval.
    assert quick.requests["bytes"] < len(segments) * ((16 << 10) + (8 << 10)) + (64 << 10)
    assert quick.requests["bytes"] < log_bytes / 2


# -- faults ----------------------------------------------------------------------------


def test_a_missing_object_is_named(tier, tip, clock) -> None:
    md = committed(tier, tip)[1]
    index = local_path(tier, md, ".index")
    index.unlink()
    report = scrub(tier, clock)
    (finding,) = report.findings
    assert finding.kind is FindingKind.MISSING_OBJECT
    assert finding.segment_id == md.segment_id and finding.object == str(index)
    assert finding.partition == partition_dir_name(tip)
    assert finding.offsets == (md.start_offset, md.end_offset)
    assert not report.ok


def test_a_truncated_log_is_found(tier, tip, clock) -> None:
    md = committed(tier, tip)[2]
    path = local_path(tier, md, ".log")
    os.truncate(path, md.segment_size_in_bytes - 100)
    (finding,) = scrub(tier, clock).findings
    assert finding.kind is FindingKind.SIZE_MISMATCH and finding.segment_id == md.segment_id
    assert str(md.segment_size_in_bytes) in finding.detail


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_flipped_byte_inside_the_data_takes_deep(tier, tip, clock) -> None:
    md = committed(tier, tip)[1]
    path = local_path(tier, md, ".log")
    batches = list(iter_batches(path.read_bytes()))
    middle = batches[len(batches) // 2]
    _flip(path, middle.position + middle.size_in_bytes - 5)  # a record's value
    assert scrub(tier, clock).findings == []
    (finding,) = scrub(tier, clock, deep=True).findings
    assert finding.kind is FindingKind.CORRUPT_DATA and finding.segment_id == md.segment_id
    assert "CRC" in finding.detail or "crc" in finding.detail


def test_a_flipped_byte_in_the_last_batch_is_found_without_deep(tier, tip, clock) -> None:
    md = committed(tier, tip)[0]
    path = local_path(tier, md, ".log")
    last = list(iter_batches(path.read_bytes()))[-1]
    _flip(path, last.position + 17)  # its CRC field
    (finding,) = scrub(tier, clock).findings
    assert finding.kind is FindingKind.CORRUPT_DATA and finding.segment_id == md.segment_id


def test_an_index_entry_pointing_off_a_batch_is_found(tier, tip, clock) -> None:
    md = committed(tier, tip)[0]
    path = local_path(tier, md, ".index")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the last entry's position moves off its batch
    path.write_bytes(bytes(data))
    found = scrub(tier, clock).findings
    assert [f.kind for f in found] == [FindingKind.CORRUPT_INDEX]
    deep = scrub(tier, clock, deep=True).findings
    assert [f.kind for f in deep] == [FindingKind.CORRUPT_INDEX]


def _update(segment_id: RemoteLogSegmentId, now: int, state: RemoteLogSegmentState
            ) -> RemoteLogSegmentMetadataUpdate:
    return RemoteLogSegmentMetadataUpdate(remote_log_segment_id=segment_id,
                                          event_timestamp_ms=now, state=state)


def _delete_segment(tier: RemoteTier, md: RemoteLogSegmentMetadata, now: int) -> None:
    store = RemoteLogMetadataManager(tier)
    for state in (DELETE_STARTED, DELETE_FINISHED):
        if state is DELETE_FINISHED:
            for suffix in (".log", ".index", ".timeindex", ".snapshot",
                           ".leader_epoch_checkpoint", ".txnindex"):
                tier.delete(tier.path(segment_object_key(md, suffix)))
        store.update_remote_log_segment_metadata(_update(md.remote_log_segment_id, now, state))
    store.close()


def test_a_gap_is_found(tier, tip, clock) -> None:
    md = committed(tier, tip)[2]
    _delete_segment(tier, md, clock.now)
    (finding,) = scrub(tier, clock).findings
    assert finding.kind is FindingKind.GAP
    assert finding.offsets == (md.start_offset, md.end_offset)


def _copy_as_new_segment(tier: RemoteTier, md: RemoteLogSegmentMetadata, now: int,
                         state: RemoteLogSegmentState = FINISHED) -> RemoteLogSegmentMetadata:
    """The same segment once more under a new id (its objects copied), in ``state``."""
    twin = dataclasses.replace(md, remote_log_segment_id=RemoteLogSegmentId.generate(
        md.topic_id_partition), state=STARTED, event_timestamp_ms=now)
    for suffix in (".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint"):
        tier.put_bytes(tier.get_bytes(tier.path(segment_object_key(md, suffix))),
                       tier.path(segment_object_key(twin, suffix)))
    store = RemoteLogMetadataManager(tier)
    store.add_remote_log_segment_metadata(twin)
    if state is not STARTED:
        store.update_remote_log_segment_metadata(_update(twin.remote_log_segment_id, now, FINISHED))
    if state is DELETE_STARTED:
        store.update_remote_log_segment_metadata(_update(twin.remote_log_segment_id, now, DELETE_STARTED))
    store.close()
    return twin


def test_an_overlap_is_found(tier, tip, clock) -> None:
    md = committed(tier, tip)[1]
    twin = _copy_as_new_segment(tier, md, clock.now)
    (finding,) = scrub(tier, clock).findings
    assert finding.kind is FindingKind.OVERLAP
    assert finding.offsets == (md.start_offset, md.end_offset)
    assert {md.segment_id, twin.segment_id} <= set(finding.detail.split())


def test_a_segment_off_the_epoch_lineage_is_found(tier, tip, clock) -> None:
    md = committed(tier, tip)[1]
    stale = dataclasses.replace(md, segment_leader_epochs={99: md.start_offset})
    twin = _copy_as_new_segment(tier, stale, clock.now)
    (finding,) = scrub(tier, clock).findings  # not an overlap: not in the lineage
    assert finding.kind is FindingKind.OFF_LINEAGE and finding.segment_id == twin.segment_id


def test_a_log_start_beyond_the_segments_is_found(tier, tip, clock) -> None:
    end = max(m.end_offset for m in committed(tier, tip)) + 1
    store = RemoteLogMetadataManager(tier)
    store.update_log_start_offset(tip, end + 10)
    store.close()
    report = scrub(tier, clock)
    assert FindingKind.LOG_START in kinds(report)
    assert str(end + 10) in report.of_kind(FindingKind.LOG_START)[0].detail


def test_orphans_are_found_only_past_the_grace_period(tier, tip, clock) -> None:
    base = Path(tier.path(partition_dir_name(tip)))
    stray = base / f"{0:020d}-{'A' * 22}.log"
    stray.write_bytes(b"left behind")
    (base / "_tail" / "junk").write_bytes(b"x")
    written_ms = int(stray.stat().st_mtime * 1000)
    assert scrub_tier(tier, time_ms=lambda: written_ms + 1000).findings == []
    report = scrub_tier(tier, time_ms=lambda: written_ms + DEFAULT_GRACE_MS + 1)
    assert sorted(f.object for f in report.findings) == sorted(
        [str(stray), str(base / "_tail" / "junk")])
    assert kinds(report) == {FindingKind.ORPHAN}
    assert scrub_tier(tier, time_ms=lambda: written_ms + 1000, grace_ms=0).of_kind(
        FindingKind.ORPHAN)


def test_stuck_states_are_found_past_the_grace_period(tier, tip, clock) -> None:
    segments = committed(tier, tip)
    copying = _copy_as_new_segment(tier, segments[-1], clock.now, STARTED)
    _stuck_delete(tier, segments[0], clock.now)
    assert scrub_tier(tier, time_ms=lambda: clock.now + 1000).findings == []
    report = scrub(tier, clock)
    assert {(f.kind, f.segment_id) for f in report.findings} == {
        (FindingKind.STUCK_COPY, copying.segment_id),
        (FindingKind.STUCK_DELETE, segments[0].segment_id)}


def _stuck_delete(tier: RemoteTier, md: RemoteLogSegmentMetadata, now: int) -> None:
    store = RemoteLogMetadataManager(tier)
    store.update_remote_log_segment_metadata(_update(md.remote_log_segment_id, now, DELETE_STARTED))
    store.close()


def test_an_inconsistent_tail_is_found(tier, tip, clock) -> None:
    tail = read_tail_manifest(tier, tip)
    assert tail is not None and tail.objects
    end = max(m.end_offset for m in committed(tier, tip)) + 1
    broken = dataclasses.replace(tail, tier_end=end + 500, generation=tail.generation + 1)
    tier.put_bytes(broken.to_json().encode(), tier.path(tail_manifest_key(tip)))
    Path(tier.path(partition_dir_name(tip), "_tail", tail.objects[0].name)).unlink()
    report = scrub(tier, clock)
    assert kinds(report) == {FindingKind.INCONSISTENT_TAIL, FindingKind.MISSING_OBJECT}
    (inconsistent,) = report.of_kind(FindingKind.INCONSISTENT_TAIL)
    assert "tier end" in inconsistent.detail


def test_a_damaged_tail_object_is_found(tier, tip, clock) -> None:
    tail = read_tail_manifest(tier, tip)
    assert tail is not None
    obj = tail.objects[-1]
    path = Path(tier.path(partition_dir_name(tip), "_tail", obj.name))
    _flip(path, obj.size - 3)  # inside its last batch, which a quick scrub reads
    for deep in (False, True):
        (finding,) = scrub(tier, clock, deep=deep).findings
        assert finding.kind is FindingKind.CORRUPT_DATA and finding.object == str(path)
        assert finding.offsets == (obj.first_offset, obj.end_offset - 1)


def test_a_corrupt_tail_manifest_is_found(tier, tip, clock) -> None:
    tier.put_bytes(b"{not json", tier.path(tail_manifest_key(tip)))
    assert kinds(scrub(tier, clock)) >= {FindingKind.CORRUPT_METADATA}


# -- repair ----------------------------------------------------------------------------


def _committed_digests(tier: RemoteTier, tip: TopicIdPartition) -> dict[str, str]:
    base = Path(tier.path(partition_dir_name(tip)))
    names = {p.name for md in committed(tier, tip) for p in base.glob(f"*{md.segment_id}*")}
    return {n: hashlib.sha256((base / n).read_bytes()).hexdigest() for n in sorted(names)}


def test_repair_fixes_orphans_and_stuck_states_and_nothing_else(tier, tip, clock) -> None:
    segments = committed(tier, tip)
    copying = _copy_as_new_segment(tier, segments[-1], clock.now, STARTED)
    deleting = _copy_as_new_segment(tier, segments[-1], clock.now, DELETE_STARTED)
    base = Path(tier.path(partition_dir_name(tip)))
    (base / f"{0:020d}-{'B' * 22}.index").write_bytes(b"orphan")
    staged = Path(tier.path(staged_chunk_key(tip, "job-1", "attempt-0", 0, ".log")))
    staged.parent.mkdir(parents=True)
    staged.write_bytes(b"staged")
    before = _committed_digests(tier, tip)
    late = clock.now + 2 * 24 * HOUR_MS  # past the grace and the staging retention
    os.utime(base / f"{0:020d}-{'B' * 22}.index", (late / 1000 - 7200,) * 2)
    os.utime(staged, (late / 1000 - 25 * 3600,) * 2)

    # The LogManager owns the partition: its stuck states are left to it by default.
    first = scrub_tier(tier, time_ms=lambda: late, repair=True)
    assert kinds(first) == {FindingKind.ORPHAN, FindingKind.STALE_STAGING,
                            FindingKind.STUCK_COPY, FindingKind.STUCK_DELETE}
    assert {r.finding.kind for r in first.repairs} == {FindingKind.ORPHAN,
                                                       FindingKind.STALE_STAGING}
    assert any("owned by" in n for n in first.notes) and not first.ok

    second = scrub_tier(tier, time_ms=lambda: late, repair=True, repair_owned=True)
    assert {(r.finding.kind, r.finding.segment_id) for r in second.repairs} == {
        (FindingKind.STUCK_COPY, copying.segment_id),
        (FindingKind.STUCK_DELETE, deleting.segment_id)}
    assert second.ok
    assert not list(base.glob(f"*{copying.segment_id}*"))
    assert not list(base.glob(f"*{deleting.segment_id}*"))
    assert not staged.exists()
    store = RemoteLogMetadataManager(tier)
    assert {m.segment_id for m in store.list_remote_log_segments(tip)} == \
        {m.segment_id for m in segments}
    store.close()
    assert _committed_digests(tier, tip) == before  # committed segments untouched

    clean = scrub_tier(tier, time_ms=lambda: late, deep=True)
    assert clean.findings == [] and clean.repairs == []


def test_repair_never_touches_a_damaged_committed_segment(tier, tip, clock) -> None:
    md = committed(tier, tip)[1]
    os.truncate(local_path(tier, md, ".log"), 1000)
    local_path(tier, md, ".timeindex").unlink()
    before = _committed_digests(tier, tip)
    report = scrub(tier, clock, repair=True, repair_owned=True)
    assert kinds(report) == {FindingKind.SIZE_MISMATCH, FindingKind.MISSING_OBJECT}
    assert report.repairs == [] and not report.ok
    assert _committed_digests(tier, tip) == before
    assert md.segment_id in {m.segment_id for m in committed(tier, tip)}


# -- the command line ------------------------------------------------------------------


def test_cli_json_matches_and_exit_status(tier, tip, clock) -> None:
    done = tierlog("scrub", tier.root, "--json", "--quiet")
    assert json.loads(done.stdout)["findings"] == []
    md = committed(tier, tip)[1]
    local_path(tier, md, ".index").unlink()
    failed = tierlog("scrub", tier.root, "--json", check=False)
    assert failed.returncode == 1
    report = json.loads(failed.stdout)
    assert report["ok"] is False
    (finding,) = report["findings"]
    assert finding["kind"] == "missing_object" and finding["segmentId"] == md.segment_id
    assert finding["object"] == str(local_path(tier, md, ".index"))
    assert finding["offsets"] == [md.start_offset, md.end_offset]
    assert failed.stderr == ""  # no progress bar when stderr is not a terminal
    human = tierlog("scrub", tier.root, "--deep", "--quiet", check=False)
    assert human.returncode == 1
    assert f"missing_object: {partition_dir_name(tip)}, segment {md.segment_id}" in human.stdout
    assert "1 problem" in human.stdout


def test_cli_refuses_a_missing_directory(tmp_path) -> None:
    done = tierlog("scrub", str(tmp_path / "nope"), check=False)
    assert done.returncode == 1 and "does not exist" in done.stderr
    assert not (tmp_path / "nope").exists()


def test_cli_repairs_an_orphan_then_scrubs_clean(tier, tip) -> None:
    stray = Path(tier.path(partition_dir_name(tip), "junk.bin"))
    stray.write_bytes(b"x" * 10)
    assert tierlog("scrub", tier.root, "--quiet", check=False).returncode == 0  # in its grace
    repaired = tierlog("scrub", tier.root, "--quiet", "--repair", "--grace-ms", "0")
    assert f"orphan: {partition_dir_name(tip)}" in repaired.stdout
    assert "[repaired: deleted the object]" in repaired.stdout and not stray.exists()
    done = tierlog("scrub", tier.root, "--quiet", "--json", "--grace-ms", "0")
    assert json.loads(done.stdout)["findings"] == []
    other = json.loads(tierlog("scrub", tier.root, "--json", "--topic", "other").stdout)
    assert other["partitions"] == 0
