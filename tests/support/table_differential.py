"""Test helper: the differential of issue 23 over a support.table_tier tier, one code for the CI
sample (tests/reader/test_reader_table.py) and for every pair (benchmarks/
bench_table_differential.py). A read is ``{partition: (start, end)}``; ``check_reads`` compares
the table path of ``RemoteTopicReader.read_table`` with the segment path (``use_table=False``)
and with ``Log.read``'s records (``TableTier.expected``), at one isolation level. ``states``
moves a tier through the states the issue names and those compaction adds: as built,
compacted (run files), after a log start offset inside a run (DeleteRecords applied to the
tier and the table), after a restore cut inside a run.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from support.table_tier import TableTier, apply_log_start, compact, cut_table
from support.tier_builder import ISOLATIONS, records_of
from tierlog.reader import RemoteTopicReader
from tierlog.remote.read.readable import segment_chain

#: ``{partition: (start, end)}``: one read's offsets.
Read = dict[int, tuple[int, int]]


@dataclass
class Tally:
    """Reads checked and the mismatches found (each named by state, isolation and read)."""

    reads: int = 0
    mismatches: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.reads += other.reads
        self.mismatches += other.mismatches


def key_marks(tt: TableTier, topic: str, partition: int, isolation: str,
              cut: int | None = None) -> set[int]:
    """Offsets where something changes, within the offsets a read at ``isolation`` may ask
    for: the log start, each table file's edges, each segment's (a run file's links), the
    coverage end, the stable end and the end of the tier (and the restore cut when one was
    made)."""
    reader = RemoteTopicReader(tt.url)
    first, end = reader.offset_range(topic, partition, isolation_level=isolation)
    marks = {tt.tier_start(topic, partition), tt.covered(topic, partition),
             tt.log_starts.get((topic, partition), 0)}
    marks |= {reader.offset_range(topic, partition, isolation_level=i)[1] for i in ISOLATIONS}
    for f in tt.current(topic, partition):
        marks |= {f.first_offset, f.last_offset + 1}
    for link in segment_chain(tt.tier, tt.tip(topic, partition)):  # inside a run too
        marks |= {link.first_offset, link.last_offset + 1}
    if cut is not None:
        marks.add(cut)
    return {m for m in marks if first <= m <= end}


def boundaries(tt: TableTier, topic: str, partition: int, isolation: str,
               cut: int | None = None, stride: int = 7) -> list[int]:
    """The key marks, each +-1, and every ``stride``-th offset, within the offsets a read at
    ``isolation`` may ask for."""
    marks = key_marks(tt, topic, partition, isolation, cut)
    first, end = RemoteTopicReader(tt.url).offset_range(
        topic, partition, isolation_level=isolation)
    near = {m + d for m in marks for d in (-1, 0, 1)} | set(range(0, end, stride))
    return sorted(o for o in near if first <= o <= end)


def every_pair(offsets: Sequence[int]) -> list[tuple[int, int]]:
    """Every ``(start, end)`` with ``start <= end`` of ``offsets``."""
    return list(itertools.combinations_with_replacement(sorted(offsets), 2))


def sample_reads(marks: dict[int, list[int]], keys: dict[int, set[int]], extra: int,
                 rng: random.Random) -> list[Read]:
    """Reads of every partition at once in which each partition starts at each of its key
    marks once and ends at each once (the rest of each pair drawn from ``marks``), then
    ``extra`` reads of pairs drawn from ``marks``."""
    own: dict[int, list[tuple[int, int]]] = {}
    for p, offsets in marks.items():
        own[p] = [(k, rng.choice([o for o in offsets if o >= k] or [k])) for k in sorted(keys[p])]
        own[p] += [(rng.choice([o for o in offsets if o <= k] or [k]), k) for k in sorted(keys[p])]
    pairs = {p: every_pair(offsets) for p, offsets in marks.items()}
    reads = [{p: own[p][i % len(own[p])] for p in marks} for i in range(max(map(len,
                                                                               own.values())))]
    reads += [{p: rng.choice(pairs[p]) for p in marks} for _ in range(extra)]
    return reads


def _slice(full: pa.Table, partition: int, start: int, end: int) -> pa.Table:
    keep = pc.and_(pc.equal(full["partition"], partition),
                   pc.and_(pc.greater_equal(full["offset"], start), pc.less(full["offset"], end)))
    return full.filter(keep)


def check_reads(tt: TableTier, topic: str, isolation: str, reads: Iterable[Read], *,
                label: str = "", segments_every: int = 1) -> Tally:
    """Each read through the table path == the same offsets of ``Log.read``'s records (the
    whole topic read from the segments, checked once against ``TableTier.expected``, then
    sliced); every ``segments_every``-th read through the segment path too."""
    reader = RemoteTopicReader(tt.url)
    tally = Tally()
    full = reader.read_table(topic, isolation_level=isolation, use_table=False)
    if records_of(full) != tt.expected(topic, isolation):
        tally.mismatches.append(f"{label} {isolation}: the segments != Log.read")
    for i, read in enumerate(reads):
        parts = sorted(read)
        starts = {p: read[p][0] for p in parts}
        ends = {p: read[p][1] for p in parts}
        want = pa.concat_tables([_slice(full, p, *read[p]) for p in parts])
        got = reader.read_table(topic, parts, starting_offsets=starts, ending_offsets=ends,
                                isolation_level=isolation)
        if not got.equals(want):
            tally.mismatches.append(f"{label} {isolation} table path {read}")
        if i % segments_every == 0:
            segments = reader.read_table(topic, parts, starting_offsets=starts,
                                         ending_offsets=ends, isolation_level=isolation,
                                         use_table=False)
            if not segments.equals(want):
                tally.mismatches.append(f"{label} {isolation} segment path {read}")
        tally.reads += 1
    return tally


def states(tt: TableTier, topic: str) -> Iterator[tuple[str, dict[int, int]]]:
    """Moves ``tt`` through the states, yielding each's name and the restore cuts made so far
    (``{partition: offset}``): as built; compacted (each partition's files merged into a run
    file); after a log start offset inside partition 0's run, in its second link
    (DeleteRecords: the run is unmerged, the first link's file goes, the second straddles the
    start); after a restore cut inside partition 1's run, in its second link (unmerged, the
    link goes whole, the segments serve the rest)."""
    yield "as built", {}
    links = {p: [(f.first_offset, f.last_offset) for f in tt.current(topic, p)] for p in (0, 1)}
    compact(tt, topic)
    assert all(f.is_run for p in (0, 1) for f in tt.current(topic, p))
    yield "compacted", {}
    apply_log_start(tt, topic, 0, links[0][1][0] + 2)
    yield "after a log start inside a run", {}
    cut = links[1][1][0] + 3
    cut_table(tt, topic, 1, cut)
    yield "after a restore cut inside a run", {1: cut}


__all__ = ["Read", "Tally", "boundaries", "check_reads", "every_pair", "key_marks",
           "sample_reads", "states"]
