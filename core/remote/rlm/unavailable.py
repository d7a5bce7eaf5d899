"""What a tiered log reads through when its partition's remote tier could not be attached (a
corrupt manifest, an unreachable bucket): every remote read reports that failure, so one bad
partition fails its own remote reads and nothing else.
"""

from __future__ import annotations

from typing import Any, NoReturn

from tierlog.errors import RemoteStorageError


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

    def read(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail()

    def fetch_offset_by_timestamp(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail()

    def segment_for(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail()

    def lookup_index(self, *args: Any, **kwargs: Any) -> NoReturn:
        self._fail()

    def __repr__(self) -> str:
        return f"UnavailableRemote({self.partition!r})"
