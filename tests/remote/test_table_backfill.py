"""A backfill keeps its topic's table (tierlog.remote.ops.backfill_table): after a job commits,
a topic with a table in the tier has the job's segments converted and committed, so the table's
rows are the tier's records, once each, across jobs; a topic without a table gets none.
"""

from __future__ import annotations

from pathlib import Path

from support.backfill_rows import backfill, rows, tier_batches

from tierlog.plugins.local import create_remote_storage
from tierlog.records.batch import iter_batches
from tierlog.remote.read.readable import segment_chain
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.schema import open_or_create_table, table_identifier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import has_table, topic_partitions

TOPIC = "events"
#: Small segments: a job writes several links per partition.
OPTIONS = {"new_topic_partitions": 2, "segment_bytes": 2048, "batch_bytes": 512}


def tier_of(tmp_path: Path) -> RemoteTier:
    tier: RemoteTier = create_remote_storage((tmp_path / "tier").as_uri(), {}).tier
    return tier


def tier_rows(tier: RemoteTier) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of every data record the tier's segments hold."""
    out = []
    for p in sorted(topic_partitions(tier, TOPIC)):
        for data in tier_batches(tier, TOPIC, p):
            for batch in iter_batches(data, strict=True):
                out += [(p, r.offset, r.key, r.value) for r in batch.records()]
    return sorted(out)


def table_rows(tier: RemoteTier, topic_id: str) -> list[tuple[int, int, bytes | None, bytes]]:
    table = TierCatalog(tier).load_table(table_identifier(TOPIC, topic_id))
    found = table.scan(selected_fields=("partition", "offset", "key", "value")).to_arrow()
    return sorted((r["partition"], r["offset"], r["key"], r["value"])
                  for r in found.to_pylist())


def test_a_backfill_converts_its_segments_into_the_topics_table(tmp_path: Path) -> None:
    tier = tier_of(tmp_path)
    backfill(tier, TOPIC, [[rows(0, 60)], [rows(60, 40)]], **OPTIONS)
    topic_id = topic_partitions(tier, TOPIC)[0].topic_id
    assert not has_table(tier, TOPIC, topic_id)  # no table: none is started

    open_or_create_table(TierCatalog(tier), TOPIC, topic_id)  # the topic gets a table
    backfill(tier, TOPIC, [[rows(100, 50)]], **OPTIONS)
    assert table_rows(tier, topic_id) == tier_rows(tier)  # both jobs' records, once each
    backfill(tier, TOPIC, [[rows(150, 30)], [rows(180, 30)]], **OPTIONS)
    expected = tier_rows(tier)
    assert len(expected) == 210
    assert table_rows(tier, topic_id) == expected
    table = TierCatalog(tier).load_table(table_identifier(TOPIC, topic_id))
    coverage = Coverage.of_snapshot(table.current_snapshot(), "t")
    for p, tip in topic_partitions(tier, TOPIC).items():
        chain = segment_chain(tier, tip)
        assert len(chain) > 1
        assert coverage.end(p) == chain[-1].last_offset + 1
