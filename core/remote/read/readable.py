"""What a reader may read of the remote tier: the tier opened from a URL and storage options,
the choice of the newest incarnation of a topic, and each partition's chain of readable
segments (``segment_chain``: the links ``tierlog.reader`` reads and the topic tables convert).
Paths, the partition listing and the request counters are the writer's own
(``tierlog.remote.tier.layout``, ``.manifest``, ``.tier``).
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError
from tierlog.remote import RemoteLogSegmentMetadata, RemoteTier, TopicIdPartition
from tierlog.remote.metadata.metadata_cache import RemoteLogMetadataCache
from tierlog.remote.ops.backfill_visibility import JobVisibility
from tierlog.remote.tier.manifest import load_partition, remote_partitions, tier_log_start
from tierlog.remote.tier.object_store import RequestStats
from tierlog.remote.tier.options import filesystem_kwargs
from tierlog.remote.tier.tail_manifest import TailManifest, read_tail_manifest
from tierlog.remote.tier.topics import newest_incarnation, topic_partitions

__all__ = [
    "ChainLink",
    "ReadStats",
    "get_optional",
    "newest_incarnation",
    "open_tier",
    "published_tail",
    "remote_partitions",
    "segment_chain",
    "topic_partitions",
]

log = logging.getLogger(__name__)

#: Requests a reader sent to the tier and the bytes they returned: the tier's one request
#: counter (``gets`` counts object reads, whole or ranged, ``lists`` directory listings,
#: ``bytes`` the bytes every GET returned).
ReadStats = RequestStats


def open_tier(url: str, storage_options: Mapping[str, Any] | None,
              stats: RequestStats | None = None) -> RemoteTier:
    """The tier at ``url`` (``s3://bucket/prefix``, ``file:///dir``, a plain path, any fsspec
    URL), read-only, counting into ``stats``, its whole-object reads sent as ranged GETs.
    ``storage_options`` use the writer's names (``endpoint_url``, ``key``, ``secret``,
    ``region``, ``client_kwargs``, ...), translated by tierlog.remote.tier.options for the URL's
    filesystem (fsspec caches instances); a bad one is a ConfigError naming it."""
    kwargs = filesystem_kwargs(url, storage_options)
    try:
        fs, root = fsspec.core.url_to_fs(url, **kwargs)
    except (ImportError, ValueError) as e:
        raise RemoteStorageError(f"cannot open remote tier {url!r}: {e}") from e
    return RemoteTier(fs, root, rename_on_publish=False, stats=stats, ranged_reads=True)


def get_optional(tier: RemoteTier, path: str) -> bytes | None:
    """The whole object, or None when it does not exist."""
    try:
        return tier.get_bytes(path)
    except RemoteResourceNotFoundError:
        return None


def published_tail(tier: RemoteTier, tip: TopicIdPartition) -> TailManifest | None:
    """The partition's published tail (``_tail.json``, one GET), None without one. Read it
    BEFORE the segment chain: the tail covers from the committed end it saw, which only
    grows, so a chain read afterwards leaves no gap before it."""
    return read_tail_manifest(tier, tip)


@dataclass(frozen=True, slots=True)
class ChainLink:
    """The part ``[first_offset, last_offset]`` of a committed segment a reader uses."""

    segment: RemoteLogSegmentMetadata
    first_offset: int
    last_offset: int


def segment_chain(tier: RemoteTier, tip: TopicIdPartition, *, verify: bool = True,
                  jobs: JobVisibility | None = None) -> list[ChainLink]:
    """The partition's readable segments as one non-overlapping chain in offset order.

    Committed (COPY_SEGMENT_FINISHED) segments only, from the tier's manifest (checked
    against the ``_metadata/`` listing when ``verify``). Where segments overlap (a new leader
    re-uploaded offsets), each offset is read from the segment that holds it with the
    greatest start offset, then the highest leader epoch, as Kafka's metadata cache chooses,
    and the next link starts after that segment's end. The chain starts at the partition's
    recorded log start offset: offsets below it were deleted (DeleteRecords, retention) even
    where a segment still holds them. Segments of backfill jobs ``jobs`` does not show are
    left out (read before the manifest when not given; one view for every partition of a
    read keeps a job all or nothing across them: tierlog.remote.ops.backfill_visibility).
    """
    if jobs is None:
        jobs = JobVisibility.read(tier)
    manifest, _ = load_partition(tier, tip, verify=verify)
    log_start = manifest.log_start_offset or 0
    committed = sorted((m for m in jobs.filter(manifest.committed) if m.end_offset >= log_start),
                       key=lambda m: (m.start_offset, m.end_offset))
    if not committed:
        return []
    cache = RemoteLogMetadataCache.from_segments(committed)
    starts = [m.start_offset for m in committed]
    chain: list[ChainLink] = []
    offset = tier_log_start(committed, log_start)
    end = max(m.end_offset for m in committed)
    while offset <= end:
        md = cache.segment_for_offset(offset)
        if md is None:  # a gap: continue with the next segment that starts after it
            offset = committed[bisect.bisect_right(starts, offset)].start_offset
            continue
        chain.append(ChainLink(md, offset, md.end_offset))
        offset = md.end_offset + 1
    return chain
