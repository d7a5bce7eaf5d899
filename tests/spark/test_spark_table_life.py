"""Spark over a topic's table through the topic's life, with a real LogManager (issue 23's
differential): as tiered, compacted into run files, after DeleteRecords inside a run, after
remote retention inside a run, and after a restore whose cut falls inside a run. In each
state, at both isolation levels (the whole topic at one, from inside a run at the other),
``tierlog.spark.table`` (Spark's Parquet reader over the table, the tierlog source for the
tail) returns exactly the rows of ``spark.read.format("tierlog")`` (the segments), and both
equal ``Log.read``'s records below the tier's end (committed and aborted transactions
spanning segments, headers, null keys and values: support.tier_builder's ``write_orders``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import fsspec
from pyspark.sql import DataFrame, SparkSession
from support.tier_builder import ISOLATIONS, PartitionWriter, expected_records, write_orders

from tierlog.manager.log_manager import LogManager
from tierlog.remote.read.readable import segment_chain
from tierlog.remote.table.catalog import TierCatalog
from tierlog.remote.table.commit import CurrentFile, current_files
from tierlog.remote.table.compact import compact_table
from tierlog.remote.table.schema import table_identifier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.topics import topic_partitions
from tierlog.spark import table

TOPIC = "orders"
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


def _rows(df: DataFrame) -> list[Row]:
    return sorted((r.partition, r.offset, None if r.key is None else bytes(r.key),
                   None if r.value is None else bytes(r.value),
                   tuple((h.key, None if h.value is None else bytes(h.value))
                         for h in r.headers or ()))
                  for r in df.collect())


class _Life:
    """One partition's topic with its table, tiered by a LogManager."""

    def __init__(self, root: Path, clock: Any) -> None:
        self.root = root
        self.url = (root / "tier").as_uri()
        self.clock = clock
        self.config = {"segment.bytes": 2048, "remote.storage.enable": True,
                       "remote.storage.manager": "local", "remote.storage.url": self.url,
                       "remote.storage.options.fsync": False}
        self.mgr = self._open()
        (log,) = self.mgr.create_topic(TOPIC, 1, config={
            "remote.log.table.enable": True, "retention.ms": -1})
        self.writer = PartitionWriter(log)

    def _open(self) -> LogManager:
        return LogManager.open(self.root / "data", self.config, time_ms=self.clock,
                               start_scheduler=False)

    def compact(self) -> None:
        """Merge the partition's files into run files (the smallest target, no bound on
        links)."""
        report = compact_table(_file_tier(self.root), TOPIC, target_bytes=1 << 20,
                               max_links=1000)
        assert report.runs == 1 and not report.stale, report

    def tier_now(self) -> Any:
        self.writer.log.update_high_watermark(self.writer.log.log_end_offset)
        result = self.mgr.tier_now()[f"{TOPIC}-0"]
        assert not result.errors and not result.table_errors, result
        return result

    def files(self) -> list[CurrentFile]:
        log = self.writer.log
        table = TierCatalog(_file_tier(self.root)).load_table(
            table_identifier(TOPIC, log.topic_id))
        return current_files(table, 0)

    def tier_end(self) -> int:
        tip = topic_partitions(_file_tier(self.root), TOPIC)[0]
        return segment_chain(_file_tier(self.root), tip)[-1].last_offset + 1

    def restore(self, cut: int) -> None:
        self.mgr.close()
        shutil.rmtree(self.root / "data")
        self.mgr = self._open()
        (log,) = self.mgr.restore_topic(TOPIC, to_offset=cut, execute=True)
        self.writer.log = log


def _file_tier(root: Path) -> RemoteTier:
    return RemoteTier(fsspec.filesystem("file"), str(root / "tier"))


def _check(spark: SparkSession, life: _Life, state: str, inside: int) -> None:
    end = life.tier_end()
    for isolation in ISOLATIONS:
        want = [(0, r.offset, r.key, r.value, tuple(r.headers or ()))
                for r in expected_records(life.writer, end, isolation)]
        # The whole topic at one level, from inside a run at the other (the reader's
        # differential, tests/reader/test_reader_table.py, covers every level and offset).
        for start in ((None,) if isolation == ISOLATIONS[0] else (inside,)):
            options = {"subscribe": TOPIC, "includeHeaders": "true",
                       "isolation.level": isolation}
            if start is not None:
                options["startingOffsets"] = json.dumps({TOPIC: {"0": start}})
            got = _rows(table(spark, life.url, **options))
            source = _rows(spark.read.format("tierlog").option("path", life.url)
                           .options(**options).load())
            expected = [w for w in want if start is None or w[1] >= start]
            assert got == source == expected, (state, isolation, start)
            assert expected, (state, isolation, start)


def _inside_a_run(files: list[CurrentFile]) -> int:
    """An offset inside the second link of the partition's (one) run file."""
    runs = [f for f in files if f.is_run]
    assert len(runs) == 1 and runs[0].links >= 3, files
    return runs[0].first_offset + (runs[0].last_offset - runs[0].first_offset) // 3


def test_the_table_path_equals_the_source_and_log_read_through_a_topics_life(
        spark: SparkSession, tmp_path: Path, clock: Any) -> None:
    life = _Life(tmp_path, clock)
    try:
        write_orders(life.writer, 0, rounds=4)
        life.tier_now()
        links = [(f.first_offset, f.last_offset) for f in life.files()]
        assert len(links) >= 6 and not any(f.is_run for f in life.files())
        _check(spark, life, "as tiered", links[2][0] + 1)

        life.compact()
        inside = _inside_a_run(life.files())
        _check(spark, life, "compacted", inside)

        # DeleteRecords inside the run: it is unmerged, rows below the start leave the table.
        life.writer.log.delete_records_before(inside)
        life.tier_now()
        assert not any(f.is_run and f.first_offset < inside <= f.last_offset
                       for f in life.files())
        assert life.files()[0].first_offset <= inside
        _check(spark, life, "delete records inside a run", inside + 3)

        # Remote retention whose new start falls inside a (new) run.
        life.compact()
        run = next(f for f in life.files() if f.is_run)
        chain = segment_chain(_file_tier(tmp_path),
                              topic_partitions(_file_tier(tmp_path), TOPIC)[0])
        keep = [link for link in chain if link.first_offset > run.first_offset][1:]
        log = life.writer.log
        local_only = sum(s.size for s in log.segments.values()
                         if s.base_offset > log.highest_offset_in_remote)
        size = sum(link.segment.segment_size_in_bytes for link in keep) + local_only
        life.mgr.alter_topic_config(TOPIC, {"retention.bytes": size})
        life.writer.log = log = life.mgr.log(TOPIC, 0)  # reopened with the new config
        result = life.tier_now()
        assert result.deleted_remote
        start = log.log_start_offset
        assert run.first_offset < start <= keep[0].first_offset  # inside the run
        _check(spark, life, "retention inside a run", start + 1)

        # A restore whose cut falls inside a (new) run.
        life.compact()
        run = next(f for f in life.files() if f.is_run)
        life.restore(run.first_offset + (run.last_offset - run.first_offset) // 2)
        cut = life.writer.log.log_end_offset  # the last stable cut at or before the asked
        assert run.first_offset + 1 < cut <= run.last_offset
        assert life.files() and all(f.last_offset < cut for f in life.files())
        assert not any(f.is_run and f.first_offset < cut <= f.last_offset
                       for f in life.files())
        _check(spark, life, "restore inside a run", start + 1)
    finally:
        life.mgr.close()
