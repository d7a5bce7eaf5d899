"""Reads topics straight from tierlog's remote tier into Arrow, with only fsspec access to it:
``RemoteTopicReader`` plans ``ReadSplit``s, and ``read_split`` runs one (a Spark task's unit).

```python
from tierlog.reader import RemoteTopicReader
reader = RemoteTopicReader("s3://bucket/tier", {"endpoint_url": "http://minio:9000"})
table = reader.read_table("orders", isolation_level="read_committed")
```
"""

from __future__ import annotations

from tierlog.reader._planner import DEFAULT_SPLIT_BYTES, EARLIEST, LATEST
from tierlog.reader._reader import TIMESTAMP_STRATEGIES, RemoteTopicReader
from tierlog.records.arrow.schema import HEADERS_TYPE, SCHEMA, SCHEMA_NO_HEADERS, schema
from tierlog.remote.read.readable import ReadStats
from tierlog.remote.read.split import (
    DEFAULT_BATCH_ROWS,
    ISOLATION_LEVELS,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    ReadSplit,
    read_split,
)

__all__ = [
    "DEFAULT_BATCH_ROWS",
    "DEFAULT_SPLIT_BYTES",
    "EARLIEST",
    "HEADERS_TYPE",
    "ISOLATION_LEVELS",
    "LATEST",
    "READ_COMMITTED",
    "READ_UNCOMMITTED",
    "SCHEMA",
    "SCHEMA_NO_HEADERS",
    "TIMESTAMP_STRATEGIES",
    "ReadSplit",
    "ReadStats",
    "RemoteTopicReader",
    "read_split",
    "schema",
]
