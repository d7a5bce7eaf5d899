"""The crash-safe swap of a cleaned segment for the segments it replaces (Kafka's
``replaceSegments``).

``.cleaned`` files are renamed ``.swap``, the old segments ``.deleted``, then ``.swap`` to final
names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.common import filenames
from tierlog.errors import LogCleaningAbortedError

if TYPE_CHECKING:
    from tierlog.log.log import Log
    from tierlog.log.segment import LogSegment

log = logging.getLogger(__name__)

#: ``hook(step, file name)``: called after each step of a swap (tests inject crashes here).
SwapHook = Callable[[str, str], None]

#: The ``.cleaned`` segment is complete and flushed (file name: its ``.log``).
CLEANED_WRITTEN = "cleaned-written"
#: One ``.cleaned`` file was renamed ``.swap``.
RENAMED_TO_SWAP = "renamed-to-swap"
#: One file of a replaced segment was renamed ``.deleted``.
RENAMED_TO_DELETED = "renamed-to-deleted"
#: One ``.swap`` file was renamed to its final name.
SWAP_RENAMED = "swap-renamed"
#: The replaced segments' ``.deleted`` files were removed (or their removal was scheduled).
OLD_DELETED = "old-deleted"


def open_cleaned_segment(target: Log, base_offset: int) -> LogSegment:
    """A new, empty ``<base>.*.cleaned`` segment in the log's directory (stale ones from an
    earlier, failed attempt are removed first, as Kafka's ``createNewCleanedSegment``)."""
    prefix = filenames.filename_prefix_from_offset(base_offset)
    for path in target.directory.glob(f"{prefix}.*{filenames.CLEANED_SUFFIX}"):
        # Every file of the segment, plugin indexes too: a stale one would be read back.
        path.unlink(missing_ok=True)
    return target.open_segment(base_offset, filenames.CLEANED_SUFFIX)


def replace_segments(
    target: Log,
    cleaned: LogSegment,
    old_segments: Sequence[LogSegment],
    hook: SwapHook | None = None,
    *,
    read_sizes: Mapping[LogSegment, int] | None = None,
) -> None:
    """Swap the flushed ``.cleaned`` segment in for ``old_segments`` (its base offset is the
    first one's), crash-safely:

    1. the ``.cleaned`` files are renamed ``.swap`` (the ``.log`` first, as Kafka; every
       rename, plugin indexes included, is ``LogSegment.change_file_suffixes``);
    2. the log's segment map takes the new segment and drops the old ones, whose files are
       renamed ``.deleted`` (in offset order);
    3. the ``.swap`` files are renamed to their final names;
    4. the old segments are closed and deleted: after ``file.delete.delay.ms`` through the
       log's scheduler if it has one (readers may still hold slices of them), else at once.

    Recovery (``LogLoader``, Kafka's rules) makes a crash at any point safe: while a
    ``.cleaned`` file remains (before or during step 1), ``.cleaned`` and ``.swap`` files are
    deleted and the old segments stay; once all are ``.swap``, it deletes the files whose
    offsets lie between the swap's base and next offset, then renames the ``.swap`` files. The
    cleaner keeps each cleaned segment's last batch (as an empty header if need be) so that
    this next offset is the last replaced segment's: none of them survives next to the swap.

    Steps 1-3 hold the log's lock, so readers see either the old segments or the new one.
    Raises LogCleaningAbortedError, deleting the ``.cleaned`` files, when the log was closed or
    changed under the cleaner: an old segment, or one of ``read_sizes`` (every segment the
    cleaning read, with the size it had), is no longer in the log as it was, or became the
    active segment (retention or a truncation got there first).
    """
    report = hook or _no_hook
    with target.lock:
        reason = _changed(target, old_segments, read_sizes or {})
        if reason is not None:
            cleaned.close()
            cleaned.delete()
            raise LogCleaningAbortedError(
                f"{target.directory.name}: cleaning of segments "
                f"{[s.base_offset for s in old_segments]} abandoned: {reason}"
            )
        report(CLEANED_WRITTEN, cleaned.path.name)
        target.local.replace_segments(cleaned, old_segments,
                                      _reporting(RENAMED_TO_SWAP, report),
                                      _reporting(RENAMED_TO_DELETED, report),
                                      _reporting(SWAP_RENAMED, report))
    log.info("%s: swapped in cleaned segment %d for segments %s", target.directory.name,
             cleaned.base_offset, [s.base_offset for s in old_segments])
    # Readers may hold slices of the old files: Kafka deletes them after file.delete.delay.ms.
    target.delete_segments_later(old_segments)
    report(OLD_DELETED, cleaned.path.name)


def _changed(
    target: Log, old_segments: Sequence[LogSegment], read_sizes: Mapping[LogSegment, int]
) -> str | None:
    """Why the swap may not happen (called under the log's lock), or None."""
    if target.closed:
        return "the log is closed"
    segments = target.segments
    expected = {**{s: s.size for s in old_segments}, **read_sizes}
    gone = sorted(s.base_offset for s in expected if segments.get(s.base_offset) is not s)
    if gone:
        return f"segments {gone} are gone"
    active = segments.active
    if active in expected:
        return f"segment {active.base_offset} is now the active segment"
    changed = sorted(s.base_offset for s, size in expected.items() if s.size != size)
    if changed:
        return f"segments {changed} changed size"
    return None


def _reporting(step: str, report: SwapHook) -> Callable[[Path], None]:
    """Report ``step`` with the new name of each file a rename moved."""
    return lambda path: report(step, path.name)


def _no_hook(step: str, name: str) -> None:
    """The default hook: nothing to do."""
