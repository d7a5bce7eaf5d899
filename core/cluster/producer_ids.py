"""Producer id blocks handed out by the cluster store (Kafka's AllocateProducerIds, KIP-730):
every node's transaction coordinator draws its idempotent and transactional producers' ids from
blocks no other node holds, so two producers on two nodes never share an id (a shared id would
make one's batches look like the other's duplicates, and be dropped).

The store keeps the start of the next free block under ``producer-ids``; a node reserves a
block by a compare-and-swap that moves it on. A block whose write's outcome was unknown is
never used (its ids are skipped, never handed out twice).
"""

from __future__ import annotations

import logging
from typing import Any

from tierlog.cluster.keys import PRODUCER_IDS
from tierlog.cluster.store import MetadataStore
from tierlog.errors import CorruptRemoteMetadataError, MetadataConflictError

__all__ = ["reserve_producer_ids"]

log = logging.getLogger(__name__)

#: Compare-and-swaps lost in a row before giving up (each means another node reserved).
MAX_ATTEMPTS = 64


def _next_free(value: dict[str, Any]) -> int:
    found = value.get("nextBlockStart")
    if not isinstance(found, int) or isinstance(found, bool) or found < 0:
        raise CorruptRemoteMetadataError(
            f"cluster metadata {PRODUCER_IDS!r}: nextBlockStart {found!r:.40} is not a "
            f"producer id")
    return found


def reserve_producer_ids(store: MetadataStore, at_least: int, size: int) -> int:
    """Reserve ``size`` producer ids for this node alone, none below ``at_least``; returns the
    first (the block is ``[first, first + size)``). MetadataConflictError after
    ``MAX_ATTEMPTS`` lost races in a row."""
    if size < 1 or at_least < 0:
        raise ValueError(f"a block of {size} ids from {at_least}: needs size >= 1, start >= 0")
    for _ in range(MAX_ATTEMPTS):
        current = store.read(PRODUCER_IDS)
        start = at_least if current is None else max(_next_free(current.value), at_least)
        value = {"nextBlockStart": start + size}
        try:
            store.swap(PRODUCER_IDS, value, current)
        except MetadataConflictError:
            continue
        log.debug("reserved producer ids [%d, %d) in the cluster store", start, start + size)
        return start
    raise MetadataConflictError(
        f"cluster metadata {PRODUCER_IDS!r}: another node reserved producer ids first, "
        f"{MAX_ATTEMPTS} times in a row", key=PRODUCER_IDS, expected=None, found=None)
