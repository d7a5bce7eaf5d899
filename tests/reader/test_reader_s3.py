"""tierlog.reader over a tier in S3 (moto's server over real HTTP), as a reader with nothing
but the bucket URL and s3fs options sees it."""

from __future__ import annotations

from typing import Any

import pytest
from support.s3 import S3_ACCESS_KEY, S3_REGION, S3_SECRET
from support.tier_builder import ISOLATIONS, BuiltTier, records_of

from tierlog.reader import RemoteTopicReader


def reader_options(endpoint: str) -> dict[str, Any]:
    """s3fs options of a reader (what Spark gets as ``storage.*`` options)."""
    return {"endpoint_url": endpoint, "key": S3_ACCESS_KEY, "secret": S3_SECRET,
            "client_kwargs": {"region_name": S3_REGION}}


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_reads_every_record_from_s3(s3_tier: BuiltTier, s3_endpoint: str,
                                    isolation: str) -> None:
    reader = RemoteTopicReader(s3_tier.url, reader_options(s3_endpoint))
    assert reader.list_topics() == ["clicks", "orders"]
    for topic in ("orders", "clicks"):
        got = records_of(reader.read_table(topic, isolation_level=isolation))
        assert got == s3_tier.expected(topic, isolation)


def test_offset_pushdown_fetches_fewer_bytes_from_s3(s3_tier: BuiltTier,
                                                     s3_endpoint: str) -> None:
    reader = RemoteTopicReader(s3_tier.url, reader_options(s3_endpoint))
    splits = reader.plan("orders", [1])
    reader.stats.reset()
    full = reader.read_table("orders", [1])
    full_stats = reader.stats.snapshot()
    segments = s3_tier.partitions[("orders", 1)].segments
    start = segments[-2].end_offset - 1
    reader.stats.reset()
    tail = reader.read_table("orders", [1], starting_offsets=start)
    assert tail.to_pylist() == [r for r in full.to_pylist() if r["offset"] >= start]
    assert reader.stats.bytes < full_stats["bytes"] // 2
    assert len(reader.plan("orders", [1], starting_offsets=start)) == 2
    assert len(splits) == len(segments)


def test_credentials_stay_out_of_reprs(s3_tier: BuiltTier, s3_endpoint: str) -> None:
    reader = RemoteTopicReader(s3_tier.url, reader_options(s3_endpoint))
    split = reader.plan("clicks")[0]
    assert split.storage_options["secret"] == S3_SECRET  # executors need it ...
    for shown in (repr(split), repr(reader)):  # ... logs and Spark's plan output do not
        assert S3_SECRET not in shown and S3_ACCESS_KEY not in shown
