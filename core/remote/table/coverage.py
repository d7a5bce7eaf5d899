"""Which offsets a topic table holds: the ``tierlog.covered`` and ``tierlog.start`` maps of a
snapshot's summary, parsed and checked on the way in, moved forward, and written whole into the
summary of every commit (a map left out would read as nothing covered).

A summary value is JSON text, ``{"<partition>": offset}``: ``covered[p]`` is the exclusive end
of the offsets of partition p the table holds every row of, ``start[p]`` the log start offset
applied (rows below it are gone from the table). A partition missing from ``covered`` has
nothing covered; it does not mean offset 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pyiceberg.table.snapshots import Snapshot

from tierlog.contracts.json_fields import check_json_int
from tierlog.errors import CorruptRemoteMetadataError, TableCoverageError
from tierlog.remote.api import load_json_object

#: Snapshot summary keys (their values are JSON text or, for the version, a number).
COVERED_KEY = "tierlog.covered"
START_KEY = "tierlog.start"
VERSION_KEY = "tierlog.version"
#: The version of these summary keys this module writes and reads.
VERSION = "1"


def _frozen(entries: Mapping[int, int]) -> Mapping[int, int]:
    return MappingProxyType(dict(sorted(entries.items())))


@dataclass(frozen=True, slots=True)
class Coverage:
    """The offsets a snapshot of a topic table holds, per partition. Immutable: each change
    returns a new Coverage; the merge rules (nothing moves backwards, start never passes
    covered) are checked here, in one place."""

    covered: Mapping[int, int] = field(default_factory=dict)
    """Partition -> the exclusive end of the offsets whose rows the table holds."""
    start: Mapping[int, int] = field(default_factory=dict)
    """Partition -> the log start offset applied: no row below it is in the table."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "covered", _frozen(self.covered))
        object.__setattr__(self, "start", _frozen(self.start))

    @classmethod
    def of_snapshot(cls, snapshot: Snapshot | None, source: str) -> Coverage:
        """The coverage a snapshot records (empty for no snapshot, or one without the maps);
        CorruptRemoteMetadataError naming ``source`` (the table) when it is malformed."""
        if snapshot is None or snapshot.summary is None:
            return cls()
        return cls.from_summary(snapshot.summary.additional_properties,
                                f"{source} snapshot {snapshot.snapshot_id}")

    @classmethod
    def from_summary(cls, summary: Mapping[str, str], source: str) -> Coverage:
        """Parse a snapshot summary's maps; CorruptRemoteMetadataError naming ``source``, the
        summary key and the bad entry when they are not what :meth:`summary` writes."""
        version = summary.get(VERSION_KEY)
        if version is not None and version != VERSION:
            raise CorruptRemoteMetadataError(
                f"{source}: summary key {VERSION_KEY!r} is {version!r:.40}; this tierlog reads "
                f"version {VERSION}")
        covered = _parse_map(summary, COVERED_KEY, "end offset", source)
        start = _parse_map(summary, START_KEY, "offset", source)
        for partition, offset in start.items():
            end = covered.get(partition)
            if end is None or offset > end:
                raise CorruptRemoteMetadataError(
                    f"{source}: summary key {START_KEY!r} entry {str(partition)!r} is {offset}, "
                    f"above {COVERED_KEY!r} of that partition ({end})")
        return cls(covered, start)

    def summary(self) -> dict[str, str]:
        """The snapshot summary entries of this coverage (every partition, every commit)."""
        return {COVERED_KEY: _dump(self.covered), START_KEY: _dump(self.start),
                VERSION_KEY: VERSION}

    def end(self, partition: int) -> int | None:
        """The exclusive end covered of ``partition``, None when nothing of it is."""
        return self.covered.get(partition)

    def advanced(self, partition: int, end: int) -> Coverage:
        """This coverage with ``partition`` covered up to ``end`` (exclusive); TableCoverageError
        when that moves it backwards or is out of range."""
        _check(partition, end, "end offset")
        current = self.covered.get(partition)
        if current is not None and end < current:
            raise TableCoverageError(
                f"partition {partition}: covered end {end} is below the table's {current}; "
                f"coverage only moves forward")
        return Coverage({**self.covered, partition: end}, self.start)

    def started(self, partition: int, offset: int) -> Coverage:
        """This coverage with the log start offset ``offset`` applied to ``partition``; the
        covered end is raised to it when below (the rows between are gone from the log, so
        nothing is left to cover there). TableCoverageError when the start moves backwards."""
        _check(partition, offset, "offset")
        current = self.start.get(partition)
        if current is not None and offset < current:
            raise TableCoverageError(
                f"partition {partition}: start {offset} is below the table's {current}; "
                f"the start only moves forward")
        end = max(self.covered.get(partition, offset), offset)
        return Coverage({**self.covered, partition: end}, {**self.start, partition: offset})

    def cut(self, partition: int, end: int) -> Coverage:
        """This coverage with ``partition`` covered only below ``end`` (a restore's cut: the one
        move backwards); unchanged when it covers no further. TableCoverageError when ``end``
        lies below the partition's start (those rows are gone from the log: nothing to cut)."""
        _check(partition, end, "end offset")
        current = self.covered.get(partition)
        if current is None or end >= current:
            return self
        start = self.start.get(partition)
        if start is not None and end < start:
            raise TableCoverageError(
                f"partition {partition}: cut at {end} is below the table's start {start}")
        return Coverage({**self.covered, partition: end}, self.start)


def _check(partition: int, offset: int, kind: str) -> None:
    try:
        check_json_int(partition, "partition", "partition")
        check_json_int(offset, kind, f"partition {partition}'s {kind}")
    except (TypeError, ValueError) as e:
        raise TableCoverageError(str(e)) from e


def _parse_map(summary: Mapping[str, str], key: str, kind: str, source: str
               ) -> dict[int, int]:
    text = summary.get(key)
    if text is None:
        return {}
    data = load_json_object(text, f"{source}: summary key {key!r}")
    parsed: dict[int, int] = {}
    for name, value in data.items():
        where = f"{source}: summary key {key!r} entry {name!r:.40}"
        if not (name.isascii() and name.isdigit() and str(int(name)) == name):
            raise CorruptRemoteMetadataError(f"{where}: not a partition number")
        try:
            partition = check_json_int(int(name), "partition", "the partition")
            parsed[partition] = check_json_int(value, kind, "its offset")
        except (TypeError, ValueError) as e:
            raise CorruptRemoteMetadataError(f"{where}: {e}") from e
    return parsed


def _dump(entries: Mapping[int, int]) -> str:
    return json.dumps({str(p): o for p, o in sorted(entries.items())}, separators=(",", ":"))
