"""Shared pytest fixtures: a fake clock, the real Kafka log directory (copied), record factories."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-3.7-logdir"
if not FIXTURES.is_dir():  # CI clones main with shared/ beside it
    FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "kafka-3.7-logdir"


class FakeClock:
    """A controllable millisecond clock, injected wherever tierlog asks for the time."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def kafka_logdir(tmp_path: Path) -> Path:
    """A writable copy of the real Kafka 3.7 broker log directory."""
    if not FIXTURES.is_dir():
        pytest.fail(f"Kafka fixture directory not found at {FIXTURES}")
    target = tmp_path / "kafka-logdir"
    shutil.copytree(FIXTURES, target)
    for path in target.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target
