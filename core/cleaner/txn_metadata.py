"""CleanedTransactionMetadata: the transactions the cleaner walks through (Kafka's class of that name).

Tells the cleaner which data batches are aborted and when a transaction marker may go.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.index import AbortedTxn, TransactionIndex
from tierlog.records import ABORT, COMMIT, RecordBatch


@dataclass(slots=True)
class _AbortedTxnState:
    txn: AbortedTxn
    #: Last offset of the latest batch of this transaction seen in this pass, if any.
    last_observed_batch_offset: int | None = None


class CleanedTransactionMetadata:
    """The open aborted and committed transactions while the cleaner walks the log in order.

    The aborted transactions come from the segments' transaction indexes (a min-heap by first
    offset); a producer's transactional batches from such a transaction's first offset on are
    aborted until its ABORT marker. An ABORT marker is kept (and re-indexed in the cleaned
    segment's transaction index) while this pass still saw data of its transaction; a COMMIT
    marker while it saw data of its transaction. Not thread-safe: one cleaning pass owns it.
    """

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []
        self._tiebreak = itertools.count()
        self._ongoing_aborted: dict[int, _AbortedTxnState] = {}
        self._ongoing_committed: set[int] = set()
        #: The cleaned segment's transaction index, which receives the markers kept.
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, aborted: Iterable[AbortedTxn]) -> None:
        for txn in aborted:
            heapq.heappush(self._aborted, (txn.first_offset, next(self._tiebreak), txn))

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """Account for a control batch; True when it may be discarded (no data of its
        transaction was seen in this pass, or it is an empty, already cleaned, batch)."""
        self._consume_aborted_up_to(batch.last_offset)
        control = batch.control_record()
        if control is None:
            return True
        pid = batch.producer_id
        if control.type == ABORT:
            state = self._ongoing_aborted.pop(pid, None)
            if state is not None and state.last_observed_batch_offset is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(state.txn)
                return False
            return True
        if control.type == COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """Account for a data batch; True when it belongs to an aborted transaction."""
        self._consume_aborted_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        state = self._ongoing_aborted.get(batch.producer_id)
        if state is not None:
            state.last_observed_batch_offset = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False

    def _consume_aborted_up_to(self, offset: int) -> None:
        heap = self._aborted
        while heap and heap[0][0] <= offset:
            txn = heapq.heappop(heap)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, _AbortedTxnState(txn))
