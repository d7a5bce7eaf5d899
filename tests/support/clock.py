"""A controllable millisecond clock the tests inject wherever tierlog asks for the time."""

from __future__ import annotations


class FakeClock:
    """A controllable millisecond clock, injected wherever tierlog asks for the time."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now
