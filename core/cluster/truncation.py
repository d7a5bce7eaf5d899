"""Where a follower truncates its log once it learnt how far its leader's log agrees with it:
Kafka's ``getOffsetTruncationState`` (``AbstractFetcherThread``, KIP-101 and KIP-279) as a
pure function.

The follower asks its leader for the end of its own latest epoch (OffsetsForLeaderEpoch); the
leader answers the largest epoch it has at or below it and that epoch's end in its log. The
follower then looks up that epoch in its own cache:

- the leader knows no such epoch (end -1): truncate to the fetch offset it would start from
  (its high watermark), done;
- the follower has no epoch at or below the leader's: the leader's end (capped at the log end),
  done;
- the follower's largest epoch at or below it is another one: truncate to that epoch's end and
  ask again (the histories diverged further back: KIP-279's rounds);
- the same epoch: the smaller of both ends (capped at the log end), done.

After the last round the follower's log is a prefix of the leader's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tierlog.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

__all__ = ["Truncation", "truncation_offset"]


@dataclass(frozen=True, slots=True)
class Truncation:
    """Truncate the log to ``offset``; ``completed`` False: ask the leader again after it."""

    offset: int
    completed: bool


def truncation_offset(leader_epoch: int, leader_end_offset: int, *, fetch_offset: int,
                      log_end_offset: int,
                      end_offset_for: Callable[[int], tuple[int, int]]) -> Truncation:
    """The follower's truncation for the leader's answer ``(leader_epoch, leader_end_offset)``;
    ``end_offset_for(epoch)`` is the follower's own cache's answer for ``epoch`` (``(epoch,
    end)``, end -1 for none: ``LeaderEpochFileCache.end_offset_for`` with its log end)."""
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return Truncation(fetch_offset, True)
    if leader_epoch == UNDEFINED_EPOCH:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    follower_epoch, follower_end = end_offset_for(leader_epoch)
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(leader_end_offset, log_end_offset), True)
    if follower_epoch != leader_epoch:
        return Truncation(min(follower_end, log_end_offset), False)
    return Truncation(min(follower_end, leader_end_offset, log_end_offset), True)
