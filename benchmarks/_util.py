"""Shared helpers for the benchmark scripts: timing, a scratch directory on the project's disk, tables."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def scratch_dir(name: str):
    """A fresh directory on the same disk as the project (not tmpfs), removed afterwards."""
    base = Path(os.environ.get("TIERLOG_BENCH_DIR", ROOT / "bench-data"))
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix=name + "-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def best_of(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(best, median) wall time of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def report(title: str, rows: list[tuple[str, str]]) -> None:
    print(f"\n== {title}")
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"  {label:<{width}}  {value}")
