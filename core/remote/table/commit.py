"""TableCommitter: the one loop that changes a topic's table (exactly once, across processes).

Every change is one snapshot whose summary carries the coverage maps forward, recomputed on
each attempt from the table as loaded: appending converted links (a group commit across
partitions), applying a log start offset (retention, DeleteRecords), cutting at a restore.
A lost race (CommitFailedException) or an unknown outcome (CommitStateUnknownException)
reloads and redoes the change with the same data files, which are never rewritten, so each
link's rows are in the table exactly once whatever crashes where (DESIGN §3.3, §6).
A compaction swaps a run file for the current files it merged, and gives up
(TableCompactionStaleError) rather than redo once one of them is no longer current.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

from pyiceberg.catalog import Catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException, CommitStateUnknownException
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.typedef import Identifier
from pyiceberg.types import LongType

from tierlog.errors import (
    TableChainError,
    TableCommitConflictError,
    TableCompactionStaleError,
    TableCoverageError,
)
from tierlog.remote.table.catalogs import write_pointer
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.schema import FIELD_IDS, OFFSET

log = logging.getLogger(__name__)

#: Attempts of one change before TableCommitConflictError (each lost to another commit).
DEFAULT_MAX_ATTEMPTS = 20
_BACKOFF_STEP_S = 0.005



def sleep_backoff(attempt: int) -> None:
    """The default pause after the ``attempt``-th lost attempt: 5 ms per attempt so far."""
    time.sleep(_BACKOFF_STEP_S * attempt)


@dataclass(frozen=True, slots=True)
class ReadyFile:
    """A published data file holding the rows of one chain link ``[first_offset,
    last_offset]`` of ``partition`` (rows below the log start offset left out; a link with no
    data rows has a 0-row file), with its Iceberg ``DataFile``."""

    partition: int
    first_offset: int
    last_offset: int
    data_file: DataFile

    def __post_init__(self) -> None:
        if not 0 <= self.first_offset <= self.last_offset or self.partition < 0:
            raise TableCoverageError(
                f"partition {self.partition}: link [{self.first_offset}, {self.last_offset}] "
                f"of {self.data_file.file_path} is not a partition's range of offsets")


@dataclass(frozen=True, slots=True)
class RunFile:
    """A published run file (a compaction's merge of consecutive current files of
    ``partition``), not yet committed: it holds exactly the rows of the files ``replaces``."""

    partition: int
    first_offset: int
    """The run's span, as its name gives it: its first link's first offset ..."""
    last_offset: int
    """... its last link's last offset."""
    data_file: DataFile
    replaces: tuple[str, ...]
    """The input files' paths (``file_path`` as the table names them), in offset order."""


@dataclass(frozen=True, slots=True)
class CommitResult:
    """What one change did to the table."""

    snapshot_id: int | None
    """The snapshot it committed; None when the table needed no change."""
    coverage: Coverage
    """The table's coverage after it."""
    added: tuple[str, ...] = ()
    """The paths of the data files it added."""
    removed: tuple[str, ...] = ()
    """The paths of the data files it removed from the table (their bytes stay until the
    sweep, so older snapshots stay readable)."""
    skipped: tuple[ReadyFile, ...] = ()
    """Ready files the table already covered (committed before, by this or another writer)."""
    conflicts: int = 0
    """Attempts lost to another commit, or of unknown outcome, and redone."""


@dataclass(frozen=True, slots=True)
class _Change:
    """One attempt's plan: the coverage to record, the files to add and to remove."""

    coverage: Coverage
    add: tuple[DataFile, ...] = ()
    remove: tuple[DataFile, ...] = ()
    skipped: tuple[ReadyFile, ...] = ()


@dataclass(frozen=True, slots=True)
class CurrentFile:
    """A data file of the current snapshot and the link (or run of links) it holds."""

    partition: int
    first_offset: int
    last_offset: int
    data_file: DataFile
    links: int = 1
    """How many chain links the file holds: 1 for a link's file, more for a run file (a
    compaction's; a run may also hold one link)."""
    is_run: bool = False
    """Whether it is a run file (its footer lists its links, ``tierlog.links``)."""


class TableCommitter:
    """Changes one topic's table in ``catalog`` (the tier's TierCatalog or a user's): each
    method is one snapshot, attempted up to ``max_attempts`` times with ``backoff(attempt)``
    between attempts (injectable: tests pass a no-op). The table must exist.

    Thread-safe (each call loads its own Table); any number of committers, in any number of
    processes, may change one table: the catalog's compare-and-swap orders them.
    """

    def __init__(self, catalog: Catalog, identifier: Identifier, *,
                 max_attempts: int = DEFAULT_MAX_ATTEMPTS,
                 backoff: Callable[[int], None] = sleep_backoff) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
        self.catalog = catalog
        self.identifier = identifier
        self._max_attempts = max_attempts
        self._backoff = backoff
        self._name = ".".join(identifier)

    # -- the changes ----------------------------------------------------------------------

    def commit(self, ready: Sequence[ReadyFile], *,
               starts: Mapping[int, int] | None = None) -> CommitResult:
        """Add every ready file not yet covered, across partitions, and move each partition's
        covered end past its last one, in one snapshot.

        Per partition, in offset order, a file the table covers (``covered > last_offset``)
        is skipped; the next must start at the covered end, or straddle it while the table
        holds nothing of the partition above its start (``covered == start``: the log start
        offset moved into the link). A partition with no coverage yet starts at
        ``starts[partition]`` (its log start offset in the tier, recorded as the partition's
        start): its first file must hold that offset. Anything else raises TableChainError
        naming the partition, the file's offsets and the covered end, and nothing of the call
        is committed."""
        files = sorted(ready, key=lambda f: (f.partition, f.first_offset))
        given = dict(starts or {})

        def plan(table: Table, coverage: Coverage) -> _Change:
            add: list[DataFile] = []
            skipped: list[ReadyFile] = []
            for f in files:
                coverage = self._continue(coverage, f, given, skipped, add)
            return _Change(coverage, add=tuple(add), skipped=tuple(skipped))

        return self._run("commit", plan)

    def apply_start(self, partition: int, offset: int, *,
                    rewritten: ReadyFile | None = None) -> CommitResult:
        """Apply the log start offset ``offset`` to ``partition`` (remote retention, whose
        offset is the first kept segment's base; DeleteRecords): one snapshot removes the files
        wholly below it, replaces the file straddling it by ``rewritten`` (that link's rows
        from ``offset`` on: ``first_offset == offset``, the same ``last_offset``) when given,
        and records ``start = offset`` (the covered end raised to it when below). Without
        ``rewritten`` a straddling file stays: readers filter its rows by the start. Nothing
        to do when the table's start is at or past ``offset`` already."""
        if rewritten is not None and (rewritten.partition != partition
                                      or rewritten.first_offset != offset):
            raise TableChainError(
                f"partition {partition}: the rewrite of the link holding the log start offset "
                f"{offset} must start there, got partition {rewritten.partition} "
                f"[{rewritten.first_offset}, {rewritten.last_offset}]")

        def plan(table: Table, coverage: Coverage) -> _Change | None:
            if coverage.start.get(partition, -1) >= offset:
                return None
            current = current_files(table, partition)
            remove = [f.data_file for f in current if f.last_offset < offset]
            add: list[DataFile] = []
            straddling = [f for f in current if f.first_offset < offset <= f.last_offset]
            if rewritten is not None and straddling:
                if [f.last_offset for f in straddling] != [rewritten.last_offset]:
                    raise TableChainError(
                        f"partition {partition}: the rewrite [{rewritten.first_offset}, "
                        f"{rewritten.last_offset}] does not end where the link holding "
                        f"{offset} does: {_spans(straddling)}")
                remove += [f.data_file for f in straddling]
                add.append(rewritten.data_file)
            return _Change(coverage.started(partition, offset), add=tuple(add),
                           remove=tuple(remove))

        return self._run(f"start p{partition} at {offset}", plan)

    def cut(self, partition: int, offset: int, *, prefix: ReadyFile | None = None
            ) -> CommitResult:
        """Cut ``partition`` at ``offset`` (a restore, or a fork's parent): one snapshot removes
        the files of links at or above it and records ``covered = offset``, the one move of
        coverage backwards. The link straddling the cut is replaced by ``prefix`` (the file of
        its uploaded prefix: the same ``first_offset``, ``last_offset == offset - 1``) when
        given; without it that link's file goes too and coverage ends at the link's start.
        Nothing to do when the table covers nothing at or past ``offset``."""
        if prefix is not None and (prefix.partition != partition
                                   or prefix.last_offset != offset - 1):
            raise TableChainError(
                f"partition {partition}: the prefix file of the link cut at {offset} must end "
                f"at {offset - 1}, got partition {prefix.partition} "
                f"[{prefix.first_offset}, {prefix.last_offset}]")

        def plan(table: Table, coverage: Coverage) -> _Change | None:
            end = coverage.end(partition)
            if end is None or end <= offset:
                return None
            coverage.cut(partition, offset)  # TableCoverageError: a cut below the start
            current = current_files(table, partition)
            remove = [f.data_file for f in current if f.first_offset >= offset]
            straddling = [f for f in current if f.first_offset < offset <= f.last_offset]
            add: list[DataFile] = []
            new_end = offset
            if straddling:
                remove += [f.data_file for f in straddling]
                if prefix is not None:
                    if [f.first_offset for f in straddling] != [prefix.first_offset]:
                        raise TableChainError(
                            f"partition {partition}: the prefix [{prefix.first_offset}, "
                            f"{prefix.last_offset}] does not start where the link cut at "
                            f"{offset} does: {_spans(straddling)}")
                    add.append(prefix.data_file)
                else:  # the link goes whole; one straddling the start leaves nothing held
                    new_end = max(min(f.first_offset for f in straddling),
                                  coverage.start.get(partition, 0))
            return _Change(coverage.cut(partition, new_end), add=tuple(add),
                           remove=tuple(remove))

        return self._run(f"cut p{partition} at {offset}", plan)

    def repair(self, ready: Sequence[ReadyFile]) -> CommitResult:
        """Put each ready file in the table in place of its link's current file (scrub's
        repair: a damaged or missing file converted again), in one snapshot; coverage does not
        change. A link whose file is missing is added when no current file overlaps it. A
        file already current is skipped. Ready files of the links of one current run file
        replace that run when together they tile its span exactly (an unmerge: a damaged run
        rebuilt, or a run split before a cut or a start moves inside it). TableChainError,
        nothing committed, for a link not within the partition's covered range, overlapping a
        current file of another span, or leaving part of a run it replaces uncovered."""

        files = sorted(ready, key=lambda f: (f.partition, f.first_offset))
        for a, b in pairwise(files):
            if a.partition == b.partition and b.first_offset <= a.last_offset:
                raise TableChainError(
                    f"partition {a.partition}: files [{a.first_offset}, {a.last_offset}] and "
                    f"[{b.first_offset}, {b.last_offset}] of one repair overlap")

        def plan(table: Table, coverage: Coverage) -> _Change:
            current = current_files(table)
            add: list[DataFile] = []
            remove: list[DataFile] = []
            skipped: list[ReadyFile] = []
            unmerged: dict[str, tuple[CurrentFile, list[ReadyFile]]] = {}
            for f in files:
                p, span = f.partition, (f.first_offset, f.last_offset)
                end = coverage.end(p)
                if end is None or f.last_offset >= end:
                    raise TableChainError(
                        f"partition {p}: file [{f.first_offset}, {f.last_offset}] is not within "
                        f"the offsets the table covers (to {end}); a repair replaces only")
                mine = [c for c in current if c.partition == p
                        and c.first_offset <= f.last_offset and f.first_offset <= c.last_offset]
                if any(c.data_file.file_path == f.data_file.file_path for c in mine):
                    skipped.append(f)
                    continue
                run = mine[0] if len(mine) == 1 else None
                if run is not None and run.is_run \
                        and (run.first_offset, run.last_offset) != span \
                        and run.first_offset <= f.first_offset and f.last_offset <= run.last_offset:
                    unmerged.setdefault(run.data_file.file_path, (run, []))[1].append(f)
                    continue
                if any((c.first_offset, c.last_offset) != span for c in mine):
                    raise TableChainError(
                        f"partition {p}: file [{f.first_offset}, {f.last_offset}] overlaps "
                        f"the table's files {_spans(mine)} of other links")
                remove += [c.data_file for c in mine]
                add.append(f.data_file)
            for run, parts in unmerged.values():
                _check_tiles(run, parts)
                remove.append(run.data_file)
                add += [f.data_file for f in parts]
            return _Change(coverage, add=tuple(add), remove=tuple(remove),
                           skipped=tuple(skipped))

        return self._run(f"repair {len(ready)} files", plan)

    def compact(self, run: RunFile) -> CommitResult:
        """Put ``run`` in the table in place of its input files, in one (overwrite) snapshot;
        coverage does not change. Nothing to do when the run is current already (a redo after
        an unknown outcome). A lost race against a change that kept every input current (a
        tiering append) is redone; TableCompactionStaleError, nothing committed, when an input
        is no longer current (retention, a cut, a repair or another compaction replaced it).
        TableChainError when the run does not hold exactly its inputs' links and rows."""
        what = f"compact p{run.partition} [{run.first_offset}, {run.last_offset}]"

        def plan(table: Table, coverage: Coverage) -> _Change | None:
            current = {f.data_file.file_path: f for f in current_files(table, run.partition)}
            if run.data_file.file_path in current:
                return None
            missing = [p for p in run.replaces if p not in current]
            if missing:
                raise TableCompactionStaleError(
                    f"{self._name}: {what}: its input {missing[0]} is no longer a current file "
                    f"({len(missing)} of {len(run.replaces)} inputs gone); "
                    f"{run.data_file.file_path} is left for the sweep")
            inputs = [current[p] for p in run.replaces]
            _check_run(run, inputs, coverage.end(run.partition))
            return _Change(coverage, add=(run.data_file,),
                           remove=tuple(f.data_file for f in inputs))

        return self._run(what, plan)

    # -- the loop -------------------------------------------------------------------------

    def _continue(self, coverage: Coverage, f: ReadyFile, starts: Mapping[int, int],
                  skipped: list[ReadyFile], add: list[DataFile]) -> Coverage:
        """``coverage`` with ``f`` appended (``add`` gets its file), or as it is when it
        already covers ``f`` (``skipped`` gets it); TableChainError when ``f`` does not
        continue it."""
        p = f.partition
        if _partition_of(f.data_file) != p:
            raise TableChainError(f"partition {p}: {f.data_file.file_path} holds partition "
                                  f"{_partition_of(f.data_file)}")
        end = coverage.end(p)
        if end is None:
            if p not in starts:
                raise TableChainError(
                    f"partition {p}: the table covers nothing of it and no start offset was "
                    f"given for its first file [{f.first_offset}, {f.last_offset}]")
            if not f.first_offset <= starts[p] <= f.last_offset:
                raise TableChainError(
                    f"partition {p}: file [{f.first_offset}, {f.last_offset}] leaves a gap: "
                    f"the table covers nothing of it yet, and its first file must hold its "
                    f"start {starts[p]}")
            coverage = coverage.started(p, starts[p])
            end = starts[p]
        start = coverage.start.get(p)
        if end > f.last_offset:
            skipped.append(f)
            return coverage
        if f.first_offset == end or (f.first_offset < end and end == start):
            add.append(f.data_file)
            return coverage.advanced(p, f.last_offset + 1)
        kind = "a gap" if f.first_offset > end else "an overlap"
        raise TableChainError(
            f"partition {p}: file [{f.first_offset}, {f.last_offset}] leaves {kind}: the "
            f"table covers [{start if start is not None else '?'}, {end}); "
            f"{f.data_file.file_path}")

    def _run(self, what: str, plan: Callable[[Table, Coverage], _Change | None]
             ) -> CommitResult:
        """Load, plan, commit; on a lost race or an unknown outcome reload and redo."""
        conflicts = 0
        for attempt in range(1, self._max_attempts + 1):
            table = self.catalog.load_table(self.identifier)
            coverage = Coverage.of_snapshot(table.current_snapshot(), self._name)
            change = plan(table, coverage)
            if change is None or (not change.add and not change.remove
                                  and change.coverage == coverage):
                return CommitResult(None, coverage, skipped=change.skipped if change else (),
                                    conflicts=conflicts)
            try:
                snapshot_id = self._commit_change(table, change)
                write_pointer(self.catalog, self.identifier, table)  # a user catalog's
            except (CommitFailedException, CommitStateUnknownException) as e:
                conflicts += 1
                log.info("%s: %s lost attempt %d (%s); reloading", self._name, what, attempt, e)
                if attempt < self._max_attempts:
                    self._backoff(attempt)
                continue
            return CommitResult(snapshot_id, change.coverage,
                                added=tuple(f.file_path for f in change.add),
                                removed=tuple(f.file_path for f in change.remove),
                                skipped=change.skipped, conflicts=conflicts)
        raise TableCommitConflictError(
            f"{self._name}: {what} lost {self._max_attempts} attempts to other commits (or "
            f"never learned their outcome); the next change reloads and finds out")

    @staticmethod
    def _commit_change(table: Table, change: _Change) -> int:
        """One snapshot of ``change`` on ``table``'s current one; its id."""
        tx = table.transaction()
        update = tx.update_snapshot(snapshot_properties=change.coverage.summary())
        with (update.overwrite() if change.remove else update.merge_append()) as producer:
            for data_file in change.remove:
                producer.delete_data_file(data_file)
            for data_file in change.add:
                producer.append_data_file(data_file)
            snapshot_id = producer.snapshot_id
        tx.commit_transaction()
        return snapshot_id


def current_files(table: Table, partition: int | None = None) -> list[CurrentFile]:
    """The data files of ``table``'s current snapshot (of one partition, or all), in
    (partition, offset) order, each with the link its name says it holds (a file of no rows
    has no offset bounds; a scan's planning leaves it out). CorruptRemoteMetadataError for a
    file not named for a link."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    found = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            data_file = entry.data_file
            p = _partition_of(data_file)
            if partition is None or p == partition:
                name = DataFileName.parse(data_file.file_path)
                found.append(CurrentFile(p, name.first_offset, name.last_offset, data_file,
                                         name.links, name.is_run))
    return sorted(found, key=lambda f: (f.partition, f.first_offset))


def _partition_of(data_file: DataFile) -> int:
    """The Kafka partition of a data file (the spec is identity(partition))."""
    return int(data_file.partition[0])


def _check_tiles(run: CurrentFile, parts: Sequence[ReadyFile]) -> None:
    """TableChainError unless ``parts`` (in offset order) tile ``run``'s span exactly."""
    spans = [(f.first_offset, f.last_offset) for f in parts]
    ends = [run.first_offset - 1] + [last for _, last in spans]
    if any(first != end + 1 for (first, _), end in zip(spans, ends, strict=False)) \
            or ends[-1] != run.last_offset:
        raise TableChainError(
            f"partition {run.partition}: files {spans} do not tile the run file "
            f"[{run.first_offset}, {run.last_offset}] they would replace: "
            f"{run.data_file.file_path}")


def _check_run(run: RunFile, inputs: Sequence[CurrentFile], end: int | None) -> None:
    """TableChainError unless ``run`` holds exactly ``inputs`` (current files of its partition,
    in offset order, below the covered end ``end``): contiguous inputs, the same span, the
    same row count, and the offset bounds of all of them (a file of no rows has none)."""
    problem = None
    spans = [(f.first_offset, f.last_offset) for f in inputs]
    if not inputs:
        problem = "it replaces no file"
    elif any(b.first_offset != a.last_offset + 1 for a, b in pairwise(inputs)):
        problem = f"its inputs {spans} are not consecutive"
    elif (run.first_offset, run.last_offset) != (inputs[0].first_offset, inputs[-1].last_offset):
        problem = f"its inputs span [{inputs[0].first_offset}, {inputs[-1].last_offset}]"
    elif end is None or inputs[-1].last_offset >= end:
        problem = f"its inputs are not all below the covered end {end}"
    elif run.data_file.record_count != sum(f.data_file.record_count for f in inputs):
        problem = (f"it holds {run.data_file.record_count} rows, its inputs "
                   f"{sum(f.data_file.record_count for f in inputs)}")
    else:
        lowers = [b for f in inputs if (b := offset_bound(f.data_file, lower=True)) is not None]
        uppers = [b for f in inputs if (b := offset_bound(f.data_file, lower=False)) is not None]
        bounds = (offset_bound(run.data_file, lower=True),
                  offset_bound(run.data_file, lower=False))
        wanted = (min(lowers), max(uppers)) if lowers and uppers else (None, None)
        if bounds != wanted:
            problem = f"its offset bounds {bounds} are not its inputs' {wanted}"
    if problem is not None:
        raise TableChainError(
            f"partition {run.partition}: the run [{run.first_offset}, {run.last_offset}] "
            f"{run.data_file.file_path} does not replace its inputs: {problem}")


def offset_bound(data_file: DataFile, *, lower: bool) -> int | None:
    """The file's lower (or upper) offset bound, None when it has none (no rows)."""
    bounds = data_file.lower_bounds if lower else data_file.upper_bounds
    raw = (bounds or {}).get(FIELD_IDS[OFFSET])
    if raw is None:
        return None
    value = from_bytes(LongType(), raw)
    assert isinstance(value, int)  # a long column's bound
    return value


def _spans(files: Iterable[CurrentFile | ReadyFile]) -> str:
    return ", ".join(f"[{f.first_offset}, {f.last_offset}]" for f in files)
