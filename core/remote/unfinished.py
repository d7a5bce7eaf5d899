"""The cleanup of a segment left unfinished in the tier (a copy or a delete that failed or
crashed), as Kafka's RemoteLogManager does it: the one home of that state sequence, for the
RemoteLogManager's sweep of each partition it tiers and for ``tierlog scrub --repair``.
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.remote.api import RemoteLogSegmentMetadata, RemoteLogSegmentState

_STARTED = RemoteLogSegmentState.COPY_SEGMENT_STARTED
_DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED


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
