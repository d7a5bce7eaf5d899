"""The harness's fault schedule (support.fault_schedule): seeded and bounded schedules, and the
driver run against a recording model cluster on a fake clock: faults land on the node holding
the role at that moment, are undone on that node, nothing starts after the deadline, and every
run (stopped, failed or over) ends with no node killed or paused and no link cut.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.clock import FakeClock
from support.fault_schedule import (
    KINDS,
    CutLink,
    CutMode,
    CutScope,
    FaultActions,
    FaultSchedule,
    Kill,
    NodeId,
    Pause,
    Restart,
    Role,
    RunReport,
    make_schedule,
    run,
)


@dataclass
class ModelCluster:
    """Three nodes whose state the actions change, each action checked against that state (a
    second kill of a dead node, a SIGCONT of a running one, a heal of an uncut link fail).
    The leader is the lowest-numbered running node, the controller the highest."""

    clock: FakeClock
    nodes: tuple[NodeId, ...] = (1, 2, 3)
    state: dict[NodeId, str] = field(default_factory=dict)
    cut_links: dict[frozenset[NodeId], CutMode] = field(default_factory=dict)
    log: list[tuple[int, str, tuple[NodeId, ...]]] = field(default_factory=list)
    fail_on: str | None = None

    def __post_init__(self) -> None:
        self.state = dict.fromkeys(self.nodes, "up")
        self.start_ms = self.clock()

    def record(self, action: str, *nodes: NodeId) -> None:
        if action == self.fail_on:
            raise RuntimeError(f"{action} failed")
        self.log.append((self.clock() - self.start_ms, action, nodes))

    def move(self, node: NodeId, before: str, after: str, action: str) -> None:
        assert self.state[node] == before, f"{action} of node {node} while {self.state[node]}"
        self.record(action, node)
        self.state[node] = after

    def resolve(self, role: Role, exclude: frozenset[NodeId]) -> NodeId | None:
        up = [n for n in self.nodes if self.state[n] == "up" and n not in exclude]
        if not up:
            return None
        if role == "leader":
            return up[0]
        if role == "controller":
            return up[-1]
        if role == "follower":
            leader = min(n for n in self.nodes if self.state[n] == "up")
            followers = [n for n in up if n != leader]
            return followers[0] if followers else None
        return up[len(up) // 2]

    def cut(self, a: NodeId, b: NodeId, mode: CutMode, scope: CutScope) -> None:
        assert a != b and frozenset((a, b)) not in self.cut_links
        self.record("cut", a, b)
        self.cut_links[frozenset((a, b))] = mode

    def heal(self, a: NodeId, b: NodeId) -> None:
        assert frozenset((a, b)) in self.cut_links, f"heal of an uncut link {a}-{b}"
        self.record("heal", a, b)
        del self.cut_links[frozenset((a, b))]

    def actions(self) -> FaultActions:
        return FaultActions(
            resolve=self.resolve,
            kill=lambda n: self.move(n, "up", "killed", "kill"),
            start=lambda n: self.move(n, "killed", "up", "start"),
            stop=lambda n: self.move(n, "up", "paused", "stop"),
            cont=lambda n: self.move(n, "paused", "up", "cont"),
            restart=lambda n: self.move(n, "up", "up", "restart"),
            cut=self.cut, heal=self.heal)

    def healthy(self) -> bool:
        return set(self.state.values()) == {"up"} and not self.cut_links


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def drive(schedule: FaultSchedule, cluster: ModelCluster,
          deadline_ms: int | None = None) -> RunReport:
    """Run on the fake clock: each wait moves it on by exactly what was asked."""
    def wait(ms: int) -> bool:
        assert ms > 0
        cluster.clock.advance(ms)
        return False
    return run(schedule, cluster.actions(), time_ms=cluster.clock, wait_ms=wait,
               deadline_ms=deadline_ms)


# -- make_schedule --------------------------------------------------------------------------

def test_a_schedule_is_a_function_of_its_seed() -> None:
    assert make_schedule(7, 3, 60_000) == make_schedule(7, 3, 60_000)
    assert make_schedule(7, 3, 60_000).faults != make_schedule(8, 3, 60_000).faults


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**32), nodes=st.integers(1, 5), duration=st.integers(0, 30_000),
       overlap=st.booleans())
def test_a_drawn_schedule_stays_in_its_time_and_one_fault_at_a_time(
        seed: int, nodes: int, duration: int, overlap: bool) -> None:
    schedule = make_schedule(seed, nodes, duration, mean_gap_ms=500, overlap=overlap)
    ends = []
    for fault in schedule.faults:
        assert 0 < fault.at_ms < duration
        length = {Kill: "down_ms", Pause: "duration_ms", CutLink: "duration_ms"}.get(type(fault))
        end = fault.at_ms + (getattr(fault, length) if length else 0)
        assert end <= duration
        ends.append((fault.at_ms, end))
        if isinstance(fault, CutLink):
            assert nodes >= 2
    assert [f.at_ms for f in schedule.faults] == sorted(f.at_ms for f in schedule.faults)
    if not overlap:
        assert all(end <= next_at for (_, end), (next_at, _) in itertools.pairwise(ends))


def test_a_schedule_draws_every_kind_and_role_over_a_long_run() -> None:
    schedule = make_schedule(1, 3, 600_000)
    assert {type(f) for f in schedule.faults} == set(KINDS)
    roles = {f.roles[0] if isinstance(f, CutLink) else f.role for f in schedule.faults}
    assert roles == {"leader", "follower", "controller", "any"}
    assert {f.mode for f in schedule.faults if isinstance(f, CutLink)} == {"reset", "blackhole"}
    assert {f.scope for f in schedule.faults if isinstance(f, CutLink)} == {"node", "peers"}


def test_bad_schedule_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="nodes=0"):
        make_schedule(1, 0, 1000)
    with pytest.raises(ValueError, match="no fault kind of \\['CutLink'\\]"):
        make_schedule(1, 1, 1000, kinds=[CutLink])
    with pytest.raises(ValueError, match="min_fault_ms <= max_fault_ms"):
        make_schedule(1, 3, 1000, min_fault_ms=500, max_fault_ms=100)


# -- run --------------------------------------------------------------------------------------

def test_faults_land_on_the_role_holder_then_and_are_undone_on_the_same_node(
        clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (
        Kill(100, "leader", 1000),          # node 1, the leader: node 2 leads while it is down
        Pause(200, "leader", 300),          # so this stops node 2
        CutLink(600, ("leader", "any"), 2000, "blackhole"),  # node 1 is killed, 2 is up again
        Restart(5000, "controller"),
    ))
    cluster = ModelCluster(clock)
    report = drive(schedule, cluster)
    assert cluster.log == [
        (100, "kill", (1,)), (200, "stop", (2,)), (500, "cont", (2,)),
        (600, "cut", (2, 3)), (1100, "start", (1,)), (2600, "heal", (2, 3)),
        (5000, "restart", (3,)),
    ]
    assert report.faults == {"Kill": 1, "Pause": 1, "CutLink": 1, "Restart": 1}
    assert report.skipped == [] and report.healed_at_end == 0
    assert cluster.healthy()


def test_a_fault_without_a_free_node_for_its_role_is_skipped(clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (
        Kill(100, "follower", 5000), Kill(200, "follower", 5000),  # nodes 2 and 3
        Pause(300, "follower", 100),  # only the leader is up: no follower
        CutLink(400, ("leader", "any"), 100),  # node 1 has no running peer
    ))
    cluster = ModelCluster(clock)
    report = drive(schedule, cluster)
    assert report.skipped == [Pause(300, "follower", 100),
                              CutLink(400, ("leader", "any"), 100)]
    assert [a for _, a, _ in cluster.log] == ["kill", "kill", "start", "start"]


def test_the_deadline_ends_the_run_and_heals_what_is_still_broken(clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (
        Kill(100, "leader", 60_000), CutLink(200, ("leader", "any"), 60_000, "reset"),
        Pause(300, "any", 60_000),
        Kill(2_000, "any", 10),  # after the deadline: never started
    ))
    cluster = ModelCluster(clock)
    report = drive(schedule, cluster, deadline_ms=1_000)
    assert cluster.log[:3] == [(100, "kill", (1,)), (200, "cut", (2, 3)), (300, "stop", (3,))]
    assert cluster.log[3:] == [(1000, "heal", (2, 3)), (1000, "cont", (3,)),
                               (1000, "start", (1,))]  # links first, then paused, then killed
    assert report.healed_at_end == 3
    assert cluster.healthy()


def test_a_failing_action_still_heals_everything_and_is_raised(clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (
        Pause(100, "leader", 5000), CutLink(200, ("leader", "any"), 5000),
        Restart(300, "any"),
    ))
    cluster = ModelCluster(clock, fail_on="restart")
    with pytest.raises(RuntimeError, match="restart failed"):
        drive(schedule, cluster)
    assert cluster.healthy()
    assert cluster.log[-2:] == [(300, "heal", (2, 3)), (300, "cont", (1,))]


def test_a_failing_undo_is_raised_after_the_others_ran(clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (
        Kill(100, "leader", 60_000), CutLink(200, ("leader", "any"), 60_000)))
    cluster = ModelCluster(clock, fail_on="heal")
    with pytest.raises(ExceptionGroup) as raised:
        drive(schedule, cluster, deadline_ms=1_000)
    assert [str(e) for e in raised.value.exceptions] == ["heal failed"]
    assert cluster.state == {1: "up", 2: "up", 3: "up"}  # the start ran after the failed heal


def test_a_resolver_returning_an_excluded_node_is_named(clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (Kill(100, "leader", 5000), Kill(200, "leader", 5000)))
    cluster = ModelCluster(clock)
    actions = cluster.actions()
    stubborn = FaultActions(**{**{f: getattr(actions, f) for f in FaultActions.__slots__},
                               "resolve": lambda role, exclude: 1})
    with pytest.raises(ValueError, match="returned node 1, which it was told to exclude"):
        run(schedule, stubborn, time_ms=clock,
            wait_ms=lambda ms: clock.advance(ms) < 0)
    assert cluster.healthy()


def test_stop_ends_the_run_early_and_heals(clock: FakeClock) -> None:
    schedule = FaultSchedule(0, 3, 10_000, (Kill(100, "leader", 5000), Pause(6000, "any", 10)))
    cluster = ModelCluster(clock)
    stop = threading.Event()

    def wait(ms: int) -> bool:
        clock.advance(ms)
        if cluster.log:  # the kill happened: ask the run to end at its next wait
            stop.set()
        return stop.is_set()

    report = run(schedule, cluster.actions(), time_ms=clock, wait_ms=wait, stop=stop)
    assert [a for _, a, _ in cluster.log] == ["kill", "start"]
    assert report.healed_at_end == 1
    assert cluster.healthy()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32), overlap=st.booleans(), deadline=st.integers(0, 20_000))
def test_drawn_schedules_never_break_the_model_and_end_healthy(
        seed: int, overlap: bool, deadline: int) -> None:
    clock = FakeClock()
    schedule = make_schedule(seed, 3, 20_000, mean_gap_ms=400, max_fault_ms=2000,
                             overlap=overlap)
    cluster = ModelCluster(clock)
    report = drive(schedule, cluster, deadline_ms=deadline)
    assert cluster.healthy()
    assert all(t <= max(deadline, 0) for t, _, _ in cluster.log)
    started = sum(report.faults.values())
    assert started + len(report.skipped) == sum(
        1 for f in schedule.faults if f.at_ms < deadline)
