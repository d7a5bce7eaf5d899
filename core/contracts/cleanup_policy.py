"""The cleanup policy contract: CleanupPolicy, what a value of ``cleanup.policy`` is, and
CleanupResult, what one run of a policy did to a log.

The built-in ``delete`` (:class:`tierlog.cleaner.retention.DeletePolicy`) and ``compact``
(:class:`tierlog.cleaner.compactor.CompactPolicy`) policies and any plugin's are registered
through the ``tierlog_register_cleanup_policies`` hook; the LogManager runs the ones a topic
names, in order, and merges their results. The protocol is generic in the log a policy cleans,
so this contract (below the log, beside the hook specs) names nothing of the engine; the engine
hands every policy a ``tierlog.log.log.Log`` (``tierlog.cleaner.policy.LogCleanupPolicy``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar

__all__ = ["CleanupPolicy", "CleanupResult"]

#: The log a policy cleans (contravariant: a policy of any log may stand for one of a Log).
_LogT_contra = TypeVar("_LogT_contra", contravariant=True)


@dataclass(slots=True)
class CleanupResult:
    """Counts of one policy run; ``skipped`` says why nothing was done, when nothing was."""

    policy: str
    segments_deleted: int = 0
    bytes_deleted: int = 0
    segments_cleaned: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    records_kept: int = 0
    records_removed: int = 0
    reasons: list[str] = field(default_factory=list)
    skipped: str | None = None

    def merge(self, other: CleanupResult) -> CleanupResult:
        """Add another run's counts to this one (used by ``compact,delete``)."""
        self.segments_deleted += other.segments_deleted
        self.bytes_deleted += other.bytes_deleted
        self.segments_cleaned += other.segments_cleaned
        self.bytes_before += other.bytes_before
        self.bytes_after += other.bytes_after
        self.records_kept += other.records_kept
        self.records_removed += other.records_removed
        self.reasons.extend(other.reasons)
        return self


class CleanupPolicy(Protocol[_LogT_contra]):
    """One cleanup policy: a run over one log at ``now_ms``, reported as a CleanupResult."""

    def clean(self, log: _LogT_contra, now_ms: int) -> CleanupResult:
        """Delete or rewrite what the policy says may go from ``log``; what it did."""
        ...
