"""A third-party RemoteStorageManager that is not fsspec-based: objects are plain files in a
directory, ``<root>/<segment uuid>/<object name>``, written with ``open()`` and published by
``os.replace``. Registered as ``plain-dir`` through ``tierlog_register_remote_storage``."""

from __future__ import annotations

import io
import os
import shutil
import threading
from pathlib import Path
from typing import Any, BinaryIO

from tierlog.errors import RemoteResourceNotFoundError, RemoteStorageError
from tierlog.hookspecs import hookimpl
from tierlog.remote.api import IndexType, LogSegmentData, RemoteLogSegmentMetadata

NAME = "plain-dir"


class PlainDirectoryRSM:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._closed = threading.Event()
        self.copies = 0

    def _dir(self, metadata: RemoteLogSegmentMetadata) -> Path:
        return self.root / metadata.segment_id

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise RemoteStorageError("PlainDirectoryRSM is closed")

    def _put(self, target: Path, data: bytes) -> None:
        temp = target.with_name(target.name + ".tmp")
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, target)

    def copy_log_segment_data(self, metadata: RemoteLogSegmentMetadata,
                              segment_data: LogSegmentData) -> bytes | None:
        self._check_open()
        files: dict[str, Any] = {
            ".log": segment_data.log_segment,
            IndexType.OFFSET.suffix: segment_data.offset_index,
            IndexType.TIMESTAMP.suffix: segment_data.time_index,
            IndexType.PRODUCER_SNAPSHOT.suffix: segment_data.producer_snapshot_index,
        }
        if segment_data.transaction_index is not None:
            files[IndexType.TRANSACTION.suffix] = segment_data.transaction_index
        files.update(segment_data.extra_indexes)
        contents = {}
        for suffix, path in files.items():
            try:
                contents[suffix] = Path(path).read_bytes()
            except FileNotFoundError:
                raise RemoteStorageError(
                    f"cannot copy {metadata.remote_log_segment_id}: local file {path} does "
                    f"not exist") from None
        directory = self._dir(metadata)
        directory.mkdir(exist_ok=True)
        for suffix, data in contents.items():
            self._put(directory / f"object{suffix}", data)
        self._put(directory / f"object{IndexType.LEADER_EPOCH.suffix}",
                  segment_data.leader_epoch_index)
        self.copies += 1
        return None

    def _read(self, metadata: RemoteLogSegmentMetadata, suffix: str) -> bytes:
        try:
            return (self._dir(metadata) / f"object{suffix}").read_bytes()
        except FileNotFoundError:
            raise RemoteResourceNotFoundError(
                f"{metadata.remote_log_segment_id}: no {suffix} object") from None

    def fetch_log_segment(self, metadata: RemoteLogSegmentMetadata, start_position: int,
                          end_position: int | None = None) -> BinaryIO:
        self._check_open()
        if start_position < 0:
            raise ValueError(f"start position {start_position} is negative")
        if end_position is not None and end_position < start_position:
            raise ValueError(f"end position {end_position} is before start position {start_position}")
        data = self._read(metadata, ".log")
        end = len(data) if end_position is None else end_position + 1
        return io.BytesIO(data[start_position:end])

    def fetch_index(self, metadata: RemoteLogSegmentMetadata, index_type: Any) -> BinaryIO:
        self._check_open()
        return io.BytesIO(self._read(metadata, index_type.suffix))

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        self._check_open()
        shutil.rmtree(self._dir(metadata), ignore_errors=True)

    def close(self) -> None:
        self._closed.set()


class PlainDirectoryPlugin:
    @hookimpl
    def tierlog_register_remote_storage(self, register):
        register(NAME, lambda url, options: PlainDirectoryRSM(url.removeprefix("plaindir://")))
