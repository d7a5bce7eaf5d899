"""What a Log asks of the remote tier for offsets below its local log start offset.

The log layer states the contract; the remote layer fulfils it (``RemoteLogReader``, or
``UnavailableRemote`` when a partition's tier could not be attached), so the Log never
imports the remote layer above it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tierlog.index.index_types import SegmentIndexType
    from tierlog.log.fetch_info import FetchDataInfo
    from tierlog.log.segment import LogSegment
    from tierlog.records.file_records import TimestampAndOffset


class TierReads(Protocol):
    """Remote reads of one partition. Thread-safe."""

    def read(self, offset: int, max_bytes: int, isolation: str, upper: int,
             min_one_message: bool, local_segments: Sequence[LogSegment] = ()
             ) -> FetchDataInfo:
        """Batches from ``offset`` (in the one remote segment holding it), capped at the
        exclusive ``upper``; read_committed reads carry the aborted transactions up to
        ``upper``, collected on through later remote segments and then ``local_segments``."""
        ...

    def fetch_offset_by_timestamp(self, timestamp: int, start_offset: int
                                  ) -> TimestampAndOffset | None:
        """The first record at or after ``timestamp`` and ``start_offset`` in the tier."""
        ...

    def lookup_index(
        self, index_type: SegmentIndexType,
        key: Any,  # noqa: ANN401 - a plugin index's key is of its own type
        below: int,
    ) -> Any:  # noqa: ANN401 - and so is its answer
        """Ask the tier's copies of ``index_type`` of the segments below ``below``."""
        ...
