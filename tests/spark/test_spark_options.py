"""The ``tierlog`` data source's options beside Spark's Kafka source (issue 13), parsed with
no SparkSession: each option's meaning and default, the combinations Spark refuses, and the
one warning for ``kafka.*`` options.
"""

from __future__ import annotations

import logging

import pytest

from tierlog.errors import ConfigError
from tierlog.spark import SCHEMA_DDL, SCHEMA_DDL_NO_HEADERS, TierlogOptions, schema_ddl

BASE = {"path": "/t", "subscribe": "orders"}


def parse(**options: str) -> TierlogOptions:
    return TierlogOptions.parse({**BASE, **options})


def test_defaults_are_sparks() -> None:
    o = parse()
    assert (o.starting_offsets, o.ending_offsets) == ("earliest", "latest")
    assert o.include_headers is False and o.fail_on_data_loss is True
    assert o.timestamp_strategy == "error" and o.min_partitions is None
    assert o.isolation_level == "read_uncommitted" and o.ignored_kafka_options == ()


def test_include_headers_chooses_seven_or_eight_columns() -> None:
    assert parse().include_headers is False
    assert parse(includeHeaders="TRUE").include_headers is True
    assert schema_ddl(include_headers=False) == SCHEMA_DDL_NO_HEADERS
    assert [c.split()[0] for c in SCHEMA_DDL_NO_HEADERS.split(", ")] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    assert schema_ddl(include_headers=True) == SCHEMA_DDL
    assert SCHEMA_DDL.startswith(SCHEMA_DDL_NO_HEADERS + ", headers array<")


@pytest.mark.parametrize(("options", "attribute", "value"), [
    ({"minPartitions": "12"}, "min_partitions", 12),
    ({"failOnDataLoss": "false"}, "fail_on_data_loss", False),
    ({"startingOffsetsByTimestampStrategy": "LATEST"}, "timestamp_strategy", "latest"),
    ({"startingOffsetsByTimestampStrategy": "error"}, "timestamp_strategy", "error"),
    ({"startingTimestamp": "1700000000000"}, "starting_timestamp", 1_700_000_000_000),
    ({"endingTimestamp": "1700000000001"}, "ending_timestamp", 1_700_000_000_001),
    ({"startingOffsetsByTimestamp": '{"orders": {"0": 5}}'}, "starting_by_timestamp",
     {"orders": {0: 5}}),
    ({"endingOffsetsByTimestamp": '{"orders": {"1": 9}}'}, "ending_by_timestamp",
     {"orders": {1: 9}}),
    ({"startingOffsets": '{"orders": {"0": 3, "1": -2}}'}, "starting_offsets",
     {"orders": {0: 3, 1: -2}}),
    ({"endingOffsets": '{"orders": {"0": -1}}'}, "ending_offsets", {"orders": {0: -1}}),
    ({"kafka.isolation.level": "read_committed"}, "isolation_level", "read_committed"),
    ({"isolation.level": "read_committed"}, "isolation_level", "read_committed"),
    ({"topicId": "q0Vs7vGvSZ6ljmj-ZmXC1A"}, "topic_ids", "q0Vs7vGvSZ6ljmj-ZmXC1A"),
])
def test_each_option_has_its_meaning(options: dict[str, str], attribute: str,
                                     value: object) -> None:
    assert getattr(parse(**options), attribute) == value


def test_topic_choices() -> None:
    assert TierlogOptions.parse({"path": "/t", "subscribe": " a, ,b "}).subscribe == ("a", "b")
    assert TierlogOptions.parse({"path": "/t", "subscribePattern": "or.*"}
                                ).subscribe_pattern == "or.*"
    assert TierlogOptions.parse({"path": "/t", "assign": '{"a": [0, 2]}'}).assign == {"a": (0, 2)}


@pytest.mark.parametrize(("options", "message"), [
    ({"path": "/t", "subscribe": " , "}, r"^subscribe: no topics to subscribe to"),
    ({"path": "/t", "subscribePattern": "  "}, r"^subscribepattern: the pattern .* is empty"),
    ({"path": "/t", "subscribePattern": "("}, r"^subscribepattern: '\(' is not a regular"),
    ({"path": "/t", "assign": "orders"}, r"^assign: no topic partitions to assign"),
    ({"path": "/t", "assign": '{"a": ["x"]}'}, r"^assign: must be a JSON object"),
    ({"path": "/t", "subscribe": "a", "subscribePattern": "b"}, r"got subscribe, subscribe"),
    ({**BASE, "minPartitions": "0"}, r"^minpartitions: must be at least 1"),
    ({**BASE, "includeHeaders": "yes"}, r"^includeheaders: must be true or false"),
    ({**BASE, "failOnDataLoss": "no"}, r"^failondataloss: must be true or false"),
    ({**BASE, "startingOffsetsByTimestampStrategy": "earliest"},
     r"^startingoffsetsbytimestampstrategy: must be one of error, latest"),
    ({**BASE, "startingOffsets": '{"orders": {"0": -3}}'}, r"orders-0: offset -3 is negative"),
    ({**BASE, "startingOffsets": '{"orders": {"0": 9}}', "endingOffsets": '{"orders": {"0": 5}}'},
     r"^startingoffsets: orders-0: start 9 is after the end 5"),
    ({**BASE, "startingOffsetsByTimestamp": '{"orders": {"0": 9}}',
      "endingOffsetsByTimestamp": '{"orders": {"0": 5}}'},
     r"^startingoffsetsbytimestamp: orders-0: start 9 is after the end 5"),
    ({**BASE, "startingTimestamp": "9", "endingTimestamp": "5"},
     r"^startingtimestamp: 9 is after endingTimestamp 5"),
    ({**BASE, "isolation.level": "read_committed", "kafka.isolation.level": "read_uncommitted"},
     r"^isolation.level: differs from kafka.isolation.level"),
    ({**BASE, "kafka.isolation.level": "dirty"}, r"^kafka.isolation.level: must be one of"),
])
def test_combinations_spark_refuses(options: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        TierlogOptions.parse(options)


@pytest.mark.parametrize(("options", "message"), [
    ({"startingOffsets": "latest"}, (r"^startingoffsets: starting offset can't be latest for "
                                     r"batch queries")),
    ({"startingOffsets": '{"orders": {"0": -1}}'}, (r"^startingoffsets: orders-0: starting "
                                                    r"offset can't be -1 \(latest\)")),
])
def test_a_batch_query_cannot_start_at_latest(options: dict[str, str], message: str) -> None:
    parsed = parse(**options)  # a stream may start there
    with pytest.raises(ConfigError, match=message):
        parsed.check_batch()


def test_a_timestamp_start_makes_latest_offsets_irrelevant() -> None:
    # Spark's precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets.
    parse(startingOffsets="latest", startingTimestamp="5").check_batch()
    parse(startingOffsets="latest",
          startingOffsetsByTimestamp='{"orders": {"0": 5}}').check_batch()
    both = parse(startingOffsets='{"orders": {"0": 3}}', startingTimestamp="7",
                 startingOffsetsByTimestamp='{"orders": {"0": 5}}')
    assert both.starting_for("orders") == ({0: 3}, 7)
    by_ts = parse(startingOffsetsByTimestamp='{"orders": {"0": 5}}',
                  endingTimestamp="9")
    assert by_ts.starting_for("orders") == ("earliest", {0: 5})
    assert by_ts.ending_for("orders") == ("latest", 9)
    assert by_ts.starting_for("clicks") == ("earliest", None)


def test_kafka_options_are_ignored_with_one_warning_naming_path(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.spark"):
        o = parse(**{"kafka.bootstrap.servers": "broker:9092", "kafka.group.id": "g",
                     "kafka.isolation.level": "read_committed"})
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "path=/t" in text and "kafka.bootstrap.servers, kafka.group.id" in text
    assert "kafka.isolation.level" not in o.ignored_kafka_options
    assert o.isolation_level == "read_committed"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tierlog.spark"):
        parse()
    assert not caplog.records


def test_unknown_options_still_fail() -> None:
    with pytest.raises(ConfigError, match=r"^groupidprefix: unknown option"):
        parse(groupIdPrefix="x")


def test_start_after_end_is_checked_after_the_precedence() -> None:
    # The offsets lose to the timestamps on both sides, so they are not compared.
    parse(startingOffsets='{"orders": {"0": 9}}', endingOffsets='{"orders": {"0": 5}}',
          startingTimestamp="1", endingTimestamp="2")
    # Different kinds on the two sides are resolved per partition, not compared here.
    parse(startingOffsets='{"orders": {"0": 9}}', endingTimestamp="2")
    with pytest.raises(ConfigError, match=r"^startingoffsetsbytimestamp: orders-1: start 8"):
        parse(startingOffsets='{"orders": {"1": 1}}', endingOffsets='{"orders": {"1": 2}}',
              startingOffsetsByTimestamp='{"orders": {"1": 8}}',
              endingOffsetsByTimestamp='{"orders": {"1": 3}}')


def test_max_offsets_per_trigger_is_ignored_by_a_batch_query_with_a_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.spark"):
        parse(maxOffsetsPerTrigger="5").check_batch()
    assert [r.getMessage() for r in caplog.records] == [
        "tierlog: maxOffsetsPerTrigger is ignored in batch queries"]
