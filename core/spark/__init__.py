"""``spark.read.format("tierlog")``: PySpark reads Kafka topics straight from tierlog's
remote tier, with the options, schema and failures of Spark's Kafka source.

```python
import tierlog.spark
spark = tierlog.spark.session()   # a local session; or tierlog.spark.register(spark)
df = spark.read.format("tierlog").option("path", "s3://bucket/tier") \\
        .option("subscribe", "orders").load()
```

Modules: ``options`` (parsing and checks, shared by batch and streaming), ``schema``,
``pushdown`` (pushed filters as bounds), ``planning`` (splits, ``minPartitions``),
``source`` (the batch data source), ``stream`` (the streaming reader, with
``stream_offsets`` and ``stream_plan``), ``session`` (a configured local session), ``tables``
(``table``/``register_views``: the covered offsets read from the topic's table by Spark's
Parquet reader; imported on first use, as it loads pyiceberg).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr
from tierlog.spark.options import NAME, STORAGE_PREFIXES, TierlogOptions
from tierlog.spark.planning import plan_read
from tierlog.spark.pushdown import PushedBounds
from tierlog.spark.schema import SCHEMA_DDL, SCHEMA_DDL_NO_HEADERS, schema_ddl
from tierlog.spark.session import session
from tierlog.spark.source import (
    TierlogDataSource,
    TierlogPushdownReader,
    TierlogReader,
    register,
)
from tierlog.spark.stream import TierlogStreamReader

if TYPE_CHECKING:
    from tierlog.spark.tables import register_views, table

#: Imported on first use (PEP 562): the workers import this package, and need no pyiceberg.
__getattr__ = lazy_getattr(__name__, {"register_views": "tierlog.spark.tables",
                                      "table": "tierlog.spark.tables"}, globals())

__all__ = [
    "NAME",
    "SCHEMA_DDL",
    "SCHEMA_DDL_NO_HEADERS",
    "STORAGE_PREFIXES",
    "PushedBounds",
    "TierlogDataSource",
    "TierlogOptions",
    "TierlogPushdownReader",
    "TierlogReader",
    "TierlogStreamReader",
    "plan_read",
    "register",
    "register_views",
    "schema_ddl",
    "session",
    "table",
]
