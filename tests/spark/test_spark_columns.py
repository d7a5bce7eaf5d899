"""A user's ``.schema(...)`` naming some of the tierlog source's columns: the read yields
just those (Spark 4.3 never passes a Python data source the columns a query uses, so this
is how fewer columns reach the JVM). ``planning.read_columns`` is tested over every column
subset without Spark; one Spark test reads a pruned schema and one sees the error.
"""

from __future__ import annotations

import itertools
import re

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from support.tier_builder import BuiltTier, records_of

from tierlog.errors import ConfigError
from tierlog.reader import schema
from tierlog.spark.planning import read_columns

TIER_SEGMENT_BYTES = 6000


@pytest.mark.parametrize("include_headers", [False, True])
def test_read_columns_over_every_ordered_subset(include_headers: bool) -> None:
    full = schema(include_headers)
    assert read_columns(full, include_headers=include_headers) is None
    for size in range(1, 4):
        for fields in itertools.permutations(full, size):
            requested = pa.schema(fields)
            assert read_columns(requested, include_headers=include_headers) == requested.names


@pytest.mark.parametrize(("requested", "message"), [
    (pa.schema([("values", pa.binary())]), ("schema: names column 'values', which the tierlog "
                                           "source does not have")),
    (pa.schema([("offset", pa.int32())]), ("schema: gives column 'offset' the type int32; "
                                          "the tierlog source reads it as int64")),
    (pa.schema([("value", pa.large_binary())]), "gives column 'value' the type large_binary"),
    (pa.schema([("headers", schema(True).field("headers").type)]),
     "names column 'headers', which"),  # includeHeaders=false reads no headers
    (pa.schema([("value", pa.binary()), ("value", pa.binary())]), "names a column twice"),
    (pa.schema([]), "schema: names no column"),
])
def test_read_columns_names_a_bad_column(requested: pa.Schema, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        read_columns(requested, include_headers=False)


def test_a_user_schema_reads_just_its_columns(spark: SparkSession, tier: BuiltTier) -> None:
    df = (spark.read.format("tierlog").schema("offset long, value binary, partition int")
          .option("path", tier.url).option("subscribe", "orders").load())
    assert df.columns == ["offset", "value", "partition"]
    got = sorted((r["partition"], r["offset"], r["value"]) for r in df.collect())
    expected = sorted((p, rec.offset, rec.value) for p, rec in
                      tier.expected("orders", "read_uncommitted"))
    assert got == expected
    # The whole schema given explicitly reads as the default does.
    full = (spark.read.format("tierlog").schema(
        "key binary, value binary, topic string, partition int, offset long, "
        "timestamp timestamp, timestampType int, "
        "headers array<struct<key: string, value: binary>>")
        .option("path", tier.url).option("subscribe", "orders")
        .option("includeHeaders", "true").load())
    assert sorted(records_of([r.asDict(recursive=True) for r in full.collect()]),
                  key=lambda pr: (pr[0], pr[1].offset)) == \
        tier.expected("orders", "read_uncommitted")


def test_a_user_schema_with_an_unknown_column_fails_naming_it(spark: SparkSession,
                                                              tier: BuiltTier) -> None:
    from pyspark.errors import AnalysisException

    with pytest.raises(AnalysisException, match=r"ConfigError: schema: names column 'vale'"):
        (spark.read.format("tierlog").schema("vale binary").option("path", tier.url)
         .option("subscribe", "orders").load().count())
