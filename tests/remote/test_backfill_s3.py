"""The tier backfill on the ``s3`` plugin, over HTTP to moto's S3 server: every codec round
trips byte-equal to a tier reader, and a LogManager adopts the backfilled topic from S3."""

from __future__ import annotations

import uuid

import pytest
from support.backfill_rows import backfill, fields, log_batches, rows, tier_batches
from support.s3 import S3_BUCKET

from tierlog.manager.log_manager import LogManager
from tierlog.plugins.s3 import create_remote_storage
from tierlog.reader import RemoteTopicReader
from tierlog.records.compression import CODEC_NAMES


@pytest.fixture
def s3_url() -> str:
    return f"s3://{S3_BUCKET}/backfill-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("codec", sorted(CODEC_NAMES))
def test_backfill_on_s3_round_trips_every_codec(s3_url, s3_options, codec):
    tier = create_remote_storage(s3_url, s3_options).tier
    backfill(tier, "orders", [[rows(0, 40)], [rows(40, 30)]], new_topic_partitions=2,
             compression=codec, batch_bytes=300, segment_bytes=1000)
    reader = RemoteTopicReader(s3_url, s3_options)
    table = reader.read_table("orders", include_headers=True).to_pylist()
    for p in (0, 1):
        written = fields(tier_batches(tier, "orders", p))
        got = [(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"],
                tuple((h["key"], h["value"]) for h in r["headers"] or ()))
               for r in sorted(table, key=lambda r: r["offset"]) if r["partition"] == p]
        assert got == written
        assert [r[0] for r in got] == list(range(len(got)))
    assert len(table) == 70
    assert not tier.fs.find(tier.path("_staging"))


def test_a_logmanager_adopts_a_topic_backfilled_on_s3(tmp_path, clock, s3_url, s3_options):
    tier = create_remote_storage(s3_url, s3_options).tier
    backfill(tier, "t", [[rows(0, 50)]], compression="lz4", batch_bytes=300,
             segment_bytes=1000)
    written = tier_batches(tier, "t", 0)
    config = {"remote.storage.manager": "s3", "remote.storage.url": s3_url,
              "segment.bytes": 2048,
              **{f"remote.storage.options.{k}": v for k, v in s3_options.items()}}
    with LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False) as mgr:
        (partition_log,) = mgr.adopt_topic("t")
        assert partition_log.log_end_offset == 50
        assert log_batches(partition_log, 0, 50) == written
        assert partition_log.recovery.snapshots_from_remote == [50]
