"""The Jepsen-style harness's faults (issue 24): a seeded, time-bounded schedule for N nodes
(SIGKILL and a later start, SIGSTOP/SIGCONT pairs, restarts, link cut/heal), and :func:`run`,
which applies it through callables the caller passes, so it is tested without processes.

A fault names a role (``leader``, ``follower``, ``controller``, ``any``), not a node: the
caller's ``resolve`` callback picks the node when the fault starts (the leader then, say). The
undo of a fault (start, SIGCONT, heal) targets the node it hit. Whatever happens, ``run``
ends with every fault undone: no node left killed or SIGSTOPped, no link left cut.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

log = logging.getLogger(__name__)

Role = Literal["leader", "follower", "controller", "any"]
ROLES: tuple[Role, ...] = ("leader", "follower", "controller", "any")
CutMode = Literal["reset", "blackhole"]
#: What a cut reaches: ``node``, every link to the node (its clients' and its peers'), or
#: ``peers``, only the links the other nodes use (its inter-broker listener): the node still
#: answers its clients, as a leader partitioned from its followers but not from producers.
CutScope = Literal["node", "peers"]
NodeId = int


@dataclass(frozen=True, slots=True)
class Kill:
    """SIGKILL a node, and start it again ``down_ms`` later."""

    at_ms: int
    role: Role
    down_ms: int


@dataclass(frozen=True, slots=True)
class Pause:
    """SIGSTOP a node, and SIGCONT it ``duration_ms`` later."""

    at_ms: int
    role: Role
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Restart:
    """Restart a node at once (the caller's way: a clean stop and a start, say)."""

    at_ms: int
    role: Role


@dataclass(frozen=True, slots=True)
class CutLink:
    """Cut the link between two nodes (``roles[0]``'s node, then another for ``roles[1]``)
    and heal it ``duration_ms`` later."""

    at_ms: int
    roles: tuple[Role, Role]
    duration_ms: int
    mode: CutMode = "reset"
    scope: CutScope = "node"


Fault = Kill | Pause | Restart | CutLink
KINDS: tuple[type[Fault], ...] = (Kill, Pause, Restart, CutLink)


@dataclass(frozen=True, slots=True)
class FaultSchedule:
    """What :func:`make_schedule` drew: faults in time order, offsets from the run's start."""

    seed: int
    nodes: int
    duration_ms: int
    faults: tuple[Fault, ...]


def make_schedule(seed: int, nodes: int, duration_ms: int, *, mean_gap_ms: int = 1000,
                  min_fault_ms: int = 200, max_fault_ms: int = 3000,
                  kinds: Sequence[type[Fault]] = KINDS, roles: Sequence[Role] = ROLES,
                  overlap: bool = False) -> FaultSchedule:
    """Faults drawn from ``random.Random(seed)`` over ``duration_ms``: gaps of ``mean_gap_ms``
    on average (half to one and a half times it), each fault lasting ``min_fault_ms`` to
    ``max_fault_ms`` (cut short at the end). Without ``overlap`` a fault starts only after the
    previous one ended (one fault at a time); with it, faults may overlap (the driver skips a
    fault whose role resolves to no free node). Link cuts need two nodes."""
    if nodes < 1 or duration_ms < 0 or mean_gap_ms < 1 or not 0 < min_fault_ms <= max_fault_ms:
        raise ValueError(f"make_schedule: nodes={nodes}, duration_ms={duration_ms}, "
                         f"mean_gap_ms={mean_gap_ms}, fault length {min_fault_ms}.."
                         f"{max_fault_ms} ms: need nodes >= 1, durations >= 0, a gap >= 1 ms "
                         f"and 0 < min_fault_ms <= max_fault_ms")
    usable = [k for k in kinds if k is not CutLink or nodes >= 2]
    if not usable or not roles:
        raise ValueError(f"make_schedule: no fault kind of {[k.__name__ for k in kinds]} and "
                         f"role of {list(roles)} applies to {nodes} node(s)")
    rng = random.Random(seed)
    faults: list[Fault] = []
    at = 0
    while True:
        at += rng.randint(mean_gap_ms // 2 or 1, mean_gap_ms + mean_gap_ms // 2)
        if at >= duration_ms:
            break
        kind = rng.choice(usable)
        role = rng.choice(roles)
        length = min(rng.randint(min_fault_ms, max_fault_ms), duration_ms - at)
        fault: Fault
        if kind is Kill:
            fault = Kill(at, role, length)
        elif kind is Pause:
            fault = Pause(at, role, length)
        elif kind is Restart:
            fault, length = Restart(at, role), 0
        else:
            mode: CutMode = rng.choice(("reset", "blackhole"))
            scope: CutScope = rng.choice(("node", "peers"))
            fault = CutLink(at, (role, rng.choice(roles)), length, mode, scope)
        faults.append(fault)
        if not overlap:
            at += length
    return FaultSchedule(seed, nodes, duration_ms, tuple(faults))


@dataclass(frozen=True, slots=True)
class FaultActions:
    """How :func:`run` touches the cluster; each callable acts at once and returns."""

    resolve: Callable[[Role, frozenset[NodeId]], NodeId | None]
    """The node that holds ``role`` now, not among the excluded (killed, paused, or the other
    end of a link); None when there is none (the fault is skipped)."""
    kill: Callable[[NodeId], None]
    """SIGKILL."""
    start: Callable[[NodeId], None]
    """Start a killed node again."""
    stop: Callable[[NodeId], None]
    """SIGSTOP."""
    cont: Callable[[NodeId], None]
    """SIGCONT."""
    restart: Callable[[NodeId], None]
    cut: Callable[[NodeId, NodeId, CutMode, CutScope], None]
    heal: Callable[[NodeId, NodeId], None]


@dataclass(frozen=True, slots=True)
class Applied:
    """One action :func:`run` took."""

    at_ms: int
    """When, in ms from the run's start."""
    action: str
    """``kill``, ``start``, ``stop``, ``cont``, ``restart``, ``cut`` or ``heal``."""
    nodes: tuple[NodeId, ...]
    fault: Fault


@dataclass
class RunReport:
    """What :func:`run` did."""

    applied: list[Applied] = field(default_factory=list)
    """Every action, in order, the final heal's included."""
    skipped: list[Fault] = field(default_factory=list)
    """Faults whose role resolved to no node (or a link already cut)."""
    healed_at_end: int = 0
    """How many undos the final "heal everything" step ran (faults still on at the end)."""

    @property
    def faults(self) -> Counter[str]:
        """Faults injected, by kind (``Kill``, ``Pause``, ``Restart``, ``CutLink``)."""
        return Counter(type(a.fault).__name__ for a in self.applied
                       if a.action in ("kill", "stop", "restart", "cut"))


@dataclass(frozen=True, slots=True)
class _Undo:
    action: str
    nodes: tuple[NodeId, ...]
    fault: Fault
    call: Callable[[], None]


#: The final heal's order: links first, so restarted and resumed nodes find each other.
_HEAL_ORDER = {"heal": 0, "cont": 1, "start": 2}


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def run(schedule: FaultSchedule, actions: FaultActions, *,
        time_ms: Callable[[], int] = _monotonic_ms,
        wait_ms: Callable[[int], bool] | None = None,
        stop: threading.Event | None = None,
        deadline_ms: int | None = None) -> RunReport:
    """Apply ``schedule`` from now on, each fault at its ``at_ms`` and its undo when it ends,
    until ``deadline_ms`` after the start (default: the schedule's duration) or until ``stop``
    is set; then undo every fault still on, whatever ended the run (an action's exception
    included: it is raised after the heal). ``wait_ms(ms)`` waits up to ``ms`` and returns
    True to stop early (default: waits on ``stop``); tests pass one that advances a fake
    ``time_ms``."""
    stopper = stop or threading.Event()
    wait = wait_ms or (lambda ms: stopper.wait(ms / 1000))
    start = time_ms()
    deadline = start + (schedule.duration_ms if deadline_ms is None else deadline_ms)
    report = RunReport()
    undos: dict[int, _Undo] = {}  # by sequence number, for the final heal
    held: set[NodeId] = set()  # killed or paused
    cut: set[frozenset[NodeId]] = set()
    queue: list[tuple[int, int, Fault | None]] = [
        (start + f.at_ms, n, f) for n, f in enumerate(schedule.faults)]
    heapq.heapify(queue)
    sequence = len(schedule.faults)

    def act(action: str, nodes: tuple[NodeId, ...], fault: Fault,
            call: Callable[[], None]) -> None:
        call()
        report.applied.append(Applied(time_ms() - start, action, nodes, fault))
        log.info("fault %s %s (%s)", action, nodes, fault)

    def later(ms: int, undo: _Undo) -> None:
        nonlocal sequence
        undos[sequence] = undo
        heapq.heappush(queue, (time_ms() + ms, sequence, None))
        sequence += 1

    def undo(number: int) -> None:
        step = undos.pop(number)
        held.difference_update(step.nodes)
        cut.discard(frozenset(step.nodes))
        act(step.action, step.nodes, step.fault, step.call)

    def begin(fault: Fault) -> None:
        if isinstance(fault, CutLink):
            first = _resolve(actions, fault.roles[0], frozenset(held))
            second = (None if first is None else
                      _resolve(actions, fault.roles[1], frozenset(held | {first})))
            if first is None or second is None or frozenset((first, second)) in cut:
                report.skipped.append(fault)
                return
            a, b, mode, scope = first, second, fault.mode, fault.scope
            cut.add(frozenset((a, b)))
            act("cut", (a, b), fault, lambda: actions.cut(a, b, mode, scope))
            later(fault.duration_ms, _Undo("heal", (a, b), fault, lambda: actions.heal(a, b)))
            return
        node = _resolve(actions, fault.role, frozenset(held))
        if node is None:
            report.skipped.append(fault)
            return
        if isinstance(fault, Restart):
            act("restart", (node,), fault, lambda: actions.restart(node))
            return
        held.add(node)
        if isinstance(fault, Kill):
            act("kill", (node,), fault, lambda: actions.kill(node))
            later(fault.down_ms, _Undo("start", (node,), fault, lambda: actions.start(node)))
        else:
            act("stop", (node,), fault, lambda: actions.stop(node))
            later(fault.duration_ms, _Undo("cont", (node,), fault, lambda: actions.cont(node)))

    try:
        while queue and not stopper.is_set():
            due, number, fault = queue[0]
            now = time_ms()
            if due > now:
                if now >= deadline or wait(min(due, deadline) - now):
                    break
                continue
            if fault is not None and due >= deadline:
                break  # no new fault after the deadline; the heal below ends the rest
            heapq.heappop(queue)
            if fault is None:
                undo(number)
            else:
                begin(fault)
    finally:
        report.healed_at_end = len(undos)
        _heal_everything(undos, undo)
    return report


def _resolve(actions: FaultActions, role: Role, exclude: frozenset[NodeId]) -> NodeId | None:
    node = actions.resolve(role, exclude)
    if node is not None and node in exclude:
        raise ValueError(f"resolve({role!r}) returned node {node}, which it was told to "
                         f"exclude ({sorted(exclude)})")
    return node


def _heal_everything(undos: dict[int, _Undo], undo: Callable[[int], None]) -> None:
    """Undo every fault still on (links, then paused nodes, then killed ones), each attempted
    even when another fails; the failures are raised together afterwards."""
    errors: list[Exception] = []
    for number in sorted(undos, key=lambda n: (_HEAL_ORDER[undos[n].action], n)):
        try:
            undo(number)
        except Exception as exc:  # noqa: BLE001 - every undo is attempted; all are raised below
            log.error("fault undo %s failed: %s", number, exc)
            errors.append(exc)
    if errors:
        raise ExceptionGroup("undoing the faults still on at the end failed", errors)
