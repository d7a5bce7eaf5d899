"""In-memory metadata of one partition's remote segments, with the per-leader-epoch lineage
Kafka's RemoteLogMetadataCache keeps. No I/O: the metadata manager persists it.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Iterable

from tierlog.remote.api import RemoteLogSegmentMetadata, RemoteLogSegmentState

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_FINISHED = RemoteLogSegmentState.COPY_SEGMENT_FINISHED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def epoch_end_offset(metadata: RemoteLogSegmentMetadata, epoch: int) -> int:
    """The last offset ``epoch`` wrote in the segment: the next epoch's start - 1, or the
    segment's end offset when ``epoch`` is its last."""
    later = [start for e, start in metadata.segment_leader_epochs.items() if e > epoch]
    return later[0] - 1 if later else metadata.end_offset


def segment_order(metadata: RemoteLogSegmentMetadata) -> tuple[int, int, str]:
    """Sort key of segment lists: start offset, then event time, then id (total and stable)."""
    return metadata.start_offset, metadata.event_timestamp_ms, metadata.segment_id


class _EpochState:
    """One leader epoch's segments: the COPY_SEGMENT_FINISHED ones keyed by the offset where
    the epoch starts inside them (sorted), the unreferenced ones (copying, deleting, or
    superseded by a later upload of the same offsets), and the highest offset copied."""

    __slots__ = ("_ids", "_starts", "highest_offset", "unreferenced")

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ids: list[str] = []
        self.unreferenced: set[str] = set()
        self.highest_offset: int | None = None

    def floor(self, offset: int) -> str | None:
        i = bisect.bisect_right(self._starts, offset) - 1
        return self._ids[i] if i >= 0 else None

    def segment_ids(self) -> list[str]:
        return [*self._ids, *self.unreferenced]

    def copy_started(self, segment_id: str) -> None:
        self.unreferenced.add(segment_id)

    def copy_finished(self, start: int, segment_id: str, epoch_end: int) -> None:
        # A new leader may re-upload offsets an earlier leader already copied (it lagged);
        # the later upload that reaches at least as far supersedes the entries it covers.
        while self._starts and self._starts[-1] >= start and self.highest_offset is not None \
                and self.highest_offset <= epoch_end:
            self._starts.pop()
            self.unreferenced.add(self._ids.pop())
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start:
            if self._ids[i] != segment_id:
                self.unreferenced.add(self._ids[i])
            self._ids[i] = segment_id
        else:
            self._starts.insert(i, start)
            self._ids.insert(i, segment_id)
        self.unreferenced.discard(segment_id)
        if self.highest_offset is None or epoch_end > self.highest_offset:
            self.highest_offset = epoch_end

    def delete_started(self, start: int, segment_id: str) -> None:
        i = bisect.bisect_left(self._starts, start)
        if i < len(self._starts) and self._starts[i] == start and self._ids[i] == segment_id:
            del self._starts[i]
            del self._ids[i]
        self.unreferenced.add(segment_id)

    def delete_finished(self, segment_id: str) -> None:
        self.unreferenced.discard(segment_id)


class RemoteLogMetadataCache:
    """Every remote segment of one partition that is not DELETE_SEGMENT_FINISHED, by id.

    Which segments each query sees, as in Kafka: ``segment_for_offset`` only
    COPY_SEGMENT_FINISHED ones; ``list_segments`` also those being copied or deleted (so they can be
    cleaned up). Not thread-safe: the owner serializes access.
    """

    def __init__(self) -> None:
        self._by_id: dict[str, RemoteLogSegmentMetadata] = {}
        self._epochs: dict[int, _EpochState] = {}
        # Lazily built view of COPY_SEGMENT_FINISHED segments for lookups without an epoch.
        self._finished: list[RemoteLogSegmentMetadata] | None = None
        self._finished_starts: list[int] = []
        self._finished_max_end: list[int] = []

    @classmethod
    def from_segments(cls, segments: Iterable[RemoteLogSegmentMetadata]) -> RemoteLogMetadataCache:
        """Rebuild from stored metadata, replaying each segment's lifecycle in event order."""
        cache = cls()
        for md in sorted(segments, key=lambda m: (m.event_timestamp_ms, *segment_order(m))):
            cache.add_copy_in_progress(dataclasses.replace(md, state=_STARTED))
            if md.state is not _STARTED:
                cache.apply(md)
        return cache

    def get(self, segment_id: str) -> RemoteLogSegmentMetadata | None:
        return self._by_id.get(segment_id)

    def segments(self) -> list[RemoteLogSegmentMetadata]:
        """Every tracked segment, sorted by start offset."""
        return sorted(self._by_id.values(), key=segment_order)

    def add_copy_in_progress(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Track a segment whose copy started (not readable until COPY_SEGMENT_FINISHED)."""
        if metadata.state is not _STARTED:
            raise ValueError(
                f"segment {metadata.remote_log_segment_id} must be added in state "
                f"{_STARTED.name}, not {metadata.state.name}"
            )
        for epoch in metadata.segment_leader_epochs:
            self._epoch(epoch).copy_started(metadata.segment_id)
        self._by_id[metadata.segment_id] = metadata

    def apply(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Record a tracked segment's new state (already checked to be a legal transition)."""
        segment_id = metadata.segment_id
        if segment_id not in self._by_id:
            raise KeyError(segment_id)
        for epoch, start in metadata.segment_leader_epochs.items():
            state = self._epoch(epoch)
            if metadata.state is _FINISHED:
                state.copy_finished(start, segment_id, epoch_end_offset(metadata, epoch))
            elif metadata.state is _DELETE_STARTED:
                state.delete_started(start, segment_id)
            elif metadata.state is _DELETE_FINISHED:
                state.delete_finished(segment_id)
        if metadata.state is _DELETE_FINISHED:
            del self._by_id[segment_id]
        else:
            self._by_id[segment_id] = metadata
        self._finished = None

    def _epoch(self, epoch: int) -> _EpochState:
        state = self._epochs.get(epoch)
        if state is None:
            state = self._epochs[epoch] = _EpochState()
        return state

    # -- queries --------------------------------------------------------------------------

    def segment_for_offset(
        self, offset: int, leader_epoch: int | None = None
    ) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset``.

        With ``leader_epoch``, Kafka's rule: the segment of that epoch's lineage whose epoch
        range holds the offset. Without, the containing segment with the greatest start
        offset (then the highest leader epoch).
        """
        if leader_epoch is not None:
            state = self._epochs.get(leader_epoch)
            segment_id = state.floor(offset) if state is not None else None
            if segment_id is None:
                return None
            md = self._by_id[segment_id]
            return md if offset <= epoch_end_offset(md, leader_epoch) else None
        finished = self._finished_view()
        i = bisect.bisect_right(self._finished_starts, offset) - 1
        while i >= 0 and self._finished_max_end[i] >= offset:
            if finished[i].end_offset >= offset:
                return finished[i]
            i -= 1
        return None

    def _finished_view(self) -> list[RemoteLogSegmentMetadata]:
        if self._finished is None:
            finished = sorted(
                (m for m in self._by_id.values() if m.state is _FINISHED),
                key=lambda m: (m.start_offset, max(m.segment_leader_epochs), m.segment_id),
            )
            max_end: list[int] = []
            for md in finished:
                max_end.append(max(md.end_offset, max_end[-1] if max_end else md.end_offset))
            self._finished = finished
            self._finished_starts = [m.start_offset for m in finished]
            self._finished_max_end = max_end
        return self._finished

    def list_segments(self, leader_epoch: int | None = None) -> list[RemoteLogSegmentMetadata]:
        """Segments in any state but DELETE_SEGMENT_FINISHED, sorted by start offset; with
        ``leader_epoch``, only those holding records of that epoch."""
        if leader_epoch is None:
            return self.segments()
        state = self._epochs.get(leader_epoch)
        if state is None:
            return []
        return sorted((self._by_id[i] for i in state.segment_ids()), key=segment_order)

    def highest_offset_for_epoch(self, leader_epoch: int) -> int | None:
        """The highest offset of ``leader_epoch`` in any segment that finished copying."""
        state = self._epochs.get(leader_epoch)
        return None if state is None else state.highest_offset

    def size(self, leader_epoch: int | None = None) -> int:
        """Total ``.log`` bytes of the COPY_SEGMENT_FINISHED segments (of ``leader_epoch``)."""
        return sum(m.segment_size_in_bytes for m in self.list_segments(leader_epoch)
                   if m.state is _FINISHED)
