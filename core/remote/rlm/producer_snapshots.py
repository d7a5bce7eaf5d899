"""The producer snapshots a remote tier holds, for a tiered log opening without its own.

Every copied segment carries the producer snapshot taken at its end offset + 1 (the next
segment's base offset). Kafka keeps the snapshot at a tiered log's local log start offset on
disk, since the batches below it can no longer be replayed locally; when that file is gone,
the tier's copy restores it (see LogLoader._keep_snapshot_at_local_start).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from tierlog.errors import ConfigError, RemoteStorageError
from tierlog.remote.api import IndexType, RemoteLogSegmentState, TopicIdPartition

log = logging.getLogger(__name__)


class TierProducerSnapshots:
    """``(topic_id, topic, partition, offset) -> bytes | None``, handed to ``Log.open`` of a
    tiered partition as ``remote_snapshots``: the snapshot copied with the finished remote
    segment ending at ``offset - 1``, or None (no such segment, or the tier failed: logged).

    ``remote_log_manager`` builds (or returns) the RemoteLogManager; it is called only when a
    snapshot is asked for (under ``lock``: partitions load in parallel), so opening a log that
    has its snapshot touches no tier.
    """

    def __init__(self, remote_log_manager: Callable[[], Any],
                 lock: AbstractContextManager[Any] | None = None) -> None:
        self._remote_log_manager = remote_log_manager
        self._lock = lock or nullcontext()

    def __call__(self, topic_id: str, topic: str, partition: int, offset: int) -> bytes | None:
        where = f"{topic}-{partition}"
        try:
            with self._lock:
                rlm = self._remote_log_manager()
            tip = TopicIdPartition(topic_id, topic, partition)
            for metadata in rlm.rlmm.list_remote_log_segments(tip):
                if (metadata.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                        and metadata.end_offset + 1 == offset):
                    with rlm.rsm.fetch_index(metadata, IndexType.PRODUCER_SNAPSHOT) as stream:
                        data: bytes = stream.read()
                    log.info("%s: fetched the producer snapshot at offset %d from the remote "
                             "tier (segment %s)", where, offset, metadata.remote_log_segment_id)
                    return data
        except (RemoteStorageError, ConfigError, OSError, ValueError) as exc:
            log.warning("%s: cannot fetch the producer snapshot at offset %d from the remote "
                        "tier: %s", where, offset, exc)
            return None
        log.warning("%s: the remote tier holds no segment ending at offset %d", where,
                    offset - 1)
        return None
