"""Planning a Spark read of a real tier without a SparkSession (issue 13): ``minPartitions``,
``includeHeaders``, ``startingOffsetsByTimestampStrategy``, ``failOnDataLoss``, and the
failures of Spark's Kafka source (no tier at the path, unknown topic or partition, a start
past the end), raised by ``tierlog.reader.RemoteTopicReader`` for every caller.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from support.tier_builder import BuiltTier, records_of

from tierlog import Record
from tierlog.errors import (
    ConfigError,
    OffsetOutOfRangeError,
    TierNotFoundError,
    UnknownTopicOrPartitionError,
)
from tierlog.manager.log_manager import LogManager
from tierlog.reader import SCHEMA_NO_HEADERS, RemoteTopicReader, read_split
from tierlog.spark import TierlogOptions, plan_read

TIER_SEGMENT_BYTES = 6000


def plan(tier: BuiltTier, **options: str) -> list[Any]:
    return plan_read(TierlogOptions.parse({"path": tier.url, **options}))


def rows(splits: list[Any]) -> list[dict[str, Any]]:
    return [r for s in splits for b in read_split(s) for r in b.to_pylist()]


@pytest.mark.parametrize("wanted", [1, 8, 9, 40, 60])
def test_min_partitions_splits_large_ranges_further(tier: BuiltTier, wanted: int) -> None:
    plain = plan(tier, subscribe="orders", includeHeaders="true")
    assert len(plain) == 8  # one per segment
    finer = plan(tier, subscribe="orders", includeHeaders="true", minPartitions=str(wanted))
    if wanted <= len(plain):
        assert finer == plain
    else:
        assert len(finer) >= wanted
    # The same records, each exactly once, in the same order.
    assert records_of(rows(finer)) == tier.expected("orders", "read_uncommitted")


def test_min_partitions_stops_at_record_batches(tier: BuiltTier) -> None:
    splits = plan(tier, subscribe="clicks", minPartitions="100000")
    assert 1 < len(splits) < 100000
    offsets = [o for s in splits for b in read_split(s) for o in b.column("offset").to_pylist()]
    assert offsets == sorted(set(offsets))


def test_headers_are_left_out_unless_asked_for(tier: BuiltTier) -> None:
    splits = plan(tier, subscribe="orders")
    assert all(not s.include_headers for s in splits)
    batch = next(read_split(splits[0]))
    assert batch.schema == SCHEMA_NO_HEADERS
    assert "headers" in next(read_split(plan(tier, subscribe="orders",
                                             includeHeaders="true")[0])).schema.names


def test_no_tier_at_the_path_is_not_an_empty_topic(tmp_path: Path) -> None:
    for url in (str(tmp_path / "missing"), (tmp_path / "typo").as_uri()):
        for topics in ({"subscribe": "orders"}, {"subscribePattern": ".*"}):
            with pytest.raises(TierNotFoundError, match=r"^no tierlog remote tier at '"):
                plan_read(TierlogOptions.parse({"path": url, **topics}))


def test_unknown_topic_or_partition_names_what_exists(tier: BuiltTier) -> None:
    with pytest.raises(UnknownTopicOrPartitionError,
                       match=r"^topic 'ordres' is not in the tier at .*; it holds clicks, orders"):
        plan(tier, subscribe="ordres")
    with pytest.raises(UnknownTopicOrPartitionError,
                       match=r"^topic 'orders' has no partition 7 .*its partitions are 0, 1"):
        plan(tier, assign=json.dumps({"orders": [0, 7]}))
    with pytest.raises(UnknownTopicOrPartitionError,
                       match=r"^startingOffsets names partition 5 of topic 'orders'"):
        plan(tier, subscribe="orders", startingOffsets='{"orders": {"5": 0}}')
    with pytest.raises(ConfigError, match=r"^endingoffsets: names topic 'clicks', which this "):
        plan(tier, subscribe="orders", endingOffsets='{"clicks": {"0": 3}}')
    # A pattern matching nothing in a real tier reads nothing, as in Spark.
    assert plan(tier, subscribePattern="nothing.*") == []


def test_a_start_past_the_end_fails(tier: BuiltTier) -> None:
    end = tier.partitions[("orders", 0)].tier_end
    with pytest.raises(OffsetOutOfRangeError,
                       match=rf"^orders-0: starting offset {end + 1} is past the end of the "
                             rf"read, {end}"):
        plan(tier, subscribe="orders",
             startingOffsets=json.dumps({"orders": {"0": end + 1, "1": -2}}))
    assert plan(tier, assign='{"orders": [0]}',
                startingOffsets=json.dumps({"orders": {"0": end}})) == []


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "orders", "startingOffsets": '{"orders": {"0": 3}}'},
     (r"^startingoffsets: leaves out partition 1 of topic 'orders' \(it names 0\): a batch "
     r"query's startingOffsets must name every partition it reads, as Spark's Kafka source "
     r"requires \(use -2 for earliest, -1 for latest\)")),
    ({"subscribe": "orders", "endingOffsets": '{"orders": {"1": 5}}'},
     r"^endingoffsets: leaves out partition 0 of topic 'orders' \(it names 1\)"),
    ({"subscribe": "orders,clicks", "startingOffsets": '{"orders": {"0": 1, "1": 1}}'},
     r"^startingoffsets: leaves out partition 0 of topic 'clicks' \(it names none\)"),
    ({"subscribe": "orders", "startingOffsetsByTimestamp": '{"orders": {"0": 1}}'},
     r"^startingoffsetsbytimestamp: leaves out partition 1 of topic 'orders'"),
])
def test_offsets_json_must_name_every_partition_read(tier: BuiltTier, options: dict[str, str],
                                                     message: str) -> None:
    """Issue 21, defect 6: offsets naming partition 0 alone read all of the other
    partitions silently; Spark's Kafka source refuses them in a batch query."""
    with pytest.raises(ConfigError, match=message):
        plan(tier, **options)


def test_offsets_json_naming_every_partition_read_plans(tier: BuiltTier) -> None:
    """-2/-1 name a partition as earliest/latest; assign narrows what must be named; a
    timestamp taking precedence makes the offsets JSON irrelevant, as in Spark."""
    both = plan(tier, subscribe="orders", startingOffsets='{"orders": {"0": 1, "1": -2}}',
                endingOffsets='{"orders": {"0": 3, "1": -1}}')
    offsets = {(r["partition"], r["offset"]) for r in rows(both)}
    assert {o for p, o in offsets if p == 0} == {1, 2}
    assert len({o for p, o in offsets if p == 1}) > 10
    one = plan(tier, assign='{"orders": [0]}', startingOffsets='{"orders": {"0": 1}}',
               endingOffsets='{"orders": {"0": 3}}')
    assert [(r["partition"], r["offset"]) for r in rows(one)] == [(0, 1), (0, 2)]
    assert plan(tier, subscribe="orders", startingOffsets='{"orders": {"0": 1}}',
                startingTimestamp="0")


def test_a_start_timestamp_with_no_offset_follows_the_strategy(tier: BuiltTier) -> None:
    last = max(r.timestamp for _, r in tier.expected("orders", "read_uncommitted"))
    with pytest.raises(OffsetOutOfRangeError,
                       match=rf"^orders-0: no offset matches starting timestamp {last + 1}"):
        plan(tier, subscribe="orders", startingTimestamp=str(last + 1))
    assert plan(tier, subscribe="orders", startingTimestamp=str(last + 1),
                startingOffsetsByTimestampStrategy="latest") == []
    # The reader's own default is 'latest' (it read nothing before issue 13 too).
    assert RemoteTopicReader(tier.url).plan("orders", starting_timestamp=last + 1) == []


@pytest.fixture
def trimmed(tmp_path: Path, clock: Any) -> str:
    """A tier whose partition orders-0 starts at 150: offsets 0..149 deleted."""
    url = (tmp_path / "tier").as_uri()
    config = {"segment.bytes": 1500, "remote.storage.enable": True,
              "remote.storage.manager": "local", "remote.storage.url": url}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    log = mgr.create_topic("orders", 1)[0]
    for start in range(0, 300, 6):
        log.append_records([Record(key=b"k%d" % i, value=b"v") for i in range(start, start + 6)])
    log.roll()
    log.update_high_watermark(log.log_end_offset)
    mgr.tier_now()
    assert log.delete_records_before(150) == 150
    mgr.tier_now()
    mgr.close()
    return url


def test_offsets_lost_to_retention_fail_unless_fail_on_data_loss_is_false(
        trimmed: str, caplog: pytest.LogCaptureFixture) -> None:
    options = {"path": trimmed, "subscribe": "orders",
               "startingOffsets": '{"orders": {"0": 140}}'}
    with pytest.raises(OffsetOutOfRangeError,
                       match=r"^orders-0: starting offset 140 is below the earliest offset in "
                             r"the tier, 150: offsets 140 to 149 were deleted .*failOnDataLoss"):
        plan_read(TierlogOptions.parse(options))
    with caplog.at_level(logging.WARNING, logger="tierlog.reader"):
        splits = plan_read(TierlogOptions.parse({**options, "failOnDataLoss": "false"}))
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        ("orders-0: starting offset 140 is below the earliest offset in the tier, 150: offsets "
        "140 to 149 were deleted (retention or DeleteRecords); reading from 150 "
        "(fail_on_data_loss is off)")]
    assert [r["offset"] for r in rows(splits)] == list(range(150, 300))
