"""The DataFrame schema of the ``tierlog`` source: Spark's Kafka source schema, its seven
columns, plus ``headers`` with ``includeHeaders=true``. No pyspark import.
"""

from __future__ import annotations

#: The column ``includeHeaders=true`` adds (the last one).
HEADERS_COLUMN = "headers"
#: Spark's Kafka source schema without headers (``includeHeaders=false``, the default).
SCHEMA_DDL_NO_HEADERS = ("key binary, value binary, topic string, partition int, "
                         "offset long, timestamp timestamp, timestampType int")
#: Spark's Kafka source schema with headers (``includeHeaders=true``).
SCHEMA_DDL = (f"{SCHEMA_DDL_NO_HEADERS}, "
              f"{HEADERS_COLUMN} array<struct<key: string, value: binary>>")


def schema_ddl(*, include_headers: bool) -> str:
    """The schema as Spark DDL, with or without the ``headers`` column."""
    return SCHEMA_DDL if include_headers else SCHEMA_DDL_NO_HEADERS
