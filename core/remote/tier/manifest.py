"""The self-describing remote tier: each partition's ``_manifest.json`` and ``_metadata/``
objects, and readers that need nothing but fsspec access (Spark, ``tierlog.reader``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

from tierlog.contracts.json_fields import json_int
from tierlog.errors import (
    CorruptRemoteMetadataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
)
from tierlog.remote.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
    dumps,
    load_json_object,
)
from tierlog.remote.metadata.metadata_cache import segment_order
from tierlog.remote.tier.layout import (
    is_metadata_object_name,
    manifest_key,
    metadata_dir_key,
    metadata_object_name,
    parse_partition_dir_name,
)
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1


@dataclass(frozen=True, slots=True)
class PartitionManifest:
    """A partition's remote segments that are not deleted yet, sorted by start offset, and the
    partition's log start offset as the last tiering run recorded it.

    JSON (``_manifest.json`` in the tier, and the metadata manager's local cache file): a
    compact object with sorted keys, ``{"logStartOffset" (absent until recorded),
    "partition", "segments": [segment metadata, see RemoteLogSegmentMetadata.to_dict],
    "topic", "topicId", "version": 1}``. Immutable.
    """

    topic_id_partition: TopicIdPartition
    segments: tuple[RemoteLogSegmentMetadata, ...]
    from_listing: bool = False
    """True when the stored manifest was missing or stale, so (some) segments came from
    listing and reading the ``_metadata/`` objects."""
    log_start_offset: int | None = None
    """The partition's log start offset (Kafka's remote log start offset): offsets below it
    were deleted (DeleteRecords, retention) even where a remote segment still holds them.
    None when never recorded."""

    @property
    def committed(self) -> tuple[RemoteLogSegmentMetadata, ...]:
        """The readable segments (COPY_SEGMENT_FINISHED), sorted by start offset."""
        return tuple(s for s in self.segments
                     if s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

    def to_json(self) -> str:
        tip = self.topic_id_partition
        data: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "topicId": tip.topic_id,
            "topic": tip.topic,
            "partition": tip.partition,
            "segments": [s.to_dict() for s in self.segments],
        }
        if self.log_start_offset is not None:
            data["logStartOffset"] = self.log_start_offset
        return dumps(data)

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "partition manifest"
                  ) -> PartitionManifest:
        """Parse a manifest. CorruptRemoteMetadataError (a RemoteStorageError and a
        ValueError) naming ``source`` (the object's path) for any malformed content, or when
        it names segments of another partition."""
        data = load_json_object(text, source)
        try:
            if data["version"] != MANIFEST_VERSION:
                raise ValueError(f"unknown manifest version {data['version']!r}")
            tip = TopicIdPartition(data["topicId"], data["topic"], data["partition"])
            entries = data["segments"]
            log_start = None if data.get("logStartOffset") is None else \
                json_int(data, "logStartOffset", "offset")
            if not isinstance(entries, list):
                raise TypeError(f"'segments' must be a list, got {type(entries).__name__}")
        except KeyError as e:
            raise CorruptRemoteMetadataError(f"{source} lacks field {e}") from e
        except (TypeError, ValueError, RecursionError) as e:
            raise CorruptRemoteMetadataError(f"{source} is malformed: {e}") from e
        segments = [RemoteLogSegmentMetadata.from_dict(s, f"{source} (segment {i})")
                    for i, s in enumerate(entries)]
        for s in segments:
            if s.topic_id_partition != tip:
                raise CorruptRemoteMetadataError(
                    f"{source}: the manifest of {tip} lists segment {s.remote_log_segment_id}")
        return cls(tip, tuple(sorted(segments, key=segment_order)),
                   log_start_offset=log_start)


def tier_log_start(committed: Iterable[RemoteLogSegmentMetadata],
                   recorded: int | None) -> int:
    """The tier's log start offset: the later of its first committed offset and its
    recorded log start (offsets below that were deleted even where a segment still holds
    them; a recorded start inside a gap stays, as Kafka's log start offset does). 0 with
    no committed segment and none recorded. The one rule of readers and adoption."""
    first = min((m.start_offset for m in committed), default=None)
    if first is None:
        return recorded or 0
    return max(first, recorded or 0)


def remote_partitions(tier: RemoteTier) -> list[TopicIdPartition]:
    """Every partition directory in the tier (one LIST of its root), sorted by topic, then
    partition, then topic id: the one listing of partitions, for the metadata manager, the
    tier reader and ``list_remote_partitions``."""
    found = (parse_partition_dir_name(n) for n in tier.list_names(tier.root, dirs=True))
    return sorted((p for p in found if p is not None),
                  key=lambda p: (p.topic, p.partition, p.topic_id))


def _more_advanced(a: RemoteLogSegmentMetadata, b: RemoteLogSegmentMetadata) -> bool:
    """Whether ``a`` is a later version of the same segment's metadata than ``b``."""
    return (a.state.id, a.event_timestamp_ms) > (b.state.id, b.event_timestamp_ms)


def read_stored_manifest(tier: RemoteTier, tip: TopicIdPartition) -> PartitionManifest | None:
    """The partition's ``_manifest.json`` as stored; None when it is absent.

    A corrupt manifest is an error (CorruptRemoteMetadataError naming it), not something to
    rebuild silently from the listing: it holds the partition's log start offset, which the
    ``_metadata/`` objects do not, and readers must not return deleted records."""
    path = tier.path(manifest_key(tip))
    try:
        stored = PartitionManifest.from_json(tier.get_bytes(path), path)
    except RemoteResourceNotFoundError:
        return None
    if stored.topic_id_partition != tip:
        raise CorruptRemoteMetadataError(
            f"{path} describes {stored.topic_id_partition}, not {tip}")
    return stored


def load_partition(
    tier: RemoteTier,
    tip: TopicIdPartition,
    *,
    known: Mapping[str, RemoteLogSegmentMetadata] | None = None,
    known_log_start: int | None = None,
    verify: bool = True,
) -> tuple[PartitionManifest, PartitionManifest | None]:
    """The partition's current segments and log start offset, and its stored manifest (None
    when absent). The log start offset is the greater of the stored one and
    ``known_log_start`` (a writer's local copy); it only ever moves up.

    One GET of the manifest; unless ``verify`` is False and the manifest exists, one LIST of
    ``_metadata/`` too: objects missing from the listing are dropped, listed objects that
    neither the manifest nor ``known`` (metadata by object name) describe are read, and where
    both describe one the later state wins.
    """
    stored = read_stored_manifest(tier, tip)
    if stored is not None and not verify:
        return stored, stored
    candidates: dict[str, RemoteLogSegmentMetadata] = {}
    for md in (*(stored.segments if stored else ()), *(known or {}).values()):
        name = metadata_object_name(md)
        seen = candidates.get(name)
        if seen is None or _more_advanced(md, seen):
            candidates[name] = md
    directory = tier.path(metadata_dir_key(tip))
    listed = [n for n in tier.list_names(directory) if is_metadata_object_name(n)]
    segments: list[RemoteLogSegmentMetadata] = []
    read_objects = False
    for name in listed:
        found = candidates.get(name)
        if found is None:
            found = _read_metadata_object(tier, f"{directory}/{name}", tip)
            read_objects = True
            if found is None:
                continue
        segments.append(found)
    stale = stored is None or read_objects or \
        {metadata_object_name(s) for s in stored.segments} != set(listed)
    starts = [o for o in (stored.log_start_offset if stored else None, known_log_start)
              if o is not None]
    return PartitionManifest(tip, tuple(sorted(segments, key=segment_order)),
                             from_listing=stale,
                             log_start_offset=max(starts) if starts else None), stored


def _read_metadata_object(
    tier: RemoteTier, path: str, tip: TopicIdPartition
) -> RemoteLogSegmentMetadata | None:
    try:
        md = RemoteLogSegmentMetadata.from_json(tier.get_bytes(path), path)
    except RemoteResourceNotFoundError:
        return None  # deleted (DELETE_SEGMENT_FINISHED) since the listing
    if md.topic_id_partition != tip or path.rsplit("/", 1)[-1] != metadata_object_name(md):
        raise RemoteStorageError(
            f"remote segment metadata {path} describes {md.remote_log_segment_id} "
            f"(start offset {md.start_offset}), which belongs elsewhere"
        )
    return md


def _tier(fs: fsspec.AbstractFileSystem, root: str, get_options: Mapping[str, Any] | None
          ) -> RemoteTier:
    return RemoteTier(fs, root, get_options=get_options, rename_on_publish=False)


def read_partition_manifest(
    fs: fsspec.AbstractFileSystem,
    root: str,
    partition: TopicIdPartition | str,
    *,
    verify: bool = True,
    get_options: Mapping[str, Any] | None = None,
) -> PartitionManifest:
    """What a reader with only fsspec access needs: a partition's segments (``.committed``
    are the readable ones) with their offset and time ranges.

    ``partition`` is a TopicIdPartition or a partition directory name
    (``<topic>-<partition>-<topicId>``). With ``verify`` (the default) the ``_metadata/``
    listing is checked against the manifest and the manifest's gaps are filled (one LIST plus
    a GET per unknown object); without it the stored manifest is trusted and the listing is
    used only when the manifest is missing. RemoteStorageError on storage failures.
    """
    if isinstance(partition, str):
        parsed = parse_partition_dir_name(partition)
        if parsed is None:
            raise ValueError(
                f"{partition!r} is not a remote partition directory (<topic>-<partition>-<topicId>)"
            )
        partition = parsed
    current, _ = load_partition(_tier(fs, root, get_options), partition, verify=verify)
    return current


def list_remote_partitions(
    fs: fsspec.AbstractFileSystem, root: str, *, get_options: Mapping[str, Any] | None = None
) -> list[TopicIdPartition]:
    """Every partition directory under ``root`` (one LIST), sorted by topic then partition."""
    return remote_partitions(_tier(fs, root, get_options))
