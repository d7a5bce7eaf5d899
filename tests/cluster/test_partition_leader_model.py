"""A differential test of PartitionLeader against a model: a hypothesis state machine appends,
produces with acks=all, lets followers fetch (any interleaving, any offsets up to the leader's
end, each follower's own end never going back), moves the clock, proposes in-sync set changes,
applies them (sometimes stale), abandons them, and lets the controller fence followers and bump
epochs. After every step the module and the model (written plainly below, calling none of the
module's helpers) must agree on everything, and the safety rules must hold: the high
watermark never moves back, stays at or below the leader's end and every in-sync member's
known end; the leader stays in the set; an acknowledged acks=all offset is held by every
member at the time it is acknowledged; the partition epoch only grows.

Fast in CI (150 histories of 30 steps); ``TIERLOG_LONG_HYPOTHESIS=1`` runs 5,000 of 80.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from tierlog.cluster.partition_leader import PartitionLeader
from tierlog.cluster.replica_state import NEVER_MS
from tierlog.errors import (
    FencedPartitionEpochError,
    InvalidIsrError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
)

LEADER = 1
REPLICAS = (1, 2, 3, 4)
FOLLOWERS = (2, 3, 4)
LAG = 100
LONG = os.environ.get("TIERLOG_LONG_HYPOTHESIS") == "1"
#: How far the clock moves before a step: often not at all, often just past the lag.
ADVANCE = st.sampled_from([0, 0, 1, LAG, LAG + 1]) | st.integers(0, 3 * LAG)


@dataclass
class Follower:
    """The model's record of a follower: None is "unknown" (end) and "never" (times)."""

    end: int | None = None
    leader_end_at_last_fetch: int | None = None
    last_fetch: int | None = None
    caught_up: int | None = None


def _later(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class Model:
    """The rules, written out plainly."""

    isr: set[int]
    end: int
    hw: int
    now: int
    min_isr: int
    epoch_start: int
    partition_epoch: int = 0
    leader_epoch: int = 0
    pending: tuple[frozenset[int], int, frozenset[int]] | None = None  # isr, epoch, added
    live: set[int] = field(default_factory=lambda: set(REPLICAS))
    followers: dict[int, Follower] = field(default_factory=dict)

    def caught_up(self, r: int) -> bool:
        f = self.followers[r]
        return f.end == self.end or (f.caught_up is not None and self.now - f.caught_up <= LAG)

    def waited_for(self) -> set[int]:
        added = self.pending[2] if self.pending else frozenset()
        return self.isr | added

    def move_hw(self) -> bool:
        if len(self.isr) < min(self.min_isr, len(REPLICAS)):
            return False
        ends = [self.end]
        for r, f in self.followers.items():
            if r in self.waited_for() or (r in self.live and self.caught_up(r)):
                ends.append(-1 if f.end is None else f.end)
        if min(ends) > self.hw:
            self.hw = min(ends)
            return True
        return False


class LeaderMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.proposals: list[tuple[frozenset[int], int]] = []
        self.outstanding: list[int] = []  # acks=all produces waiting: their required offset

    @initialize(isr=st.sets(st.sampled_from(FOLLOWERS)), end=st.integers(0, 20),
                data=st.data(), now=st.integers(0, 10**6), min_isr=st.integers(1, 5))
    def start(self, isr: set[int], end: int, data: st.DataObject, now: int,
              min_isr: int) -> None:
        hw = data.draw(st.integers(0, end))
        self.model = Model(isr={LEADER} | isr, end=end, hw=hw, now=now, min_isr=min_isr,
                           epoch_start=end)
        self.model.followers = {r: Follower(caught_up=now if r in isr else None)
                                for r in FOLLOWERS}
        self.initial_hw = hw
        self.leader = PartitionLeader(
            "orders", 0, leader_id=LEADER, replicas=REPLICAS, isr=self.model.isr,
            leader_epoch=0, partition_epoch=0, log_end_offset=end, high_watermark=hw,
            now_ms=now, replica_lag_time_max_ms=LAG, min_insync_replicas=min_isr)
        self.model.move_hw()
        self.last_hw = self.model.hw
        self.last_partition_epoch = 0

    # --- the leader's log -------------------------------------------------------------------

    @rule(n=st.integers(1, 5), advance=ADVANCE)
    def append(self, n: int, advance: int) -> None:
        self.model.now += advance
        self.model.end += n
        assert self.leader.leader_appended(self.model.end, self.model.now) == self.model.move_hw()

    @rule(n=st.integers(1, 5), advance=ADVANCE)
    def produce_acks_all(self, n: int, advance: int) -> None:
        if len(self.model.isr) < min(self.model.min_isr, len(REPLICAS)):
            with pytest.raises(NotEnoughReplicasError):
                self.leader.check_min_isr()
            return
        self.leader.check_min_isr()
        self.append(n, advance)
        self.outstanding.append(self.model.end)


    @precondition(lambda self: self.outstanding)
    @rule()
    def complete_delayed_produces(self) -> None:
        """The caller checks its waiting acks=all produces (Kafka does when the high watermark
        moves; here at any time, so the in-sync set may have shrunk meanwhile): one answered
        must be held by every member of the set it waited for."""
        m, p = self.model, self.leader
        for required in list(self.outstanding):
            try:
                answered = p.acks_all_satisfied(required)
                assert not answered or len(m.waited_for()) >= min(m.min_isr, len(REPLICAS))
            except NotEnoughReplicasAfterAppendError:
                assert m.hw >= required and len(m.waited_for()) < min(m.min_isr, len(REPLICAS))
                answered = True
            assert answered == (m.hw >= required)
            if answered:
                for r in m.waited_for() - {LEADER}:
                    end = m.followers[r].end
                    assert end is not None and end >= required, (required, r, end, p)
                self.outstanding.remove(required)

    @precondition(lambda self: any(f.caught_up is not None
                                   for f in self.model.followers.values()))
    @rule(r=st.sampled_from(FOLLOWERS), delta=st.sampled_from([-1, 0, 1]))
    def tick_to_the_lag_edge(self, r: int, delta: int) -> None:
        """Move the clock to where follower ``r`` is about to lag, lags exactly, or just
        does (replica.lag.time.max.ms is inclusive)."""
        caught_up = self.model.followers[r].caught_up
        if caught_up is not None:
            self.model.now = max(self.model.now, caught_up + LAG + delta)

    # --- followers --------------------------------------------------------------------------

    @rule(r=st.sampled_from(FOLLOWERS), data=st.data(), advance=ADVANCE)
    def fetch(self, r: int, data: st.DataObject, advance: int) -> None:
        m, f = self.model, self.model.followers[r]
        m.now += advance
        # A follower's end never goes back; one in the set at the election has the mark.
        low = f.end if f.end is not None else self.initial_hw if r in m.isr else 0
        # The edges the rules compare with are drawn often: the mark, the epoch start, the end.
        edges = sorted({o for o in (low, m.hw, m.epoch_start, m.end) if low <= o <= m.end})
        offset = data.draw(st.sampled_from(edges) | st.integers(low, m.end), label="offset")
        leader_end = data.draw(st.sampled_from([m.end]) | st.integers(offset, m.end),
                               label="leader end at the fetch")
        outcome = self.leader.follower_fetched(r, offset, leader_end, m.now)

        if offset >= leader_end:
            f.caught_up = _later(f.caught_up, m.now)
        elif f.leader_end_at_last_fetch is None or offset >= f.leader_end_at_last_fetch:
            f.caught_up = _later(f.caught_up, f.last_fetch)
        previous_end = f.end
        f.end = offset
        f.leader_end_at_last_fetch = _later(f.leader_end_at_last_fetch, leader_end)
        f.last_fetch = m.now
        expected_proposal = None
        if (m.pending is None and r not in m.isr and r in m.live and offset >= m.hw
                and offset >= m.epoch_start):
            m.pending = (frozenset(m.isr | {r}), m.partition_epoch, frozenset({r}))
            expected_proposal = m.pending
        moved = previous_end != offset and m.move_hw()

        assert outcome.high_watermark_moved == moved
        self._check_proposal(outcome.proposal, expected_proposal)

    @rule(live=st.sets(st.sampled_from(FOLLOWERS)))
    def brokers_alive(self, live: set[int]) -> None:
        self.model.live = {LEADER} | live
        self.leader.set_live_brokers(self.model.live)

    # --- in-sync set changes ----------------------------------------------------------------

    def _check_proposal(self, proposal: object,
                        expected: tuple[frozenset[int], int, frozenset[int]] | None) -> None:
        if expected is None:
            assert proposal is None
            return
        assert proposal is not None and proposal == self.leader.pending
        assert (self.leader.pending.isr, self.leader.pending.partition_epoch,
                self.leader.pending.added) == expected
        self.proposals.append((expected[0], expected[1]))

    @rule(advance=ADVANCE)
    def shrink(self, advance: int) -> None:
        m = self.model
        m.now += advance
        expected = None
        if m.pending is None:
            out = {r for r in m.isr - {LEADER} if not m.caught_up(r)}
            if out:
                m.pending = (frozenset(m.isr - out), m.partition_epoch, frozenset())
                expected = m.pending
        self._check_proposal(self.leader.propose_isr_shrink(m.now), expected)

    @precondition(lambda self: self.proposals)
    @rule(data=st.data())
    def apply(self, data: st.DataObject) -> None:
        m = self.model
        isr, epoch = data.draw(st.sampled_from(self.proposals), label="proposal")
        if epoch != m.partition_epoch:
            with pytest.raises(FencedPartitionEpochError):
                self.leader.apply_isr(isr, epoch, m.now)
        elif m.pending is None or m.pending[0] != isr:
            with pytest.raises(InvalidIsrError):
                self.leader.apply_isr(isr, epoch, m.now)
        else:
            m.isr = set(isr)
            m.partition_epoch += 1
            m.pending = None
            assert self.leader.apply_isr(isr, epoch, m.now) == m.move_hw()

    @rule()
    def abandon(self) -> None:
        self.model.pending = None
        self.leader.abandon_isr_change()

    @rule(fenced=st.sets(st.sampled_from(FOLLOWERS)), new_leader_epoch=st.booleans(),
          step=st.integers(-1, 2))
    def controller_update(self, fenced: set[int], new_leader_epoch: bool, step: int) -> None:
        m = self.model
        isr = m.isr - fenced
        epoch = m.partition_epoch + step
        leader_epoch = m.leader_epoch + (1 if new_leader_epoch else 0)
        if step < 0:
            with pytest.raises(FencedPartitionEpochError):
                self.leader.update_partition(replicas=REPLICAS, isr=isr, leader_epoch=leader_epoch,
                                             partition_epoch=epoch, now_ms=m.now)
            return
        m.isr, m.partition_epoch, m.pending = isr, epoch, None
        if new_leader_epoch:
            m.leader_epoch, m.epoch_start = leader_epoch, m.end
            for r, f in m.followers.items():
                in_sync = r in isr
                m.followers[r] = Follower(end=f.end, leader_end_at_last_fetch=m.end,
                                          last_fetch=m.now if in_sync else None,
                                          caught_up=m.now if in_sync else None)
        moved = self.leader.update_partition(replicas=REPLICAS, isr=isr,
                                             leader_epoch=leader_epoch, partition_epoch=epoch,
                                             now_ms=m.now)
        assert moved == m.move_hw()

    # --- what must hold after every step ----------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        m, p = self.model, self.leader
        assert (p.high_watermark, p.log_end_offset, set(p.isr)) == (m.hw, m.end, m.isr)
        assert (p.partition_epoch, p.leader_epoch) == (m.partition_epoch, m.leader_epoch)
        assert p.leader_epoch_start_offset == m.epoch_start
        pending = None if p.pending is None else (p.pending.isr, p.pending.partition_epoch,
                                                  p.pending.added)
        assert pending == m.pending
        for r, f in m.followers.items():
            s = p.follower(r)
            assert s.log_end_offset == (-1 if f.end is None else f.end)
            assert s.last_caught_up_time_ms == (NEVER_MS if f.caught_up is None else f.caught_up)
            assert s.last_fetch_time_ms == (NEVER_MS if f.last_fetch is None else f.last_fetch)

    @invariant()
    def high_watermark_is_safe(self) -> None:
        m, p = self.model, self.leader
        assert self.last_hw <= p.high_watermark <= p.log_end_offset
        self.last_hw = p.high_watermark
        assert LEADER in p.isr
        for r in p.maximal_isr - {LEADER}:
            end = m.followers[r].end
            assert end is None or p.high_watermark <= end, (r, end, p)

    @invariant()
    def partition_epoch_only_grows(self) -> None:
        assert self.leader.partition_epoch >= self.last_partition_epoch
        self.last_partition_epoch = self.leader.partition_epoch


LeaderMachine.TestCase.settings = settings(
    max_examples=5_000 if LONG else 150, stateful_step_count=80 if LONG else 30,
    deadline=None, suppress_health_check=[HealthCheck.too_slow])
TestPartitionLeaderModel = LeaderMachine.TestCase
