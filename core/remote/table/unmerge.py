"""Unmerging a run file (a compaction's merged file of consecutive links): its links converted
again from their segments (``build.convert_ready``, the tiering run's own conversion) and put
in the table in its place (``TableCommitter.repair``: ready files tiling one run file's span
replace it, coverage unchanged, one snapshot).

Run files are never trimmed: whenever a start offset (remote retention, DeleteRecords) or a
restore cut falls strictly inside a current run, the run is unmerged first
(:func:`unmerge_straddling`) and the link-file logic (``rewrite_from_start``, ``apply_start``,
``cut`` with a prefix) then runs unchanged; scrub's repair of a damaged run is the same
unmerge. The segments are still in the tier: nothing deletes a segment a current file holds.
A later compaction merges the links again (the write amplification is accepted).

Which links a run holds comes from its footer's ``tierlog.links`` (read with ranged GETs), each
checked against the tier's chain (or its committed segments: a link wholly below the tier's
log start offset, or shadowed by a restore's prefix segment): the same segment and span, else
TableChainError naming it (nothing is committed). Scrub unmerges a run whose footer cannot be
read by the chain's links of its span (:func:`links_of_span`, :func:`convert_links`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from pyiceberg.table import Table

from tierlog.errors import TableChainError
from tierlog.remote.api import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.remote.read.readable import ChainLink, segment_chain
from tierlog.remote.table.build import Call, PartitionWork, convert_ready, direct_call, ready_file
from tierlog.remote.table.commit import (
    CommitResult,
    CurrentFile,
    ReadyFile,
    TableCommitter,
    current_files,
)
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.footer import key_values, read_footer
from tierlog.remote.table.naming import DataFileName
from tierlog.remote.table.run_links import KV_LINKS, RunLink, decode_links
from tierlog.remote.tier.layout import table_key
from tierlog.remote.tier.manifest import load_partition
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

__all__ = ["convert_links", "links_of_span", "run_links", "unmerge", "unmerge_links",
           "unmerge_straddling"]


def run_links(tier: RemoteTier, tip: TopicIdPartition, run: CurrentFile, *,
              call: Call = direct_call) -> tuple[RunLink, ...]:
    """The links the footer of ``run`` (a current file of ``tip``'s table) lists, read with
    ranged GETs. CorruptRemoteMetadataError naming the file when the list is absent or
    malformed; CorruptRecordError when the object is not a Parquet file."""
    path = tier.path(table_key(tip.topic, tip.topic_id),
                     DataFileName.parse(run.data_file.file_path).key)
    size = run.data_file.file_size_in_bytes
    footer = call(f"{tip}: read the footer of the run file {path}",
                  lambda: read_footer(tier, path, size))
    return decode_links(key_values(footer).get(KV_LINKS), run.data_file.file_path)


def _chain_links(chain: Sequence[ChainLink],
                 committed: Callable[[], Sequence[RemoteLogSegmentMetadata]],
                 run: CurrentFile, links: Sequence[RunLink]) -> list[ChainLink]:
    """The tier's link of each of ``links``, with the run's spans: the chain's, whose first
    link starts at the tier's log start offset (maybe inside a link of the run), else a
    committed segment of ``committed()`` with that id ending there (a link wholly below the
    log start offset, or one a restore's prefix segment now shadows: its objects stay until
    retention or the restore's cut, which unmerge first). TableChainError naming the first
    link the tier does not hold."""
    spans = [(lk.first_offset, lk.last_offset) for lk in links]
    if not links or spans[0][0] != run.first_offset or spans[-1][1] != run.last_offset:
        raise TableChainError(
            f"partition {run.partition}: the run file {run.data_file.file_path} lists links "
            f"{spans}, which do not span its name's [{run.first_offset}, {run.last_offset}]")
    by_end = {c.last_offset: c for c in chain}
    found = []
    for lk in links:
        c = by_end.get(lk.last_offset)
        segment = c.segment if c is not None and c.segment.segment_id == lk.segment_id and (
            c.first_offset == lk.first_offset
            or (c is chain[0] and lk.first_offset < c.first_offset)) else None
        if segment is None:
            segment = next((m for m in committed() if m.segment_id == lk.segment_id
                            and m.start_offset <= lk.first_offset
                            and m.end_offset == lk.last_offset), None)
        if segment is None:
            raise TableChainError(
                f"partition {run.partition}: segment {lk.segment_id} of offsets "
                f"[{lk.first_offset}, {lk.last_offset}], a link of the run file "
                f"{run.data_file.file_path}, is not a link of the tier's chain")
        found.append(ChainLink(segment, lk.first_offset, lk.last_offset))
    return found


def links_of_span(chain: Sequence[ChainLink], run: CurrentFile) -> list[ChainLink]:
    """The chain's links tiling ``run``'s span (the first may start before the chain does,
    at the tier's log start offset): a run's links when its footer cannot be read.
    TableChainError when the chain's links do not tile it."""
    inside = [c for c in chain
              if c.last_offset >= run.first_offset and c.first_offset <= run.last_offset]
    if not inside or inside[-1].last_offset != run.last_offset \
            or inside[0].first_offset < run.first_offset \
            or (inside[0].first_offset > run.first_offset and inside[0] is not chain[0]):
        raise TableChainError(
            f"partition {run.partition}: the tier's chain has no links tiling the run file "
            f"{run.data_file.file_path} [{run.first_offset}, {run.last_offset}]")
    first = inside[0]
    return [ChainLink(first.segment, run.first_offset, first.last_offset), *inside[1:]]


def convert_links(tier: RemoteTier, table: Table, tip: TopicIdPartition,
                  chain: Sequence[ChainLink], links: Sequence[ChainLink], *,
                  log_start_offset: int, call: Call = direct_call) -> list[ReadyFile]:
    """Each of ``links`` (of ``tip``'s ``chain``) converted and published, not committed."""
    work = PartitionWork(tip, chain, tuple(links), None)
    return [ready_file(convert_ready(tier, table, work, link,
                                     log_start_offset=log_start_offset, call=call))
            for link in links]


def unmerge_links(tier: RemoteTier, table: Table, tip: TopicIdPartition, run: CurrentFile, *,
                  log_start_offset: int, call: Call = direct_call) -> list[ReadyFile]:
    """The links of ``run`` (a current run file of ``tip`` in ``table``, per its footer's
    ``tierlog.links``), each converted again from its segment without rows below
    ``log_start_offset`` (the table's start of the partition) and published, not committed:
    ready files tiling the run's span, for ``TableCommitter.repair``. TableChainError naming
    a listed segment the tier's chain no longer holds with that span (nothing published)."""
    links = run_links(tier, tip, run, call=call)
    chain = call(f"{tip}: read the segment chain", lambda: segment_chain(tier, tip))
    manifest: list[Sequence[RemoteLogSegmentMetadata]] = []

    def committed() -> Sequence[RemoteLogSegmentMetadata]:  # read once, when needed
        if not manifest:
            manifest.append(call(f"{tip}: read the tier's segments",
                                 lambda: load_partition(tier, tip)[0].committed))
        return manifest[0]

    matched = _chain_links(chain, committed, run, links)
    # The aborted transactions of the run's links are read from their own segments on.
    after = [c for c in chain if c.first_offset > run.last_offset]
    return convert_links(tier, table, tip, [*matched, *after], matched,
                         log_start_offset=log_start_offset, call=call)


def unmerge(tier: RemoteTier, committer: TableCommitter, tip: TopicIdPartition,
            run: CurrentFile, *, log_start_offset: int,
            call: Call = direct_call) -> CommitResult:
    """Replace ``run`` in ``committer``'s table by its links' files (:func:`unmerge_links`),
    in one snapshot (``TableCommitter.repair``); coverage unchanged."""
    table = call(f"{tip}: load its table",
                 lambda: committer.catalog.load_table(committer.identifier))
    ready = unmerge_links(tier, table, tip, run, log_start_offset=log_start_offset, call=call)
    result = call(f"{tip}: unmerge the run file [{run.first_offset}, {run.last_offset}]",
                  lambda: committer.repair(ready))
    log.info("%s: unmerged the run file %s into %d link files (snapshot %s)", tip,
             run.data_file.file_path, len(ready), result.snapshot_id)
    return result


def unmerge_straddling(tier: RemoteTier, committer: TableCommitter, tip: TopicIdPartition,
                       offset: int, *, call: Call = direct_call) -> bool:
    """Unmerge the current run file of ``tip`` straddling ``offset`` (``first < offset <=
    last``), so a start or a cut at ``offset`` meets link files only; False (nothing done)
    when no run file straddles it. Its links convert without rows below the table's start."""
    table = call(f"{tip}: load its table",
                 lambda: committer.catalog.load_table(committer.identifier))
    files = call(f"{tip}: read the table's files", lambda: current_files(table, tip.partition))
    run = next((f for f in files if f.is_run and f.first_offset < offset <= f.last_offset), None)
    if run is None:
        return False
    coverage = Coverage.of_snapshot(table.current_snapshot(), ".".join(committer.identifier))
    unmerge(tier, committer, tip, run, log_start_offset=coverage.start.get(tip.partition, 0),
            call=call)
    return True
