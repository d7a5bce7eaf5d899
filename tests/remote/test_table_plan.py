"""TablePlan: one snapshot's coverage and files. Files pruned by partition and by the offset
statistics, with their offset bounds; a range split at the coverage, its start raised to the
table's start; a partition with nothing covered; a table with no commit; files and coverage of
the same snapshot while others commit; the committer's links (bounds are the rows', a link of no
rows is not planned); columns found by name in any schema; a file without offset bounds
named."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import BinaryType, IntegerType, LongType, NestedField, StringType
from support.table_commits import IDENT, SCHEMA, SPEC, commit_rows, rows
from support.table_files import IDENT as TOPIC_IDENT
from support.table_files import create_table, write_link

from tierlog.errors import CorruptRemoteMetadataError
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import TableCommitter
from tierlog.remote.table.coverage import Coverage
from tierlog.remote.table.plan import PlannedFile, TablePlan
from tierlog.remote.tier.object_store import RemoteTier


@pytest.fixture
def catalog(tier: RemoteTier) -> TierCatalog:
    catalog = TierCatalog(tier)
    catalog.create_table(IDENT, SCHEMA, partition_spec=SPEC)
    return catalog


@pytest.fixture
def table(catalog: TierCatalog) -> Table:
    """p0: files [0, 10), [10, 20), [20, 30); p1: [0, 5); nothing of p2."""
    for start in (0, 10, 20):
        commit_rows(catalog, 0, start, 10)
    commit_rows(catalog, 1, 0, 5)
    return catalog.load_table(IDENT)


def bounds(files: list[PlannedFile]) -> list[tuple[int, int, int, int]]:
    return [(f.partition, f.first_offset, f.last_offset, f.record_count) for f in files]


def test_files_are_pruned_by_partition_and_offset_bounds(table: Table) -> None:
    plan = TablePlan.of(table)
    assert bounds(plan.files(0, 12, 25)) == [(0, 10, 19, 10), (0, 20, 29, 10)]
    assert bounds(plan.files(0, 0, 30)) == [(0, 0, 9, 10), (0, 10, 19, 10), (0, 20, 29, 10)]
    assert bounds(plan.files(0, 19, 20)) == [(0, 10, 19, 10)]
    assert bounds(plan.files(1, 0, 100)) == [(1, 0, 4, 5)]
    assert plan.files(0, 30, 40) == [] and plan.files(0, 5, 5) == []
    planned = plan.files(0, 0, 1)[0]
    assert planned.path.endswith(".parquet") and planned.path.startswith(table.location())
    assert planned.size == len(table.io.new_input(planned.path)) > 0


def test_a_range_splits_at_the_coverage(table: Table) -> None:
    plan = TablePlan.of(table)
    assert plan.coverage.covered == {0: 30, 1: 5}
    split = plan.split(0, 5, 50)
    assert (split.table, split.tail) == (range(5, 30), range(30, 50))
    split = plan.split(0, 5, 20)
    assert (split.table, split.tail) == (range(5, 20), range(20, 20))
    split = plan.split(0, 40, 50)
    assert (split.table, split.tail) == (range(40, 40), range(40, 50))
    split = plan.split(1, 0, 5)
    assert (split.table, split.tail) == (range(5), range(5, 5))


def test_a_partition_with_nothing_covered_is_all_tail(table: Table) -> None:
    plan = TablePlan.of(table)
    split = plan.split(2, 3, 9)
    assert (split.partition, split.table, split.tail) == (2, range(3, 3), range(3, 9))
    assert plan.files(2, 0, 100) == []


def test_the_table_start_raises_the_start(catalog: TierCatalog, table: Table) -> None:
    coverage = Coverage.of_snapshot(table.current_snapshot(), IDENT[1])
    table.append(rows(0, 30, 10),
                 snapshot_properties=coverage.advanced(0, 40).started(0, 15).summary())
    plan = TablePlan.of(catalog.load_table(IDENT))
    split = plan.split(0, 5, 50)
    assert (split.table, split.tail) == (range(15, 40), range(40, 50))
    split = plan.split(0, 5, 12)  # wholly below the start: nothing left to read
    assert (split.table, split.tail) == (range(15, 15), range(15, 15))


def test_files_and_coverage_come_from_one_snapshot(catalog: TierCatalog, table: Table) -> None:
    plan = TablePlan.of(table)
    commit_rows(catalog, 0, 30, 10)
    commit_rows(catalog, 2, 0, 10)
    assert plan.snapshot_id == table.current_snapshot().snapshot_id  # type: ignore[union-attr]
    assert plan.coverage.covered == {0: 30, 1: 5}
    assert bounds(plan.files(0, 0, 100))[-1] == (0, 20, 29, 10)
    assert plan.files(2, 0, 100) == []
    newer = TablePlan.of(catalog.load_table(IDENT))
    assert newer.snapshot_id != plan.snapshot_id
    assert newer.coverage.covered == {0: 40, 1: 5, 2: 10}
    assert bounds(newer.files(0, 0, 100))[-1] == (0, 30, 39, 10)
    assert bounds(newer.files(2, 0, 100)) == [(2, 0, 9, 10)]


def test_a_table_with_no_commit_plans_everything_as_tail(catalog: TierCatalog) -> None:
    plan = TablePlan.of(catalog.load_table(IDENT))
    assert plan.snapshot_id is None and plan.coverage == Coverage()
    assert plan.files(0, 0, 100) == []
    split = plan.split(0, 0, 100)
    assert (split.table, split.tail) == (range(0), range(100))


def test_columns_are_found_by_name_in_any_schema(catalog: TierCatalog) -> None:
    schema = Schema(NestedField(1, "value", BinaryType(), required=False),
                    NestedField(2, "topic", StringType(), required=True),
                    NestedField(3, "offset", LongType(), required=True),
                    NestedField(4, "partition", IntegerType(), required=True))
    spec = PartitionSpec(PartitionField(source_id=4, field_id=1000,
                                        transform=IdentityTransform(), name="partition"))
    table = catalog.create_table(("tierlog", "wide-AAAAAAAAAAAAAAAAAAAAAA"), schema,
                                 partition_spec=spec)
    data = pa.table({"value": [b"a", None, b"c"], "topic": ["wide"] * 3,
                     "offset": pa.array([7, 8, 9], pa.int64()),
                     "partition": pa.array([3, 3, 3], pa.int32())}, schema=schema.as_arrow())
    table.append(data, snapshot_properties=Coverage().advanced(3, 10).started(3, 7).summary())
    plan = TablePlan.of(table)
    assert bounds(plan.files(3, 0, 100)) == [(3, 7, 9, 3)]
    assert plan.files(3, 10, 100) == []


def test_a_table_that_is_not_a_topic_table_is_refused(catalog: TierCatalog) -> None:
    schema = Schema(NestedField(1, "partition", IntegerType(), required=True),
                    NestedField(2, "offset", StringType(), required=True))
    table = catalog.create_table(("tierlog", "odd-AAAAAAAAAAAAAAAAAAAAAA"), schema)
    with pytest.raises(CorruptRemoteMetadataError, match="no long column 'offset'"):
        TablePlan.of(table)


def test_a_file_without_offset_bounds_is_named(catalog: TierCatalog) -> None:
    table = catalog.create_table(("tierlog", "bare-AAAAAAAAAAAAAAAAAAAAAA"), SCHEMA,
                                 partition_spec=SPEC,
                                 properties={"write.metadata.metrics.default": "none"})
    table.append(rows(0, 0, 3), snapshot_properties=Coverage().advanced(0, 3).summary())
    path = TablePlan.of(table).table.inspect.files()["file_path"][0].as_py()
    with pytest.raises(CorruptRemoteMetadataError, match="has no bounds of column 'offset'") as e:
        TablePlan.of(table).files(0, 0, 3)
    assert path in str(e.value)


def test_the_committers_links_plan_by_their_rows(tier: RemoteTier) -> None:
    catalog = TierCatalog(tier)
    table = create_table(catalog)  # the topic table's own schema
    links = [write_link(tier, table, 0, 0, 9),
             write_link(tier, table, 0, 10, 19, offsets=range(10, 17)),  # 17-19: markers
             write_link(tier, table, 0, 20, 24, offsets=[]),             # markers only
             write_link(tier, table, 0, 25, 29)]
    TableCommitter(catalog, TOPIC_IDENT, backoff=lambda attempt: None).commit(
        links, starts={0: 0})
    plan = TablePlan.of(catalog.load_table(TOPIC_IDENT))
    assert plan.coverage.covered == {0: 30}
    assert bounds(plan.files(0, 0, 30)) == [(0, 0, 9, 10), (0, 10, 16, 7), (0, 25, 29, 5)]
    assert plan.files(0, 17, 25) == []  # no row there, in the table or the log
    split = plan.split(0, 12, 40)
    assert (split.table, split.tail) == (range(12, 30), range(30, 40))
