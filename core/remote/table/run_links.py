"""The list of chain links a run file holds, kept in its Parquet footer (``tierlog.links``):
written by the compaction that merges the links' files, read by scrub (is each committed link
in exactly one file?) and by an unmerge (which segments to convert again).

One entry per link, in offset order, as a JSON list ``[segmentId, first, last, records,
firstRowGroup]``: the link's segment, its span, its rows in the file, and the index of its
first row group (a row group never spans two links, so one link's rows can be counted, or a
trim can drop whole row groups, from the footer alone). ~60 bytes a link.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from tierlog.errors import CorruptRemoteMetadataError
from tierlog.remote.table.naming import MAX_RUN_LINKS

#: The footer key of a run file's link list.
KV_LINKS = "tierlog.links"
#: ``tierlog.version`` of a run file (a link's file is ``"1"``).
RUN_FORMAT_VERSION = "2"


@dataclass(frozen=True, slots=True)
class RunLink:
    """One chain link of a run file: segment ``segment_id``'s offsets ``[first_offset,
    last_offset]``, whose ``records`` rows start at row group ``first_row_group``."""

    segment_id: str
    first_offset: int
    last_offset: int
    records: int
    first_row_group: int


def encode_links(links: Sequence[RunLink]) -> str:
    """The footer value of ``links`` (checked as :func:`decode_links` checks them)."""
    _check(links, "the run being written")
    return json.dumps([[k.segment_id, k.first_offset, k.last_offset, k.records,
                        k.first_row_group] for k in links], separators=(",", ":"))


def decode_links(value: str | bytes | None, source: str) -> tuple[RunLink, ...]:
    """The links of the footer value ``value`` of the run file ``source``;
    CorruptRemoteMetadataError naming the file when it is missing, not a link list, or its
    links are not contiguous, in offset order, with increasing row groups."""
    if value is None:
        raise CorruptRemoteMetadataError(f"{source}: a run file without its {KV_LINKS} list")
    try:
        entries = json.loads(value)
        links = tuple(RunLink(str(e[0]), int(e[1]), int(e[2]), int(e[3]), int(e[4]))
                      for e in entries)
    except (ValueError, TypeError, IndexError, KeyError) as e:
        raise CorruptRemoteMetadataError(f"{source}: its {KV_LINKS} is not a link list: "
                                         f"{e}") from e
    _check(links, source)
    return links


def _check(links: Sequence[RunLink], source: str) -> None:
    if not 1 <= len(links) <= MAX_RUN_LINKS:
        raise CorruptRemoteMetadataError(f"{source}: a run holds 1 to {MAX_RUN_LINKS} links, "
                                         f"not {len(links)}")
    for k in links:
        if not k.segment_id or not 0 <= k.first_offset <= k.last_offset or k.records < 0 \
                or k.first_row_group < 0:
            raise CorruptRemoteMetadataError(f"{source}: link {k} is not a chain link")
    for a, b in pairwise(links):
        if b.first_offset != a.last_offset + 1 or b.first_row_group < a.first_row_group:
            raise CorruptRemoteMetadataError(
                f"{source}: links [{a.first_offset}, {a.last_offset}] and [{b.first_offset}, "
                f"{b.last_offset}] are not consecutive (or their row groups go backwards)")


__all__ = ["KV_LINKS", "RUN_FORMAT_VERSION", "RunLink", "decode_links", "encode_links"]
