"""Lifecycle events: immutable event objects, delivered outside the log's lock, and a plugin
whose hook raises is isolated (logged, rate-limited, naming the plugin) while the engine and
the other plugins go on."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest

from tierlog import Log, Record
from tierlog.events import EventDelivery, SegmentDeleted, SegmentRolled
from tierlog.hookspecs import hookimpl
from tierlog.plugin_manager import PluginHost


class BrokenPlugin:
    """Raises from every lifecycle hook."""

    def __init__(self) -> None:
        self.calls = 0

    @hookimpl
    def tierlog_segment_rolled(self, event):
        self.calls += 1
        raise RuntimeError("metrics backend is down")

    @hookimpl
    def tierlog_segment_deleted(self, event):
        self.calls += 1
        raise RuntimeError("audit store is down")


class Recorder:
    """Records every event, and whether the log's lock was free when it arrived."""

    def __init__(self) -> None:
        self.events: list[object] = []
        self.lock_free: list[bool] = []
        self.log: Log | None = None

    def _lock_is_free(self) -> bool:
        # Another thread must be able to take the log's lock while the hook runs.
        assert self.log is not None
        lock = self.log.lock
        got: list[bool] = []

        def try_lock() -> None:
            got.append(lock.acquire(timeout=5))
            if got[0]:
                lock.release()

        thread = threading.Thread(target=try_lock)
        thread.start()
        thread.join()
        return got[0]

    @hookimpl
    def tierlog_segment_rolled(self, event):
        self.events.append(event)
        self.lock_free.append(self._lock_is_free())

    @hookimpl
    def tierlog_segment_deleted(self, event):
        self.events.append(event)
        self.lock_free.append(self._lock_is_free())


def _host(*plugins: object) -> PluginHost:
    host = PluginHost(load_entry_points=False)
    for i, plugin in enumerate(plugins):
        host.register(plugin, name=f"{type(plugin).__name__.lower()}-{i}")
    return host


def _open(tmp_path, host: PluginHost, clock) -> Log:
    return Log.open(tmp_path / "t-0", {"segment.bytes": 1024, "retention.bytes": 2048},
                    time_ms=clock, plugins=host)


def _fill(log: Log, count: int) -> None:
    for i in range(count):
        log.append_records([Record(key=b"k%d" % i, value=b"v" * 200)])


def test_a_raising_roll_hook_neither_breaks_appends_nor_later_rolls(tmp_path, clock, caplog):
    broken, recorder = BrokenPlugin(), Recorder()
    host = _host(broken, recorder)
    log = _open(tmp_path, host, clock)
    recorder.log = log
    with caplog.at_level(logging.ERROR, logger="tierlog.events"):
        _fill(log, 30)  # rolls every few batches
    assert log.log_end_offset == 30  # every batch was written, including those that rolled
    offsets: list[int] = []
    while len(offsets) < 30:  # a read stops at its segment's end
        offsets += [r.offset for r in log.read(len(offsets), 1 << 20).records()]
    assert offsets == list(range(30))
    rolls = [e for e in recorder.events if isinstance(e, SegmentRolled)]
    assert len(rolls) == len(log.segments.values()) - 1 >= 5  # the other plugin saw every roll
    assert broken.calls == len(rolls)
    failures = [r for r in caplog.records if "failed in tierlog_segment_rolled" in r.getMessage()]
    assert len(failures) == 1  # rate-limited: one report for many failures
    assert "brokenplugin-0" in failures[0].getMessage()
    assert "metrics backend is down" in failures[0].getMessage()
    log.close()


def test_roll_and_delete_events_are_immutable_snapshots_delivered_outside_the_lock(tmp_path, clock):
    recorder = Recorder()
    host = _host(recorder)
    log = _open(tmp_path, host, clock)
    recorder.log = log
    _fill(log, 20)
    log.update_high_watermark(log.log_end_offset)
    bases = [s.base_offset for s in log.segments.values()]
    rolled = [e for e in recorder.events if isinstance(e, SegmentRolled)]
    assert [e.base_offset for e in rolled] == bases[:-1]
    assert [e.next_offset for e in rolled] == bases[1:]
    assert all(e.topic == "t" and e.partition == 0 and e.topic_id == log.topic_id for e in rolled)
    assert all(e.size_in_bytes > 0 and e.max_timestamp == clock.now for e in rolled)
    deleted = log.delete_old_segments(lambda segment, nxt: True, "retention")
    events = [e for e in recorder.events if isinstance(e, SegmentDeleted)]
    assert [(e.base_offset, e.size_in_bytes) for e in events] == deleted
    assert all(e.reason == "retention" for e in events)
    assert recorder.lock_free and all(recorder.lock_free)
    with pytest.raises(dataclasses.FrozenInstanceError):
        rolled[0].base_offset = 99  # type: ignore[misc]
    log.close()


def test_failure_reports_resume_after_the_interval_with_a_count(caplog):
    now = [0.0]
    host = _host(BrokenPlugin())
    delivery = EventDelivery(host.pm, clock=lambda: now[0], log_interval_s=60)
    event = SegmentRolled("t", 0, None, 0, 10, 100, -1)
    with caplog.at_level(logging.ERROR, logger="tierlog.events"):
        for _ in range(5):
            delivery.deliver("tierlog_segment_rolled", event)
        now[0] = 61
        delivery.deliver("tierlog_segment_rolled", event)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2
    assert "4 more failures since the last report" in messages[1]
