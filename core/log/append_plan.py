"""The validation half of an append: check producer batches as bytes and plan their write.

``plan_append`` walks the batches without copying them, checks each one (magic, CRC, sizes,
counts, timestamps, offsets), assigns offsets, and returns the pieces for one vectored write.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tierlog.config import INT_MAX, LONG_MAX, LogConfig
from tierlog.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    OffsetsOutOfOrderError,
    RecordBatchTooLargeError,
    TruncatedBatchError,
)
from tierlog.log.segment import AppendedBatch
from tierlog.records.batch import HEADER_SIZE, RecordBatch, set_log_append_time
from tierlog.records.compression import max_decompressed_bytes

if TYPE_CHECKING:
    from tierlog.producer.append import ProducerBatchRun

_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_BASE_OFFSET = struct.Struct(">q")

#: Who is appending: a producer (validated and assigned offsets), the transaction
#: coordinator (control markers), or a copy of another log (offsets kept).
ORIGINS = ("client", "coordinator", "replication")


@dataclass(slots=True)
class AppendPlan:
    """Everything the Log needs to write one validated append."""

    pieces: list[bytes | bytearray | memoryview] = field(default_factory=list)
    batches: list[AppendedBatch] = field(default_factory=list)
    views: list[RecordBatch] = field(default_factory=list)
    base_offsets: dict[int, int] = field(default_factory=dict)
    epoch_starts: list[tuple[int, int]] = field(default_factory=list)
    first_offset: int = -1
    last_offset: int = -1
    max_timestamp: int = -1
    offset_of_max_timestamp: int = -1
    log_append_time: int = -1
    record_count: int = 0
    size: int = 0
    producer_run: ProducerBatchRun | None = None
    """The producer-state effect of the append, validated by the Log before the write and
    applied after it (None: no batch has a producer id)."""


def plan_append(
    data: bytes | bytearray | memoryview,
    *,
    config: LogConfig,
    next_offset: int,
    now_ms: int,
    assign_offsets: bool,
    leader_epoch: int | None,
    origin: str,
    check_records: bool,
) -> AppendPlan:
    """Validate every batch in ``data`` and plan the write; raises before anything is written.

    ``check_records`` also walks every record of a producer's batch (record.validation=full).
    """
    if origin not in ORIGINS:
        raise ValueError(f"origin must be one of {', '.join(ORIGINS)}, got {origin!r}")
    view = data if isinstance(data, memoryview) else memoryview(data)
    total = len(view)
    if total == 0:
        raise InvalidRecordError("append of zero bytes: at least one record batch is required")
    max_message = config["max.message.bytes"]
    log_append = config.is_log_append_time
    before_max = config["message.timestamp.before.max.ms"]
    after_max = config["message.timestamp.after.max.ms"]
    client = origin == "client"
    # A follower appends the leader's batches as they are (Kafka's appendAsFollower): the
    # leader checked their sizes and timestamps and stamped their LogAppendTime; checking
    # again against this node's clock and limits could refuse what the leader acknowledged,
    # and re-stamping would make the replicas' bytes differ.
    replicated = origin == "replication"
    plan = AppendPlan()
    offset = next_offset
    previous_last = next_offset - 1
    position = 0
    while position < total:
        batch = _read_batch(view, position, total, None if replicated else max_message)
        size = batch.size_in_bytes
        if not replicated:
            _check_produced(batch, position, client, check_records, max_message)
        if not replicated and not batch.is_control and not log_append \
                and batch.timestamp_type == 0:
            _check_timestamp(batch, position, now_ms, before_max, after_max)
        if assign_offsets:
            base = offset
        else:
            base = batch.base_offset
            if base <= previous_last:
                raise OffsetsOutOfOrderError(
                    f"batch at position {position} starts at offset {base}, not after the "
                    f"previous offset {previous_last} (the log end offset is {next_offset})"
                )
        last = base + batch.last_offset_delta
        epoch = batch.partition_leader_epoch if leader_epoch is None else leader_epoch
        if log_append and not replicated:
            copy = bytearray(view[position:position + size])
            _OFFSET_LENGTH_EPOCH.pack_into(copy, 0, base, batch.batch_length, epoch)
            set_log_append_time(copy, 0, now_ms)
            plan.pieces.append(copy)
            max_ts = plan.log_append_time = now_ms
        else:
            _add_patched(plan.pieces, view, batch, base, leader_epoch)
            max_ts = batch.max_timestamp
        _add_batch(plan, batch, base, last, max_ts, epoch)
        previous_last = last
        offset = last + 1
        position += size
    plan.last_offset = previous_last
    plan.size = total
    return plan


def _read_batch(view: memoryview, position: int, total: int,
                max_message: int | None) -> RecordBatch:
    """The batch at ``position``: a whole header, within max.message.bytes (None: any size),
    intact (CRC)."""
    if total - position < HEADER_SIZE:
        raise TruncatedBatchError(
            f"{total - position} trailing bytes at position {position} are not a whole "
            f"batch header ({HEADER_SIZE} bytes)"
        )
    batch = RecordBatch(view, position)
    size = batch.size_in_bytes
    if max_message is not None and size > max_message:
        raise RecordBatchTooLargeError(
            f"batch at position {position} is {size} bytes, larger than max.message.bytes "
            f"({max_message})"
        )
    batch.ensure_valid()
    return batch


def _check_produced(batch: RecordBatch, position: int, client: bool, check_records: bool,
                    max_message: int) -> None:
    """What a batch that is not a copy of another log must be: records whose count agrees with
    its last offset delta, a control batch only from the coordinator, and (with
    ``check_records``) every record well framed."""
    count = batch.record_count
    delta = batch.last_offset_delta
    if count < 1:
        raise InvalidRecordError(f"batch at position {position} has no records")
    if delta != count - 1:
        raise CorruptRecordError(
            f"batch at position {position}: lastOffsetDelta {delta} disagrees with its "
            f"record count {count}"
        )
    if client and batch.is_control:
        raise InvalidRecordError(
            f"batch at position {position} is a control batch; only the transaction "
            f"coordinator may append control records"
        )
    if check_records:
        batch.check_records(max_decompressed_bytes(max_message))


def _add_patched(pieces: list[bytes | bytearray | memoryview], view: memoryview,
                 batch: RecordBatch, base: int, leader_epoch: int | None) -> None:
    """The batch as write pieces, its base offset (and a leader's epoch) patched in front of
    the caller's bytes, which are not copied."""
    position, size = batch.position, batch.size_in_bytes
    if leader_epoch is None:
        pieces.append(_BASE_OFFSET.pack(base))
        pieces.append(view[position + 8:position + size])
    else:
        pieces.append(_OFFSET_LENGTH_EPOCH.pack(base, batch.batch_length, leader_epoch))
        pieces.append(view[position + 16:position + size])


def _add_batch(plan: AppendPlan, batch: RecordBatch, base: int, last: int, max_ts: int,
               epoch: int) -> None:
    """Count a planned batch: its offsets, max timestamp, leader epoch and records."""
    if plan.first_offset < 0:
        plan.first_offset = base
    if max_ts > plan.max_timestamp:
        plan.max_timestamp = max_ts
        plan.offset_of_max_timestamp = last
    if epoch >= 0 and (not plan.epoch_starts or epoch > plan.epoch_starts[-1][0]):
        plan.epoch_starts.append((epoch, base))
    plan.batches.append(AppendedBatch(last, max_ts, batch.size_in_bytes))
    plan.views.append(batch)
    plan.base_offsets[batch.position] = base
    plan.record_count += batch.record_count


def _check_timestamp(batch: RecordBatch, position: int, now_ms: int, before_max: int,
                     after_max: int) -> None:
    """Kafka's message.timestamp.before/after.max.ms checks for CreateTime batches."""
    for ts in (batch.base_timestamp, batch.max_timestamp):
        if ts < 0:
            continue
        if now_ms - ts > before_max:
            raise InvalidTimestampError(
                f"batch at position {position} has timestamp {ts}, more than "
                f"message.timestamp.before.max.ms ({before_max}) before now ({now_ms})"
            )
        if ts - now_ms > after_max:
            raise InvalidTimestampError(
                f"batch at position {position} has timestamp {ts}, more than "
                f"message.timestamp.after.max.ms ({after_max}) after now ({now_ms})"
            )


def check_leader_epoch(epoch: int) -> None:
    """A partition leader epoch is an int32: -1 (none) or a leader's epoch, >= 0."""
    if not -1 <= epoch <= INT_MAX:
        raise ValueError(f"leader epoch {epoch} is not -1 or an int32 >= 0")


def plain_appends_allowed(config: LogConfig) -> bool:
    """Whether this config lets single producer batches skip the general append planner:
    CreateTime with no timestamp bounds."""
    return (not config.is_log_append_time
            and config["message.timestamp.before.max.ms"] == LONG_MAX
            and config["message.timestamp.after.max.ms"] == LONG_MAX)


class LogAppendInfo(NamedTuple):
    """The result of an append: where the batches landed."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    num_batches: int
    valid_bytes: int
    duplicate: bool = False
