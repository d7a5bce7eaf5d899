"""What a scrub of the remote tier found and repaired (``tierlog.remote.ops.scrub``): typed
findings, the repairs made, and their JSON form (``tierlog scrub --json``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from tierlog.remote.api import dumps


class FindingKind(enum.Enum):
    """What is wrong; each value is the name the JSON output and the human output use."""

    MISSING_OBJECT = "missing_object"
    """A committed segment's object (or a tail object the tail manifest names) is absent."""
    SIZE_MISMATCH = "size_mismatch"
    """An object's size differs from the recorded one (truncated or overwritten)."""
    CORRUPT_DATA = "corrupt_data"
    """A batch fails its CRC-32C or header rule, or batches do not tile the object."""
    OFFSET_MISMATCH = "offset_mismatch"
    """Batch offsets disagree with the segment's (or tail object's) recorded offsets."""
    CORRUPT_INDEX = "corrupt_index"
    """An offset, time or transaction index or a producer snapshot is malformed (does not
    parse, fails its CRC, is cut mid-entry) or an entry does not point at what it names."""
    CORRUPT_METADATA = "corrupt_metadata"
    """A manifest, ``_metadata`` object, tail manifest or leader-epoch checkpoint cannot be
    read, or does not describe its segment."""
    GAP = "gap"
    """Offsets missing between consecutive committed segments of the epoch lineage."""
    OVERLAP = "overlap"
    """Two committed segments of the epoch lineage hold the same offsets."""
    OFF_LINEAGE = "off_lineage"
    """A committed segment whose leader epochs are not in the partition's lineage."""
    LOG_START = "log_start"
    """The recorded log start offset lies beyond every offset the tier holds."""
    INCONSISTENT_TAIL = "inconsistent_tail"
    """``_tail.json`` disagrees with the committed segments or with its own objects."""
    ORPHAN = "orphan"
    """An object no metadata names (older than the grace period)."""
    STALE_STAGING = "stale_staging"
    """A crashed backfill job's staging, older than the staging retention."""
    STUCK_COPY = "stuck_copy"
    """A segment in COPY_SEGMENT_STARTED for longer than the grace period."""
    STUCK_DELETE = "stuck_delete"
    """A segment in DELETE_SEGMENT_STARTED for longer than the grace period."""
    TABLE_MISSING_FILE = "table_missing_file"
    """A committed segment below the offsets a topic's table covers has no file in it."""
    TABLE_DAMAGED_FILE = "table_damaged_file"
    """A table file disagrees with its segment or with the table: missing object, size,
    key-value metadata, row count (``--deep``: against the segment's records)."""
    TABLE_STRAY_FILE = "table_stray_file"
    """A table file of a segment that is not a committed link of the partition's chain."""
    TABLE_TILING = "table_tiling"
    """A partition's table files do not tile the offsets its table covers (gap, overlap,
    a file below the start or past the covered end)."""

    @property
    def repairable(self) -> bool:
        """Whether ``--repair`` fixes every finding of this kind (the rest needs a human,
        except a missing or corrupt offset or time index, which ``--repair`` rebuilds from
        its segment's ``.log`` when that passes, and a missing or damaged table file, which
        it converts again from its segment when that passes)."""
        return self in _REPAIRABLE


_REPAIRABLE = frozenset({FindingKind.ORPHAN, FindingKind.STALE_STAGING, FindingKind.STUCK_COPY,
                         FindingKind.STUCK_DELETE})


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem: its kind, where (partition directory, segment id, object path, offsets)
    and a sentence saying what is wrong."""

    kind: FindingKind
    partition: str | None
    """``<topic>-<partition>-<topicId>``, None for a tier-wide object (staging)."""
    detail: str
    segment_id: str | None = None
    object: str | None = None
    offsets: tuple[int, int] | None = None
    """The first and last offset concerned (inclusive), when offsets are."""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind.value, "partition": self.partition,
                "segmentId": self.segment_id, "object": self.object,
                "offsets": list(self.offsets) if self.offsets is not None else None,
                "detail": self.detail}

    def __str__(self) -> str:
        where = [w for w in (self.partition, self.segment_id and f"segment {self.segment_id}",
                             self.offsets and f"offsets {self.offsets[0]}..{self.offsets[1]}")
                 if w]
        return f"{self.kind.value}: {', '.join(where)}: {self.detail}" if where \
            else f"{self.kind.value}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Repair:
    """What ``--repair`` did about a finding."""

    finding: Finding
    action: str

    def to_dict(self) -> dict[str, Any]:
        return {"finding": self.finding.to_dict(), "action": self.action}


@dataclass(slots=True)
class ScrubReport:
    """The result of one scrub: every finding, the repairs made, the notes (what was left
    alone and why), how many partitions and segments were checked and the requests sent."""

    url: str
    deep: bool
    partitions: int = 0
    segments: int = 0
    tables: int = 0
    """Topic tables checked against their segments (``tierlog.remote.ops.scrub_table``)."""
    findings: list[Finding] = field(default_factory=list)
    repairs: list[Repair] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    requests: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the scrub found nothing, or repaired everything it found."""
        repaired = {id(r.finding) for r in self.repairs}
        return all(id(f) in repaired for f in self.findings)

    def unrepaired(self) -> list[Finding]:
        repaired = {id(r.finding) for r in self.repairs}
        return [f for f in self.findings if id(f) not in repaired]

    def of_kind(self, kind: FindingKind) -> list[Finding]:
        return [f for f in self.findings if f.kind is kind]

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "deep": self.deep, "ok": self.ok,
                "partitions": self.partitions, "segments": self.segments,
                "tables": self.tables,
                "findings": [f.to_dict() for f in self.findings],
                "repairs": [r.to_dict() for r in self.repairs],
                "notes": list(self.notes), "requests": dict(self.requests)}

    def to_json(self) -> str:
        return dumps(self.to_dict())
