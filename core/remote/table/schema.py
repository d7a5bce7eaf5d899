"""A topic table's shape: its Iceberg schema (Spark's Kafka source columns plus ``aborted``, with
fixed field ids), its partition spec (``identity(partition)``), the Arrow schema its Parquet
files are written in, its properties and its name in a catalog.

```text
1 key binary?   2 value binary?   3 topic string   4 partition int   5 offset long
6 timestamp timestamptz   7 timestampType int
8 headers list<10: struct<11 key string?, 12 value binary?>>?   9 aborted boolean
```
Every reader resolves the Parquet columns by these ids (``PARQUET:field_id``). ``day(timestamp)``
is no partition field: a segment spanning midnight would be no one file; the files' timestamp
bounds prune instead.
"""

from __future__ import annotations

import logging

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from tierlog.records.arrow.schema import SCHEMA
from tierlog.remote.table.catalog import DEFAULT_PROPERTIES, NAMESPACE, check_fixed_properties

log = logging.getLogger(__name__)

#: Column names the table's own code filters and plans on.
PARTITION = "partition"
OFFSET = "offset"
TIMESTAMP = "timestamp"
ABORTED = "aborted"

#: The field ids of the columns (Iceberg's, and the Parquet files' ``PARQUET:field_id``).
FIELD_IDS = {"key": 1, "value": 2, "topic": 3, PARTITION: 4, OFFSET: 5, TIMESTAMP: 6,
             "timestampType": 7, "headers": 8, ABORTED: 9}
HEADER_ELEMENT_ID, HEADER_KEY_ID, HEADER_VALUE_ID = 10, 11, 12
#: The one field of the partition spec.
PARTITION_FIELD_ID = 1000

ICEBERG_SCHEMA = Schema(
    NestedField(1, "key", BinaryType(), required=False),
    NestedField(2, "value", BinaryType(), required=False),
    NestedField(3, "topic", StringType(), required=True),
    NestedField(4, PARTITION, IntegerType(), required=True),
    NestedField(5, OFFSET, LongType(), required=True),
    NestedField(6, TIMESTAMP, TimestamptzType(), required=True),
    NestedField(7, "timestampType", IntegerType(), required=True),
    NestedField(8, "headers", ListType(
        HEADER_ELEMENT_ID,
        StructType(NestedField(HEADER_KEY_ID, "key", StringType(), required=False),
                   NestedField(HEADER_VALUE_ID, "value", BinaryType(), required=False)),
        element_required=False), required=False),
    NestedField(9, ABORTED, BooleanType(), required=True),
)
PARTITION_SPEC = PartitionSpec(PartitionField(
    source_id=FIELD_IDS[PARTITION], field_id=PARTITION_FIELD_ID, transform=IdentityTransform(),
    name=PARTITION))


def _with_id(field: pa.Field, field_id: int, nullable: bool = True) -> pa.Field:
    return field.with_nullable(nullable).with_metadata(
        {b"PARQUET:field_id": str(field_id).encode("ascii")})


def _arrow_schema() -> pa.Schema:
    """``tierlog.records.arrow.schema.SCHEMA`` (Spark's Kafka types) plus ``aborted``, each
    field carrying its id and the nullability ICEBERG_SCHEMA gives it."""
    header = pa.struct([_with_id(pa.field("key", pa.string()), HEADER_KEY_ID),
                        _with_id(pa.field("value", pa.binary()), HEADER_VALUE_ID)])
    fields = []
    for field in SCHEMA:
        nullable = not ICEBERG_SCHEMA.find_field(FIELD_IDS[field.name]).required
        if field.name == "headers":
            field = field.with_type(pa.list_(_with_id(pa.field("element", header),
                                                      HEADER_ELEMENT_ID)))
        fields.append(_with_id(field, FIELD_IDS[field.name], nullable))
    fields.append(_with_id(pa.field(ABORTED, pa.bool_()), FIELD_IDS[ABORTED], nullable=False))
    return pa.schema(fields)


#: The Arrow schema of the table's Parquet files: the reader's columns, in its types, then
#: ``aborted``; field ids in the metadata.
ARROW_SCHEMA = _arrow_schema()


def table_properties() -> dict[str, str]:
    """The properties a topic table is created with (the tier catalog's defaults, its fixed
    ones among them: pyiceberg's own commit retry off, metadata files kept)."""
    return dict(DEFAULT_PROPERTIES)


def table_identifier(topic: str, topic_id: str) -> tuple[str, str]:
    """The table of one incarnation of a topic: ``("tierlog", "<topic>-<topicId>")``, the
    name of its directory under ``_tables/``."""
    return (NAMESPACE, f"{topic}-{topic_id}")


def open_or_create_table(catalog: Catalog, topic: str, topic_id: str, *,
                         location: str | None = None) -> Table:
    """The topic's table, created (with ``location`` when a user catalog needs to be told the
    tier's place for it) when the catalog has none; a create racing another process's loads
    the winner's. ConfigError when the table has pyiceberg's commit retry on or other fixed
    properties changed (its commits would then lose coverage)."""
    identifier = table_identifier(topic, topic_id)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        try:
            table = catalog.create_table(identifier, ICEBERG_SCHEMA, location=location,
                                         partition_spec=PARTITION_SPEC,
                                         properties=table_properties())
            log.info("created table %s at %s", ".".join(identifier), table.location())
        except TableAlreadyExistsError:
            table = catalog.load_table(identifier)
    check_fixed_properties(table.properties)
    return table


__all__ = [
    "ABORTED",
    "ARROW_SCHEMA",
    "FIELD_IDS",
    "ICEBERG_SCHEMA",
    "OFFSET",
    "PARTITION",
    "PARTITION_SPEC",
    "TIMESTAMP",
    "open_or_create_table",
    "table_identifier",
    "table_properties",
]
