"""The cleanup of a segment left unfinished in the tier (a copy or a delete that failed or
crashed), as Kafka's RemoteLogManager does it: the one home of that state sequence, for the
RemoteLogManager's sweep of each partition it tiers and for ``tierlog scrub --repair``.
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.remote.api import (
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemoteStorageManager,
)
from tierlog.remote.metadata_api import RemoteLogMetadataStore

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
_DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def roll_back_unfinished(
    metadata: RemoteLogSegmentMetadata, *,
    mark: Callable[[RemoteLogSegmentMetadata, RemoteLogSegmentState], None],
    delete: Callable[[RemoteLogSegmentMetadata], None],
) -> bool:
    """Clean up ``metadata`` if it is unfinished; False (nothing done) for any other state.

    A copy (COPY_SEGMENT_STARTED) is first marked abandoned (``mark(metadata,
    DELETE_SEGMENT_STARTED)``), so no reader or later run takes it for data; then the delete
    (DELETE_SEGMENT_STARTED) is finished by ``delete(metadata)``, which removes its objects
    and records DELETE_SEGMENT_FINISHED. The metadata never names missing data as committed.
    """
    if metadata.state is _STARTED:
        mark(metadata, _DELETE_STARTED)
    elif metadata.state is not _DELETE_STARTED:
        return False
    delete(metadata)
    return True


class StoreRollback:
    """The marks and deletes of :func:`roll_back_unfinished` for code that works on a
    metadata store and a storage manager directly, outside a RemoteLogManager (a restore, a
    restore into a new topic): ``mark`` records a state in ``rlmm`` stamped ``time_ms()``,
    ``delete`` removes a segment's objects through ``rsm`` and records DELETE_SEGMENT_FINISHED."""

    def __init__(self, rlmm: RemoteLogMetadataStore, rsm: RemoteStorageManager,
                 time_ms: Callable[[], int]) -> None:
        self._rlmm, self._rsm, self._time_ms = rlmm, rsm, time_ms

    def mark(self, metadata: RemoteLogSegmentMetadata, state: RemoteLogSegmentState) -> None:
        self._rlmm.update_remote_log_segment_metadata(RemoteLogSegmentMetadataUpdate(
            remote_log_segment_id=metadata.remote_log_segment_id,
            event_timestamp_ms=self._time_ms(), state=state))

    def delete(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._rsm.delete_log_segment_data(metadata)
        self.mark(metadata, _DELETE_FINISHED)

    def roll_back(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """:func:`roll_back_unfinished` of ``metadata`` through this store and storage."""
        return roll_back_unfinished(metadata, mark=self.mark, delete=self.delete)
