"""A follower's truncation (tierlog.cluster.truncation, Kafka's getOffsetTruncationState):
each branch by example, then the whole exchange of KIP-279 (the follower asks for the end of
its latest epoch, truncates, asks again until done) run over the real leader-epoch caches of
histories hypothesis draws: a leader's log, and a follower's that agrees with it up to some
offset and then holds records of epochs the leader never got (or more of the last epoch they
share). The follower always ends with a prefix of the leader's log, and at the divergence point
itself whenever the leader has appended in an epoch above every diverged one."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.cluster.truncation import Truncation, truncation_offset
from tierlog.log.leader_epoch import UNDEFINED_EPOCH, LeaderEpochFileCache


def _cache(epochs: list[int]) -> LeaderEpochFileCache:
    """The cache of a log whose record at each offset was written in ``epochs[offset]``."""
    cache = LeaderEpochFileCache(None)
    for offset, epoch in enumerate(epochs):
        cache.assign_if_newer(epoch, offset)
    return cache


def test_each_branch() -> None:
    follower = _cache([0, 0, 1, 1, 3])  # epochs 0 at 0, 1 at 2, 3 at 4; log end 5

    def ask(leader_epoch: int, leader_end: int) -> Truncation:
        return truncation_offset(leader_epoch, leader_end, fetch_offset=1, log_end_offset=5,
                                 end_offset_for=lambda e: follower.end_offset_for(e, 5))

    assert ask(0, -1) == Truncation(1, True)  # the leader knows no such epoch: fetch offset
    assert ask(UNDEFINED_EPOCH, 3) == Truncation(3, True)  # an old leader: its end
    assert ask(1, 3) == Truncation(3, True)  # the same epoch: the smaller end
    assert ask(1, 9) == Truncation(4, True)  # ... the follower's end of it
    assert ask(2, 4) == Truncation(4, False)  # epoch 2 unknown here: to epoch 1's end, again
    assert truncation_offset(  # no epoch cached here (records from before epochs): the leader's
        0, 2, fetch_offset=0, log_end_offset=3,
        end_offset_for=lambda e: _cache([]).end_offset_for(e, 3)) == Truncation(2, True)


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[int], list[int], int, int]:
    """(leader's epochs per offset, follower's, the divergence offset, follower's HW)."""
    steps = draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 4)), min_size=1,
                          max_size=6))
    leader: list[int] = []
    epoch = -1
    for gap, count in steps:
        epoch += gap
        leader += [epoch] * count
    k = draw(st.integers(0, len(leader)))
    follower = leader[:k]
    spare = sorted(set(range(epoch + 3)) - set(leader))
    last = follower[-1] if follower else -1
    at_boundary = k == len(leader) or (k > 0 and leader[k] != leader[k - 1])
    if follower and at_boundary and draw(st.booleans()):  # more of the last shared epoch
        follower += [last] * draw(st.integers(1, 3))
    for lost in sorted(draw(st.sets(st.sampled_from([e for e in spare if e > last] or [-1]),
                                    max_size=3))):
        if lost > last:  # epochs whose leader's records never reached this leader
            follower += [lost] * draw(st.integers(1, 3))
    hw = draw(st.integers(0, k))
    return leader, follower, k, hw


#: ``TIERLOG_LONG_HYPOTHESIS=1`` draws 5,000 histories instead of 300.
LONG = os.environ.get("TIERLOG_LONG_HYPOTHESIS") == "1"


@settings(max_examples=5_000 if LONG else 300, deadline=None)
@given(histories())
def test_the_exchange_ends_with_a_prefix_of_the_leaders_log(
        drawn: tuple[list[int], list[int], int, int]) -> None:
    leader, follower, k, hw = drawn
    lcache, fcache = _cache(leader), _cache(follower)
    log = list(follower)
    for _ in range(50):
        latest = fcache.latest_epoch
        if latest is None:  # an empty cache: to the high watermark (Kafka does the same)
            offset = min(hw, len(log))
            break
        epoch, end = lcache.end_offset_for(latest, len(leader))
        end_now = len(log)
        step = truncation_offset(epoch, end, fetch_offset=hw, log_end_offset=end_now,
                                 end_offset_for=lambda e, n=end_now: fcache.end_offset_for(e, n))
        offset = step.offset
        assert 0 <= offset <= len(log)
        log = log[:offset]
        fcache.truncate_from_end(offset)
        if step.completed:
            break
    else:
        raise AssertionError("the exchange did not end")
    assert log == leader[:offset]  # never anything the leader does not have
    assert offset >= hw  # never below the high watermark
    diverged = follower[k:]
    if not diverged or max(diverged) < leader[-1]:
        assert offset == k  # ... and exactly at the divergence point
