"""Collecting the aborted transactions of a read across several transaction indexes: Kafka's
``collectAbortedTransactions``, the one home of the rule for local reads, remote reads, the
tier reader's planner and the cleaner.

A read of ``[start, upper)`` needs every aborted transaction overlapping it, and the ABORT
marker of a transaction may sit in any later segment (remote or local). So the indexes are
asked in offset order, from the segment holding ``start`` on, until one answers
``is_complete`` (an entry's last stable offset reached ``upper``: no marker further on can
end a transaction that began below ``upper``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from tierlog.index.transaction_index import AbortedTxn, TxnIndexSearchResult, search_aborted_txns


class AbortedTxnSource(Protocol):
    """Anything answering Kafka's ``TransactionIndex.collectAbortedTxns``: a LogSegment, a
    TransactionIndex, or an AbortedTxnList of a fetched ``.txnindex`` object."""

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int
                             ) -> TxnIndexSearchResult: ...


class AbortedTxnList:
    """The entries of a transaction index held in memory (e.g. a remote ``.txnindex`` object
    already fetched), answering as a TransactionIndex does. Immutable."""

    __slots__ = ("entries",)

    def __init__(self, entries: Sequence[AbortedTxn]) -> None:
        self.entries = tuple(entries)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int
                             ) -> TxnIndexSearchResult:
        return search_aborted_txns(self.entries, fetch_offset, upper_bound_offset)


def collect_aborted_txns(
    sources: Iterable[AbortedTxnSource | None], fetch_offset: int, upper_bound_offset: int
) -> list[AbortedTxn]:
    """The aborted transactions overlapping ``[fetch_offset, upper_bound_offset)``.

    ``sources`` are the transaction indexes of consecutive segments in offset order, starting
    with the one holding ``fetch_offset`` (None: a segment known to have no aborted
    transaction). It is consumed lazily and only until a source answers ``is_complete``, so a
    generator that fetches remote indexes on demand fetches no more than needed. An entry seen
    twice (a segment both in the remote tier and still local) is kept once.
    """
    found: list[AbortedTxn] = []
    seen: set[AbortedTxn] = set()
    for source in sources:
        if source is None:
            continue
        result = source.collect_aborted_txns(fetch_offset, upper_bound_offset)
        for txn in result.aborted:
            if txn not in seen:
                seen.add(txn)
                found.append(txn)
        if result.is_complete:
            break
    return found
