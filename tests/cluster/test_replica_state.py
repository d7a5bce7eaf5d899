"""ReplicaState: a follower's log end offset and Kafka's ``lastCaughtUpTimeMs`` rule (caught up
at this fetch when it reaches the leader's end now, at the previous fetch when it reaches the
leader's end as of then), and ``is_caught_up``'s bound, inclusive of the lag."""

from __future__ import annotations

from tierlog.cluster.replica_state import NEVER_MS, UNKNOWN_OFFSET, ReplicaState

LAG = 30_000


def test_a_new_leader_knows_no_end_offset_and_trusts_only_in_sync_followers() -> None:
    in_sync = ReplicaState.for_new_leader(True, 5_000)
    out = ReplicaState.for_new_leader(False, 5_000)
    assert in_sync.log_end_offset == out.log_end_offset == UNKNOWN_OFFSET
    assert in_sync.last_caught_up_time_ms == 5_000
    assert out.last_caught_up_time_ms == NEVER_MS  # older than any lag, whatever the clock
    assert not out.is_caught_up(10, 0, LAG)


def test_a_fetch_at_the_leaders_end_is_caught_up_at_its_own_time() -> None:
    state = ReplicaState().fetched(10, 10, 1_000)
    assert (state.log_end_offset, state.last_caught_up_time_ms) == (10, 1_000)
    assert state.last_fetch_leader_log_end_offset == 10
    assert state.last_fetch_time_ms == 1_000


def test_a_fetch_reaching_the_previous_fetchs_leader_end_is_caught_up_at_that_time() -> None:
    # Small appends keep the leader one step ahead: the follower always reaches where the
    # leader was at its previous fetch, so it is caught up as of that fetch.
    state = ReplicaState().fetched(0, 5, 1_000).fetched(5, 8, 2_000)
    assert state.last_caught_up_time_ms == 1_000
    state = state.fetched(8, 12, 3_000)
    assert state.last_caught_up_time_ms == 2_000


def test_a_fetch_short_of_both_ends_keeps_the_old_caught_up_time() -> None:
    state = ReplicaState().fetched(10, 10, 1_000).fetched(10, 20, 2_000).fetched(15, 30, 3_000)
    assert state.last_caught_up_time_ms == 1_000
    assert state.last_fetch_leader_log_end_offset == 30
    assert state.log_end_offset == 15


def test_caught_up_times_never_go_back() -> None:
    # A fetch whose (late) time is older than the one recorded does not move the time back.
    state = ReplicaState().fetched(10, 10, 5_000).fetched(10, 10, 4_000)
    assert state.last_caught_up_time_ms == 5_000


def test_is_caught_up_at_the_leaders_end_or_within_the_lag_inclusive() -> None:
    state = ReplicaState().fetched(10, 10, 1_000)
    assert state.is_caught_up(20, 1_000 + LAG, LAG)
    assert not state.is_caught_up(20, 1_000 + LAG + 1, LAG)
    assert state.is_caught_up(10, 10 * LAG, LAG)  # at the leader's end: never lagging


def test_a_new_leader_epoch_keeps_the_end_offset_and_restarts_the_clocks() -> None:
    state = ReplicaState().fetched(10, 10, 1_000)
    in_sync = state.for_new_leader_epoch(True, 12, 9_000)
    assert in_sync == ReplicaState(10, 12, 9_000, 9_000)
    assert state.for_new_leader_epoch(False, 12, 9_000) == ReplicaState(10, 12, NEVER_MS, NEVER_MS)
