"""What a tiered log reads through when its partition's remote tier could not be attached (a
corrupt manifest, an unreachable bucket): every remote read reports that failure, so one bad
partition fails its own remote reads and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from tierlog.errors import RemoteStorageError

if TYPE_CHECKING:
    from tierlog.index.index_types import SegmentIndexType
    from tierlog.log.segment import LogSegment


class UnavailableRemote:
    """A stand-in for a log's RemoteLogReader after ``cause`` stopped the attach.

    Reads below the local log start offset raise RemoteStorageError naming the partition and
    the cause, instead of an out-of-range error that would hide it. Immutable; thread-safe.
    """

    def __init__(self, partition: str, cause: BaseException) -> None:
        self.partition = partition
        self.cause = cause

    def error(self) -> RemoteStorageError:
        """The error remote reads and tiering of this partition report."""
        return RemoteStorageError(
            f"{self.partition}: the remote tier is unavailable for this partition: {self.cause}")

    def _fail(self) -> NoReturn:
        raise self.error() from self.cause

    # The calls of a RemoteLogReader (tierlog.log.tier_reads.TierReads, and segment_for), each
    # failing with the cause.

    def read(self, offset: int, max_bytes: int, isolation: str, upper: int,
             min_one_message: bool, local_segments: Sequence[LogSegment] = ()) -> NoReturn:
        self._fail()

    def fetch_offset_by_timestamp(self, timestamp: int, start_offset: int) -> NoReturn:
        self._fail()

    def segment_for(self, offset: int) -> NoReturn:
        self._fail()

    def lookup_index(self, index_type: SegmentIndexType, key: object, below: int) -> NoReturn:
        self._fail()

    def __repr__(self) -> str:
        return f"UnavailableRemote({self.partition!r})"
