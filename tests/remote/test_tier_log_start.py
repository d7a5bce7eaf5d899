"""The tier's log start offset has one home (tierlog.remote.tier.manifest.tier_log_start), used
by the readers' segment chain and by adoption: the later of the first committed offset and
the recorded log start."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tierlog.remote.api import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentState,
    TopicIdPartition,
)
from tierlog.remote.tier.manifest import tier_log_start

TIP = TopicIdPartition("c2Vn6QbUSz6vHqYkQ1dM0w", "events", 0)


def _segment(start: int, end: int) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        remote_log_segment_id=RemoteLogSegmentId.generate(TIP), start_offset=start,
        end_offset=end, max_timestamp_ms=1, event_timestamp_ms=1, segment_size_in_bytes=10,
        segment_leader_epochs={0: start}, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)


@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 500)), min_size=1,
                max_size=8),
       st.one_of(st.none(), st.integers(0, 20_000)))
def test_later_of_first_committed_and_recorded(spans, recorded):
    segments = [_segment(start, start + length) for start, length in spans]
    first = min(start for start, _ in spans)
    got = tier_log_start(segments, recorded)
    assert got == (first if recorded is None else max(first, recorded))
    assert got >= first
    if recorded is not None:
        assert got >= recorded


def test_recorded_start_inside_a_gap_stays():
    assert tier_log_start([_segment(20, 29), _segment(0, 9)], 12) == 12


def test_no_committed_segment():
    assert tier_log_start([], None) == 0
    assert tier_log_start([], 7) == 7
