"""``tierlog.remote.ops.scrub`` with ``deep``: every object of a committed segment it can parse is
verified by the engine's own parser (producer snapshot, leader-epoch checkpoint, transaction
index, ``_metadata`` object, indexes), and ``repair`` rebuilds a missing or damaged offset or
time index from the segment's ``.log``, byte for byte what the writer uploaded."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.clock import FakeClock
from support.s3 import S3_BUCKET

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.remote import RemoteLogSegmentMetadata
from tierlog.remote.ops.scrub import (
    FindingKind,
    ScrubReport,
    check_segment,
    open_storage,
    scrub_tier,
)
from tierlog.remote.tier.layout import metadata_object_key, segment_object_key
from tierlog.remote.tier.manifest import load_partition, remote_partitions
from tierlog.remote.tier.object_store import RemoteTier

#: Small segments (a quick scrub reads each whole), an index entry every 1 KiB.
INDEX_INTERVAL = 1024
CONFIG: dict[str, Any] = {"segment.bytes": 8 << 10, "index.interval.bytes": INDEX_INTERVAL,
          "remote.log.tail.ms": -1, "remote.storage.enable": True,
          "remote.storage.manager": "local"}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local tier written by a LogManager: small segments, each with producers in its
    snapshot and aborted transactions in its ``.txnindex``."""
    root = tmp_path_factory.mktemp("deep")
    write_payments(root / "data", {**CONFIG, "remote.storage.url": (root / "tier").as_uri()})
    return root / "tier"


def write_payments(data: Path, config: dict[str, Any], batches: int = 90) -> None:
    """A topic of small segments with an aborted transaction every third batch, tiered."""
    clock = FakeClock()
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("payments", 1)[0]
        for i in range(batches):
            clock.advance(1000)
            log.append_records([Record(key=b"k%d" % i, value=b"v" * 300) for _ in range(3)])
            if i % 3 == 0:
                pid = 9000 + i
                log.append_records([Record(key=b"t", value=b"x" * 200)], producer_id=pid,
                                   producer_epoch=0, base_sequence=0, transactional=True)
                log.append_marker(pid, 0, commit=False)
        mgr.tier_now()


@pytest.fixture
def tier(pristine: Path, tmp_path: Path) -> RemoteTier:
    shutil.copytree(pristine, tmp_path / "tier")
    return open_storage(str(tmp_path / "tier")).tier


def committed(tier: RemoteTier) -> list[RemoteLogSegmentMetadata]:
    (tip,) = remote_partitions(tier)
    return list(load_partition(tier, tip)[0].committed)


def middle(tier: RemoteTier) -> RemoteLogSegmentMetadata:
    """A committed segment that is neither the first nor the last (whose leader-epoch
    checkpoint the lineage check reads anyway), with aborted transactions."""
    segments = committed(tier)
    assert len(segments) >= 5
    md = segments[len(segments) // 2]
    assert not md.txn_idx_empty
    return md


def path_of(tier: RemoteTier, md: RemoteLogSegmentMetadata, suffix: str) -> Path:
    return Path(tier.path(segment_object_key(md, suffix)))


def flip(path: Path, position: int) -> Path:
    """Flip every bit of the byte at ``position`` (from the end when negative)."""
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def cut(path: Path, drop: int) -> Path:
    os.truncate(path, path.stat().st_size - drop)
    return path


def rewrite_metadata(tier: RemoteTier, md: RemoteLogSegmentMetadata,
                     change: Callable[[dict[str, Any]], bytes]) -> Path:
    path = Path(tier.path(metadata_object_key(md)))
    path.write_bytes(change(json.loads(path.read_bytes())))
    return path


def off_by_one(data: dict[str, Any]) -> bytes:
    data["startOffset"] += 1
    return json.dumps(data).encode()


#: Each damage: (what it does to the segment, returning the object it damaged; the finding
#: kind a deep scrub reports).
DAMAGES: dict[str, tuple[Callable[[RemoteTier, RemoteLogSegmentMetadata], Path], FindingKind]] = {
    "producer snapshot byte flipped": (
        lambda t, md: flip(path_of(t, md, ".snapshot"), -5), FindingKind.CORRUPT_INDEX),
    ".index cut mid-entry": (
        lambda t, md: cut(path_of(t, md, ".index"), 4), FindingKind.CORRUPT_INDEX),
    ".timeindex cut mid-entry": (
        lambda t, md: cut(path_of(t, md, ".timeindex"), 5), FindingKind.CORRUPT_INDEX),
    "leader-epoch checkpoint byte flipped": (
        lambda t, md: flip(path_of(t, md, ".leader_epoch_checkpoint"), 0),
        FindingKind.CORRUPT_METADATA),
    ".txnindex byte flipped": (
        lambda t, md: flip(path_of(t, md, ".txnindex"), 1), FindingKind.CORRUPT_INDEX),
    "_metadata object not JSON": (
        lambda t, md: rewrite_metadata(t, md, lambda _: b"{not json"),
        FindingKind.CORRUPT_METADATA),
    "_metadata start offset off by one": (
        lambda t, md: rewrite_metadata(t, md, off_by_one), FindingKind.CORRUPT_METADATA),
}


def scrub(tier: RemoteTier, **kwargs: object) -> ScrubReport:
    return scrub_tier(tier, index_interval_bytes=INDEX_INTERVAL, **kwargs)  # type: ignore[arg-type]


def test_the_pristine_tier_scrubs_clean(tier: RemoteTier) -> None:
    for deep in (False, True):
        assert scrub(tier, deep=deep).findings == []


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_deep_scrub_finds_each_damage_and_names_the_object(tier: RemoteTier, damage: str
                                                           ) -> None:
    md = middle(tier)
    do, kind = DAMAGES[damage]
    path = do(tier, md)
    (finding,) = scrub(tier, deep=True).findings
    assert (finding.kind, finding.segment_id, finding.object) == (kind, md.segment_id,
                                                                  str(path))
    assert check_segment(tier, md, deep=True) == [finding]  # the one-segment entry point


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_a_quick_scrub_finds_an_index_cut_mid_entry_in_a_small_segment(tier: RemoteTier,
                                                                       suffix: str) -> None:
    md = middle(tier)
    assert md.segment_size_in_bytes < 16 << 10  # read whole by the head read
    cut(path_of(tier, md, suffix), 3)
    (finding,) = scrub(tier).findings
    assert finding.kind is FindingKind.CORRUPT_INDEX
    assert finding.object == str(path_of(tier, md, suffix))


def test_repair_rebuilds_missing_and_damaged_indexes_as_the_writer_wrote_them(
        tier: RemoteTier) -> None:
    segments = committed(tier)
    gone, cut_short = segments[1], segments[3]
    originals = {(md.segment_id, s): path_of(tier, md, s).read_bytes()
                 for md in (gone, cut_short) for s in (".index", ".timeindex")}
    assert all(originals.values())
    path_of(tier, gone, ".index").unlink()
    path_of(tier, gone, ".timeindex").unlink()
    cut(path_of(tier, cut_short, ".index"), 4)
    report = scrub(tier, deep=True, repair=True)
    assert {(r.finding.kind, r.finding.segment_id, r.finding.object) for r in report.repairs} == {
        (FindingKind.MISSING_OBJECT, gone.segment_id, str(path_of(tier, gone, ".index"))),
        (FindingKind.MISSING_OBJECT, gone.segment_id, str(path_of(tier, gone, ".timeindex"))),
        (FindingKind.CORRUPT_INDEX, cut_short.segment_id,
         str(path_of(tier, cut_short, ".index")))}
    assert report.ok and all("rebuilt" in r.action for r in report.repairs)
    for (segment_id, suffix), data in originals.items():
        md = gone if segment_id == gone.segment_id else cut_short
        assert path_of(tier, md, suffix).read_bytes() == data, (segment_id, suffix)
    assert scrub(tier, deep=True).findings == []


def test_repair_leaves_an_index_alone_when_its_log_is_damaged(tier: RemoteTier) -> None:
    md = middle(tier)
    path_of(tier, md, ".index").unlink()
    log = path_of(tier, md, ".log")
    flip(log, log.stat().st_size // 2)  # inside a batch: its CRC fails
    report = scrub(tier, deep=True, repair=True)
    assert {f.kind for f in report.findings} == {FindingKind.MISSING_OBJECT,
                                                 FindingKind.CORRUPT_DATA}
    assert report.repairs == [] and not report.ok
    assert not path_of(tier, md, ".index").exists()


def test_deep_scrub_finds_damage_on_s3(tmp_path: Path, s3_options: dict[str, str]) -> None:
    url = f"s3://{S3_BUCKET}/deep-{uuid.uuid4().hex[:10]}"
    write_payments(tmp_path / "data", {
        **CONFIG, "remote.storage.manager": "s3", "remote.storage.url": url,
        **{f"remote.storage.options.{k}": v for k, v in s3_options.items()}}, batches=40)
    storage = open_storage(url, s3_options)
    try:
        tier = storage.tier
        md = middle(tier)
        snapshot = tier.path(segment_object_key(md, ".snapshot"))
        data = bytearray(tier.get_bytes(snapshot))
        data[-5] ^= 0xFF
        tier.put_bytes(bytes(data), snapshot)
        metadata = tier.path(metadata_object_key(md))
        tier.put_bytes(off_by_one(json.loads(tier.get_bytes(metadata))), metadata)
        assert scrub(tier).findings == []  # neither is read by a quick scrub
        found = scrub(tier, deep=True).findings
        assert {(f.kind, f.segment_id, f.object) for f in found} == {
            (FindingKind.CORRUPT_INDEX, md.segment_id, snapshot),
            (FindingKind.CORRUPT_METADATA, md.segment_id, metadata)}
    finally:
        storage.close()
