"""CleanupResult: what one run of a cleanup policy did to a log."""

from __future__ import annotations

from dataclasses import dataclass, field


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
