"""What the filters Spark pushes allow, as bounds that prune segments and byte ranges of a
read (``PushedBounds``): conservative, so a bound is a superset of the matching rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
#: Filters whose values a row must equal (a null-safe one pushed with a value is the same).
_EQUALITIES = (EqualTo, EqualNullSafe, In)

_T = TypeVar("_T")


@dataclass(frozen=True)
class PushedBounds:
    """What pushed filters allow (their AND): a superset of the matching rows, never less."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    min_partition: int | None = None
    max_partition: int | None = None
    min_offset: int | None = None
    max_offset: int | None = None
    min_timestamp: int | None = None

    def allows_partition(self, partition: int) -> bool:
        return ((self.partitions is None or partition in self.partitions)
                and (self.min_partition is None or partition >= self.min_partition)
                and (self.max_partition is None or partition <= self.max_partition))

    def with_filter(self, f: Filter) -> PushedBounds:
        """These bounds narrowed by ``f``; unchanged when ``f`` cannot prune."""
        attribute = getattr(f, "attribute", None)
        if attribute == ("topic",):
            names = _values(f, str, _EQUALITIES)
            if names is None:
                return self
            topics = frozenset(names) if self.topics is None else self.topics & set(names)
            return replace(self, topics=topics)
        if attribute == ("timestamp",):
            # Only lower bounds prune: CreateTime timestamps need not grow with offsets.
            stamps = _values(f, datetime, (*_EQUALITIES, GreaterThan, GreaterThanOrEqual))
            if stamps is None:
                return self
            floor_ms = min((s if s.tzinfo else s.replace(tzinfo=UTC)) - _EPOCH
                           for s in stamps) // _MILLISECOND
            return replace(self, min_timestamp=_tighter(self.min_timestamp, floor_ms, max))
        if attribute not in (("partition",), ("offset",)):
            return self
        numbers = _values(f, int, (*_EQUALITIES, GreaterThan, GreaterThanOrEqual, LessThan,
                                   LessThanOrEqual))
        if numbers is None:
            return self
        least, most = min(numbers), max(numbers)
        lo: int | None = least
        hi: int | None = most
        if isinstance(f, GreaterThan):
            lo, hi = least + 1, None
        elif isinstance(f, GreaterThanOrEqual):
            hi = None
        elif isinstance(f, LessThan):
            lo, hi = None, most - 1
        elif isinstance(f, LessThanOrEqual):
            lo = None
        if attribute == ("offset",):
            return replace(self, min_offset=_tighter(self.min_offset, lo, max),
                           max_offset=_tighter(self.max_offset, hi, min))
        narrowed = replace(self, min_partition=_tighter(self.min_partition, lo, max),
                           max_partition=_tighter(self.max_partition, hi, min))
        if isinstance(f, _EQUALITIES):
            kept = frozenset(numbers) if self.partitions is None else self.partitions & set(numbers)
            narrowed = replace(narrowed, partitions=kept)
        return narrowed


def _tighter(current: int | None, new: int | None, pick: Callable[[int, int], int]
             ) -> int | None:
    if current is None or new is None:
        return new if current is None else current
    return int(pick(current, new))


def _values(f: Filter, kind: type[_T], kinds: tuple[type[Filter], ...]) -> list[_T] | None:
    """The filter's literal values when it is one of ``kinds`` and they are all ``kind``."""
    if not isinstance(f, kinds):
        return None
    values = list(f.value) if isinstance(f, In) else [f.value]  # type: ignore[attr-defined]
    if not values or not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        return None
    return values
