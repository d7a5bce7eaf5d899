"""Scrub the remote tier: is a bucket healthy? (``tierlog scrub URL``, :func:`scrub_tier`).

For every partition directory of the tier (or of one topic):

- each committed segment's objects exist with the recorded sizes, and their batches pass the
  CRC-32C and sit inside the segment's offsets, its offset index pointing at them
  (``tierlog.remote.ops.scrub_segments``; ``deep`` reads everything, else the bytes it must);
- the committed segments of the epoch lineage (the leader-epoch checkpoint of the last
  segment, as Kafka's RemoteLogManager judges a segment) leave no gap and do not overlap;
  segments off the lineage are reported;
- the recorded log start offset lies within what the tier holds, and ``_tail.json`` agrees
  with the committed segments and with its objects;
- orphans: objects of the partition no metadata (in any state) and no tail manifest names,
  and crashed backfill jobs' staging beyond the staging retention; segments stuck in
  COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED. Both only when older than ``grace_ms``, so
  an upload in flight in a live log is not flagged.

``repair`` fixes only what is safe, and reports each repair: orphan objects and stale staging
are deleted; a committed segment's missing or corrupt offset or time index is rebuilt from its
``.log`` when every batch of it passes (``tierlog.remote.ops.scrub_repair``); a stuck
COPY_SEGMENT_STARTED is rolled back (its objects deleted, then DELETE_SEGMENT_FINISHED, as the
RemoteLogManager cleans up a failed copy) and a stuck DELETE_SEGMENT_STARTED finished, through
the metadata store's own API. A committed segment's data is never touched. In a partition a
live log owns (``_owner.json``) the stuck states are left to the owner (its RemoteLogManager
cleans them on its next run, and two writers must not race on a partition's metadata) unless
``repair_owned``; its orphans older than the grace period are deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from itertools import pairwise
from typing import Any

from tierlog.checkpoint.checkpoint_file import decode_leader_epoch_checkpoint
from tierlog.common.clock import system_time_ms
from tierlog.config import TOPIC_CONFIG_KEYS
from tierlog.errors import (
    CorruptCheckpointError,
    CorruptRecordError,
    CorruptRemoteMetadataError,
    RemoteResourceNotFoundError,
)
from tierlog.remote.api import (
    IndexType,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.remote.metadata.metadata import RemoteLogMetadataManager
from tierlog.remote.ops.backfill_commit import DEFAULT_STAGING_RETENTION_MS, BackfillCommitter
from tierlog.remote.ops.backfill_visibility import JobVisibility
from tierlog.remote.ops.scrub_objects import lineage_of, within_lineage
from tierlog.remote.ops.scrub_repair import REBUILDABLE_SUFFIXES, rebuilt_indexes
from tierlog.remote.ops.scrub_report import Finding, FindingKind, Repair, ScrubReport
from tierlog.remote.ops.scrub_segments import (
    SegmentScrubber,
    check_segment,
    named_objects,
    tail_object_problems,
)
from tierlog.remote.rlm.unfinished import roll_back_unfinished
from tierlog.remote.tier.fsspec_storage import FsspecRemoteStorageManager
from tierlog.remote.tier.layout import (
    MANIFEST_NAME,
    METADATA_DIR,
    OWNER_NAME,
    SEGMENT_SUFFIX,
    TABLES_DIR,
    TAIL_DIR,
    TAIL_MANIFEST_NAME,
    is_metadata_object_name,
    metadata_dir_key,
    partition_dir_name,
    segment_object_key,
    staging_dir_key,
    tail_dir_key,
)
from tierlog.remote.tier.manifest import PartitionManifest, load_partition, remote_partitions
from tierlog.remote.tier.object_store import ObjectEntry, RemoteTier
from tierlog.remote.tier.ownership import read_owner
from tierlog.remote.tier.storage_from_url import open_storage
from tierlog.remote.tier.tail_manifest import TailManifest, read_tail_manifest

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_GRACE_MS", "DEFAULT_INDEX_INTERVAL_BYTES", "Finding", "FindingKind",
           "Repair", "ScrubReport", "check_segment", "scrub_tier"]

#: How old an unfinished state or an unnamed object must be before the scrub flags it: an
#: hour, far beyond any copy or tail publish in flight.
DEFAULT_GRACE_MS = 3600 * 1000
#: Where a rebuilt index places its entries unless told the writer's setting: Kafka's
#: default ``index.interval.bytes``.
DEFAULT_INDEX_INTERVAL_BYTES: int = TOPIC_CONFIG_KEYS["index.interval.bytes"].default
#: Findings about a segment's ``.log`` itself: its indexes are not rebuilt from it.
_LOG_FINDINGS = frozenset({FindingKind.MISSING_OBJECT, FindingKind.SIZE_MISMATCH,
                           FindingKind.CORRUPT_DATA, FindingKind.OFFSET_MISMATCH})

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
#: Partition-directory entries that are metadata, not orphans.
_PARTITION_FILES = frozenset({MANIFEST_NAME, TAIL_MANIFEST_NAME, OWNER_NAME})
_PARTITION_DIRS = frozenset({METADATA_DIR, TAIL_DIR})

Progress = Callable[[str], None]


def scrub_tier(
    tier: str | RemoteTier | FsspecRemoteStorageManager,
    *,
    deep: bool = False,
    repair: bool = False,
    repair_owned: bool = False,
    topic: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    grace_ms: int = DEFAULT_GRACE_MS,
    staging_retention_ms: int = DEFAULT_STAGING_RETENTION_MS,
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
    time_ms: Callable[[], int] | None = None,
    progress: Progress | None = None,
) -> ScrubReport:
    """Scrub the tier at ``tier`` (a URL opened with ``storage_options``, a RemoteTier or a
    RemoteStorageManager's) and return what it found and, with ``repair``, repaired (see the
    module docstring). A rebuilt index places an entry every ``index_interval_bytes`` (the
    writer's ``index.interval.bytes``). ``progress`` is called with each partition
    directory's name as it is scrubbed. Storage failures raise RemoteStorageError."""
    if grace_ms < 0:
        raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")
    now = (time_ms or system_time_ms)()
    if isinstance(tier, str):
        url, storage = tier, open_storage(tier, storage_options)
        remote = storage.tier
    elif isinstance(tier, FsspecRemoteStorageManager):
        storage, remote = tier, tier.tier
        url = remote.root
    else:
        remote, url = tier, tier.root
        storage = FsspecRemoteStorageManager(remote.fs, remote.root,
                                             rename_on_publish=remote.rename_on_publish)
        storage.tier = remote
    before = remote.stats.snapshot()
    report = ScrubReport(url=url, deep=deep)
    scrubber = _Scrubber(remote, storage, report, deep=deep, repair=repair,
                         repair_owned=repair_owned, grace_ms=grace_ms, now_ms=now,
                         index_interval_bytes=index_interval_bytes)
    try:
        partitions = [p for p in remote_partitions(remote) if topic is None or p.topic == topic]
        for tip in partitions:
            if progress is not None:
                progress(partition_dir_name(tip))
            scrubber.partition(tip)
        scrubber.tables(partitions)
        if topic is None:
            scrubber.staging(staging_retention_ms, time_ms or (lambda: now))
    finally:
        scrubber.close()
    report.partitions = len(partitions)
    after = remote.stats.snapshot()
    report.requests = {k: after[k] - before.get(k, 0) for k in after}
    log.info("scrubbed %s: %d partitions, %d segments, %d findings, %d repairs", url,
             report.partitions, report.segments, len(report.findings), len(report.repairs))
    return report


class _Scrubber:
    """One scrub's walk over the tier's partitions (see :func:`scrub_tier`)."""

    def __init__(self, tier: RemoteTier, storage: FsspecRemoteStorageManager,
                 report: ScrubReport, *, deep: bool, repair: bool, repair_owned: bool,
                 grace_ms: int, now_ms: int, index_interval_bytes: int) -> None:
        self._tier = tier
        self._storage = storage
        self._report = report
        self._deep = deep
        self._repair = repair
        self._repair_owned = repair_owned
        self._grace_ms = grace_ms
        self._now = now_ms
        self._index_interval_bytes = index_interval_bytes
        self._store: RemoteLogMetadataManager | None = None
        # Before any manifest: segments of backfill jobs not yet published are not committed.
        self._jobs = JobVisibility.read(tier)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def _find(self, finding: Finding) -> Finding:
        self._report.findings.append(finding)
        return finding

    # -- one partition ---------------------------------------------------------------------

    def partition(self, tip: TopicIdPartition) -> None:
        name = partition_dir_name(tip)
        try:
            manifest, _ = load_partition(self._tier, tip)
        except CorruptRemoteMetadataError as exc:
            self._find(Finding(FindingKind.CORRUPT_METADATA, name, str(exc)))
            return
        try:
            tail = read_tail_manifest(self._tier, tip)
        except CorruptRemoteMetadataError as exc:
            self._find(Finding(FindingKind.CORRUPT_METADATA, name, str(exc)))
            tail = None
        listing = {e.name: e for e in self._tier.list_entries(self._tier.path(name))}
        committed = self._jobs.filter(manifest.committed)
        self._report.segments += len(committed)
        segments = SegmentScrubber(self._tier, listing, deep=self._deep)
        for md in committed:
            findings = [self._find(f) for f in segments.check(md)]
            if self._repair and findings:
                self._rebuild_indexes(md, findings)
        lineage = self._lineage(committed, listing)
        self._check_chain(name, manifest, committed, lineage)
        if tail is not None:
            self._check_tail(name, manifest, committed, tail)
        owner = read_owner(self._tier, tip) if self._repair else None
        if owner is not None:
            self._report.notes.append(
                f"{name} is owned by {owner}: "
                + ("its stuck states are repaired anyway (repair_owned)" if self._repair_owned
                   else "its stuck states are left to the owner's RemoteLogManager, which "
                        "cleans them on its next run (--force-owned repairs them here)"))
            log.debug("%s", self._report.notes[-1])  # a note of the report: shown once
        self._check_states(name, manifest, owned=owner is not None)
        self._check_orphans(name, manifest, listing, tail)

    def _lineage(self, committed: list[RemoteLogSegmentMetadata],
                 listing: Mapping[str, ObjectEntry]) -> dict[int, tuple[int, int | None]] | None:
        """Epoch -> [start, next epoch's start) of the partition's lineage: the leader-epoch
        checkpoint copied with the segment that ends last (its history up to there). None
        when unknown (no committed segment, or the object is missing or corrupt: reported
        already, or now)."""
        if not committed:
            return None
        last = max(committed, key=lambda m: (m.end_offset, max(m.segment_leader_epochs)))
        key = segment_object_key(last, IndexType.LEADER_EPOCH.suffix)
        if key.rsplit("/", 1)[-1] not in listing:
            return None
        path = self._tier.path(key)
        try:
            entries = decode_leader_epoch_checkpoint(self._tier.get_bytes(path), path)
        except (RemoteResourceNotFoundError, CorruptCheckpointError) as exc:
            if not any(f.object == path for f in self._report.findings):  # deep found it
                self._find(Finding(FindingKind.CORRUPT_METADATA,
                                   partition_dir_name(last.topic_id_partition), str(exc),
                                   segment_id=last.segment_id, object=path))
            return None
        return lineage_of(entries)

    def _check_chain(self, name: str, manifest: PartitionManifest,
                     committed: list[RemoteLogSegmentMetadata],
                     lineage: dict[int, tuple[int, int | None]] | None) -> None:
        """Gaps, overlaps and off-lineage segments among the committed segments, and the log
        start offset against what they hold."""
        log_start = manifest.log_start_offset or 0
        chain = []
        for md in committed:
            if lineage is not None and not within_lineage(md, lineage):
                self._find(Finding(FindingKind.OFF_LINEAGE, name,
                                   f"leader epochs {dict(md.segment_leader_epochs)} are not in "
                                   f"the partition's lineage {sorted(lineage)}",
                                   segment_id=md.segment_id,
                                   offsets=(md.start_offset, md.end_offset)))
            elif md.end_offset >= log_start:
                chain.append(md)
        chain.sort(key=lambda m: (m.start_offset, m.end_offset))
        for prev, nxt in pairwise(chain):
            if nxt.start_offset > prev.end_offset + 1:
                self._find(Finding(FindingKind.GAP, name,
                                   f"no committed segment holds these offsets (between "
                                   f"segments {prev.segment_id} and {nxt.segment_id})",
                                   segment_id=nxt.segment_id,
                                   offsets=(prev.end_offset + 1, nxt.start_offset - 1)))
            elif nxt.start_offset <= prev.end_offset:
                self._find(Finding(FindingKind.OVERLAP, name,
                                   f"segments {prev.segment_id} and {nxt.segment_id} both "
                                   f"hold these offsets",
                                   segment_id=nxt.segment_id,
                                   offsets=(nxt.start_offset,
                                            min(prev.end_offset, nxt.end_offset))))
        if committed and manifest.log_start_offset is not None:
            end = max(m.end_offset for m in committed) + 1
            if manifest.log_start_offset > end:
                self._find(Finding(FindingKind.LOG_START, name,
                                   f"the recorded log start offset {manifest.log_start_offset}"
                                   f" is beyond the committed segments' end {end}"))

    def _check_tail(self, name: str, manifest: PartitionManifest,
                    committed: list[RemoteLogSegmentMetadata], tail: TailManifest) -> None:
        """``_tail.json`` against the committed segments, its objects and itself."""
        committed_end = max((m.end_offset + 1 for m in committed), default=0)
        log_start = max(manifest.log_start_offset or 0, tail.log_start_offset)
        problems = []
        if tail.tier_end > max(committed_end, log_start):
            problems.append(f"its tier end {tail.tier_end} is beyond the committed segments' "
                            f"end {committed_end}")
        live = [o for o in tail.objects if o.end_offset > max(committed_end, log_start)]
        if live and live[0].first_offset > max(committed_end, log_start):
            problems.append(f"its first object {live[0].name} starts at {live[0].first_offset}"
                            f", leaving offsets from {max(committed_end, log_start)} in no "
                            f"segment")
        for prev, nxt in pairwise(tail.objects):
            if nxt.first_offset != prev.end_offset:
                problems.append(f"objects {prev.name} and {nxt.name} are not contiguous")
        if tail.objects and tail.high_watermark < tail.objects[-1].end_offset:
            problems.append(f"its high watermark {tail.high_watermark} is below its last "
                            f"object's end {tail.objects[-1].end_offset}")
        for problem in problems:
            self._find(Finding(FindingKind.INCONSISTENT_TAIL, name, f"_tail.json: {problem}"))
        tail_dir = self._tier.path(tail_dir_key(manifest.topic_id_partition))
        sizes = {e.name: e.size for e in self._tier.list_entries(tail_dir)}
        for obj in live:
            path = f"{tail_dir}/{obj.name}"
            offsets = (obj.first_offset, obj.end_offset - 1)
            if obj.name not in sizes:
                self._find(Finding(FindingKind.MISSING_OBJECT, name, "a tail object the tail "
                                   "manifest names is missing", object=path, offsets=offsets))
            elif sizes[obj.name] != obj.size:
                self._find(Finding(FindingKind.SIZE_MISMATCH, name,
                                   f"the tail object holds {sizes[obj.name]} bytes, the tail "
                                   f"manifest records {obj.size}", object=path,
                                   offsets=offsets))
            else:
                for kind, detail in tail_object_problems(self._tier, obj, path,
                                                         deep=self._deep):
                    self._find(Finding(kind, name, detail, object=path, offsets=offsets))

    def _rebuild_indexes(self, md: RemoteLogSegmentMetadata, findings: list[Finding]) -> None:
        """Rebuild the segment's missing or corrupt offset and time indexes from its
        ``.log``, unless something is wrong with the ``.log`` itself or it does not pass
        (then a note says why)."""
        paths = {self._tier.path(segment_object_key(md, s)): s for s in REBUILDABLE_SUFFIXES}
        broken = {paths[f.object]: f for f in findings if f.object in paths
                  and f.kind in (FindingKind.MISSING_OBJECT, FindingKind.CORRUPT_INDEX)}
        log_path = self._tier.path(segment_object_key(md, SEGMENT_SUFFIX))
        if not broken or any(f.kind in _LOG_FINDINGS and f.object == log_path
                             for f in findings):
            return
        try:
            rebuilt = rebuilt_indexes(md, self._tier.get_bytes(log_path),
                                      index_interval_bytes=self._index_interval_bytes,
                                      source=log_path)
        except (CorruptRecordError, RemoteResourceNotFoundError) as exc:
            self._report.notes.append(f"segment {md.segment_id}: its {', '.join(broken)} not "
                                      f"rebuilt: {exc}")
            log.debug("%s", self._report.notes[-1])  # a note of the report: shown once
            return
        for suffix, finding in broken.items():
            data, entries = rebuilt[suffix]
            self._tier.put_bytes(data, self._tier.path(segment_object_key(md, suffix)))
            self._report.repairs.append(Repair(
                finding, f"rebuilt the {suffix} from the segment's .log ({entries} entries, "
                         f"one per {self._index_interval_bytes} bytes)"))

    def _check_states(self, name: str, manifest: PartitionManifest, *, owned: bool) -> None:
        """Segments stuck in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED past the grace."""
        for md in manifest.segments:
            if md.state not in (_STARTED, _DELETE_STARTED):
                continue
            age = self._now - md.event_timestamp_ms
            if age < self._grace_ms:
                log.info("%s: segment %s is %s for %d ms: in flight, left alone", name,
                         md.segment_id, md.state.name, age)
                continue
            kind = FindingKind.STUCK_COPY if md.state is _STARTED else FindingKind.STUCK_DELETE
            finding = self._find(Finding(kind, name, f"{md.state.name} for {age} ms",
                                         segment_id=md.segment_id,
                                         offsets=(md.start_offset, md.end_offset)))
            if self._repair and (not owned or self._repair_owned):
                self._roll_back(md, finding)

    def _roll_back(self, md: RemoteLogSegmentMetadata, finding: Finding) -> None:
        """Finish an unfinished segment as the RemoteLogManager cleans one up: a copy is
        abandoned (DELETE_SEGMENT_STARTED), its objects deleted, then DELETE_FINISHED."""
        store = self._metadata_store()

        def mark(m: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
            self._update(store, m, state)

        def delete(m: RemoteLogSegmentMetadata) -> None:
            self._storage.delete_log_segment_data(m)
            mark(m, _DELETE_FINISHED)

        roll_back_unfinished(md, mark=mark, delete=delete)
        action = ("rolled back the copy: deleted its objects, DELETE_SEGMENT_FINISHED"
                  if md.state is _STARTED else
                  "finished the delete: deleted its objects, DELETE_SEGMENT_FINISHED")
        self._report.repairs.append(Repair(finding, action))

    def _update(self, store: RemoteLogMetadataManager, md: RemoteLogSegmentMetadata,
                state: RemoteLogSegmentState) -> None:
        store.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=md.remote_log_segment_id,
            event_timestamp_ms=max(self._now, md.event_timestamp_ms), state=state))

    def _metadata_store(self) -> RemoteLogMetadataManager:
        if self._store is None:
            self._store = RemoteLogMetadataManager(self._tier)
        return self._store

    def _check_orphans(self, name: str, manifest: PartitionManifest,
                       listing: Mapping[str, ObjectEntry], tail: TailManifest | None) -> None:
        """Objects nothing names, older than the grace period: in the partition directory,
        in ``_metadata/`` (not metadata objects) and in ``_tail/``."""
        named = set(_PARTITION_FILES)
        for md in manifest.segments:
            named |= named_objects(md)
        base = self._tier.path(name)
        candidates = [(f"{base}/{n}", e) for n, e in listing.items() if n not in named]
        metadata_dir = self._tier.path(metadata_dir_key(manifest.topic_id_partition))
        candidates += [(f"{metadata_dir}/{e.name}", e)
                       for e in self._tier.list_entries(metadata_dir)
                       if not is_metadata_object_name(e.name)]
        tail_dir = self._tier.path(tail_dir_key(manifest.topic_id_partition))
        tail_names = {o.name for o in tail.objects} if tail is not None else set()
        candidates += [(f"{tail_dir}/{e.name}", e) for e in self._tier.list_entries(tail_dir)
                       if e.name not in tail_names]
        extra_dirs = [d for d in self._tier.list_names(base, dirs=True)
                      if d not in _PARTITION_DIRS]
        for d in extra_dirs:
            self._find(Finding(FindingKind.ORPHAN, name, "a directory tierlog never writes "
                               "in a partition directory (left alone)", object=f"{base}/{d}"))
        for path, entry in candidates:
            age = None if entry.modified_ms is None else self._now - entry.modified_ms
            if age is not None and age < self._grace_ms:
                continue
            finding = self._find(Finding(
                FindingKind.ORPHAN, name,
                f"no metadata names this object ({entry.size} bytes"
                + (f", {age} ms old)" if age is not None else ")"), object=path))
            if self._repair:
                self._tier.delete(path)
                self._report.repairs.append(Repair(finding, "deleted the object"))

    # -- tier-wide -------------------------------------------------------------------------

    def tables(self, partitions: list[TopicIdPartition]) -> None:
        """The tables of the scrubbed topics that have one (one LIST of ``_tables/``), each
        against its segments (``tierlog.remote.ops.scrub_table``, imported only then: it
        needs pyiceberg)."""
        names = set(self._tier.list_names(self._tier.path(TABLES_DIR), dirs=True))
        topics: dict[tuple[str, str], list[TopicIdPartition]] = {}
        for tip in partitions:
            if f"{tip.topic}-{tip.topic_id}" in names:
                topics.setdefault((tip.topic, tip.topic_id), []).append(tip)
        if not topics:
            return
        from tierlog.remote.ops.scrub_table import TableScrubber
        scrubber = TableScrubber(self._tier, self._report, deep=self._deep,
                                 repair=self._repair, jobs=self._jobs)
        for (name, topic_id), tips in sorted(topics.items()):
            scrubber.topic(name, topic_id, tips)

    def staging(self, retention_ms: int, time_ms: Callable[[], int]) -> None:
        """Crashed backfill jobs' staging older than ``retention_ms`` (and awaited by no job
        record): found, and with ``repair`` deleted by the backfill's own sweep."""
        committer = BackfillCommitter(self._tier, time_ms=time_ms)
        try:
            stale = committer.stale_staging(retention_ms)
            findings = [self._find(Finding(
                FindingKind.STALE_STAGING, None,
                f"a crashed backfill job's staging, unmodified for over {retention_ms} ms",
                object=self._tier.path(staging_dir_key(job)))) for job in stale]
            if self._repair and stale:
                committer.sweep_staging(retention_ms)
                self._report.repairs.extend(Repair(f, "deleted the job's staging")
                                            for f in findings)
        finally:
            committer.close()

