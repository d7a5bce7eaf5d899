"""The Arrow schemas of Spark's Kafka source, with and without headers: the one home of the
columns every Arrow reader of tierlog returns (``tierlog.reader``, the Spark source, the
topic tables, which add their ``aborted`` column to ``SCHEMA``).
"""

from __future__ import annotations

import pyarrow as pa

HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("element", HEADER_TYPE))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

#: Spark's Kafka source schema without headers (its ``includeHeaders`` false): binary (not
#: large_binary), int32 partition and timestampType, microsecond UTC timestamps.
SCHEMA_NO_HEADERS = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
])
#: Spark's Kafka source schema with headers, null when a record has none.
SCHEMA = SCHEMA_NO_HEADERS.append(pa.field("headers", HEADERS_TYPE))


def schema(include_headers: bool = True) -> pa.Schema:
    """``SCHEMA`` (8 columns) or, without headers, ``SCHEMA_NO_HEADERS`` (7 columns)."""
    return SCHEMA if include_headers else SCHEMA_NO_HEADERS


__all__ = ["HEADERS_TYPE", "HEADER_TYPE", "SCHEMA", "SCHEMA_NO_HEADERS", "TIMESTAMP_TYPE",
           "schema"]
