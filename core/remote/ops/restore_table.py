"""A restore's cut of the topic's Iceberg table (DESIGN §6): the table follows the tier's cut.

``LogManager``'s restore calls :func:`cut_tables` after the records below each cut are
committed to the tier as a segment of their own (``commit_cut_prefix``) and before the segments
at or above the cut leave the tier (``cut_tier``). For each partition whose table covers
offsets at or past its cut, one snapshot (``TableCommitter.cut``) removes the files of links at
or above the cut, replaces the file of the link the cut falls in by the file of its uploaded
prefix (that segment converted, ``convert_link``) and records ``covered = cut``: the one move of
coverage backwards. A cut inside a run file (a compaction's) unmerges the run first
(``tierlog.remote.table.unmerge``), so the cut meets link files only. The table then never
holds a row the restored log does not, and a stale former owner's commit fails the
committer's gap check.

A failure raises, and the restore fails before any segment leaves the tier; run again, it cuts
the same (a partition cut already is not cut twice). A topic without a table costs one LIST
(``_tables/``) and imports nothing of pyiceberg. A restore into a new topic (a fork) starts no
table: the new topic id has none; ``tierlog table build`` fills one when asked.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import has_table

if TYPE_CHECKING:
    from tierlog.remote.ops.restore import PartitionRestore
    from tierlog.remote.table.commit import ReadyFile, TableCommitter

log = logging.getLogger(__name__)

__all__ = ["cut_tables"]


def cut_tables(tier: RemoteTier | None, restores: Sequence[PartitionRestore],
               catalog_properties: Mapping[str, str] | None = None) -> None:
    """Cut the table of the restored topic (``restores``: its partitions' plans, their
    prefixes committed to the tier) at each partition's cut; nothing when the tier holds no
    table of it. Raises what the committer raises (TableChainError, TableCommitConflictError,
    RemoteStorageError), so the restore stops before the tier is cut. ``catalog_properties``:
    the topic's ``remote.log.table.catalog.*`` (none given: a user catalog's table is refused
    with TableCatalogRequiredError)."""
    if tier is None or not restores:
        return
    tip = restores[0].tip
    if not has_table(tier, tip.topic, tip.topic_id):
        return
    from tierlog.remote.table.catalogs import writer_catalog
    from tierlog.remote.table.commit import TableCommitter
    from tierlog.remote.table.schema import table_identifier
    from tierlog.remote.table.unmerge import unmerge_straddling

    # A user catalog's table (its pointer exists): TableCatalogRequiredError, nothing cut.
    catalog = writer_catalog(tier, tip.topic, tip.topic_id, catalog_properties)
    committer = TableCommitter(catalog, table_identifier(tip.topic, tip.topic_id))
    for state in sorted(restores, key=lambda s: s.tip.partition):
        unmerge_straddling(tier, committer, state.tip, state.cut)
        result = committer.cut(state.tip.partition, state.cut,
                               prefix=_prefix_file(tier, committer, state))
        if result.snapshot_id is not None:
            log.info("%s: its table cut at offset %d (%d files removed, %d added)", state.tip,
                     state.cut, len(result.removed), len(result.added))


def _prefix_file(tier: RemoteTier, committer: TableCommitter, state: PartitionRestore
                 ) -> ReadyFile | None:
    """The file of the prefix segment below the cut, when the cut falls inside a link the
    table holds (None: the cut is on a link boundary, or the table does not reach it)."""
    from tierlog.remote.read.readable import ChainLink
    from tierlog.remote.read.transactions import aborted_txns
    from tierlog.remote.table.commit import ReadyFile, current_files
    from tierlog.remote.table.convert import convert_link
    from tierlog.remote.table.coverage import Coverage
    from tierlog.remote.tier.manifest import load_partition

    p, cut = state.tip.partition, state.cut
    table = committer.catalog.load_table(committer.identifier)
    coverage = Coverage.of_snapshot(table.current_snapshot(), ".".join(committer.identifier))
    end = coverage.end(p)
    if end is None or end <= cut:
        return None
    straddling = [f for f in current_files(table, p) if f.first_offset < cut <= f.last_offset]
    if not straddling:
        return None
    manifest, _ = load_partition(tier, state.tip)
    prefix = next((m for m in manifest.committed
                   if m.start_offset <= straddling[0].first_offset and m.end_offset == cut - 1
                   and m.start_offset == state.local_start), None)
    if prefix is None:  # no prefix segment: the cut's link goes whole (coverage ends before it)
        return None
    link = ChainLink(prefix, straddling[0].first_offset, cut - 1)
    written = convert_link(tier, table, state.tip, link,
                           aborted_txns=aborted_txns(tier, [link], link.first_offset, cut),
                           log_start_offset=coverage.start.get(p, 0))
    return ReadyFile(written.partition, written.first_offset, written.last_offset,
                     written.data_file)
