"""The coordinators' compacted internal topics in tierlog's engine: creating them, appending
coordinator records and replaying a partition on load (the one home of each).

Both ``__consumer_offsets`` and ``__transaction_state`` are ordinary compacted topics of the
LogManager, so the cleaner compacts them and a restart reopens them like any other topic.
Clients may read them (Metadata marks them ``is_internal``) but not remove them or change
their partition count, which the coordinators' key-to-partition mapping depends on
(:func:`refusal`).
Coordinator records are appended with ``origin="coordinator"`` (no client sequence checks);
replay reads every batch from the log start to the log end, control batches included, so a
loader can follow transaction markers.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import Enum

from kio.schema.errors import ErrorCode

from tierlog.errors import TopicExistsError
from tierlog.log.append_plan import LogAppendInfo
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.records.batch import RecordBatch
from tierlog.records.builder import build_batch
from tierlog.records.record import Record

log = logging.getLogger(__name__)

CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"

#: The topics only the coordinators write (Kafka's ``Topic.isInternal``).
INTERNAL_TOPICS = frozenset({CONSUMER_OFFSETS, TRANSACTION_STATE})

#: The settings Kafka gives its internal topics (compacted; 100 MiB segments).
INTERNAL_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 100 * 1024 * 1024}

_READ_BYTES = 1 << 20


def ensure_topic(manager: LogManager, name: str, partitions: int) -> int:
    """Create the compacted topic ``name`` with ``partitions`` partitions unless it exists;
    returns its partition count (an existing topic keeps its own count, as Kafka keeps it)."""
    existing = manager.partitions(name)
    if existing:
        return len(existing)
    try:
        manager.create_topic(name, partitions, INTERNAL_TOPIC_CONFIG)
    except TopicExistsError:
        pass
    else:
        log.info("created the internal topic %s with %d partitions", name, partitions)
    return len(manager.partitions(name))


def is_internal(topic: str | None) -> bool:
    """Whether ``topic`` is one of the coordinators' internal topics."""
    return topic in INTERNAL_TOPICS


class AdminChange(Enum):
    """The client requests that would destroy, remap or forge an internal topic's data."""

    DELETE_TOPIC = "delete topic"
    CREATE_PARTITIONS = "add partitions to"
    DELETE_RECORDS = "delete records of"
    PRODUCE = "append to"


#: Kafka's answer to each: DeleteRecords is refused with INVALID_TOPIC_EXCEPTION as Kafka's
#: ReplicaManager refuses it; a Kafka broker relies on ACLs (and kafka-topics refuses) for the
#: other two, which a node without ACLs answers INVALID_REQUEST.
_REFUSAL_CODES = {AdminChange.DELETE_TOPIC: ErrorCode.invalid_request,
                  AdminChange.CREATE_PARTITIONS: ErrorCode.invalid_request,
                  AdminChange.DELETE_RECORDS: ErrorCode.invalid_topic_exception,
                  # Kafka's ReplicaManager: "Cannot append to internal topic".
                  AdminChange.PRODUCE: ErrorCode.invalid_topic_exception}


def refusal(topic: str | None, change: AdminChange) -> tuple[ErrorCode, str] | None:
    """The error code and message refusing ``change`` on ``topic``; None when ``topic`` is not
    internal (the change may go ahead)."""
    if not is_internal(topic):
        return None
    return (_REFUSAL_CODES[change],
            f"cannot {change.value} the internal topic {topic}: its coordinator owns it")


def append_records(log_: Log, records: Sequence[tuple[bytes, bytes | None]], now_ms: int, *,
                   producer_id: int = -1, producer_epoch: int = -1,
                   transactional: bool = False,
                   as_leader_at: int | None = None) -> LogAppendInfo:
    """Append ``(key, value)`` records (value None: a tombstone) as one batch, atomically
    (the caller, :class:`~tierlog.server.coordinator.internal_log.InternalLog`, makes it as
    durable as the partition's replication demands)."""
    batch = build_batch([Record(k, v, timestamp=now_ms) for k, v in records],
                        producer_id=producer_id, producer_epoch=producer_epoch,
                        is_transactional=transactional, now_ms=now_ms)
    return log_.append(batch, origin="coordinator", as_leader_at=as_leader_at)


@dataclass(frozen=True, slots=True)
class ReplayedBatch:
    """One batch of an internal partition, with its records decoded."""

    batch: RecordBatch
    records: list[Record]


def replay(log_: Log) -> Iterator[ReplayedBatch]:
    """Every batch of ``log_`` from its log start to its log end, in offset order."""
    offset, end = log_.log_start_offset, log_.log_end_offset
    while offset < end:
        info = log_.read(offset, _READ_BYTES)
        progressed = False
        for batch in info.batches():
            if batch.next_offset <= offset:
                continue
            yield ReplayedBatch(batch, batch.records())
            offset = batch.next_offset
            progressed = True
        if not progressed:
            break
