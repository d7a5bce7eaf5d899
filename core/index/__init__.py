"""Memory-mapped sparse indexes of a log segment: offset, time and transaction indexes.

Byte-compatible with Kafka's ``.index``, ``.timeindex`` and ``.txnindex`` files.
"""

from __future__ import annotations

from tierlog.index.base import AbstractIndex
from tierlog.index.offset_index import OffsetIndex, OffsetPosition
from tierlog.index.time_index import TimeIndex, TimestampOffset
from tierlog.index.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

__all__ = [
    "AbortedTxn",
    "AbstractIndex",
    "OffsetIndex",
    "OffsetPosition",
    "TimeIndex",
    "TimestampOffset",
    "TransactionIndex",
    "TxnIndexSearchResult",
]
