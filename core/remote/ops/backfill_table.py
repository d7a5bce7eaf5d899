"""A backfill keeps its topics' tables (DESIGN §6): after a job commits (``BackfillCommitter``),
each topic it wrote that has an Iceberg table in the tier gets the job's new links converted and
committed, so the table keeps covering what the tier holds.

A backfill writes only topics no LogManager owns (their tables have no tiering run to follow
them): the table is the one record that a topic has one (the tier keeps no topic configs), so a
topic whose table exists is updated and a topic without one is left alone (``tierlog table
build`` starts one). Each partition's committed links above the table's covered end and below
the tier's last stable offset are converted (``tierlog.remote.table.build``, the rule the
tiering run and ``tierlog table build`` share) and committed in one snapshot per topic
(``TableCommitter.commit``, which skips what another writer covered meanwhile), so a job
committed by a crashed driver and rolled forward later is converted by the next job's update (or
the build). Here on the driver, one link after another.

A failure is returned, never raised: the job's records are committed and visible whatever
happens to the table, which then lags until the next backfill or build converts from its
coverage again; a file published and not committed is an orphan the table's sweep removes.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tierlog.remote.api import TopicIdPartition
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import has_table

log = logging.getLogger(__name__)

__all__ = ["update_tables"]


def update_tables(tier: RemoteTier, tips: Iterable[TopicIdPartition]) -> str | None:
    """Convert and commit the uncovered stable links of ``tips`` (a job's partitions) into the
    tables of their topics that have one. None when done (or nothing had a table), else what
    failed (logged as a warning)."""
    topics: dict[tuple[str, str], list[TopicIdPartition]] = {}
    for tip in tips:
        topics.setdefault((tip.topic, tip.topic_id), []).append(tip)
    errors = []
    for (topic, topic_id), mine in sorted(topics.items()):
        try:
            if has_table(tier, topic, topic_id):
                _update(tier, topic, topic_id, mine)
        except Exception as exc:  # noqa: BLE001 - the job is committed whatever the table does
            message = f"{topic}: its table was not updated after the backfill: {exc}"
            log.warning("%s (it lags until the next backfill or `tierlog table build`)",
                        message)
            errors.append(message)
    return "; ".join(errors) or None


def _update(tier: RemoteTier, topic: str, topic_id: str,
            tips: list[TopicIdPartition]) -> None:
    from tierlog.remote.table.build import convert_ready, ready_file, uncovered_links
    from tierlog.remote.table.catalogs import open_topic_table, writer_catalog
    from tierlog.remote.table.commit import ReadyFile, TableCommitter
    from tierlog.remote.table.coverage import Coverage
    from tierlog.remote.table.schema import table_identifier

    # A user catalog's table: TableCatalogRequiredError (the job knows no topic config).
    catalog = writer_catalog(tier, topic, topic_id)
    table = open_topic_table(tier, catalog, topic, topic_id)
    coverage = Coverage.of_snapshot(table.current_snapshot(), ".".join(table.name()))
    ready: list[ReadyFile] = []
    starts: dict[int, int] = {}
    for tip in sorted(tips, key=lambda t: t.partition):
        work = uncovered_links(tier, tip, coverage.end(tip.partition))
        starts.update(work.starts)
        for link in work.links:
            ready.append(ready_file(convert_ready(
                tier, table, work, link,
                log_start_offset=coverage.start.get(tip.partition, 0))))
    if ready:
        result = TableCommitter(catalog, table_identifier(topic, topic_id)).commit(
            ready, starts=starts)
        log.info("%s: the backfill added %d files to its table", topic, len(result.added))
