"""A producer's state and one append's effect on it (Kafka's ProducerStateEntry and
ProducerAppendInfo): epoch and sequence validation, the recent batches kept for duplicate
detection, open transactions, and ProducerBatchRun, the one way a run of batches is applied.

The map of all producers, its expiry and its snapshots are in :mod:`tierlog.producer.state`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import (
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TransactionCoordinatorFencedError,
)
from tierlog.index.transaction_index import AbortedTxn
from tierlog.producer.snapshot import SnapshotEntry

if TYPE_CHECKING:
    from tierlog.records.batch import RecordBatch

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
#: How many recent batches per producer are kept for duplicate detection (Kafka's value).
NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
#: Control record types of the end-transaction markers.
ABORT_MARKER, COMMIT_MARKER = 0, 1

#: Kafka's AppendOrigin. Only client appends are sequence-checked; replicated appends were
#: validated by the leader, so a stale epoch there is only logged.
CLIENT, COORDINATOR, REPLICATION = "client", "coordinator", "replication"
APPEND_ORIGINS = frozenset({CLIENT, COORDINATOR, REPLICATION, "raft_leader"})


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping past the int32 maximum to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement``, wrapping below 0 to the int32 maximum."""
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one appended batch (its sequence and offset ranges)."""

    last_seq: int
    last_offset: int
    #: ``last_offset - first_offset`` (equal to the sequence span of the batch).
    offset_delta: int
    #: The batch's max timestamp.
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a COMMIT/ABORT marker at ``last_offset`` (inclusive range)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(slots=True)
class TxnMetadata:
    """An open (or completed but not yet replicated) transaction of one producer."""

    producer_id: int
    first_offset: int
    #: The marker's offset once the transaction completed.
    last_offset: int | None = None


class ProducerStateEntry:
    """One producer's state: epoch, coordinator epoch, last timestamp, the first offset of its
    open transaction, and the metadata of its last ``NUM_BATCHES_TO_RETAIN`` batches (oldest
    first). Not thread-safe."""

    __slots__ = (
        "_batches",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        coordinator_epoch: int = -1,
        last_timestamp: int = NO_TIMESTAMP,
        current_txn_first_offset: int | None = None,
        batch: BatchMetadata | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self._batches: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        if batch is not None:
            self._batches.append(batch)

    @property
    def batch_metadata(self) -> tuple[BatchMetadata, ...]:
        return tuple(self._batches)

    @property
    def is_empty(self) -> bool:
        """True when no batch of the current epoch is remembered."""
        return not self._batches

    @property
    def first_seq(self) -> int:
        return self._batches[0].first_seq if self._batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self._batches[-1].last_seq if self._batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self._batches[0].first_offset if self._batches else -1

    @property
    def last_data_offset(self) -> int:
        return self._batches[-1].last_offset if self._batches else -1

    @property
    def last_offset_delta(self) -> int:
        return self._batches[-1].offset_delta if self._batches else 0

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """Switch to ``producer_epoch``, forgetting the old epoch's batches; True if it changed."""
        if self.producer_epoch == producer_epoch:
            return False
        self._batches.clear()
        self.producer_epoch = producer_epoch
        return True

    def add_batch(
        self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
        timestamp: int,
    ) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self._batches.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, newer: ProducerStateEntry) -> None:
        """Take over ``newer``'s state (what one append produced), keeping recent batches."""
        self.maybe_update_producer_epoch(newer.producer_epoch)
        self._batches.extend(newer._batches)
        self.coordinator_epoch = newer.coordinator_epoch
        self.current_txn_first_offset = newer.current_txn_first_offset
        self.last_timestamp = newer.last_timestamp

    def end_transaction(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """Apply an end-transaction marker: no transaction is open any more."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def find_duplicate_batch(
        self, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The remembered batch of this epoch with exactly this sequence range, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for batch in self._batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def to_snapshot_entry(self) -> SnapshotEntry:
        txn = self.current_txn_first_offset
        return SnapshotEntry(
            self.producer_id, self.producer_epoch, self.last_seq, self.last_data_offset,
            self.last_offset_delta, self.last_timestamp, self.coordinator_epoch,
            -1 if txn is None else txn,
        )

    @classmethod
    def from_snapshot_entry(cls, e: SnapshotEntry) -> ProducerStateEntry:
        batch = None
        if e.last_offset >= 0:
            batch = BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp)
        txn = e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None
        return cls(e.producer_id, e.producer_epoch, e.coordinator_epoch, e.timestamp, txn, batch)

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
            f"txn_first_offset={self.current_txn_first_offset}, "
            f"coordinator_epoch={self.coordinator_epoch}, last_timestamp={self.last_timestamp}, "
            f"batches={list(self._batches)})"
        )


class ProducerAppendInfo:
    """Validates one producer's batches of one append against its state before the append,
    accumulating the new state and the transactions started. Kafka's ``ProducerAppendInfo``
    (legacy transaction markers: a marker's epoch may equal the current one).
    Not thread-safe."""

    def __init__(
        self, producer_id: int, current: ProducerStateEntry, origin: str, where: str
    ) -> None:
        if origin not in APPEND_ORIGINS:
            raise ValueError(f"unknown append origin {origin!r}; expected one of "
                             f"{sorted(APPEND_ORIGINS)}")
        self.producer_id = producer_id
        self.origin = origin
        self._where = where
        self._current = current
        self._updated = ProducerStateEntry(
            producer_id, current.producer_epoch, current.coordinator_epoch,
            current.last_timestamp, current.current_txn_first_offset,
        )
        self._transactions: list[TxnMetadata] = []

    @property
    def started_transactions(self) -> list[TxnMetadata]:
        return list(self._transactions)

    def to_entry(self) -> ProducerStateEntry:
        """The producer's state after the batches appended so far."""
        return self._updated

    def _context(self, offset: int) -> str:
        return f"producer {self.producer_id} at offset {offset} in {self._where}"

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        current = self._updated.producer_epoch
        if producer_epoch < current:
            message = (f"epoch of {self._context(offset)} is {producer_epoch}, older than the "
                       f"last seen epoch {current}")
            if self.origin == REPLICATION:
                log.warning("%s", message)
            else:
                raise ProducerFencedError(message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self._updated, self._current
        if producer_epoch != updated.producer_epoch:
            # A new epoch must restart at sequence 0, unless the producer has no epoch yet.
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence for new epoch {producer_epoch} of {self._context(offset)}:"
                    f" {first_seq} (must be 0; current epoch {updated.producer_epoch})"
                )
            return
        if not updated.is_empty:
            last_seq = updated.last_seq
        elif producer_epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # Without a current epoch (its batches were all deleted) any sequence is accepted.
        if current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last_seq, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence for {self._context(offset)}: {first_seq} "
                f"(incoming), {last_seq} (current end sequence)"
            )

    def append_batch(self, batch: RecordBatch, base_offset: int | None = None
                     ) -> CompletedTxn | None:
        """Validate and record one batch with a producer id from its header: a data batch, or
        the end-transaction marker of a control batch (other control records change nothing).
        ``base_offset`` overrides the batch's own (an append whose offsets are not yet patched
        in). Returns the transaction a marker completed, if any; raises as
        :meth:`append_data_batch` and :meth:`append_end_txn_marker` do."""
        first = batch.base_offset if base_offset is None else base_offset
        if batch.is_control:
            control = batch.control_record()
            if control is None or control.type not in (ABORT_MARKER, COMMIT_MARKER):
                return None
            return self.append_end_txn_marker(control.type, batch.producer_epoch, first,
                                              batch.max_timestamp, control.coordinator_epoch)
        self.append_data_batch(
            batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.max_timestamp,
            first, first + batch.last_offset_delta, batch.is_transactional,
        )
        return None

    def append_data_batch(
        self,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        last_timestamp: int,
        first_offset: int,
        last_offset: int,
        is_transactional: bool,
    ) -> None:
        """Validate and record a data batch (header fields of the batch, offsets assigned).

        Raises ProducerFencedError (older epoch, not for replication), OutOfOrderSequenceError
        (client appends only) or InvalidTxnStateError (a non-transactional batch while a
        transaction is open).
        """
        self._check_producer_epoch(producer_epoch, first_offset)
        if self.origin == CLIENT:
            self._check_sequence(producer_epoch, first_seq, first_offset)
        updated = self._updated
        updated.add_batch(producer_epoch, last_seq, last_offset, last_offset - first_offset,
                          last_timestamp)
        if updated.current_txn_first_offset is not None:
            if not is_transactional:
                raise InvalidTxnStateError(
                    f"expected a transactional write from {self._context(first_offset)}: its "
                    f"transaction from offset {updated.current_txn_first_offset} is open"
                )
        elif is_transactional:
            updated.current_txn_first_offset = first_offset
            self._transactions.append(TxnMetadata(self.producer_id, first_offset))

    def append_end_txn_marker(
        self,
        control_type: int,
        producer_epoch: int,
        offset: int,
        timestamp: int,
        coordinator_epoch: int,
    ) -> CompletedTxn | None:
        """Validate and record a COMMIT (1) or ABORT (0) marker at ``offset``.

        Returns the completed transaction, or None when no transaction was open (an empty
        transaction changes neither the last stable offset nor the transaction index).
        Raises ProducerFencedError or TransactionCoordinatorFencedError (not for replication).
        """
        if control_type not in (ABORT_MARKER, COMMIT_MARKER):
            raise ValueError(f"control type {control_type} is not an end-transaction marker")
        self._check_producer_epoch(producer_epoch, offset)
        updated = self._updated
        if updated.coordinator_epoch > coordinator_epoch:
            message = (f"coordinator epoch {coordinator_epoch} of the marker of "
                       f"{self._context(offset)} is older than {updated.coordinator_epoch}")
            if self.origin == REPLICATION:
                log.info("%s", message)
            else:
                raise TransactionCoordinatorFencedError(message)
        completed = None
        if updated.current_txn_first_offset is not None:
            completed = CompletedTxn(self.producer_id, updated.current_txn_first_offset, offset,
                                     control_type == ABORT_MARKER)
        updated.end_transaction(producer_epoch, coordinator_epoch, timestamp)
        return completed


class ProducerUpdates(Protocol):
    """What a :class:`ProducerBatchRun` asks of the producer state it feeds (the
    ProducerStateManager, which imports this module: a protocol keeps the two from naming each
    other)."""

    def prepare_update(self, producer_id: int, origin: str) -> ProducerAppendInfo:
        """Start validating an append of ``producer_id`` from ``origin``."""

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply a validated append's producer state and the transactions it started."""

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The last stable offset once ``completed`` is done."""

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Mark a transaction complete."""


class ProducerBatchRun:
    """What a run of batches does to producer state, validated first and applied in one step:
    the one rule for feeding batches to a ProducerStateManager (Kafka's ProducerAppendInfo per
    producer, then ``update`` and ``completeTxn``).

    Every path uses it: an append validates its batches (:meth:`add`, which raises before
    anything is written), writes them, then applies the run (:meth:`apply`), its aborted
    transactions going to the segment's transaction index; a segment's recovery applies runs of one
    batch; the rebuild from segments applies runs of replicated batches. Each producer's batches are
    checked against its state before the run plus its earlier batches in the run; on apply
    the producers are updated first, then the completed transactions are completed in order.
    Not thread-safe (the owner of the manager serialises it).
    """

    __slots__ = ("_completed", "_infos", "_origin", "_psm")

    def __init__(self, psm: ProducerUpdates, origin: str) -> None:
        self._psm = psm
        self._origin = origin
        self._infos: dict[int, ProducerAppendInfo] = {}
        self._completed: list[CompletedTxn] = []

    def add(self, batch: RecordBatch, base_offset: int | None = None) -> None:
        """Validate ``batch`` (ignored without a producer id) as the run's next batch;
        ``base_offset`` overrides the batch's own. Raises ProducerFencedError,
        OutOfOrderSequenceError, InvalidTxnStateError or TransactionCoordinatorFencedError as
        the origin's rules say; the manager is unchanged until :meth:`apply`."""
        pid = batch.producer_id
        if pid < 0:
            return
        info = self._infos.get(pid)
        if info is None:
            info = self._infos[pid] = self._psm.prepare_update(pid, self._origin)
        completed = info.append_batch(batch, base_offset)
        if completed is not None:
            self._completed.append(completed)

    def apply(self, on_aborted: Callable[[AbortedTxn], None] | None = None) -> None:
        """Apply the run to the manager: every producer's new state, then each completed
        transaction; ``on_aborted`` receives each aborted one with its last stable offset
        (Kafka's entry of the transaction index), before it is completed."""
        psm = self._psm
        for info in self._infos.values():
            psm.update(info)
        for txn in self._completed:
            if on_aborted is not None and txn.is_aborted:
                on_aborted(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                      psm.last_stable_offset(txn)))
            psm.complete_txn(txn)
