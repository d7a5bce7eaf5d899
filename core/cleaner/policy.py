"""CleanupPolicy: what a value of ``cleanup.policy`` is, as registered by plugins.

The built-in ``delete`` (:class:`tierlog.cleaner.retention.DeletePolicy`) and ``compact``
(:class:`tierlog.cleaner.compactor.CompactPolicy`) policies and any plugin's are registered
through the ``tierlog_register_cleanup_policies`` hook; the LogManager runs the ones a topic
names, in order, and merges their results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tierlog.cleaner.result import CleanupResult
    from tierlog.log.log import Log

__all__ = ["CleanupPolicy"]


class CleanupPolicy(Protocol):
    """One cleanup policy: a run over one log at ``now_ms``, reported as a CleanupResult."""

    def clean(self, log: Log, now_ms: int) -> CleanupResult:
        """Delete or rewrite what the policy says may go from ``log``; what it did."""
