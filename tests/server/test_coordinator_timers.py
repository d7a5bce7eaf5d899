"""The coordinators' timer source: :class:`ManualTimers` fires callbacks in deadline order,
only when virtual time reaches them, never after a cancel; :class:`LoopTimers` is the loop's."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.server.coordinator.coordinator_timers import LoopTimers, ManualTimers


@given(delays=st.lists(st.integers(0, 1000), max_size=30),
       cancelled=st.sets(st.integers(0, 29)),
       steps=st.lists(st.integers(0, 400), min_size=1, max_size=8))
def test_manual_timers_fire_due_callbacks_in_deadline_order(
        delays: list[int], cancelled: set[int], steps: list[int]) -> None:
    timers = ManualTimers()
    fired: list[tuple[int, int]] = []
    handles = [timers.call_later(d / 1000, lambda i=i: fired.append((timers.now_ms, i)))
               for i, d in enumerate(delays)]
    for i in cancelled & set(range(len(delays))):
        handles[i].cancel()
    elapsed = 0
    for step in steps:
        timers.advance(step)
        elapsed += step
        assert timers.now_ms == elapsed
    expected = sorted((d, i) for i, d in enumerate(delays)
                      if d <= elapsed and i not in cancelled)
    assert fired == expected  # each at its own deadline, ties in scheduling order
    assert timers.pending == sum(1 for i, d in enumerate(delays)
                                 if d > elapsed and i not in cancelled)


def test_callbacks_scheduled_by_callbacks_fire_within_the_window() -> None:
    timers = ManualTimers()
    seen: list[int] = []

    def tick(n: int) -> None:
        seen.append(timers.now_ms)
        if n:
            timers.call_later(0.01, tick, n - 1)

    timers.call_later(0.01, tick, 5)
    assert timers.advance(35) == 3 and seen == [10, 20, 30]
    assert timers.advance(100) == 3 and seen == [10, 20, 30, 40, 50, 60]
    assert timers.pending == 0


@pytest.mark.parametrize("bad", [lambda t: t.advance(-1),
                                 lambda t: t.call_later(-0.001, print)])
def test_time_never_moves_backwards(bad: object) -> None:
    with pytest.raises(ValueError):
        bad(ManualTimers())  # type: ignore[operator]


def test_loop_timers_use_the_running_loop() -> None:
    async def main() -> list[str]:
        seen: list[str] = []
        done = asyncio.get_running_loop().create_future()
        LoopTimers().call_later(0, lambda: (seen.append("fired"), done.set_result(None)))
        LoopTimers().call_later(0, seen.append, "cancelled?").cancel()
        await done
        return seen
    assert asyncio.run(main()) == ["fired"]
