"""The names of a topic table's data files, built and parsed here only: one file per chain link
(segment) and attempt, under the table's location.

```text
data/p<partition>/<20-digit first>-<20-digit last>-<segmentId>-<attempt8>.parquet
```
``attempt8`` (8 hex digits of a uuid4) makes every attempt's name unique, so two writers of
one link never overwrite each other's bytes; a losing attempt is an orphan the sweep removes.
``p<partition>`` has no ``=``: Spark would infer a partition column from a Hive-style name.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from tierlog.errors import CorruptRemoteMetadataError

#: The data files' directory under the table's location.
DATA_DIR = "data"
PARQUET_SUFFIX = ".parquet"
_ATTEMPT = re.compile(r"[0-9a-f]{8}")
_PARTITION_DIR = re.compile(r"p(0|[1-9]\d{0,9})")
# The segment id (a Kafka Uuid in base64url) may hold "-": the 20-digit offsets lead and the
# 8-hex attempt ends, so the id is what lies between them.
_NAME = re.compile(r"(\d{20})-(\d{20})-(.+)-([0-9a-f]{8})\.parquet")


@dataclass(frozen=True, slots=True)
class DataFileName:
    """The name of the data file of offsets ``[first_offset, last_offset]`` of one partition,
    converted from segment ``segment_id`` by attempt ``attempt``."""

    partition: int
    first_offset: int
    last_offset: int
    segment_id: str
    attempt: str
    """8 hex digits, unique per write of the link."""

    def __post_init__(self) -> None:
        if not 0 <= self.partition < 1 << 31:
            raise ValueError(f"partition {self.partition} is not a partition number")
        if not 0 <= self.first_offset <= self.last_offset < 10 ** 20:
            raise ValueError(f"[{self.first_offset}, {self.last_offset}] is not an offset "
                             f"range of a data file")
        if not self.segment_id or "/" in self.segment_id:
            raise ValueError(f"segment id {self.segment_id!r} cannot be part of a file name")
        if not _ATTEMPT.fullmatch(self.attempt):
            raise ValueError(f"attempt {self.attempt!r} is not 8 hex digits")

    @classmethod
    def new(cls, partition: int, first_offset: int, last_offset: int,
            segment_id: str) -> DataFileName:
        """The name of a new attempt at writing the link's file."""
        return cls(partition, first_offset, last_offset, segment_id, uuid.uuid4().hex[:8])

    @property
    def name(self) -> str:
        return (f"{self.first_offset:020d}-{self.last_offset:020d}-{self.segment_id}-"
                f"{self.attempt}{PARQUET_SUFFIX}")

    @property
    def key(self) -> str:
        """The file's path relative to the table's location."""
        return f"{DATA_DIR}/p{self.partition}/{self.name}"

    @classmethod
    def parse(cls, path: str) -> DataFileName:
        """The name of the data file at ``path`` (a location, a tier path or a key ending in
        ``p<partition>/<name>``); CorruptRemoteMetadataError naming it when it is not one of
        ours."""
        parts = path.rstrip("/").rsplit("/", 2)
        directory, name = (parts[-2], parts[-1]) if len(parts) >= 2 else ("", parts[-1])
        found = _NAME.fullmatch(name)
        folder = _PARTITION_DIR.fullmatch(directory)
        if found is None or folder is None:
            raise CorruptRemoteMetadataError(
                f"{path} is not a table data file name (data/p<partition>/<20-digit first>-"
                f"<20-digit last>-<segmentId>-<attempt8>.parquet)")
        try:
            return cls(int(folder.group(1)), int(found.group(1)), int(found.group(2)),
                       found.group(3), found.group(4))
        except ValueError as e:
            raise CorruptRemoteMetadataError(f"{path}: {e}") from e


__all__ = ["DATA_DIR", "PARQUET_SUFFIX", "DataFileName"]
