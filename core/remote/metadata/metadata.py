"""The segment metadata store (Kafka's RemoteLogMetadataManager).

:class:`PartitionMetadataStore` holds the rules every store follows: legal state changes, one
writer per partition, queries that never wait on a write, a partition's metadata as one
PartitionManifest JSON file in ``cache_dir`` replaced atomically after every change. Where
the metadata lives is its subclasses' business: :class:`RemoteLogMetadataManager` keeps it in
the remote tier (the local file is a cache, reconciled with the tier on first use);
``tierlog.remote.metadata.metadata_logdir`` keeps it only in the local file (for a
RemoteStorageManager that has no tier to keep it in).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from tierlog.common.atomic import atomic_write_bytes
from tierlog.errors import (
    CorruptRemoteMetadataError,
    MetadataConflictError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TierFencedError,
)
from tierlog.remote.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    TopicIdPartition,
    dumps,
    is_valid_transition,
    load_json_object,
)
from tierlog.remote.metadata.metadata_cache import RemoteLogMetadataCache, segment_order
from tierlog.remote.tier.layout import (
    manifest_key,
    metadata_object_key,
    metadata_object_name,
    parse_partition_dir_name,
    partition_dir_name,
)
from tierlog.remote.tier.manifest import (
    PartitionManifest,
    load_partition,
    read_stored_manifest,
    remote_partitions,
)
from tierlog.remote.tier.object_store import RemoteTier, RequestStats

log = logging.getLogger(__name__)
_T = TypeVar("_T")

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED
CACHE_FILE_SUFFIX = ".json"
#: The manifest field naming the leader epoch of the leader that wrote it (replicated mode).
LEADER_EPOCH_FIELD = "leaderEpoch"
#: How often a claim re-reads and tries again after losing a compare-and-swap.
CLAIM_ATTEMPTS = 5


def manifest_leader_epoch(data: bytes, source: str) -> int | None:
    """The leader epoch a stored manifest was written at (None: written by a LogManager of
    its own, not a replicated partition's leader)."""
    epoch = load_json_object(data, source).get(LEADER_EPOCH_FIELD)
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


class _Partition:
    """One partition's metadata.

    ``write_lock`` serializes its writers and its loading, and is held across their tier
    calls; ``lock`` guards ``cache`` and ``log_start_offset`` and is never held across a tier
    call, so a query waits for no write, however long the tier takes.
    """

    __slots__ = ("cache", "lock", "log_start_offset", "tip", "write_lock")

    def __init__(self, tip: TopicIdPartition) -> None:
        self.tip = tip
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.cache: RemoteLogMetadataCache | None = None
        self.log_start_offset: int | None = None

    def manifest(self, segments: list[RemoteLogSegmentMetadata]) -> PartitionManifest:
        return PartitionManifest(self.tip, tuple(sorted(segments, key=segment_order)),
                                 log_start_offset=self.log_start_offset)


class PartitionMetadataStore:
    """Segment metadata by partition, with Kafka's RemoteLogMetadataManager methods.

    A subclass persists each change in ``_stored_add``/``_stored_update``/
    ``_stored_log_start`` (called with the partition's write lock held, before queries see
    the change), may load a partition differently (``_load``; this base reads the
    partition's local file) and lists partitions (``list_partitions``). After every change
    the partition's file in ``cache_dir`` (when given) is replaced atomically.

    Thread-safe: writes to a partition are serialized (and may wait on the store); queries
    read its cache under a short lock that no store call holds, so they never wait on a
    write. A partition must have a single writer (its leader).
    """

    #: Whether the local file only caches what the store keeps elsewhere.
    local_file_is_cache = True

    def __init__(self, cache_dir: str | os.PathLike[str] | None = None) -> None:
        self._cache_dir = None if cache_dir is None else Path(cache_dir)
        if self._cache_dir is not None:
            self._cache_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._partitions: dict[TopicIdPartition, _Partition] = {}
        self._closed = False

    # -- where the metadata lives (subclasses) --------------------------------------------

    def _stored_add(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Persist a new copy attempt (COPY_SEGMENT_STARTED). This base keeps only the file."""

    def _stored_update(self, new: RemoteLogSegmentMetadata, manifest: PartitionManifest) -> None:
        """Persist a segment's new state; ``manifest`` is the partition after it."""

    def _stored_finish(self, news: Sequence[RemoteLogSegmentMetadata],
                       manifest: PartitionManifest) -> None:
        """Persist several segments' COPY_SEGMENT_FINISHED as one change; ``manifest`` is
        the partition after it."""

    def _stored_log_start(self, manifest: PartitionManifest) -> None:
        """Persist a raised log start offset; ``manifest`` is the partition after it."""

    def list_partitions(self) -> list[TopicIdPartition]:
        """Every partition the store holds metadata of: this base lists its files."""
        if self._cache_dir is None:
            return []
        found = (parse_partition_dir_name(p.name.removesuffix(CACHE_FILE_SUFFIX))
                 for p in self._cache_dir.glob(f"*{CACHE_FILE_SUFFIX}"))
        return sorted((t for t in found if t is not None), key=str)

    def _load(self, part: _Partition) -> RemoteLogMetadataCache:
        """Load the partition (write lock held) from its local file; the result replaces the
        cache under the short lock."""
        stored = self._read_local(part.tip)
        with part.lock:
            part.cache = RemoteLogMetadataCache.from_segments(
                stored.segments if stored is not None else ())
            part.log_start_offset = stored.log_start_offset if stored is not None else None
        return part.cache

    # -- writes ---------------------------------------------------------------------------

    def add_remote_log_segment_metadata(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a copy attempt (state must be COPY_SEGMENT_STARTED); ValueError otherwise or
        when the segment id is already tracked in a later state."""
        if metadata.state is not _STARTED:
            raise ValueError(
                f"segment {metadata.remote_log_segment_id} must be added in state "
                f"{_STARTED.name}, not {metadata.state.name}"
            )
        part = self._partition(metadata.topic_id_partition)
        with part.write_lock:
            cache = self._loaded(part)
            existing = cache.get(metadata.segment_id)
            if existing is not None and not is_valid_transition(existing.state, metadata.state):
                raise ValueError(
                    f"segment {metadata.remote_log_segment_id} is already "
                    f"{existing.state.name}; it cannot be added again"
                )
            self._stored_add(metadata)
            if existing is None:
                with part.lock:
                    cache.add_copy_in_progress(metadata)
            self._save_local(part)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Move a tracked segment to ``update.state``.

        RemoteResourceNotFoundError when the segment is unknown; ValueError when the update's
        state is COPY_SEGMENT_STARTED (use add) or the transition is illegal.
        """
        if update.state is _STARTED:
            raise ValueError(
                f"segment {update.remote_log_segment_id}: {_STARTED.name} is set by "
                f"add_remote_log_segment_metadata, not by an update"
            )
        part = self._partition(update.topic_id_partition)
        with part.write_lock:
            cache = self._loaded(part)
            existing = cache.get(update.remote_log_segment_id.id)
            if existing is None or existing.remote_log_segment_id != update.remote_log_segment_id:
                raise RemoteResourceNotFoundError(
                    f"no remote log segment metadata for {update.remote_log_segment_id}"
                )
            new = existing.create_with_update(update)
            after = [s for s in cache.segments() if s.segment_id != new.segment_id]
            if new.state is not _DELETE_FINISHED:
                after.append(new)
            self._stored_update(new, part.manifest(after))
            with part.lock:
                cache.apply(new)
            self._save_local(part)
        log.debug("remote segment %s is now %s", new.remote_log_segment_id, new.state.name)

    def finish_remote_log_segments(self, tip: TopicIdPartition,
                                   updates: Sequence[RemoteLogSegmentMetadataUpdate]) -> None:
        """Move several COPY_SEGMENT_STARTED segments of ``tip`` to COPY_SEGMENT_FINISHED as
        one change (``_stored_finish``), so readers see all of them or none: a backfill
        job's commit. With no updates the partition's (empty) manifest is written, which
        makes a new partition exist. RemoteResourceNotFoundError for an unknown segment,
        ValueError for another state or partition."""
        part = self._partition(tip)
        with part.write_lock:
            cache = self._loaded(part)
            news: list[RemoteLogSegmentMetadata] = []
            for update in updates:
                existing = cache.get(update.remote_log_segment_id.id)
                if update.state is not _FINISHED or update.topic_id_partition != tip:
                    raise ValueError(f"{update.remote_log_segment_id}: only "
                                     f"{_FINISHED.name} updates of {tip} finish together")
                if existing is None:
                    raise RemoteResourceNotFoundError(
                        f"no remote log segment metadata for {update.remote_log_segment_id}")
                news.append(existing.create_with_update(update))
            ids = {m.segment_id for m in news}
            after = [s for s in cache.segments() if s.segment_id not in ids] + news
            self._stored_finish(news, part.manifest(after))
            with part.lock:
                for new in news:
                    cache.apply(new)
            self._save_local(part)
        log.debug("%s: %d remote segments finished together", tip, len(news))

    def update_log_start_offset(self, tip: TopicIdPartition, offset: int) -> None:
        """Record the partition's log start offset (Kafka's remote log start offset), which
        readers of the tier start at: rewrites the manifest (and the local cache file) when
        ``offset`` is above the recorded one; it never moves backwards."""
        part = self._partition(tip)
        with part.write_lock:
            cache = self._loaded(part)
            if offset <= (part.log_start_offset or 0):
                return
            with part.lock:
                part.log_start_offset = offset
            self._stored_log_start(part.manifest(cache.segments()))
            self._save_local(part)
        log.debug("%s: remote log start offset is now %d", tip, offset)

    # -- queries --------------------------------------------------------------------------

    def log_start_offset(self, tip: TopicIdPartition) -> int | None:
        """The log start offset recorded for the partition, or None."""
        return self._query(tip, lambda _, part: part.log_start_offset)

    def remote_log_segment_metadata(
        self, tip: TopicIdPartition, offset: int, leader_epoch: int | None = None
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` (in ``leader_epoch``'s lineage
        when given), or None."""
        return self._query(tip, lambda cache, _: cache.segment_for_offset(offset, leader_epoch))

    def list_remote_log_segments(
        self, tip: TopicIdPartition, leader_epoch: int | None = None
    ) -> list[RemoteLogSegmentMetadata]:
        """Segments in every state but DELETE_SEGMENT_FINISHED (so unfinished copies and
        deletes can be cleaned up), sorted by start offset; with ``leader_epoch``, only those
        holding records of that epoch."""
        return self._query(tip, lambda cache, _: cache.list_segments(leader_epoch))

    def highest_offset_for_epoch(self, tip: TopicIdPartition, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` copied to the tier, or None."""
        return self._query(tip, lambda cache, _: cache.highest_offset_for_epoch(leader_epoch))

    def remote_log_size(self, tip: TopicIdPartition, leader_epoch: int | None = None) -> int:
        """Total ``.log`` bytes of the partition's COPY_SEGMENT_FINISHED segments (holding
        records of ``leader_epoch`` when given)."""
        return self._query(tip, lambda cache, _: cache.size(leader_epoch))

    def list_topics(self) -> list[str]:
        return sorted({p.topic for p in self.list_partitions()})

    def reconcile(self, tip: TopicIdPartition) -> None:
        """Reload ``tip`` from the tier now (as on first use), merging the local cache."""
        part = self._partition(tip)
        with part.write_lock:
            self._load(part)

    def close(self) -> None:
        """Forget loaded partitions; later calls raise RemoteStorageError. Idempotent."""
        with self._lock:
            self._closed = True
            self._partitions.clear()

    # -- internals ------------------------------------------------------------------------

    def _partition(self, tip: TopicIdPartition) -> _Partition:
        with self._lock:
            if self._closed:
                raise RemoteStorageError(f"{self!r} is closed")
            part = self._partitions.get(tip)
            if part is None:
                part = self._partitions[tip] = _Partition(tip)
            return part

    def _query(self, tip: TopicIdPartition,
               answer: Callable[[RemoteLogMetadataCache, _Partition], _T]) -> _T:
        """``answer(cache, part)`` under the partition's short lock, loading it on first use
        (a partition being written is loaded already, so a query never waits on a write)."""
        part = self._partition(tip)
        with part.lock:
            if part.cache is not None:
                return answer(part.cache, part)
        with part.write_lock:
            cache = self._loaded(part)
        with part.lock:
            return answer(part.cache or cache, part)

    def _loaded(self, part: _Partition) -> RemoteLogMetadataCache:
        """The partition's cache, reconciling it with the tier first if needed (write lock
        held)."""
        if part.cache is not None:
            return part.cache
        return self._load(part)

    def _local_path(self, tip: TopicIdPartition) -> Path | None:
        if self._cache_dir is None:
            return None
        return self._cache_dir / (partition_dir_name(tip) + CACHE_FILE_SUFFIX)

    def _read_local(self, tip: TopicIdPartition) -> PartitionManifest | None:
        """The partition's local file (None when absent). Where it is only a cache
        (``local_file_is_cache``), a corrupt one is ignored with a warning (the store is
        reconciled without it); otherwise CorruptRemoteMetadataError names it."""
        path = self._local_path(tip)
        if path is None:
            return None
        try:
            manifest = PartitionManifest.from_json(path.read_bytes(), str(path))
        except FileNotFoundError:
            return None
        except ValueError as e:
            if not self.local_file_is_cache:
                raise
            log.warning("ignoring unreadable remote metadata cache %s: %s", path, e)
            return None
        if manifest.topic_id_partition != tip:
            if not self.local_file_is_cache:
                raise CorruptRemoteMetadataError(
                    f"{path} describes {manifest.topic_id_partition}, not {tip}")
            log.warning("ignoring remote metadata cache %s: it describes %s", path,
                        manifest.topic_id_partition)
            return None
        return manifest

    def _save_local(self, part: _Partition) -> None:
        path = self._local_path(part.tip)
        if path is None or part.cache is None:
            return
        with part.lock:
            manifest = part.manifest(part.cache.segments())
        atomic_write_bytes(path, manifest.to_json().encode())


class RemoteLogMetadataManager(PartitionMetadataStore):
    """Kafka's RemoteLogMetadataManager, storing segment metadata next to the segments.

    In the tier, per partition directory (see ``tierlog.remote.tier.layout``):
    ``_metadata/<20-digit start>-<uuid>.json`` holds one segment's current metadata
    (RemoteLogSegmentMetadata JSON) and ``_manifest.json`` a snapshot of all of them
    (PartitionManifest JSON). Writes keep every manifest entry backed by its data:

    - add (COPY_SEGMENT_STARTED): write the metadata object (the manifest is not rewritten);
    - COPY_SEGMENT_FINISHED, sent once the segment's data is fully uploaded: rewrite the
      object, then the manifest; a crash in between leaves the segment looking unfinished
      (the copy is redone), never a committed entry without data;
    - DELETE_SEGMENT_STARTED: rewrite the manifest first (readers stop using the segment),
      then the object; the caller deletes the data only afterwards;
    - DELETE_SEGMENT_FINISHED: delete the object, then rewrite the manifest.

    ``cache_dir`` (optional) holds ``<topic>-<partition>-<topicId>.json`` per partition, in the
    manifest's format, replaced atomically after each change. A partition is loaded on first
    use: stored manifest + one LIST of ``_metadata/`` + the cache file, reading only objects
    neither describes; where they disagree the later state wins; the manifest and the cache
    file are rewritten when they differ from the result.

    Thread-safe: writes to a partition are serialized (and may wait on the tier); queries
    read its cache under a short lock that no tier call holds, so they never wait on a write.
    A partition must have a single writer (its leader).
    """

    def __init__(self, tier: RemoteTier, cache_dir: str | os.PathLike[str] | None = None) -> None:
        super().__init__(cache_dir)
        self._tier = tier
        #: Replicated mode (:meth:`fence_writes`): the partitions this node may write, each
        #: with its leader epoch and the manifest version it last read or wrote; None: the
        #: single writer of every partition (a LogManager of its own).
        self._claims: dict[TopicIdPartition, tuple[int, str]] | None = None

    # -- replicated partitions: one leader writes, fenced by compare-and-swap ----------------

    def fence_writes(self) -> None:
        """Replicated mode (issue 24): a partition is written only once claimed (:meth:`claim`) at a
        leader epoch, every manifest write is a compare-and-swap on the version this node
        last read or wrote (a lost one raises TierFencedError and drops the claim), a
        segment's COPY_SEGMENT_FINISHED commits the manifest before its object, and loading
        a partition never rewrites its manifest (a follower only reads)."""
        if self._claims is None:
            self._claims = {}

    def claim(self, tip: TopicIdPartition, leader_epoch: int) -> None:
        """Take up writing ``tip`` as its leader at ``leader_epoch``: read the stored manifest,
        reload the partition from the tier, and write the manifest back stamped with the
        epoch by compare-and-swap, so any later write of an older leader fails its own swap.
        TierFencedError when the manifest names a higher leader epoch (this node is stale)."""
        claims = self._claims
        if claims is None:
            return
        part = self._partition(tip)
        path = self._tier.path(manifest_key(tip))
        with part.write_lock:
            for _ in range(CLAIM_ATTEMPTS):
                found = self._tier.read_versioned(path)
                stored_epoch = None if found is None else manifest_leader_epoch(found[0], path)
                if stored_epoch is not None and stored_epoch > leader_epoch:
                    claims.pop(tip, None)
                    raise TierFencedError(
                        f"{tip}: {path} was written at leader epoch {stored_epoch}, newer "
                        f"than this node's {leader_epoch}: another node leads the partition")
                cache = self._load(part)
                data = self._manifest_bytes(part.manifest(cache.segments()), leader_epoch)
                try:
                    version = self._tier.replace_if(data, path,
                                                    None if found is None else found[1])
                except MetadataConflictError:
                    continue  # written meanwhile: read it again
                claims[tip] = (leader_epoch, version)
                log.info("%s: this node writes the partition's tier at leader epoch %d "
                         "(%d segments)", tip, leader_epoch, len(cache.segments()))
                return
        raise TierFencedError(f"{tip}: the claim of {path} at leader epoch {leader_epoch} "
                              f"lost {CLAIM_ATTEMPTS} compare-and-swaps in a row")

    def release(self, tip: TopicIdPartition) -> None:
        """Stop writing ``tip`` (this node no longer leads it)."""
        if self._claims is not None:
            self._claims.pop(tip, None)

    def claimed_epoch(self, tip: TopicIdPartition) -> int | None:
        """The leader epoch ``tip`` is claimed at (None: not claimed by this node); a
        LogManager of its own writes every partition (-1)."""
        if self._claims is None:
            return -1
        claim = self._claims.get(tip)
        return None if claim is None else claim[0]

    def stored_manifest(self, tip: TopicIdPartition) -> PartitionManifest | None:
        """The partition's manifest as stored now (one GET; None when absent): what a
        follower learns of the tier its leader writes."""
        return read_stored_manifest(self._tier, tip)

    @property
    def tier(self) -> RemoteTier:
        return self._tier

    @property
    def stats(self) -> RequestStats:
        return self._tier.stats

    def __repr__(self) -> str:
        return f"RemoteLogMetadataManager({self._tier!r}, cache_dir={self._cache_dir})"

    def _stored_add(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._tier.put_bytes(metadata.to_json().encode(),
                             self._tier.path(metadata_object_key(metadata)))

    def _stored_update(self, new: RemoteLogSegmentMetadata, manifest: PartitionManifest) -> None:
        object_path = self._tier.path(metadata_object_key(new))
        if new.state is _DELETE_STARTED or (new.state is _FINISHED and self._claims is not None):
            # The manifest first: a fenced leader's commit fails before its object says
            # COPY_SEGMENT_FINISHED, so its upload stays unfinished (cleaned by the leader).
            self._write_manifest(manifest)
            self._tier.put_bytes(new.to_json().encode(), object_path)
        elif new.state is _DELETE_FINISHED:
            self._tier.delete(object_path)
            self._write_manifest(manifest)
        else:
            self._tier.put_bytes(new.to_json().encode(), object_path)
            self._write_manifest(manifest)

    def _stored_finish(self, news: Sequence[RemoteLogSegmentMetadata],
                       manifest: PartitionManifest) -> None:
        """The manifest first: its one atomic replace is the commit point (its entries win
        over the ``_metadata/`` objects it names, which still say COPY_SEGMENT_STARTED until
        they are rewritten after it), so readers see every new segment or none."""
        self._write_manifest(manifest)
        for new in news:
            self._tier.put_bytes(new.to_json().encode(), self._tier.path(metadata_object_key(new)))

    def _stored_log_start(self, manifest: PartitionManifest) -> None:
        self._write_manifest(manifest)

    def list_partitions(self) -> list[TopicIdPartition]:
        """Every partition with a directory in the tier (one LIST of the root)."""
        return remote_partitions(self._tier)

    def _load(self, part: _Partition) -> RemoteLogMetadataCache:
        """Reconcile the partition with the tier and its cache file (write lock held); the
        result replaces the cache under the short lock."""
        cached = self._read_local(part.tip)
        cached_segments = cached.segments if cached is not None else ()
        known = {metadata_object_name(s): s for s in cached_segments}
        current, stored = load_partition(
            self._tier, part.tip, known=known,
            known_log_start=cached.log_start_offset if cached is not None else None)
        now = (current.segments, current.log_start_offset)
        was = (stored.segments, stored.log_start_offset) if stored else ((), None)
        if was != now and self._claims is None:  # replicated: only a claim writes it
            log.info("rewriting the remote manifest of %s (%d segments)", part.tip,
                     len(current.segments))
            self._write_manifest(current)
        with part.lock:
            part.cache = RemoteLogMetadataCache.from_segments(current.segments)
            part.log_start_offset = current.log_start_offset
        if (cached_segments, cached.log_start_offset if cached else None) != now:
            self._save_local(part)
        return part.cache

    def _write_manifest(self, manifest: PartitionManifest) -> None:
        tip = manifest.topic_id_partition
        path = self._tier.path(manifest_key(tip))
        if self._claims is None:
            self._tier.put_bytes(manifest.to_json().encode(), path)
            return
        claim = self._claims.get(tip)
        if claim is None:
            raise TierFencedError(f"{tip}: this node does not lead the partition (no claim "
                                  f"of its tier at a leader epoch); {path} is not written")
        epoch, expected = claim
        try:
            version = self._tier.replace_if(self._manifest_bytes(manifest, epoch), path,
                                            expected)
        except MetadataConflictError as exc:
            self._claims.pop(tip, None)
            part = self._partition(tip)
            with part.lock:
                part.cache = None  # what this node holds may be stale: reload on next use
            raise TierFencedError(
                f"{tip}: {path} changed since this node (leader epoch {epoch}) last read or "
                f"wrote it: another node leads the partition; nothing was committed ({exc})"
            ) from exc
        self._claims[tip] = (epoch, version)

    @staticmethod
    def _manifest_bytes(manifest: PartitionManifest, leader_epoch: int) -> bytes:
        """The manifest's JSON stamped with the leader epoch of its writer."""
        data = load_json_object(manifest.to_json(), "manifest")
        data[LEADER_EPOCH_FIELD] = leader_epoch
        return dumps(data).encode()
