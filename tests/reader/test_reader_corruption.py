"""Damage outside the CRC of a remote ``.log`` (a batch's base offset) is found by checking
offset continuity against the segment's metadata and offset index: readers of the tier and
``Log.read`` served from the tier raise CorruptRecordError naming the object instead of
silently returning fewer (or renumbered) rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog import Record
from tierlog.errors import CorruptRecordError
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader
from tierlog.records import iter_batches
from tierlog.remote.rlm.integrity import check_batch_offsets
from tierlog.remote.rlm.rlm import topic_id_partition
from tierlog.remote.tier.layout import partition_dir_name

BATCHES, PER_BATCH = 40, 3


@pytest.fixture
def tiered(tmp_path, clock):
    config = {"segment.bytes": 1 << 20, "index.interval.bytes": 200, "local.retention.bytes": 0,
              "remote.storage.enable": True, "remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    log = mgr.create_topic("orders", 1)[0]
    for i in range(BATCHES):
        log.append_records([Record(key=b"k%d" % (i * PER_BATCH + j), value=b"v" * 40)
                            for j in range(PER_BATCH)])
    log.roll()
    mgr.tier_now()
    assert log.local_log_start_offset == BATCHES * PER_BATCH
    directory = tmp_path / "tier" / partition_dir_name(topic_id_partition(log))
    (segment,) = directory.glob("*.log")
    yield mgr, log, segment
    mgr.close()


def _flip_base_offset(segment: Path, batch: int, byte: int) -> None:
    data = bytearray(segment.read_bytes())
    position = [b.position for b in iter_batches(bytes(data))][batch]
    data[position + byte] ^= 0x01
    segment.write_bytes(bytes(data))


DAMAGE = [(batch, byte) for batch in (0, 1, 17, BATCHES - 2, BATCHES - 1) for byte in (7, 6, 0)]


@pytest.mark.parametrize(("batch", "byte"), DAMAGE)
@pytest.mark.parametrize("split_bytes", [1 << 20, 700])
def test_tier_reader_refuses_a_damaged_base_offset(tiered, batch, byte, split_bytes):
    _, _, segment = tiered
    url = segment.parent.parent.as_uri()
    assert RemoteTopicReader(url).read_table("orders").num_rows == BATCHES * PER_BATCH
    _flip_base_offset(segment, batch, byte)
    reader = RemoteTopicReader(url, split_bytes=split_bytes)
    with pytest.raises(CorruptRecordError, match=segment.name):
        reader.read_table("orders")
    with pytest.raises(CorruptRecordError, match=segment.name):
        reader.read_table("orders", starting_offsets={0: batch * PER_BATCH + 1},
                          ending_offsets={0: batch * PER_BATCH + 2})


@pytest.mark.parametrize(("batch", "byte"), DAMAGE)
def test_log_read_from_the_tier_refuses_a_damaged_base_offset(tiered, batch, byte):
    _, log, segment = tiered
    _flip_base_offset(segment, batch, byte)
    with pytest.raises(CorruptRecordError, match=segment.stem):
        offset = 0
        while offset < log.local_log_start_offset:
            info = log.read(offset, max_bytes=400)
            batches = list(info.batches())
            assert batches
            offset = batches[-1].next_offset


def test_the_offset_check_accepts_gaps_but_not_overlaps() -> None:
    from tierlog.records.builder import build_batch

    def batch(base: int, n: int) -> bytes:
        return bytes(build_batch([Record(key=b"k", value=b"v")] * n, base_offset=base))

    check_batch_offsets(batch(10, 3) + batch(20, 2), "x", first_offset=10, last_offset=21)
    with pytest.raises(CorruptRecordError, match=r"obj.*position"):
        check_batch_offsets(batch(10, 3) + batch(12, 2), "obj", first_offset=10, last_offset=21)
    with pytest.raises(CorruptRecordError, match="obj"):
        check_batch_offsets(batch(10, 3), "obj", first_offset=11, last_offset=21)
    with pytest.raises(CorruptRecordError, match="obj"):
        check_batch_offsets(batch(10, 3), "obj", first_offset=0, last_offset=11)
    with pytest.raises(CorruptRecordError, match="index"):
        check_batch_offsets(batch(10, 3), "obj", first_offset=0, last_offset=99, anchor=13)


@pytest.mark.parametrize("batch", [0, 17, BATCHES - 1])
def test_timestamp_lookups_in_the_tier_refuse_a_damaged_base_offset(tiered, batch):
    _, log, segment = tiered
    assert log.offset_for_timestamp(0) == 0
    _flip_base_offset(segment, batch, 6)
    with pytest.raises(CorruptRecordError, match=segment.stem):
        log.offset_for_timestamp(0)
