"""``tierlog.remote.rlm.unfinished.roll_back_unfinished``: the one cleanup of an unfinished
segment (the RemoteLogManager's sweep and ``tierlog scrub --repair``), over every state."""

from __future__ import annotations

import pytest

from tierlog.remote.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.remote.rlm.unfinished import roll_back_unfinished

TIP = TopicIdPartition("c2Vn6QbUSz6vHqYkQ1dM0w", "events", 0)
S = RemoteLogSegmentState


@pytest.mark.parametrize(("state", "expected"), [
    (S.COPY_SEGMENT_STARTED, [("mark", S.DELETE_SEGMENT_STARTED), ("delete", None)]),
    (S.DELETE_SEGMENT_STARTED, [("delete", None)]),
    (S.COPY_SEGMENT_FINISHED, []),
    (S.DELETE_SEGMENT_FINISHED, []),
])
def test_each_state(state: RemoteLogSegmentState, expected: list) -> None:
    md = RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate(TIP), start_offset=0, end_offset=9,
        max_timestamp_ms=1, event_timestamp_ms=1, segment_size_in_bytes=10,
        segment_leader_epochs={0: 0}, state=state)
    calls: list = []
    done = roll_back_unfinished(md, mark=lambda m, s: calls.append(("mark", s)),
                                delete=lambda m: calls.append(("delete", None)))
    assert calls == expected
    assert done is bool(expected)
