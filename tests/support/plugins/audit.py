"""A class-based test plugin that records lifecycle events and adds a cleanup policy."""

from __future__ import annotations

from tierlog.cleaner import CleanupResult
from tierlog.hookspecs import hookimpl


class NoopPolicy:
    name = "noop"

    def clean(self, log, now_ms):
        return CleanupResult(self.name, skipped="noop never deletes anything")


class AuditPlugin:
    """Collects every lifecycle event it sees."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    @hookimpl
    def tierlog_register_cleanup_policies(self, register):
        register("noop", NoopPolicy())

    @hookimpl
    def tierlog_segment_rolled(self, event):
        self.events.append(("rolled", event.topic, event.base_offset))

    @hookimpl
    def tierlog_segment_deleted(self, event):
        self.events.append(("deleted", event.topic, event.base_offset, event.reason))
