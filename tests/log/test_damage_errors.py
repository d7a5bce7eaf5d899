"""Errors about damaged data say where (issue 21): a CorruptRecordError names the topic,
partition, segment file or object key, offset, position and the check that failed (the CRC
first), whichever reader hits it (Log.read local or tiered, tierlog.reader, the CLI, which
also says what to run next). Reads of the tier never come back short in silence: a cut
``.log`` object or a size in the metadata that disagrees with it is an error giving both
sizes; an int of the tier's JSON outside its range is refused naming the object and field;
a lost ``.index``/``.timeindex`` is scanned around, with one warning naming it."""

from __future__ import annotations

import json
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli_runner import tierlog, user_error
from support.clock import FakeClock

from tierlog import Record
from tierlog.errors import (
    CorruptRecordError,
    CorruptRemoteMetadataError,
    OffsetOutOfRangeError,
    TruncatedBatchError,
    locating_corrupt_records,
)
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader
from tierlog.records import iter_batches
from tierlog.records.batch import HEADER_SIZE
from tierlog.records.timestamps import format_timestamp_ms
from tierlog.remote.rlm.rlm import topic_id_partition
from tierlog.remote.tier.layout import partition_dir_name

BATCHES, PER_BATCH = 40, 3
TIERED = BATCHES * PER_BATCH


def _fill(log: Log, batches: int, prefix: bytes = b"k") -> None:
    for i in range(batches):
        log.append_records([Record(key=prefix + b"%d" % (i * PER_BATCH + j), value=b"v" * 40)
                            for j in range(PER_BATCH)])


@pytest.fixture
def tiered(tmp_path: Path, clock: FakeClock) -> Iterator[tuple[LogManager, Log, Path]]:
    """A topic whose first 120 offsets are in one remote segment (and no longer local), and
    the tier's partition directory."""
    config = {"segment.bytes": 1 << 20, "index.interval.bytes": 200, "local.retention.bytes": 0,
              "remote.storage.enable": True, "remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    log = mgr.create_topic("orders", 1)[0]
    _fill(log, BATCHES)
    log.roll()
    mgr.tier_now()
    assert log.local_log_start_offset == TIERED
    yield mgr, log, tmp_path / "tier" / partition_dir_name(topic_id_partition(log))
    mgr.close()


def _segment(directory: Path) -> Path:
    (segment,) = directory.glob("*.log")
    return segment


def _damage_record(path: Path, batch: int, at: int = HEADER_SIZE) -> int:
    """Overwrite the first record length varint of batch ``batch`` (a framing error that the
    batch's CRC also catches); returns the batch's position."""
    data = bytearray(path.read_bytes())
    position = [b.position for b in iter_batches(bytes(data))][batch]
    data[position + at] = 0x7F  # record length -64
    path.write_bytes(bytes(data))
    return position


def _rewrite_json(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _segment_metadata(directory: Path, change: Any) -> None:
    """Apply ``change`` to the segment's metadata in the manifest and its _metadata object."""
    _rewrite_json(directory / "_manifest.json", lambda d: change(d["segments"][0]))
    for path in (directory / "_metadata").glob("*.json"):
        _rewrite_json(path, change)


# --- the error's fields and its one message format ------------------------------------------


def test_the_error_fills_in_what_it_lacks_as_it_rises() -> None:
    inner = TruncatedBatchError("only 15 bytes", offset=7, position=10, check="size")
    assert str(inner) == "batch at offset 7 (position 10): size check failed: only 15 bytes"
    outer = inner.located(topic="orders", partition=3, file="orders-3/x.log", shift=100,
                          offset=99, check="CRC")
    assert type(outer) is TruncatedBatchError
    assert (outer.topic, outer.partition, outer.file) == ("orders", 3, "orders-3/x.log")
    assert (outer.offset, outer.position, outer.check) == (7, 110, "size")  # kept, moved
    assert str(outer) == ("orders-3, orders-3/x.log, batch at offset 7 (position 110): size "
                          "check failed: only 15 bytes")
    # Once the file is named, positions are the file's: a caller further up moves nothing.
    assert outer.located(file="other", shift=5).position == 110
    again = pickle.loads(pickle.dumps(outer))  # a Spark task's error crosses processes
    assert (type(again), str(again), again.file) == (type(outer), str(outer), outer.file)
    assert str(CorruptRecordError("plain words")) == "plain words"
    with (pytest.raises(CorruptRecordError, match=r"^t-0, f, position 4: bad$") as caught,
          locating_corrupt_records(topic="t", partition=0, file="f", shift=4)):
        raise CorruptRecordError("bad", position=0)
    assert isinstance(caught.value.__cause__, CorruptRecordError)


# --- CRC first, and the location, wherever a read meets damage --------------------------------


def test_a_local_read_reports_the_crc_failure_with_the_segment_file(tmp_path: Path,
                                                                      clock: FakeClock) -> None:
    with LogManager.open(tmp_path / "data", {}, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 10)
        segment = log.directory / "00000000000000000000.log"
        position = _damage_record(segment, 4)
        with pytest.raises(CorruptRecordError) as caught:
            list(log.read(0, max_bytes=1 << 20).records())
    error = caught.value
    assert (error.topic, error.partition, error.file) == ("orders", 0, str(segment))
    assert (error.offset, error.position, error.check) == (4 * PER_BATCH, position, "CRC")
    assert "varint" not in str(error) and "record length" not in str(error)
    assert str(error).startswith(f"orders-0, {segment}, batch at offset 12 (position "
                                 f"{position}): CRC check failed: stored crc 0x")


def test_a_batch_whose_crc_fails_is_never_decoded(tmp_path: Path, clock: FakeClock) -> None:
    """A flipped byte inside a value keeps the framing intact: only the CRC can tell, and a
    consumer must not be handed the damaged value."""
    with LogManager.open(tmp_path / "data", {}, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 10)
        segment = log.directory / "00000000000000000000.log"
        data = bytearray(segment.read_bytes())
        data[-5] ^= 0x01  # the last record's value
        segment.write_bytes(bytes(data))
        with pytest.raises(CorruptRecordError, match="CRC check failed") as caught:
            list(log.read(0).records())
    assert caught.value.offset == 9 * PER_BATCH


def test_consume_names_the_damage_and_what_to_run_next(tmp_path: Path, clock: FakeClock) -> None:
    with LogManager.open(tmp_path / "data", {}, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 10)
        log.roll()
        segment = log.directory / "00000000000000000000.log"
    position = _damage_record(segment, 4)
    line = user_error("consume", "--data-dir", tmp_path / "data", "--topic", "orders")
    assert f"orders-0, {segment}, batch at offset 12 (position {position}): CRC check" in line
    assert f"tierlog dump-log --verify {segment}" in line
    assert "tierlog scrub --deep" in line


def test_dump_log_still_shows_the_records_of_a_batch_failing_its_crc(tmp_path: Path,
                                                                    clock: FakeClock) -> None:
    """As Kafka's DumpLogSegments: the batch is marked invalid and its records listed (the
    reads' CRC-first rule is not the dump's)."""
    with LogManager.open(tmp_path / "data", {}, time_ms=clock, start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, 2)
        log.roll()
        segment = log.directory / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x01  # the last record's value: the framing stays intact
    segment.write_bytes(bytes(data))
    out = tierlog("dump-log", "--deep-iteration", segment).stdout
    assert "isvalid: false" in out
    assert f"| offset: {2 * PER_BATCH - 1} " in out


def test_a_tiered_read_names_the_object_key_and_the_partition(tiered) -> None:
    _, log, directory = tiered
    segment = _segment(directory)
    position = _damage_record(segment, 17)
    with pytest.raises(CorruptRecordError) as caught:
        offset = 0
        while offset < TIERED:
            batches = list(log.read(offset, max_bytes=400).batches())
            offset = batches[-1].next_offset
    error = caught.value
    assert (error.topic, error.partition, error.check) == ("orders", 0, "CRC")
    assert error.file == f"{directory.name}/{segment.name}"
    assert (error.offset, error.position) == (17 * PER_BATCH, position)


@pytest.mark.parametrize("verify_crc", [True, False])
def test_the_tier_reader_names_the_object_offset_position_and_check(tiered, verify_crc) -> None:
    _, _, directory = tiered
    segment = _segment(directory)
    position = _damage_record(segment, 30)
    reader = RemoteTopicReader(directory.parent.as_uri(), verify_crc=verify_crc)
    with pytest.raises(CorruptRecordError) as caught:
        reader.read_table("orders")
    error = caught.value
    assert (error.topic, error.partition, error.file) == ("orders", 0, str(segment))
    assert (error.offset, error.position, error.check) == (30 * PER_BATCH, position, "CRC")
    # Spark shows the Python worker's exception text: it holds the whole location.
    assert f"orders-0, {segment}, batch at offset 90 (position {position})" in str(error)


# --- reads never come back short in silence ------------------------------------------------


def test_a_tiered_read_of_a_cut_object_says_so_with_both_sizes(tiered) -> None:
    _, log, directory = tiered
    segment = _segment(directory)
    size = segment.stat().st_size
    segment.write_bytes(segment.read_bytes()[:size // 2])
    with pytest.raises(CorruptRecordError, match=rf"expected {size} bytes .*found \d+") as caught:
        list(log.read(TIERED - 10).records())
    assert caught.value.file == f"{directory.name}/{segment.name}"
    assert caught.value.check == "size"


def test_a_tiered_read_refuses_a_metadata_size_one_byte_short(tmp_path, clock) -> None:
    config = {"segment.bytes": 1 << 20, "index.interval.bytes": 200, "local.retention.bytes": 0,
              "remote.storage.enable": True, "remote.storage.manager": "local",
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, BATCHES)
        log.roll()
        mgr.tier_now()
        directory = tmp_path / "tier" / partition_dir_name(topic_id_partition(log))
    size = _segment(directory).stat().st_size
    _segment_metadata(directory, lambda d: d.update(segmentSizeInBytes=size - 1))
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        log = mgr.log("orders", 0)
        for offset in (TIERED - 1, TIERED - 20):  # the cut batch, and a read reaching it
            with pytest.raises(CorruptRecordError,
                               match=rf"expected {size - 1} bytes .*reaching byte {size}"):
                list(log.read(offset).records())


def test_the_tier_reader_refuses_a_cut_object(tiered) -> None:
    _, _, directory = tiered
    segment = _segment(directory)
    size = segment.stat().st_size
    segment.write_bytes(segment.read_bytes()[:size // 2])
    reader = RemoteTopicReader(directory.parent.as_uri())
    with pytest.raises(CorruptRecordError, match=rf"expected {size} bytes .*found {size // 2}"):
        reader.read_table("orders")


def test_the_tier_reader_refuses_a_metadata_size_one_byte_short(tiered) -> None:
    _, _, directory = tiered
    segment = _segment(directory)
    size = segment.stat().st_size
    _segment_metadata(directory, lambda d: d.update(segmentSizeInBytes=size - 1))
    reader = RemoteTopicReader(directory.parent.as_uri())
    with pytest.raises(CorruptRecordError,
                       match=rf"{segment.name}.*expected {size - 1} bytes .*found {size}"):
        reader.read_table("orders")


@pytest.fixture(params=["local", "s3"])
def cut_tier(request, tmp_path: Path, clock: FakeClock) -> Iterator[dict[str, Any]]:
    """A topic whose first 120 offsets are only in one remote ``.log`` object (local tier or
    S3 on moto), cut to half its size: the tier's URL and options, the Log, the object's key
    and its size before and after the cut."""
    if request.param == "s3":
        import uuid

        from support.s3 import S3_BUCKET, s3_client
        options = request.getfixturevalue("s3_options")
        url = f"s3://{S3_BUCKET}/cut-{uuid.uuid4().hex[:10]}"
        fs = s3_client(options["endpoint_url"])
    else:
        import fsspec
        options, url = {}, (tmp_path / "tier").as_uri()
        fs = fsspec.filesystem("file")
    config = {"segment.bytes": 1 << 20, "index.interval.bytes": 200, "local.retention.bytes": 0,
              "remote.storage.enable": True, "remote.storage.manager": request.param,
              "remote.storage.url": url,
              **{f"remote.storage.options.{k}": v for k, v in options.items()}}
    mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
    try:
        log = mgr.create_topic("orders", 1)[0]
        _fill(log, BATCHES)
        log.roll()
        mgr.tier_now()
        assert log.local_log_start_offset == TIERED
        root = url.split("://", 1)[1].rstrip("/")
        if request.param == "local":
            root = str(tmp_path / "tier")
        directory = f"{root}/{partition_dir_name(topic_id_partition(log))}"
        (path,) = [p for p in fs.ls(directory, detail=False) if p.endswith(".log")]
        data = fs.cat_file(path)
        fs.pipe_file(path, data[:len(data) // 2])
        fs.invalidate_cache()
        key = f"{directory.rsplit('/', 1)[1]}/{path.rsplit('/', 1)[1]}"
        yield {"url": url, "options": options, "log": log, "key": key, "size": len(data),
               "found": len(data) // 2}
    finally:
        mgr.close()


def test_a_tiered_read_past_the_cut_says_so_with_both_sizes(cut_tier) -> None:
    """The read starts at or beyond the object's real end (an object store refuses the
    range as not satisfiable): the same size error, with the size the object really has."""
    size, found = cut_tier["size"], cut_tier["found"]
    with pytest.raises(CorruptRecordError,
                       match=rf"expected {size} bytes \(its metadata\), found {found}$") as caught:
        list(cut_tier["log"].read(TIERED - 3).records())
    assert (caught.value.file, caught.value.check) == (cut_tier["key"], "size")
    assert (caught.value.topic, caught.value.partition) == ("orders", 0)


def test_the_tier_reader_past_the_cut_says_so_with_both_sizes(cut_tier) -> None:
    size, found = cut_tier["size"], cut_tier["found"]
    reader = RemoteTopicReader(cut_tier["url"], cut_tier["options"], split_bytes=1000)
    with pytest.raises(CorruptRecordError,
                       match=rf"expected {size} bytes \(its metadata\), found {found}$") as caught:
        reader.read_table("orders", starting_offsets={0: TIERED - 3})
    assert caught.value.check == "size" and caught.value.file.endswith(cut_tier["key"])
    assert (caught.value.topic, caught.value.partition) == ("orders", 0)


# --- ints of the tier's JSON are checked against their range ------------------------------


@pytest.mark.parametrize("verify", [True, False])
def test_an_end_offset_no_int64_can_follow_is_refused_naming_the_field(tiered, verify) -> None:
    _, _, directory = tiered
    _segment_metadata(directory, lambda d: d.update(endOffset=(1 << 63) - 1))
    reader = RemoteTopicReader(directory.parent.as_uri(), verify_manifest=verify)
    with pytest.raises(CorruptRemoteMetadataError, match=r"_manifest.json.*'endOffset'"):
        reader.read_table("orders")


@pytest.mark.parametrize(("field", "value"), [("highWatermark", 1 << 63),
                                              ("generation", 1 << 64)])
def test_a_tail_manifest_int_out_of_range_names_the_field(tiered, field, value) -> None:
    _, log, directory = tiered
    tail = {"version": 1, "topicId": log.topic_id, "topic": "orders",
            "partition": 0, "generation": 1, "highWatermark": TIERED,
            "lastStableOffset": TIERED, "logStartOffset": 0, "tierEnd": TIERED, "objects": [],
            "abortedTxns": [], field: value}
    (directory / "_tail.json").write_text(json.dumps(tail))
    with pytest.raises(CorruptRemoteMetadataError, match=rf"_tail.json.*'{field}'"):
        RemoteTopicReader(directory.parent.as_uri()).read_table("orders")


# --- a lost index is scanned around ------------------------------------------------------------


def test_a_tiered_read_copes_with_lost_indexes_and_warns_once(tiered, caplog) -> None:
    _, log, directory = tiered
    for suffix in ("index", "timeindex"):
        (path,) = directory.glob(f"*.{suffix}")
        path.unlink()
    caplog.set_level(logging.WARNING, logger="tierlog.remote.rlm.index_cache")
    offsets = []
    offset = 0
    while offset < TIERED:
        records = list(log.read(offset, max_bytes=400).records())
        offsets += [r.offset for r in records]
        offset = offsets[-1] + 1
    assert offsets == list(range(TIERED))
    assert next(r.offset for r in log.read(100).records()) == 100
    assert log.offset_for_timestamp(0) == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert any(f"{directory.name}/" in w and w.split()[2].endswith(".index") for w in warnings)
    assert any(w.split()[2].endswith(".timeindex") for w in warnings)


# --- timestamps in messages ------------------------------------------------------------------


def test_timestamps_in_messages_are_shown_in_utc_too(tiered) -> None:
    assert format_timestamp_ms(1_700_000_000_000) == "1700000000000 (2023-11-14T22:13:20.000Z)"
    assert format_timestamp_ms(-1) == "-1 (no timestamp)"
    assert format_timestamp_ms((1 << 63) - 1) == str((1 << 63) - 1)
    _, _, directory = tiered
    reader = RemoteTopicReader(directory.parent.as_uri())
    with pytest.raises(OffsetOutOfRangeError, match=r"4102444800000 \(2100-01-01T00:00:00.000Z\)"):
        reader.read_table("orders", starting_timestamp=4_102_444_800_000,
                          timestamp_strategy="error")


# --- Spark shows the location ------------------------------------------------------------------


def test_spark_shows_where_the_damage_is(tiered, spark) -> None:
    _, _, directory = tiered
    segment = _segment(directory)
    position = _damage_record(segment, 30)
    frame = (spark.read.format("tierlog").option("path", directory.parent.as_uri())
             .option("subscribe", "orders").load())
    with pytest.raises(Exception) as caught:  # Spark's wrapper types vary by version
        frame.count()
    assert (f"CorruptRecordError: orders-0, {segment}, batch at offset 90 (position "
            f"{position}): CRC check failed") in str(caught.value)
