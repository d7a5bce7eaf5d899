"""Scheduler: due order, periods, cancellation and failure isolation, driven by a fake clock."""

from __future__ import annotations

import threading

from tierlog.common.scheduler import Scheduler


def test_tasks_run_when_due_and_repeat(clock):
    sched = Scheduler(clock)
    ran = []
    sched.schedule("flush", lambda: ran.append(("flush", clock.now)), delay_ms=100, period_ms=100)
    sched.schedule("once", lambda: ran.append(("once", clock.now)), delay_ms=150)
    assert sched.run_due() == 0
    clock.advance(100)
    assert sched.run_due() == 1
    clock.advance(50)
    assert sched.run_due() == 1
    clock.advance(50)
    assert sched.run_due() == 1
    start = clock.now - 200
    assert ran == [("flush", start + 100), ("once", start + 150), ("flush", start + 200)]
    assert sched.task_names() == ["flush"]


def test_cancel_and_failure_isolation(clock, caplog):
    sched = Scheduler(clock)
    ran = []

    def boom():
        raise RuntimeError("disk on fire")

    sched.schedule("bad", boom, period_ms=10)
    task = sched.schedule("good", lambda: ran.append(1), period_ms=10)
    sched.run_due()
    assert ran == [1]
    assert "scheduled task bad failed" in caplog.text
    clock.advance(10)
    sched.run_due()
    assert ran == [1, 1]  # the failing task did not stop the good one
    sched.cancel(task)
    clock.advance(10)
    sched.run_due()
    assert ran == [1, 1]


def test_background_thread_runs_due_tasks_and_shuts_down():
    sched = Scheduler()
    done = threading.Event()
    sched.schedule("now", done.set)
    sched.start()
    assert done.wait(timeout=10)
    sched.shutdown()
    assert sched.task_names() == []
