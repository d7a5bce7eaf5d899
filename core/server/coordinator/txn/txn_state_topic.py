"""``__transaction_state`` in tierlog's engine: which partition holds a transactional id,
writing its state and loading every transactional id's latest state (the one home of each).
"""

from __future__ import annotations

import logging

from tierlog.errors import CorruptRecordError
from tierlog.manager.log_manager import LogManager
from tierlog.server.coordinator.coordinator_wire import partition_for
from tierlog.server.coordinator.internal_log import InternalLog
from tierlog.server.coordinator.internal_topics import (
    TRANSACTION_STATE,
    append_records,
    ensure_topic,
    replay,
)
from tierlog.server.coordinator.txn import txn_log_records as rec

log = logging.getLogger(__name__)

#: Kafka's default ``transaction.state.log.num.partitions``.
DEFAULT_PARTITIONS = 50


class TxnStateTopic:
    """The ``__transaction_state`` topic of one node: writes go through its
    :class:`InternalLog`; ``ensure`` and ``load_partition`` block."""

    def __init__(self, manager: LogManager, internal: InternalLog,
                 partitions: int = DEFAULT_PARTITIONS) -> None:
        self.manager = manager
        self.internal = internal
        self.partitions = partitions

    def ensure(self) -> None:
        self.partitions = ensure_topic(self.manager, TRANSACTION_STATE, self.partitions)

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions)

    async def write(self, transactional_id: str, value: rec.TxnValue | None,
                    now_ms: int) -> None:
        """Store ``value`` (None: a tombstone) as the transactional id's latest state;
        returns once durable, else raises what the append raised."""
        record = (rec.encode_key(transactional_id),
                  None if value is None else rec.encode_value(value))
        await self.internal.append(TRANSACTION_STATE, self.partition_of(transactional_id),
                                   lambda log_, at: append_records(log_, [record], now_ms,
                                                                   as_leader_at=at))

    def load_partition(self, partition: int) -> dict[str, rec.TxnValue]:
        """The latest state of every transactional id of ``partition``."""
        states: dict[str, rec.TxnValue] = {}
        for item in replay(self.manager.log(TRANSACTION_STATE, partition)):
            if item.batch.is_control:
                continue
            for record in item.records:
                if record.key is None:
                    continue
                try:
                    tid = rec.decode_key(record.key)
                    if record.value is None:
                        states.pop(tid, None)
                    else:
                        states[tid] = rec.decode_value(record.value)
                except CorruptRecordError as exc:
                    log.warning("skipping an unreadable record at offset %d of %s-%d: %s",
                                record.offset, TRANSACTION_STATE, partition, exc)
        return states
