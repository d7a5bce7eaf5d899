"""tierlog.spark.convert_job: ``build_table`` with its conversions on Spark's executors (one task
per link, the driver committing each batch) builds the same table as the local build: the
reader's rows below each partition's covered end, once each, and a rerun finds nothing to do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from support.tier_builder import build_tier

from tierlog.plugins.local import create_remote_storage
from tierlog.reader import SCHEMA, RemoteTopicReader
from tierlog.remote.table.build import build_table
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import current_files
from tierlog.remote.table.schema import ABORTED, table_identifier
from tierlog.spark.convert_job import build_table_on_spark


def test_a_spark_build_holds_the_readers_rows_once(spark: Any, tmp_path: Path) -> None:
    url = (tmp_path / "tier").as_uri()
    built = build_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url, rounds=3)
    tier = built.rsm.tier
    reader = RemoteTopicReader(url)
    expected = {p: reader.read_table("orders", [p]) for p in (0, 1)}

    report = build_table_on_spark(tier, "orders", spark=spark, batch_links=4)
    assert report.links == report.committed > 4 and report.commits == -(-report.links // 4)
    assert report.covered[0] == built.partitions[("orders", 0)].tier_end

    tip = built.partitions[("orders", 0)].tip
    table = TierCatalog(tier).load_table(table_identifier("orders", tip.topic_id))
    rows = pa.concat_tables(pq.read_table(f.data_file.file_path.removeprefix("file://"))
                            for f in current_files(table))
    for p, end in report.covered.items():
        mine = rows.filter(pc.equal(rows["partition"], p)).sort_by("offset")
        want = expected[p].filter(pc.less(expected[p]["offset"], end))
        assert want.num_rows > 0
        assert mine.drop_columns([ABORTED]).cast(SCHEMA).equals(want), p
    assert build_table(tier, "orders").links == 0  # all covered: the local build agrees


def test_a_spark_build_commits_into_a_users_catalog(spark: Any, tmp_path: Path) -> None:
    """Executors convert for the table of a user's SQL catalog (they are handed the driver's
    table metadata, not a catalog): the table in that catalog covers every link, and the
    bucket's own catalog holds no table of the topic."""
    from pyiceberg.exceptions import NoSuchTableError

    from tierlog.remote.table.catalogs import open_catalog

    url = (tmp_path / "tier").as_uri()
    built = build_tier(tmp_path, create_remote_storage(url, {"fsync": False}), url, rounds=2)
    tier = built.rsm.tier
    catalog = open_catalog(tier, {"type": "sql", "uri": f"sqlite:///{tmp_path}/cat.db"})

    report = build_table_on_spark(tier, "orders", catalog=catalog, spark=spark, batch_links=2)
    assert report.links == report.committed == 3 and report.commits == 2

    tip = built.partitions[("orders", 0)].tip
    identifier = table_identifier("orders", tip.topic_id)
    table = catalog.load_table(identifier)
    rows = sum(f.data_file.record_count for f in current_files(table))
    assert rows == report.records > 0
    with pytest.raises(NoSuchTableError):  # nothing in the tier's own catalog
        TierCatalog(tier).load_table(identifier)
    assert build_table(tier, "orders", catalog=catalog).links == 0  # the local build agrees
