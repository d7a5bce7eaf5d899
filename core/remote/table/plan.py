"""TablePlan: what a read of a topic table uses, taken from one snapshot: its coverage, the data
files of a partition overlapping an offset range with their offset bounds (from the manifests'
statistics, no file opened), and the split of a requested range into the part the table holds
and the tail that the tier's segments serve. Every front door plans this way (the reader, Spark,
scrub), so the table part and the tail meet where that snapshot's coverage ends.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import (
    And,
    EqualTo,
    GreaterThanOrEqual,
    LessThan,
    LiteralPredicate,
    Reference,
)
from pyiceberg.expressions.literals import literal
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, NestedField, PrimitiveType

from tierlog.errors import CorruptRemoteMetadataError
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.schema import OFFSET, PARTITION


@dataclass(frozen=True, slots=True)
class PlannedFile:
    """A data file of the table, with the offset bounds its manifest entry records."""

    path: str
    """The file's location, as the table names it."""
    partition: int
    """The Kafka partition whose rows it holds."""
    first_offset: int
    """The lowest offset of its rows (the offset column's lower bound)."""
    last_offset: int
    """The highest offset of its rows (inclusive; the offset column's upper bound)."""
    record_count: int
    """Its rows."""
    size: int
    """Its size in bytes."""


@dataclass(frozen=True, slots=True)
class TableSplit:
    """A partition's requested offsets, split at the snapshot's coverage: ``table`` is read
    from the table's files, ``tail`` from the tier's segments; either may be empty, and
    together they are the request with its start raised to the table's start."""

    partition: int
    table: range
    """``[max(start, start[p]), min(end, covered[p]))``: empty when nothing of it is covered."""
    tail: range
    """``[max(start, start[p], covered[p]), end)``: what the table does not hold yet."""


class TablePlan:
    """One snapshot of a topic table, planned from: immutable, so a plan's files and coverage
    always agree (a commit after :meth:`of` is seen by the next plan only). Safe to share
    between threads; each :meth:`files` reads that snapshot's manifests."""

    __slots__ = ("_offset", "_partition", "coverage", "snapshot_id", "table")

    def __init__(self, table: Table, snapshot_id: int | None, coverage: Coverage) -> None:
        self.table = table
        """The table planned from."""
        self.snapshot_id = snapshot_id
        """The snapshot of this plan; None for a table with no commit yet."""
        self.coverage = coverage
        """The offsets that snapshot holds, per partition."""
        # Found by name, so any schema holding the two columns plans (their ids may differ).
        self._partition = _column(table, PARTITION, IntegerType)
        self._offset = _column(table, OFFSET, LongType)

    @classmethod
    def of(cls, table: Table) -> TablePlan:
        """The plan of the table's current snapshot (as loaded: reload the table for a newer
        one); CorruptRemoteMetadataError when its coverage or schema is not a topic table's."""
        snapshot = table.current_snapshot()
        coverage = Coverage.of_snapshot(snapshot, _name(table))
        return cls(table, None if snapshot is None else snapshot.snapshot_id, coverage)

    def split(self, partition: int, start: int, end: int) -> TableSplit:
        """``[start, end)`` of ``partition`` split at this snapshot's coverage, the start first
        raised to the log start offset the table applied (no row below it is in the table, nor
        in the log)."""
        start = max(start, self.coverage.start.get(partition, start))
        covered = self.coverage.end(partition)
        if covered is None:
            return TableSplit(partition, range(start, start), range(start, max(start, end)))
        middle = max(start, min(end, covered))
        return TableSplit(partition, range(start, middle), range(middle, max(middle, end)))

    def files(self, partition: int, start: int, end: int) -> list[PlannedFile]:
        """The data files of ``partition`` in this snapshot whose offsets overlap
        ``[start, end)``, in offset order, pruned by the manifests' partition values and offset
        statistics; CorruptRemoteMetadataError naming a file whose offset bounds are missing."""
        if self.snapshot_id is None or start >= end:
            return []
        condition = And(_predicate(EqualTo, self._partition, partition),
                        _predicate(GreaterThanOrEqual, self._offset, start),
                        _predicate(LessThan, self._offset, end))
        tasks = self.table.scan(row_filter=condition, snapshot_id=self.snapshot_id).plan_files()
        planned = [self._planned(partition, task.file) for task in tasks]
        return sorted(planned, key=lambda f: f.first_offset)

    def _planned(self, partition: int, data_file: DataFile) -> PlannedFile:
        field_id = self._offset.field_id
        lower = (data_file.lower_bounds or {}).get(field_id)
        upper = (data_file.upper_bounds or {}).get(field_id)
        if lower is None or upper is None:
            raise CorruptRemoteMetadataError(
                f"{_name(self.table)} snapshot {self.snapshot_id}: data file "
                f"{data_file.file_path} has no bounds of column {self._offset.name!r}")
        return PlannedFile(data_file.file_path, partition, _long(lower), _long(upper),
                           data_file.record_count, data_file.file_size_in_bytes)


def _predicate(kind: type[LiteralPredicate], column: NestedField, value: int
               ) -> LiteralPredicate:
    # By keyword: pyiceberg's predicates are pydantic models, typed by their fields.
    return kind(term=Reference(column.name), value=literal(value))


def _long(bound: bytes) -> int:
    value = from_bytes(LongType(), bound)
    assert isinstance(value, int)  # a long column's bound
    return value


def _column(table: Table, name: str, kind: type[PrimitiveType]) -> NestedField:
    """The top-level column ``name`` of the table's schema, of type ``kind``."""
    field = next((f for f in table.schema().fields if f.name == name), None)
    if field is None or not isinstance(field.field_type, kind):
        raise CorruptRemoteMetadataError(
            f"{_name(table)}: no {kind.__name__.removesuffix('Type').lower()} column "
            f"{name!r}; not a topic table")
    return field


def _name(table: Table) -> str:
    return ".".join(table.name())
