"""``__consumer_offsets`` in tierlog's engine: which partition holds a group, writing a
group's records there and loading every group back (the one home of each).

Records are Kafka's (:mod:`tierlog.server.coordinator.group.offsets_topic_records`). Offsets
committed inside a transaction are written as transactional records of the producer and only count
once the partition holds that producer's COMMIT marker, on load as when served.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tierlog.errors import CorruptRecordError
from tierlog.manager.log_manager import LogManager
from tierlog.records.control import COMMIT
from tierlog.server.coordinator.coordinator_wire import partition_for
from tierlog.server.coordinator.group import offsets_topic_records as rec
from tierlog.server.coordinator.internal_log import InternalLog
from tierlog.server.coordinator.internal_topics import (
    CONSUMER_OFFSETS,
    append_records,
    ensure_topic,
    replay,
)

log = logging.getLogger(__name__)

#: Kafka's default ``offsets.topic.num.partitions``.
DEFAULT_PARTITIONS = 50

TopicPartitionKey = tuple[str, int]


@dataclass(slots=True)
class LoadedGroup:
    """What ``__consumer_offsets`` says of one group."""

    metadata: rec.GroupValue | None = None
    offsets: dict[TopicPartitionKey, rec.OffsetValue] = field(default_factory=dict)
    #: producer id -> offsets committed in its open transaction.
    pending: dict[int, dict[TopicPartitionKey, rec.OffsetValue]] = field(default_factory=dict)


class OffsetsTopic:
    """The ``__consumer_offsets`` topic of one node: writes go through its
    :class:`InternalLog`; ``ensure`` and ``load_partition`` block (run them on the server's
    workers)."""

    def __init__(self, manager: LogManager, internal: InternalLog,
                 partitions: int = DEFAULT_PARTITIONS) -> None:
        self.manager = manager
        self.internal = internal
        self.partitions = partitions

    def ensure(self) -> None:
        """Create the topic unless it exists (an existing topic keeps its partition count)."""
        self.partitions = ensure_topic(self.manager, CONSUMER_OFFSETS, self.partitions)

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    async def write(self, group_id: str, records: Sequence[tuple[bytes, bytes | None]],
                    now_ms: int, *, producer_id: int = -1, producer_epoch: int = -1) -> None:
        """Append a group's records as one batch (transactional when ``producer_id`` >= 0);
        returns once durable, else raises what the append raised."""
        await self.internal.append(
            CONSUMER_OFFSETS, self.partition_of(group_id),
            lambda log_, at: append_records(log_, records, now_ms, producer_id=producer_id,
                                            producer_epoch=producer_epoch,
                                            transactional=producer_id >= 0, as_leader_at=at))

    def load_partition(self, partition: int) -> dict[str, LoadedGroup]:
        """The metadata, committed offsets and pending transactional offsets of every group
        of ``partition``."""
        groups: dict[str, LoadedGroup] = {}
        self._load_partition(partition, groups)
        return {g: v for g, v in groups.items()
                if v.metadata is not None or v.offsets or v.pending}

    def _load_partition(self, partition: int, groups: dict[str, LoadedGroup]) -> None:
        log_ = self.manager.log(CONSUMER_OFFSETS, partition)
        for item in replay(log_):
            batch = item.batch
            if batch.is_control:
                control = batch.control_record()
                if control is None or not control.is_transaction_marker:
                    continue
                for group in groups.values():
                    pending = group.pending.pop(batch.producer_id, None)
                    if pending and control.type == COMMIT:
                        group.offsets.update(pending)
                continue
            for record in item.records:
                if record.key is None:
                    continue
                try:
                    self._apply(record.key, record.value, groups, batch.producer_id
                                if batch.is_transactional else -1)
                except CorruptRecordError as exc:
                    log.warning("skipping an unreadable record at offset %d of %s-%d: %s",
                                record.offset, CONSUMER_OFFSETS, partition, exc)

    @staticmethod
    def _apply(key_bytes: bytes, value: bytes | None, groups: dict[str, LoadedGroup],
               producer_id: int) -> None:
        key = rec.decode_key(key_bytes)
        group = groups.setdefault(key.group, LoadedGroup())
        if isinstance(key, rec.GroupKey):
            group.metadata = None if value is None else rec.decode_group_value(value)
            return
        tp = (key.topic, key.partition)
        if producer_id >= 0:
            if value is not None:
                group.pending.setdefault(producer_id, {})[tp] = rec.decode_offset_value(value)
            return
        if value is None:
            group.offsets.pop(tp, None)
        else:
            group.offsets[tp] = rec.decode_offset_value(value)


def offset_records(group_id: str, offsets: Mapping[TopicPartitionKey, rec.OffsetValue]
                   ) -> list[tuple[bytes, bytes | None]]:
    """The records of a commit of ``offsets``."""
    return [(rec.encode_key(rec.OffsetKey(group_id, t, p)), rec.encode_offset_value(v))
            for (t, p), v in offsets.items()]


def tombstones(group_id: str, partitions: Sequence[TopicPartitionKey], *,
               group: bool) -> list[tuple[bytes, bytes | None]]:
    """Tombstones of ``partitions``' offsets (and of the group's metadata when ``group``)."""
    out: list[tuple[bytes, bytes | None]] = [
        (rec.encode_key(rec.OffsetKey(group_id, t, p)), None) for t, p in partitions]
    if group:
        out.append((rec.encode_key(rec.GroupKey(group_id)), None))
    return out
