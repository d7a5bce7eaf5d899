"""The tail manifest: what a partition's tail publishing has put in the tier beyond its
committed segments, read by the writer (to continue) and by readers (to read it).

``<partition dir>/_tail.json`` lists the immutable tail objects (``_tail/*.log``: whole v2
batches copied from the local log, all below the high watermark and flushed), the published
high watermark and last stable offset (each partition's published end per isolation level,
in ONE small GET), the aborted transactions whose ABORT marker lies in the published range
(so read_committed needs no ``.txnindex`` object of the tail), the log start offset and a
generation number that grows with every replacement. The manifest is replaced whole, after
its objects are uploaded, so a reader never sees a tail object that is not complete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from tierlog.contracts.json_fields import check_json_int, json_int
from tierlog.errors import CorruptRemoteMetadataError, RemoteResourceNotFoundError
from tierlog.index.transaction_index import AbortedTxn
from tierlog.remote.api import TopicIdPartition, dumps, load_json_object
from tierlog.remote.tier.layout import is_tail_object_name, tail_manifest_key
from tierlog.remote.tier.object_store import RemoteTier

TAIL_MANIFEST_VERSION = 1


@dataclass(frozen=True, slots=True)
class TailObject:
    """One tail object: the whole batches of offsets ``[first_offset, end_offset)`` copied
    from bytes ``[position, position + size)`` of the local segment based at ``segment``.
    ``last_batch`` is ``(position, leader epoch, crc)`` of its last batch in that segment:
    the writer checks it against the local log to notice a truncation."""

    name: str
    first_offset: int
    end_offset: int
    size: int
    segment: int
    position: int
    max_timestamp: int
    last_batch: tuple[int, int, int]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "firstOffset": self.first_offset,
                "endOffset": self.end_offset, "size": self.size, "segment": self.segment,
                "position": self.position, "maxTimestamp": self.max_timestamp,
                "lastBatch": list(self.last_batch)}

    @classmethod
    def from_dict(cls, data: object, source: str) -> TailObject:
        if not isinstance(data, dict):
            raise TypeError(f"a tail object must be an object, got {type(data).__name__}")
        name = data["name"]
        if not isinstance(name, str) or not is_tail_object_name(name):
            raise ValueError(f"{name!r:.80} is not a tail object name")
        ints = [json_int(data, k, kind) for k, kind in _OBJECT_INTS]
        max_ts = json_int(data, "maxTimestamp", "timestamp")
        last = data["lastBatch"]
        if not isinstance(last, list) or len(last) != 3:
            raise TypeError(f"'lastBatch' must be three ints, got {last!r:.60}")
        for value, (what, kind) in zip(last, _LAST_BATCH_INTS, strict=True):
            check_json_int(value, kind, f"'lastBatch' {what}")
        first, end, size, segment, position = ints
        if end <= first or size <= 0:
            raise ValueError(f"tail object {name} has an empty range [{first}, {end}) or size "
                             f"{size}")
        return cls(name, first, end, size, segment, position, max_ts,
                   (last[0], last[1], last[2]))


#: The int fields of a tail object and their kinds (tierlog.contracts.json_fields).
_OBJECT_INTS = (("firstOffset", "offset"), ("endOffset", "end offset"), ("size", "size"),
                ("segment", "offset"), ("position", "size"))
_LAST_BATCH_INTS = (("position", "size"), ("leader epoch", "leader epoch"), ("crc", "crc"))
#: The int fields of a tail manifest and their kinds.
_MANIFEST_INTS = (("generation", "generation"), ("highWatermark", "end offset"),
                  ("lastStableOffset", "end offset"), ("logStartOffset", "end offset"),
                  ("tierEnd", "end offset"))
_ABORTED_TXN_INTS = (("producer id", "producer id"), ("first offset", "offset"),
                     ("last offset", "offset"), ("last stable offset", "end offset"))


@dataclass(frozen=True, slots=True)
class TailManifest:
    """A partition's published tail (see the module docstring). Immutable.

    ``high_watermark`` is the published end for read_uncommitted (every object's offsets
    below it are readable), ``last_stable_offset`` the end for read_committed. ``tier_end``
    is one past the last offset the committed segments held when it was published."""

    topic_id_partition: TopicIdPartition
    generation: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    tier_end: int
    objects: tuple[TailObject, ...] = ()
    aborted: tuple[AbortedTxn, ...] = field(default=())

    def published_end(self, read_committed: bool) -> int:
        """Where a reader at that isolation level stops."""
        return self.last_stable_offset if read_committed else self.high_watermark

    def same_content(self, other: TailManifest | None) -> bool:
        """Whether ``other`` publishes the same thing (the generation aside)."""
        return other is not None and self.to_dict(0) == other.to_dict(0)

    def to_dict(self, generation: int | None = None) -> dict[str, Any]:
        tip = self.topic_id_partition
        return {
            "version": TAIL_MANIFEST_VERSION, "topicId": tip.topic_id, "topic": tip.topic,
            "partition": tip.partition,
            "generation": self.generation if generation is None else generation,
            "highWatermark": self.high_watermark, "lastStableOffset": self.last_stable_offset,
            "logStartOffset": self.log_start_offset, "tierEnd": self.tier_end,
            "objects": [o.to_dict() for o in self.objects],
            "abortedTxns": [[t.producer_id, t.first_offset, t.last_offset,
                             t.last_stable_offset] for t in self.aborted],
        }

    def to_json(self) -> str:
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> TailManifest:
        """Parse; CorruptRemoteMetadataError naming ``source`` for malformed content."""
        data = load_json_object(text, source)
        try:
            if data["version"] != TAIL_MANIFEST_VERSION:
                raise ValueError(f"unknown tail manifest version {data['version']!r}")
            tip = TopicIdPartition(data["topicId"], data["topic"], data["partition"])
            nums = [json_int(data, k, kind) for k, kind in _MANIFEST_INTS]
            entries, txns = data["objects"], data["abortedTxns"]
            if not isinstance(entries, list) or not isinstance(txns, list):
                raise TypeError("'objects' and 'abortedTxns' must be lists")
            objects = tuple(TailObject.from_dict(e, source) for e in entries)
            aborted = []
            for t in txns:
                if not isinstance(t, list) or len(t) != 4:
                    raise TypeError(f"an aborted transaction must be four ints, got {t!r:.60}")
                pid, first, last, lso = (check_json_int(v, kind, f"an aborted transaction's {what}")
                                         for v, (what, kind) in zip(t, _ABORTED_TXN_INTS,
                                                                    strict=True))
                aborted.append(AbortedTxn(pid, first, last, lso))
        except KeyError as e:
            raise CorruptRemoteMetadataError(f"{source} lacks field {e}") from e
        except (TypeError, ValueError, RecursionError) as e:
            raise CorruptRemoteMetadataError(f"{source} is malformed: {e}") from e
        generation, hw, lso, log_start, tier_end = nums
        if lso > hw:
            raise CorruptRemoteMetadataError(
                f"{source}: last stable offset {lso} is above the high watermark {hw}")
        for prev, nxt in pairwise(objects):
            if nxt.first_offset < prev.end_offset:
                raise CorruptRemoteMetadataError(
                    f"{source}: tail objects {prev.name} and {nxt.name} overlap")
        if objects and objects[-1].first_offset >= hw:
            raise CorruptRemoteMetadataError(
                f"{source}: tail object {objects[-1].name} starts at or above the published "
                f"high watermark {hw}")
        return cls(tip, generation, hw, lso, log_start, tier_end, objects, tuple(aborted))


def read_tail_manifest(tier: RemoteTier, tip: TopicIdPartition) -> TailManifest | None:
    """The partition's ``_tail.json`` (one GET); None when it has none (tail publishing was
    never on). CorruptRemoteMetadataError naming the object when it is malformed or
    describes another partition."""
    path = tier.path(tail_manifest_key(tip))
    try:
        data = tier.get_bytes(path)
    except RemoteResourceNotFoundError:
        return None
    manifest = TailManifest.from_json(data, path)
    if manifest.topic_id_partition != tip:
        raise CorruptRemoteMetadataError(
            f"{path} describes {manifest.topic_id_partition}, not {tip}")
    return manifest
