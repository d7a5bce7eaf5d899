"""FsspecRemoteStorageManager: the one RemoteStorageManager, over any fsspec filesystem.

Plugins only build and tune the filesystem (see ``tierlog.plugins.local`` and ``.s3``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
from collections.abc import Mapping
from typing import Any, BinaryIO

import fsspec

from tierlog.errors import RemoteStorageError
from tierlog.remote.api import (
    IndexObject,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    dumps,
    load_json_object,
)
from tierlog.remote.tier.layout import SEGMENT_OBJECT_SUFFIXES, SEGMENT_SUFFIX, segment_object_key
from tierlog.remote.tier.object_store import RemoteTier, RequestStats

log = logging.getLogger(__name__)

#: Key of the custom metadata (JSON) listing the suffixes of the plugin indexes of a copy.
EXTRA_INDEXES_KEY = "extraIndexes"


def extra_index_suffixes(metadata: RemoteLogSegmentMetadata) -> tuple[str, ...]:
    """The plugin index suffixes a copy by this RSM recorded in the segment's custom metadata
    (none when it has none, or when another RSM wrote it: then it is not our JSON)."""
    custom = metadata.custom_metadata
    if not custom:
        return ()
    try:
        suffixes = load_json_object(custom, "custom metadata").get(EXTRA_INDEXES_KEY, [])
    except ValueError:
        return ()
    return tuple(s for s in suffixes if isinstance(s, str) and s.startswith(".")
                 and s not in SEGMENT_OBJECT_SUFFIXES and "/" not in s)


class FsspecRemoteStorageManager:
    """Kafka's RemoteStorageManager contract over an fsspec filesystem.

    Objects of a segment, as Kafka's test RSM lays them out (``tierlog.remote.tier.layout``)::

        <root>/<topic>-<partition>-<topicId>/<20-digit startOffset>-<uuid>.log
                                                ... .index .timeindex .txnindex .snapshot
                                                ... .leader_epoch_checkpoint
                                                ... <suffix> of each plugin index it got

    The ``.log`` is uploaded from its local path by ``fs.put_file`` (streamed), the small
    objects with ``fs.pipe_file``/``fs.put_file``; publication is atomic (see RemoteTier).
    Each fetch is one ranged GET. ``stats`` counts the requests. Thread-safe.
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        *,
        put_options: Mapping[str, Any] | None = None,
        get_options: Mapping[str, Any] | None = None,
        rename_on_publish: bool | None = None,
    ) -> None:
        self.tier = RemoteTier(fs, root, put_options=put_options, get_options=get_options,
                               rename_on_publish=rename_on_publish)
        self._closed = threading.Event()

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        return self.tier.fs

    @property
    def root(self) -> str:
        return self.tier.root

    @property
    def stats(self) -> RequestStats:
        return self.tier.stats

    def __repr__(self) -> str:
        return f"FsspecRemoteStorageManager({self.tier!r})"

    def object_path(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
        """The full path of one of the segment's objects (``suffix`` such as ``.log``)."""
        return self.tier.path(segment_object_key(metadata, suffix))

    # -- RemoteStorageManager -------------------------------------------------------------

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        """Upload the ``.log`` first, then the other files of the segment (indexes, producer
        snapshot, transaction index, plugin indexes) and the leader-epoch checkpoint last; a
        retry overwrites. Returns no custom metadata unless plugin indexes were uploaded: then
        it names their suffixes (:func:`extra_index_suffixes`), so the delete finds them."""
        self._check_open()
        files: list[tuple[str, os.PathLike[str]]] = [
            (SEGMENT_SUFFIX, segment_data.log_segment),
            (IndexType.OFFSET.suffix, segment_data.offset_index),
            (IndexType.TIMESTAMP.suffix, segment_data.time_index),
            (IndexType.PRODUCER_SNAPSHOT.suffix, segment_data.producer_snapshot_index),
        ]
        if segment_data.transaction_index is not None:
            files.append((IndexType.TRANSACTION.suffix, segment_data.transaction_index))
        extras = sorted(segment_data.extra_indexes.items())
        for suffix, _ in extras:
            if suffix in SEGMENT_OBJECT_SUFFIXES or not suffix.startswith(".") or "/" in suffix:
                raise RemoteStorageError(
                    f"cannot copy segment {metadata.remote_log_segment_id}: plugin index "
                    f"suffix {suffix!r} must start with '.', hold no '/' and not be one of "
                    f"{', '.join(SEGMENT_OBJECT_SUFFIXES)}"
                )
        files += extras
        for _, local_path in files:
            if not os.path.isfile(local_path):
                raise RemoteStorageError(
                    f"cannot copy segment {metadata.remote_log_segment_id}: local file "
                    f"{os.fspath(local_path)} does not exist"
                )
        try:
            for suffix, local_path in files:
                self.tier.put_file(local_path, self.object_path(metadata, suffix))
            self.tier.put_bytes(segment_data.leader_epoch_index,
                                self.object_path(metadata, IndexType.LEADER_EPOCH.suffix))
        except BaseException:
            # The metadata of a failed copy names no plugin index: remove ours now, as the
            # delete of the abandoned copy will not know them.
            for suffix, _ in extras:
                with contextlib.suppress(Exception):
                    self.tier.delete(self.object_path(metadata, suffix))
            raise
        log.debug("copied segment %s (%d bytes) to %s", metadata.remote_log_segment_id,
                  metadata.segment_size_in_bytes, self.object_path(metadata, SEGMENT_SUFFIX))
        if not extras:
            return None
        return dumps({EXTRA_INDEXES_KEY: [suffix for suffix, _ in extras]}).encode()

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """``[start_position, end_position]``, both inclusive, in one ranged GET. A start at or
        past the segment size (from the metadata) gives an empty stream without a request; fewer
        bytes than the range (a cut object) raise CorruptRecordError (check "size")."""
        self._check_open()
        if start_position < 0:
            raise ValueError(f"start position {start_position} is negative")
        if end_position is not None and end_position < start_position:
            raise ValueError(
                f"end position {end_position} is before start position {start_position}"
            )
        if start_position >= metadata.segment_size_in_bytes:
            return io.BytesIO(b"")
        end = None if end_position is None else end_position + 1
        path = self.object_path(metadata, SEGMENT_SUFFIX)
        return io.BytesIO(self.tier.get_range(path, start_position, end,
                                              metadata.segment_size_in_bytes))

    def fetch_index(self, metadata: RemoteLogSegmentMetadata,
                    index_type: IndexType | IndexObject) -> BinaryIO:
        """One GET of the whole index object (an ``IndexType`` or a plugin index type, by its
        suffix); RemoteResourceNotFoundError when it is absent."""
        self._check_open()
        return io.BytesIO(self.tier.get_bytes(self.object_path(metadata, index_type.suffix)))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment, the plugin indexes its copy recorded in the
        custom metadata included; absent ones are skipped silently."""
        self._check_open()
        for suffix in (*SEGMENT_OBJECT_SUFFIXES, *extra_index_suffixes(metadata)):
            self.tier.delete(self.object_path(metadata, suffix))
        log.debug("deleted segment %s", metadata.remote_log_segment_id)

    def close(self) -> None:
        self._closed.set()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise RemoteStorageError(f"{self!r} is closed")
