"""Whether this node may create ``count`` more partitions: under ``max.broker.partitions``
and with the disk to hold them. Every request that creates partitions asks it first
(CreateTopics, CreatePartitions, a Metadata request auto-creating a topic).

Each partition costs open files, memory and disk before its first record; a CreateTopics for
2^31-1 partitions made 2,738 of them (54 GiB reserved) before it was stopped. The cap is
KIP-578's ``max.broker.partitions`` (internal topics count); the disk check wants, in the
log dir with the most free space, :data:`BYTES_PER_NEW_PARTITION` per new partition: the
first reserved step of its two indexes and its small metadata files. The refusal names the
counts, never the data dir's path (that goes to the server's log).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.errors import PartitionLimitError
from tierlog.index.base import RESERVE_STEP_BYTES
from tierlog.manager.log_manager import LogManager

if TYPE_CHECKING:
    from tierlog.server.services import Services

log = logging.getLogger(__name__)

#: Disk a new, empty partition takes: the first reserved step of its offset and time
#: indexes, plus its partition.metadata, leader-epoch checkpoint and producer snapshot.
BYTES_PER_NEW_PARTITION = 2 * RESERVE_STEP_BYTES + 16 * 1024


def broker_partitions(manager: LogManager) -> int:
    """Partitions this node holds now (internal topics included)."""
    return len(manager.logs())


def check_new_partitions(manager: LogManager, log_dirs: Sequence[Path], max_partitions: int,
                         count: int) -> None:
    """PartitionLimitError unless ``count`` more partitions fit under ``max_partitions``
    (``max.broker.partitions``) and in the free space of ``log_dirs``."""
    held = broker_partitions(manager)
    if count > max_partitions - held:
        raise PartitionLimitError(
            f"{count} new partitions would exceed max.broker.partitions ({max_partitions}): "
            f"this broker holds {held}")
    need = count * BYTES_PER_NEW_PARTITION
    free = max((_free_bytes(d) for d in log_dirs), default=need)
    if free < need:
        log.warning("refusing %d new partitions: they need %d bytes, %s has %d free", count,
                    need, ", ".join(str(d) for d in log_dirs), free)
        raise PartitionLimitError(
            f"{count} new partitions need {need} bytes of disk; the broker's log dirs have "
            f"{free} free")


def new_partitions_check(services: Services) -> Callable[[int], None]:
    """``check(count)``: :func:`check_new_partitions` with the server's settings."""
    config = services.config
    return partial(check_new_partitions, services.manager, config.log_dirs,
                   config.max_broker_partitions)


def _free_bytes(directory: Path) -> int:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return 0
