"""The keys and values of ``__transaction_state`` in Kafka's formats (the one codec of them).

TransactionLogKey version 0 is the transactional id; TransactionLogValue version 0 (written
here; version 1, flexible with tagged fields, is read too) holds the producer id and epoch,
the timeout, the state, the partitions of the ongoing transaction and two timestamps. A null
value is a tombstone (an expired transactional id).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tierlog.errors import CorruptRecordError
from tierlog.server.coordinator.coordinator_wire import Reader, Writer

KEY_VERSION = 0


class TxnStatus(enum.IntEnum):
    """Kafka's TransactionState ids, as stored in TransactionStatus."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7


@dataclass(frozen=True, slots=True)
class TxnValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: TxnStatus
    #: topic -> partitions of the transaction (empty when none).
    partitions: tuple[tuple[str, tuple[int, ...]], ...]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    w = Writer(KEY_VERSION)
    w.string(transactional_id)
    return w.finish()


def decode_key(data: bytes) -> str:
    r = Reader(data, "__transaction_state key")
    if r.version != KEY_VERSION:
        raise CorruptRecordError(f"__transaction_state key has unknown version {r.version}")
    tid = r.required_string("transactionalId")
    r.end()
    return tid


def encode_value(value: TxnValue) -> bytes:
    w = Writer(0)
    w.int64(value.producer_id)
    w.int16(value.producer_epoch)
    w.int32(value.timeout_ms)
    w.int8(int(value.status))
    w.array(len(value.partitions))
    for topic, partitions in value.partitions:
        w.string(topic)
        w.array(len(partitions))
        for p in partitions:
            w.int32(p)
    w.int64(value.last_update_ms)
    w.int64(value.start_ms)
    return w.finish()


def decode_value(data: bytes) -> TxnValue:
    r = Reader(data, "TransactionLogValue")
    if r.version not in (0, 1):
        raise CorruptRecordError(f"TransactionLogValue has unknown version {r.version}")
    r.flexible = r.version >= 1
    producer_id = r.int64()
    epoch = r.int16()
    timeout = r.int32()
    status_id = r.int8()
    try:
        status = TxnStatus(status_id)
    except ValueError:
        raise CorruptRecordError(f"TransactionLogValue has unknown status {status_id}") from None
    topics = []
    for _ in range(r.array() or 0):
        topic = r.required_string("topic")
        parts = tuple(r.int32() for _ in range(r.array() or 0))
        r.tagged_fields()
        topics.append((topic, parts))
    last_update = r.int64()
    start = r.int64()
    r.tagged_fields()
    r.end()
    return TxnValue(producer_id, epoch, timeout, status, tuple(topics), last_update, start)
