"""The tier records each partition's log start offset (Kafka's remote log start offset), and
readers of the tier honour it: records deleted by DeleteRecords or retention inside a
segment are not returned, ``earliest`` is the recorded log start offset."""

from __future__ import annotations

import pytest

from tierlog import Record
from tierlog.errors import OffsetOutOfRangeError
from tierlog.reader import RemoteTopicReader
from tierlog.remote import RemoteLogMetadataManager, read_partition_manifest
from tierlog.remote.rlm.rlm import topic_id_partition

MANAGER_CONFIG = {"segment.bytes": 1500, "remote.storage.enable": True,
                  "remote.storage.manager": "local"}


def _fill(log, count: int = 300, per_batch: int = 6) -> None:
    for start in range(0, count, per_batch):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 20)
                            for i in range(start, start + per_batch)])
    log.roll()
    log.update_high_watermark(log.log_end_offset)


def _offsets(table) -> list[int]:
    return table.column("offset").to_pylist()


@pytest.fixture
def tiered(manager, tmp_path):
    log = manager.create_topic("orders", 1)[0]
    _fill(log)
    manager.tier_now()
    assert log.delete_records_before(150) == 150
    # The segment holding 138..149 is still in the tier, and so is its first batch.
    segments = manager.remote_log_manager.rlmm.list_remote_log_segments(topic_id_partition(log))
    assert any(m.start_offset < 150 <= m.end_offset for m in segments)
    manager.tier_now()
    return log, (tmp_path / "tier").as_uri()


@pytest.mark.parametrize("verify", [True, False])
def test_reader_starts_at_the_recorded_log_start_offset(tiered, verify):
    log, url = tiered
    reader = RemoteTopicReader(url, verify_manifest=verify)
    assert reader.offset_range("orders", 0)[0] == 150
    got = _offsets(reader.read_table("orders"))
    assert got == list(range(150, log.highest_offset_in_remote + 1))
    assert _offsets(reader.read_table("orders", starting_offsets={0: -2}))[0] == 150
    assert _offsets(reader.read_table("orders", min_offset=100))[0] == 150


def test_a_start_below_the_log_start_offset_is_data_loss(tiered):
    _, url = tiered
    with pytest.raises(OffsetOutOfRangeError, match="150"):
        RemoteTopicReader(url).read_table("orders", starting_offsets={0: 140})
    lenient = RemoteTopicReader(url, fail_on_data_loss=False)
    assert _offsets(lenient.read_table("orders", starting_offsets={0: 140}))[0] == 150


def test_the_log_start_offset_survives_manifest_rewrites_and_restarts(tiered, manager, tmp_path):
    log, url = tiered
    tip = topic_id_partition(log)
    rsm = manager.remote_log_manager.rsm
    # More segments copied: the manifest is rewritten with them and keeps the log start.
    log.append_records([Record(key=b"more", value=b"m" * 900)])
    log.roll()
    manager.tier_now()
    from fsspec.implementations.local import LocalFileSystem
    manifest = read_partition_manifest(LocalFileSystem(), rsm.root, tip)
    assert manifest.log_start_offset == 150
    # A metadata manager with no local state reloads it from the tier.
    fresh = RemoteLogMetadataManager(rsm.tier, tmp_path / "fresh-cache")
    assert fresh.log_start_offset(tip) == 150
    fresh.update_log_start_offset(tip, 120)  # never moves backwards
    assert fresh.log_start_offset(tip) == 150
    assert RemoteTopicReader(url).offset_range("orders", 0)[0] == 150
