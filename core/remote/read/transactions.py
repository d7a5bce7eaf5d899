"""What a read of a partition's tier must know of its transactions: the tier's last stable
offset (where read_committed stops) and the aborted transactions of an offset range, from the
committed chain's producer snapshot and ``.txnindex`` objects and the published tail.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from tierlog.errors import RemoteStorageError
from tierlog.index.aborted_txns import AbortedTxnList, collect_aborted_txns
from tierlog.index.transaction_index import decode_aborted_txns
from tierlog.producer.snapshot import decode_snapshot
from tierlog.remote import IndexType, RemoteTier, TopicIdPartition
from tierlog.remote.read.readable import ChainLink, get_optional
from tierlog.remote.tier.layout import segment_object_key
from tierlog.remote.tier.tail_manifest import TailManifest

#: ``(producer_id, first_offset, last_offset)`` of an aborted transaction: picklable, as a
#: ReadSplit carries it to a Spark task.
AbortedRange = tuple[int, int, int]


def chain_end(chain: Sequence[ChainLink]) -> int:
    """One past the last offset of the committed segments."""
    return chain[-1].last_offset + 1 if chain else 0


def last_stable_offset(tier: RemoteTier, tip: TopicIdPartition, chain: Sequence[ChainLink],
                       tail: TailManifest | None = None) -> int:
    """The tier's last stable offset: the first offset of the earliest transaction whose
    marker is not in the tier, else its end.

    A transaction is open at the tier's end when the producer snapshot uploaded with the last
    segment (taken at the next segment's base offset, i.e. the chain's end) has a
    ``currentTxnFirstOffset`` for its producer. Its outcome is not in the tier, so a
    read_committed reader stops before it, as a consumer stops at the LSO. A published
    ``tail`` whose last stable offset reaches the chain's end is newer than anything the chain
    can say, and answers instead (one GET of the snapshot otherwise).
    """
    end = chain_end(chain)
    if tail is not None and tail.last_stable_offset >= end:
        return tail.last_stable_offset
    if not chain:
        return 0
    last = chain[-1].segment
    path = tier.path(segment_object_key(last, IndexType.PRODUCER_SNAPSHOT.suffix))
    data = get_optional(tier, path)
    if data is None:
        tier_end = max(end, tail.high_watermark if tail else 0)
        raise RemoteStorageError(
            f"{tip}: producer snapshot {path} is missing; read_committed needs it "
            f"to know which transactions are still open at offset {tier_end}"
        )
    open_firsts = [e.current_txn_first_offset for e in decode_snapshot(data, path)
                   if e.current_txn_first_offset >= 0]
    return min([end, *open_firsts])


def aborted_txns(tier: RemoteTier, chain: Sequence[ChainLink], start: int, end: int,
                 tail: TailManifest | None = None) -> tuple[AbortedRange, ...]:
    """Aborted transactions touching ``[start, end)``, collected as every read path collects
    them (``tierlog.index.aborted_txns``): from the transaction indexes of the chain's
    segments from ``start`` on, each fetched only when needed, then the tail's markers."""
    found = collect_aborted_txns(_txn_indexes_from(tier, chain, start, tail), start, end)
    return tuple((txn.producer_id, txn.first_offset, txn.last_offset) for txn in found)


def _txn_indexes_from(tier: RemoteTier, chain: Sequence[ChainLink], start: int,
                      tail: TailManifest | None) -> Iterator[AbortedTxnList | None]:
    for link in chain:
        if link.last_offset < start:
            continue
        if link.segment.txn_idx_empty:
            yield None
            continue
        # The metadata says this segment aborted transactions: a missing index is an error,
        # not an empty one (that would return aborted records).
        path = tier.path(segment_object_key(link.segment, IndexType.TRANSACTION.suffix))
        yield AbortedTxnList(decode_aborted_txns(tier.get_bytes(path), path))
    if tail is not None:  # ABORT markers published in the tail
        yield AbortedTxnList(tail.aborted)


__all__ = ["AbortedRange", "aborted_txns", "chain_end", "last_stable_offset"]
