"""The names of a topic table's data files, built and parsed here only, under the table's
location. A file holds either one chain link (segment), as tiering writes it, or a run of
consecutive links of one partition, as a compaction merges them:

```text
data/p<partition>/<20-digit first>-<20-digit last>-<segmentId>-<attempt8>.parquet   (a link)
data/p<partition>/<20-digit first>-<20-digit last>.r<links>-<attempt8>.parquet      (a run)
```
``first``/``last`` are the span of the link (or of the run's links). A run's name carries its
link count, not its segment ids (the file's footer lists them, ``tierlog.links``), so the name
alone gives a reader and the committer the span. ``attempt8`` (8 hex digits of a uuid4) makes
every attempt's name unique, so two writers never overwrite each other's bytes; a losing
attempt is an orphan the sweep removes. ``p<partition>`` has no ``=``: Spark would infer a
partition column from a Hive-style name. A link's name never parses as a run's: a link's last
offset is followed by ``-``, a run's by ``.r``.
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
_RUN_NAME = re.compile(r"(\d{20})-(\d{20})\.r([1-9]\d{0,5})-([0-9a-f]{8})\.parquet")
#: The most links one run file may hold (its footer lists each: ~60 bytes a link).
MAX_RUN_LINKS = 1000


@dataclass(frozen=True, slots=True)
class DataFileName:
    """The name of the data file of offsets ``[first_offset, last_offset]`` of one partition,
    written by attempt ``attempt``: converted from segment ``segment_id`` (a link's file), or
    merged from ``links`` consecutive links (a run's file, ``segment_id`` None)."""

    partition: int
    first_offset: int
    last_offset: int
    segment_id: str | None
    """The link's segment; None for a run."""
    attempt: str
    """8 hex digits, unique per write of the file."""
    links: int = 1
    """How many chain links the file holds (1 for a link's file)."""

    def __post_init__(self) -> None:
        if not 0 <= self.partition < 1 << 31:
            raise ValueError(f"partition {self.partition} is not a partition number")
        if not 0 <= self.first_offset <= self.last_offset < 10 ** 20:
            raise ValueError(f"[{self.first_offset}, {self.last_offset}] is not an offset "
                             f"range of a data file")
        if self.segment_id is None:
            if not 1 <= self.links <= MAX_RUN_LINKS:
                raise ValueError(f"a run holds 1 to {MAX_RUN_LINKS} links, not {self.links}")
        elif not self.segment_id or "/" in self.segment_id:
            raise ValueError(f"segment id {self.segment_id!r} cannot be part of a file name")
        elif self.links != 1:
            raise ValueError(f"a link's file holds one link, not {self.links}")
        if not _ATTEMPT.fullmatch(self.attempt):
            raise ValueError(f"attempt {self.attempt!r} is not 8 hex digits")

    @classmethod
    def new(cls, partition: int, first_offset: int, last_offset: int,
            segment_id: str) -> DataFileName:
        """The name of a new attempt at writing the link's file."""
        return cls(partition, first_offset, last_offset, segment_id, uuid.uuid4().hex[:8])

    @classmethod
    def new_run(cls, partition: int, first_offset: int, last_offset: int,
                links: int) -> DataFileName:
        """The name of a new attempt at writing a run of ``links`` links spanning
        ``[first_offset, last_offset]``."""
        return cls(partition, first_offset, last_offset, None, uuid.uuid4().hex[:8], links)

    @property
    def is_run(self) -> bool:
        """Whether the file holds a run of links (a compaction's file)."""
        return self.segment_id is None

    @property
    def name(self) -> str:
        span = f"{self.first_offset:020d}-{self.last_offset:020d}"
        if self.segment_id is None:
            return f"{span}.r{self.links}-{self.attempt}{PARQUET_SUFFIX}"
        return f"{span}-{self.segment_id}-{self.attempt}{PARQUET_SUFFIX}"

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
        run = _RUN_NAME.fullmatch(name)
        found = _NAME.fullmatch(name) if run is None else None
        folder = _PARTITION_DIR.fullmatch(directory)
        if (found is None and run is None) or folder is None:
            raise CorruptRemoteMetadataError(
                f"{path} is not a table data file name (data/p<partition>/<20-digit first>-"
                f"<20-digit last>-<segmentId>-<attempt8>.parquet, or <20-digit first>-"
                f"<20-digit last>.r<links>-<attempt8>.parquet for a run)")
        try:
            partition = int(folder.group(1))
            if run is not None:
                return cls(partition, int(run.group(1)), int(run.group(2)), None, run.group(4),
                           int(run.group(3)))
            assert found is not None
            return cls(partition, int(found.group(1)), int(found.group(2)), found.group(3),
                       found.group(4))
        except ValueError as e:
            raise CorruptRemoteMetadataError(f"{path}: {e}") from e


__all__ = ["DATA_DIR", "MAX_RUN_LINKS", "PARQUET_SUFFIX", "DataFileName"]
