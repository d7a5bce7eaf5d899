"""Lifecycle events for plugins: immutable event objects, and their isolated delivery.

The engine never hands a plugin its live ``Log`` or ``LogSegment``: an event hook receives a
frozen snapshot of what happened (topic, partition, offsets, sizes). Delivery is isolated: a
plugin whose hook raises is logged (rate-limited, naming the plugin and the hook) and the
engine, and every other plugin, goes on. Logs queue their events while they hold their lock
and deliver them after releasing it, so a slow plugin never blocks appends or reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeAlias

import pluggy

log = logging.getLogger(__name__)

#: A failing (plugin, hook) pair is logged at most once per this many seconds.
FAILURE_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True, slots=True)
class SegmentRolled:
    """A local segment stopped being the active one (``tierlog_segment_rolled``)."""

    topic: str
    partition: int
    topic_id: str | None
    #: First offset of the segment that became inactive.
    base_offset: int
    #: First offset of the new active segment (the rolled segment ends just below it).
    next_offset: int
    #: Size of the rolled segment's ``.log`` file.
    size_in_bytes: int
    #: Largest record timestamp in the rolled segment (-1 if none).
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class SegmentDeleted:
    """A local segment left the log (``tierlog_segment_deleted``); its files go after
    ``file.delete.delay.ms``."""

    topic: str
    partition: int
    topic_id: str | None
    base_offset: int
    size_in_bytes: int
    #: Why: "retention", "truncation", "full truncation", "log start offset", ...
    reason: str


@dataclass(frozen=True, slots=True)
class RemoteSegmentEvent:
    """A remote segment was committed (``tierlog_segment_copied_to_remote``) or deleted
    (``tierlog_remote_segment_deleted``). ``metadata`` is its immutable
    :class:`tierlog.remote.RemoteLogSegmentMetadata`."""

    topic: str
    partition: int
    topic_id: str | None
    start_offset: int
    end_offset: int
    size_in_bytes: int
    metadata: Any


#: What an event hook receives.
Event: TypeAlias = SegmentRolled | SegmentDeleted | RemoteSegmentEvent


class EventDelivery:
    """Calls each plugin's implementation of an event hook on its own, so one plugin that
    raises affects neither the engine nor the other plugins. Thread-safe."""

    def __init__(self, pm: pluggy.PluginManager, *,
                 clock: Callable[[], float] = time.monotonic,
                 log_interval_s: float = FAILURE_LOG_INTERVAL_S) -> None:
        self._pm = pm
        self._clock = clock
        self._interval = log_interval_s
        self._lock = threading.Lock()
        #: (plugin, hook) -> [when last logged, failures not logged since]
        self._failures: dict[tuple[str, str], list[float]] = {}

    def deliver(self, hook_name: str, event: Event) -> None:
        """Call every implementation of ``hook_name`` with ``event=event``."""
        caller = getattr(self._pm.hook, hook_name)
        for impl in caller.get_hookimpls():
            try:
                impl.function(*[event for _ in impl.argnames])
            except Exception as exc:  # noqa: BLE001 - a plugin's failure must stay its own
                self._report(impl.plugin_name, hook_name, exc)

    def _report(self, plugin: str, hook_name: str, exc: Exception) -> None:
        now = self._clock()
        with self._lock:
            state = self._failures.get((plugin, hook_name))
            if state is not None and now - state[0] < self._interval:
                state[1] += 1
                return
            suppressed = int(state[1]) if state is not None else 0
            self._failures[(plugin, hook_name)] = [now, 0]
        more = f" ({suppressed} more failures since the last report)" if suppressed else ""
        log.error("plugin %r failed in %s and was skipped%s: %s: %s", plugin, hook_name, more,
                  type(exc).__name__, exc, exc_info=exc)


class EventQueue:
    """Events a log queued under its lock, delivered once the lock is released.

    ``post`` only appends (safe under any lock); ``deliver`` must be called without the log's
    lock held. Events reach plugins in the order they were posted.
    """

    __slots__ = ("_delivery", "_pending")

    def __init__(self, delivery: EventDelivery) -> None:
        self._delivery = delivery
        self._pending: deque[tuple[str, Event]] = deque()

    def post(self, hook_name: str, event: Event) -> None:
        self._pending.append((hook_name, event))

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    def deliver(self) -> None:
        while True:
            try:
                hook_name, event = self._pending.popleft()
            except IndexError:
                return
            self._delivery.deliver(hook_name, event)
