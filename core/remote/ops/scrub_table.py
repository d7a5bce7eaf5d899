"""Scrub a topic's Iceberg table against its segments (``tierlog scrub`` on a tier whose topics
have tables, DESIGN §6): :class:`TableScrubber`, called by ``tierlog.remote.ops.scrub`` for each
topic incarnation the tier holds a table of (``_tables/<topic>-<topicId>/``).

Per partition of the current snapshot, with its coverage ``[start, covered)``:

- the current files tile ``[start, covered)`` in chain order: no gap, no overlap, nothing
  beyond ``covered`` (``table_tiling``);
- each committed chain link below ``covered`` has exactly one file, named for the link
  (``tierlog.remote.table.naming``): the same segment id, first and last offset (the first link
  may start later than its file, when the log start offset moved into it), else
  ``table_missing_file``;
- that file's Parquet key-value metadata (segment id, first and last offset) agrees with its
  name, its ``tierlog.records`` with the DataFile's ``record_count``, a HEAD of it with
  ``file_size_in_bytes`` (``table_damaged_file``); ``deep`` decodes the segment's data records
  of the file's offsets (at or past ``start``) and compares their count;
- no file names a segment that is not a committed link of the partition's chain
  (``table_stray_file``).

A run file (a compaction's merged file of consecutive links) holds the links its footer's
``tierlog.links`` lists: each must be a committed link (else ``table_stray_file``), and each link
below ``covered`` is held by exactly one file, a link file by its name or a run by its list.
A run's own checks (``table_damaged_file``): ``tierlog.version`` 2, the footer's first and last
offsets its name's, its links decoding, spanning its name and as many as its name says, each
link's row groups holding its records, their sum the footer's ``tierlog.records``, the
DataFile's ``record_count`` and the footer's rows; ``deep`` counts each link's rows (from the
row-group metadata) against its segment's data records. A run whose footer cannot be read is
damaged and holds the chain's links of its span.

``repair`` converts each link (below the tier's last stable offset) with a missing or damaged
file again (``build.convert_ready``, the tiering run's own conversion) and puts the files in
the table in one snapshot per topic (``TableCommitter.repair``: the damaged DataFile
replaced, a missing one added, coverage unchanged); a damaged run, or one holding a missing
link's offsets, is unmerged: the chain's links of its span converted again replace it
(``tierlog.remote.table.unmerge``). A link whose segment cannot be converted (its ``.log`` is
damaged) is noted and left; tiling problems and stray files need a human. A user catalog's
table is checked at the snapshot its ``_pointer.json`` names; its repair, which needs that
catalog, is refused (a note).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import NoSuchTableError

from tierlog.errors import (
    CorruptRecordError,
    CorruptRemoteMetadataError,
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TableCatalogRequiredError,
    TableChainError,
    TableCommitConflictError,
)
from tierlog.records.batch import iter_batches
from tierlog.remote.api import TopicIdPartition
from tierlog.remote.ops.backfill_visibility import JobVisibility
from tierlog.remote.ops.scrub_report import Finding, FindingKind, Repair, ScrubReport
from tierlog.remote.read.readable import ChainLink, segment_chain
from tierlog.remote.read.transactions import last_stable_offset
from tierlog.remote.table.build import PartitionWork, convert_ready, ready_file
from tierlog.remote.table.catalogs import load_topic_table, writer_catalog
from tierlog.remote.table.commit import CurrentFile, ReadyFile, TableCommitter, current_files
from tierlog.remote.table.convert import (
    KV_FIRST_OFFSET,
    KV_LAST_OFFSET,
    KV_RECORDS,
    KV_SEGMENT_ID,
    KV_VERSION,
)
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.footer import key_values, read_footer
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.run_links import KV_LINKS, RUN_FORMAT_VERSION, RunLink, decode_links
from tierlog.remote.table.schema import OFFSET, table_identifier
from tierlog.remote.table.unmerge import convert_links, links_of_span
from tierlog.remote.tier.layout import (
    SEGMENT_SUFFIX,
    partition_dir_name,
    segment_object_key,
    table_key,
)
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

__all__ = ["TableScrubber"]

_UNHELD = "no table file holds these offsets, which the table covers"


@dataclass(frozen=True, slots=True)
class _Damaged:
    """A link to convert again: its file is missing or damaged (``file`` None: missing); or,
    with ``run``, a run file to unmerge (damaged, listing a link the chain does not have, or
    holding a missing link's offsets)."""

    tip: TopicIdPartition
    link: ChainLink | None
    """The link (None: a run's)."""
    file: CurrentFile | None
    finding: Finding
    run: CurrentFile | None = None


@dataclass(slots=True)
class _Run:
    """A run file being checked: what its footer says, and the chain links it holds."""

    file: CurrentFile
    path: str
    """Its path in the tier."""
    footer: pq.FileMetaData | None
    links: tuple[RunLink, ...] | None
    """Its footer's link list (None: unreadable)."""
    problem: str | None
    """What is wrong with it from its metadata alone (None: nothing found)."""
    entries: list[tuple[str, int, int]]
    """The (segment id, first, last) it holds: its list's, or the chain's links of its span
    when the list cannot be read."""
    held: dict[int, ChainLink]
    """The chain link each entry (by index) matched."""


class TableScrubber:
    """Scrubs the tables of one scrub's topics into its ``report`` (see the module docstring).
    ``jobs`` is the scrub's view of backfill jobs: their unpublished segments are not
    committed links."""

    def __init__(self, tier: RemoteTier, report: ScrubReport, *, deep: bool, repair: bool,
                 jobs: JobVisibility) -> None:
        self._tier = tier
        self._report = report
        self._deep = deep
        self._repair = repair
        self._jobs = jobs

    def _find(self, finding: Finding) -> Finding:
        self._report.findings.append(finding)
        return finding

    def topic(self, topic: str, topic_id: str, tips: Sequence[TopicIdPartition]) -> None:
        """Scrub the table of one topic incarnation, whose partitions are ``tips``."""
        identifier = table_identifier(topic, topic_id)
        name = ".".join(identifier)
        location = self._tier.path(table_key(topic, topic_id))
        try:
            found = load_topic_table(self._tier, topic, topic_id)
            if found is None:
                raise NoSuchTableError(f"no table at {location}")
            table = found
            coverage = Coverage.of_snapshot(table.current_snapshot(), name)
            files = current_files(table)
        except (CorruptRemoteMetadataError, RemoteStorageError) as exc:
            self._find(Finding(FindingKind.CORRUPT_METADATA, None,
                               f"table {name} cannot be read: {exc}", object=location))
            return
        self._report.tables += 1
        damaged: list[_Damaged] = []
        for tip in sorted(tips, key=lambda t: t.partition):
            mine = [f for f in files if f.partition == tip.partition]
            damaged += self._partition(tip, coverage, mine)
        known = {t.partition for t in tips}
        for f in files:
            if f.partition not in known:
                self._find(Finding(FindingKind.TABLE_STRAY_FILE, None,
                                   f"table {name} holds a file of partition {f.partition}, "
                                   f"which the tier does not hold",
                                   object=f.data_file.file_path,
                                   offsets=(f.first_offset, f.last_offset)))
        if self._repair and damaged:
            self._repair_files(topic, topic_id, damaged)

    # -- one partition ---------------------------------------------------------------------

    def _partition(self, tip: TopicIdPartition, coverage: Coverage,
                   files: list[CurrentFile]) -> list[_Damaged]:
        name = partition_dir_name(tip)
        p = tip.partition
        covered = coverage.end(p)
        if covered is None:
            for f in files:
                self._find(Finding(FindingKind.TABLE_TILING, name,
                                   "a table file of a partition the table records no coverage "
                                   "of", object=f.data_file.file_path,
                                   offsets=(f.first_offset, f.last_offset)))
            return []
        start = coverage.start.get(p, 0)
        try:
            chain = segment_chain(self._tier, tip, jobs=self._jobs)
        except (CorruptRemoteMetadataError, RemoteStorageError) as exc:
            self._report.notes.append(f"{name}: its table is not checked: its segments cannot "
                                      f"be listed ({exc})")
            return []
        links = [link for link in chain if link.last_offset < covered]
        runs = {f.data_file.file_path: self._run(f, tip, links) for f in files if f.is_run}
        matched: dict[str, ChainLink] = {}
        damaged: list[_Damaged] = []
        for i, link in enumerate(links):
            held = [f for f in files if not f.is_run and _holds(f, link, first=i == 0)]
            for run in runs.values():
                at = [j for j, e in enumerate(run.entries) if _entry_holds(e, link, i == 0)]
                if at:
                    run.held[at[0]] = link
                    held.append(run.file)
            if not held:
                covering = next((r.file for r in runs.values()
                                 if r.file.first_offset <= link.last_offset
                                 and link.first_offset <= r.file.last_offset), None)
                finding = self._find(Finding(
                    FindingKind.TABLE_MISSING_FILE, name,
                    f"the table covers offsets below {covered} but has no file of this "
                    f"committed segment" + ("" if covering is None else
                                            f" (the run file {covering.data_file.file_path} "
                                            f"spans its offsets)"),
                    segment_id=link.segment.segment_id,
                    offsets=(link.first_offset, link.last_offset)))
                damaged.append(_Damaged(tip, link, None, finding, covering))
                continue
            for f in held:
                matched[f.data_file.file_path] = link
            if len(held) > 1:
                self._find(Finding(FindingKind.TABLE_TILING, name,
                                   f"{len(held)} table files hold this segment's offsets: "
                                   + ", ".join(f.data_file.file_path for f in held),
                                   segment_id=link.segment.segment_id,
                                   offsets=(link.first_offset, link.last_offset)))
                continue
            if held[0].is_run:
                continue  # checked once per run, below
            problem = self._file_problem(held[0], link, start)
            if problem is not None:
                finding = self._find(Finding(
                    FindingKind.TABLE_DAMAGED_FILE, name, problem,
                    segment_id=link.segment.segment_id, object=held[0].data_file.file_path,
                    offsets=(held[0].first_offset, held[0].last_offset)))
                damaged.append(_Damaged(tip, link, held[0], finding))
        for run in runs.values():
            damaged += self._run_findings(name, tip, run, start, covered)
        self._strays(name, files, matched, chain, covered)
        self._check_tiling(name, files, start, covered,
                           missing=[(d.link.first_offset, d.link.last_offset)
                                    for d in damaged if d.file is None and d.link is not None])
        return damaged

    def _strays(self, name: str, files: list[CurrentFile], matched: dict[str, ChainLink],
                chain: Sequence[ChainLink], covered: int) -> None:
        """Link files holding no committed link of the chain (a run's entries: _run_findings)."""
        committed = {link.segment.segment_id for link in chain}
        for f in files:
            if f.data_file.file_path in matched or f.is_run:
                continue
            segment = DataFileName.parse(f.data_file.file_path).segment_id
            if segment in committed and f.last_offset >= covered:
                continue  # past the covered end: a tiling finding
            why = ("names a segment that is not committed" if segment not in committed else
                   "does not hold a committed link of the chain (its offsets differ)")
            self._find(Finding(FindingKind.TABLE_STRAY_FILE, name, f"the table file {why}",
                               segment_id=segment, object=f.data_file.file_path,
                               offsets=(f.first_offset, f.last_offset)))

    def _check_tiling(self, name: str, files: list[CurrentFile], start: int, covered: int,
                      missing: list[tuple[int, int]]) -> None:
        """Gaps (but those of links already found missing), overlaps and overhangs of the
        files against ``[start, covered)``."""
        problems: list[tuple[str, tuple[int, int]]] = []
        at = start
        for f in files:
            if f.last_offset < start:
                problems.append((f"a file wholly below the table's start {start}",
                                 (f.first_offset, f.last_offset)))
                continue
            if f.first_offset > at:
                problems += [(_UNHELD, gap) for gap in _outside(at, f.first_offset - 1, missing)]
            elif f.first_offset < at and at > start:
                problems.append(("two table files hold these offsets",
                                 (f.first_offset, min(at - 1, f.last_offset))))
            at = max(at, f.last_offset + 1)
        if at > covered:
            problems.append((f"table files hold offsets at or past the covered end {covered}",
                             (covered, at - 1)))
        elif at < covered:
            problems += [(_UNHELD, gap) for gap in _outside(at, covered - 1, missing)]
        for detail, offsets in problems:
            self._find(Finding(FindingKind.TABLE_TILING, name, detail, offsets=offsets))

    def _footer(self, f: CurrentFile, tip: TopicIdPartition
                ) -> tuple[str, pq.FileMetaData | None, str | None]:
        """The tier path of ``f``, its footer, and what keeps it from being read (its size
        against the DataFile's, a HEAD; the footer, ranged GETs)."""
        path = self._tier.path(table_key(tip.topic, tip.topic_id),
                               DataFileName.parse(f.data_file.file_path).key)
        expected_size = f.data_file.file_size_in_bytes
        try:
            size = self._tier.size(path)
        except RemoteResourceNotFoundError:
            return path, None, "the table's data file is missing from the tier"
        if size != expected_size:
            return path, None, (f"the data file holds {size} bytes, the table records "
                                f"{expected_size}")
        try:
            return path, read_footer(self._tier, path, size), None
        except (CorruptRecordError, OSError, pa.ArrowException) as exc:
            return path, None, f"the data file's Parquet footer cannot be read: {exc}"

    def _file_problem(self, f: CurrentFile, link: ChainLink, start: int) -> str | None:
        """What is wrong with the file of ``link`` (None: nothing): its size, its key-value
        metadata, its row count, and with ``deep`` its rows against the segment's records."""
        path, metadata, problem = self._footer(f, link.segment.topic_id_partition)
        if metadata is None:
            return problem
        kv = key_values(metadata)
        name = DataFileName.parse(f.data_file.file_path)
        wanted = {KV_SEGMENT_ID: name.segment_id, KV_FIRST_OFFSET: str(name.first_offset),
                  KV_LAST_OFFSET: str(name.last_offset),
                  KV_RECORDS: str(f.data_file.record_count)}
        wrong = [f"{k} is {kv.get(k)!r}, expected {v!r}" for k, v in wanted.items()
                 if kv.get(k) != v]
        if wrong:
            return "the data file's key-value metadata disagrees: " + "; ".join(wrong)
        if metadata.num_rows != f.data_file.record_count:
            return (f"the data file holds {metadata.num_rows} rows, the table records "
                    f"{f.data_file.record_count}")
        if self._deep:
            return self._count_problem(f, link, path, start)
        return None

    def _segment_records(self, link: ChainLink, low: int, high: int) -> int | str:
        """The data records of ``link``'s segment in ``[low, high]``, or why they cannot be
        counted."""
        segment_path = self._tier.path(segment_object_key(link.segment, SEGMENT_SUFFIX))
        try:
            return _data_records(self._tier.get_bytes(segment_path), low, high, segment_path)
        except (CorruptRecordError, RemoteResourceNotFoundError) as exc:
            return f"its segment cannot be decoded to count its records: {exc}"

    def _count_problem(self, f: CurrentFile, link: ChainLink, path: str, start: int
                       ) -> str | None:
        """The file's rows at or past ``start`` against the segment's data records there."""
        low = max(f.first_offset, start)
        records = self._segment_records(link, low, f.last_offset)
        if isinstance(records, str):
            return records
        rows = f.data_file.record_count
        if low > f.first_offset:  # rows below the start may be in it: count those at or past
            with self._tier.fs.open(path, "rb") as stream:
                offsets = pq.read_table(stream, columns=[OFFSET])[OFFSET]
            rows = sum(1 for o in offsets.to_pylist() if o >= low)
        if rows != records:
            return (f"the data file holds {rows} rows of offsets {low}..{f.last_offset}, the "
                    f"segment {records} data records")
        return None

    # -- run files -------------------------------------------------------------------------

    def _run(self, f: CurrentFile, tip: TopicIdPartition, links: Sequence[ChainLink]) -> _Run:
        """Read run file ``f``'s footer and check its metadata (:class:`_Run`)."""
        path, footer, problem = self._footer(f, tip)
        decoded: tuple[RunLink, ...] | None = None
        if footer is not None:
            try:
                decoded = decode_links(key_values(footer).get(KV_LINKS), f.data_file.file_path)
            except CorruptRemoteMetadataError as exc:
                problem = f"the run file's link list cannot be read: {exc}"
            else:
                problem = _run_metadata_problem(f, footer, decoded)
        if decoded is not None:
            entries = [(k.segment_id, k.first_offset, k.last_offset) for k in decoded]
        else:  # unreadable: it holds the chain's links of its span (not reported missing)
            entries = [(c.segment.segment_id, c.first_offset, c.last_offset) for c in links
                       if f.first_offset <= c.last_offset <= f.last_offset]
        return _Run(f, path, footer, decoded, problem, entries, {})

    def _run_findings(self, name: str, tip: TopicIdPartition, run: _Run, start: int,
                      covered: int) -> list[_Damaged]:
        """The findings of one run file: its list's entries the chain does not have
        (``table_stray_file``), then what is wrong with it (``table_damaged_file``); each to
        be repaired by unmerging the run (the returned damage)."""
        f = run.file
        damaged = []
        for j, (segment, first, last) in enumerate(run.entries):
            if j not in run.held and last < covered:
                finding = self._find(Finding(
                    FindingKind.TABLE_STRAY_FILE, name, "the run file lists a link the chain "
                    "does not have (a segment not committed, or other offsets)",
                    segment_id=segment, object=f.data_file.file_path, offsets=(first, last)))
                damaged.append(_Damaged(tip, None, f, finding, f))
        problem = run.problem
        if problem is None and self._deep and run.links is not None and run.footer is not None:
            problem = self._run_count_problem(run, start)
        if problem is not None:
            finding = self._find(Finding(FindingKind.TABLE_DAMAGED_FILE, name, problem,
                                         object=f.data_file.file_path,
                                         offsets=(f.first_offset, f.last_offset)))
            damaged.append(_Damaged(tip, None, f, finding, f))
        return damaged

    def _run_count_problem(self, run: _Run, start: int) -> str | None:
        """Each held link's rows at or past ``start`` (from the row-group metadata; the offset
        column read only for a link holding ``start``) against its segment's data records."""
        assert run.links is not None and run.footer is not None
        for j, link in sorted(run.held.items()):
            k = run.links[j]
            groups = _groups_of(run.links, j, run.footer.num_row_groups)
            low = max(k.first_offset, start)
            if low > k.last_offset:
                continue
            records = self._segment_records(link, low, k.last_offset)
            if isinstance(records, str):
                return records
            rows = sum(run.footer.row_group(g).num_rows for g in groups)
            if low > k.first_offset and rows:  # rows below the start may be in it
                with self._tier.fs.open(run.path, "rb") as stream:
                    offsets = pq.ParquetFile(stream).read_row_groups(list(groups),
                                                                     columns=[OFFSET])[OFFSET]
                rows = sum(1 for o in offsets.to_pylist() if o >= low)
            if rows != records:
                return (f"the run file holds {rows} rows of offsets {low}..{k.last_offset} "
                        f"(segment {k.segment_id}), the segment {records} data records")
        return None

    # -- repair ----------------------------------------------------------------------------

    def _repair_files(self, topic: str, topic_id: str, damaged: list[_Damaged]) -> None:
        """Convert each damaged link again and put the files in the table in one snapshot."""
        identifier = table_identifier(topic, topic_id)
        try:
            catalog = writer_catalog(self._tier, topic, topic_id)
        except TableCatalogRequiredError as exc:
            self._note(f"table {'.'.join(identifier)}: not repaired: {exc}")
            return
        table = catalog.load_table(identifier)
        coverage = Coverage.of_snapshot(table.current_snapshot(), ".".join(identifier))
        ready: list[ReadyFile] = []
        done: list[tuple[_Damaged, str]] = []
        unmerged: dict[str, str] = {}  # a run's path: the repair's action
        chains: dict[TopicIdPartition, list[ChainLink]] = {}
        stable: dict[TopicIdPartition, int] = {}
        for d in damaged:
            chain = chains.get(d.tip) or chains.setdefault(
                d.tip, segment_chain(self._tier, d.tip, jobs=self._jobs))
            if d.tip not in stable:
                stable[d.tip] = last_stable_offset(self._tier, d.tip, chain)
            held = d.run if d.run is not None else d.link
            assert held is not None
            if held.last_offset >= stable[d.tip]:
                what = (f"run file {d.run.data_file.file_path}" if d.run is not None
                        else f"file of segment {d.link.segment.segment_id}" if d.link else "")
                self._note(f"{partition_dir_name(d.tip)}: the table {what} is not rebuilt: its "
                           f"offsets are not below the tier's last stable offset "
                           f"{stable[d.tip]} (the table covers offsets whose transactions "
                           f"have no outcome yet)")
                continue
            start = coverage.start.get(d.tip.partition, 0)
            if d.run is not None:
                path = d.run.data_file.file_path
                if path not in unmerged:
                    try:
                        links = links_of_span(chain, d.run)
                        ready += convert_links(self._tier, table, d.tip, chain, links,
                                               log_start_offset=start)
                    except (TableChainError, CorruptRecordError,
                            RemoteResourceNotFoundError) as exc:
                        self._note(f"{partition_dir_name(d.tip)}: the run file {path} is not "
                                   f"unmerged: {exc}")
                        unmerged[path] = ""
                        continue
                    unmerged[path] = (f"unmerged the run file {path}: its {len(links)} "
                                      f"links' segments converted again")
                if unmerged[path]:
                    done.append((d, unmerged[path]))
                continue
            # A file straddling the start keeps its span: the repair replaces it in place.
            assert d.link is not None
            link = d.link if d.file is None else ChainLink(d.link.segment, d.file.first_offset,
                                                          d.link.last_offset)
            try:
                written = convert_ready(
                    self._tier, table, PartitionWork(d.tip, chain, (link,), None), link,
                    log_start_offset=start)
            except (CorruptRecordError, RemoteResourceNotFoundError) as exc:
                self._note(f"{partition_dir_name(d.tip)}: the table file of segment "
                           f"{link.segment.segment_id} is not rebuilt: {exc}")
                continue
            ready.append(ready_file(written))
            action = ("converted the segment again and added the file" if d.file is None
                      else "converted the segment again and replaced the file")
            done.append((d, f"{action} {written.path}"))
        if not ready:
            return
        try:
            result = TableCommitter(catalog, identifier).repair(ready)
        except (TableChainError, TableCommitConflictError) as exc:
            self._note(f"table {'.'.join(identifier)}: the repair was not committed: {exc}")
            return
        for d, action in done:
            self._report.repairs.append(Repair(
                d.finding, f"{action} (snapshot {result.snapshot_id})"))

    def _note(self, note: str) -> None:
        self._report.notes.append(note)
        log.debug("%s", note)  # a note of the report: shown once


def _holds(f: CurrentFile, link: ChainLink, *, first: bool) -> bool:
    """Whether ``f`` is named for ``link`` (the chain's first link may start after its file:
    the log start offset moved into it after the conversion)."""
    if f.last_offset != link.last_offset or f.first_offset > link.first_offset:
        return False
    if f.first_offset < link.first_offset and not first:
        return False
    return DataFileName.parse(f.data_file.file_path).segment_id == link.segment.segment_id


def _entry_holds(entry: tuple[str, int, int], link: ChainLink, first: bool) -> bool:
    """Whether a run's list entry ``(segment id, first, last)`` is ``link`` (the chain's
    first link may start after it, as after a link file's)."""
    segment, low, high = entry
    return segment == link.segment.segment_id and high == link.last_offset \
        and (low == link.first_offset or (first and low < link.first_offset))


def _groups_of(links: Sequence[RunLink], j: int, num_row_groups: int) -> range:
    """The row groups of the ``j``-th link of a run (a link's rows never share a group)."""
    end = links[j + 1].first_row_group if j + 1 < len(links) else num_row_groups
    return range(links[j].first_row_group, end)


def _run_metadata_problem(f: CurrentFile, footer: pq.FileMetaData,
                          links: Sequence[RunLink]) -> str | None:
    """What the footer of run file ``f`` says that disagrees with its name, its DataFile or
    itself (None: nothing)."""
    kv = key_values(footer)
    wanted = {KV_VERSION: RUN_FORMAT_VERSION, KV_FIRST_OFFSET: str(f.first_offset),
              KV_LAST_OFFSET: str(f.last_offset), KV_RECORDS: str(f.data_file.record_count)}
    wrong = [f"{k} is {kv.get(k)!r}, expected {v!r}" for k, v in wanted.items()
             if kv.get(k) != v]
    if wrong:
        return "the run file's key-value metadata disagrees: " + "; ".join(wrong)
    if len(links) != f.links or links[0].first_offset != f.first_offset \
            or links[-1].last_offset != f.last_offset:
        return (f"the run file lists {len(links)} links of offsets {links[0].first_offset}.."
                f"{links[-1].last_offset}; its name says {f.links} of {f.first_offset}.."
                f"{f.last_offset}")
    if footer.num_rows != f.data_file.record_count \
            or sum(k.records for k in links) != f.data_file.record_count:
        return (f"the run file holds {footer.num_rows} rows, its links "
                f"{sum(k.records for k in links)}, the table records "
                f"{f.data_file.record_count}")
    if links[-1].first_row_group > footer.num_row_groups:
        return (f"the run file's last link starts at row group {links[-1].first_row_group} of "
                f"{footer.num_row_groups}")
    for j, k in enumerate(links):
        rows = sum(footer.row_group(g).num_rows
                   for g in _groups_of(links, j, footer.num_row_groups))
        if rows != k.records:
            return (f"the row groups of link {k.first_offset}..{k.last_offset} (segment "
                    f"{k.segment_id}) hold {rows} rows, its list says {k.records}")
    return None


def _outside(first: int, last: int, spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ranges of ``[first, last]`` in none of ``spans`` (inclusive, in order)."""
    found = []
    at = first
    for a, b in sorted(spans):
        if b < at or a > last:
            continue
        if a > at:
            found.append((at, a - 1))
        at = max(at, b + 1)
    if at <= last:
        found.append((at, last))
    return found


def _data_records(data: bytes, low: int, high: int, source: str) -> int:
    """The data records (control records are not rows) of ``[low, high]`` in a segment's
    ``.log`` bytes, every batch's CRC checked."""
    count = 0
    for batch in iter_batches(data, strict=True):
        if batch.next_offset <= low or batch.base_offset > high or batch.is_control:
            continue
        try:
            count += sum(1 for r in batch.records() if low <= r.offset <= high)
        except CorruptRecordError as exc:
            raise CorruptRecordError(f"{source}: {exc}") from exc
    return count
