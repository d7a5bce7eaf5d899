"""What a restore checks of the tier before it changes anything: every committed segment the
restored log will read from the tier is whole, as far as the scrub's cheap checks tell.

A restored log reads the records below its local start from the tier's committed segments;
a ``.log`` cut short (or metadata recording a size its object does not have) would let the
restore succeed and its reads stall later. So the restore runs the scrub's per-segment checks
(:class:`tierlog.remote.ops.scrub_segments.SegmentScrubber` without ``deep``: each object present
with the recorded size from one LIST of the partition, the ``.log``'s head and tail batches
checked, the offset index's last entry pointing at a batch) on those segments and refuses
with TierDamagedError naming each damaged object, expected vs found. The rules are scrub's:
none is copied here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from tierlog.errors import TierDamagedError
from tierlog.remote.api import RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.remote.ops.scrub_report import Finding
from tierlog.remote.ops.scrub_segments import SegmentScrubber
from tierlog.remote.tier.layout import partition_dir_name
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)


def damaged_segments(tier: RemoteTier, tip: TopicIdPartition,
                     segments: Iterable[RemoteLogSegmentMetadata]) -> list[Finding]:
    """The scrub's cheap findings of ``segments`` (committed segments of ``tip``): one LIST of
    the partition's directory, then a few ranged GETs per segment. Empty when all are sound."""
    wanted = list(segments)
    if not wanted:
        return []
    listing = {e.name: e for e in tier.list_entries(tier.path(partition_dir_name(tip)))}
    scrubber = SegmentScrubber(tier, listing, deep=False)
    return [finding for md in wanted for finding in scrubber.check(md)]


def refuse_damage(findings: list[Finding]) -> None:
    """Raise TierDamagedError naming every finding (its object, what was expected and
    found), or return when there is none."""
    if not findings:
        return
    for finding in findings:  # the error names them all: the caller reports it once
        log.debug("restore refused: %s (object %s)", finding, finding.object)
    details = "; ".join(f"{f.object}: {f.detail} ({f.kind.value}, "
                        f"{f.partition} offsets {f.offsets[0]}-{f.offsets[1]})"
                        if f.offsets else f"{f.object}: {f.detail} ({f.kind.value})"
                        for f in findings)
    raise TierDamagedError(
        f"the remote tier holds {len(findings)} damaged object"
        f"{'' if len(findings) == 1 else 's'} the restore relies on: {details}; nothing was "
        f"changed (run `tierlog scrub --deep` on the tier to see all of its damage)")


__all__ = ["damaged_segments", "refuse_damage"]
