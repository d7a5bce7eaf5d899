"""The batch ``tierlog`` data source: ``spark.read.format("tierlog")`` reads Kafka topics
straight from tierlog's remote tier, one Spark partition per read split (a remote segment,
or a part of one larger than ``splitBytes``), with the schema of Spark's Kafka source.

```python
import tierlog.spark
spark = tierlog.spark.session()          # or tierlog.spark.register(existing_session)
df = (spark.read.format("tierlog").option("path", "s3://bucket/tier")
      .option("subscribe", "orders").option("storage.endpoint_url", "http://minio:9000")
      .load())
```
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from tierlog.reader import read_split
from tierlog.spark.options import NAME, TierlogOptions
from tierlog.spark.planning import plan_read, read_columns, select_columns
from tierlog.spark.pushdown import PushedBounds
from tierlog.spark.schema import schema_ddl
from tierlog.spark.session import check_workers, show_errors_first

log = logging.getLogger(__name__)


class TierlogReader(DataSourceReader):
    """Plans one InputPartition per ReadSplit (each remote segment, or a byte range of a
    large one) and reads each with ``tierlog.reader.read_split`` from the options alone,
    yielding only ``columns`` (names, in order; None for all) of every batch."""

    def __init__(self, options: TierlogOptions, columns: list[str] | None = None) -> None:
        self.options = options
        self.bounds = PushedBounds()
        self.columns = columns

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(split) for split in plan_read(self.options, self.bounds)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:  # Spark's stand-in when there is nothing to read
            return iter(())
        # The split says whether to decode headers.
        return select_columns(read_split(partition.value), self.columns)


class TierlogPushdownReader(TierlogReader):
    """A TierlogReader that also prunes with the filters Spark pushes (option
    ``filterPushdown=true``; the session needs ``spark.sql.python.filterPushdown.enabled``).

    ``topic``, ``partition``, ``offset`` and lower ``timestamp`` bounds prune segments and
    byte ranges; Spark still applies every filter. Off by default: Spark 4.3.0 keeps the read
    plan made for one query's pushed filters on the DataFrame and reuses it for later queries
    of that DataFrame (or temp view) that push no filter, which would then miss the pruned
    rows. Both the planned partitions and the pickled reader are reused, so no reader-side
    scheme can tell those queries apart. Enable it for DataFrames that every query filters;
    bounds given as options belong to the DataFrame and prune the same way, always safely.
    """

    def pushFilters(self, filters: list[Filter]) -> Sequence[Filter]:
        bounds = PushedBounds()
        for f in filters:
            bounds = bounds.with_filter(f)
        self.bounds = bounds
        # Pruning is conservative (segments, byte ranges): Spark applies every filter itself.
        return list(filters)


class TierlogDataSource(DataSource):
    """The ``tierlog`` data source: options are parsed (and checked) when the DataFrame is
    loaded; readers plan and read with nothing but them. The options, their meanings beside
    Spark's Kafka source and the errors are in the README (section "Reading the remote tier")
    and ``tierlog.spark.options``.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._parsed: TierlogOptions | None = None

    @property
    def parsed(self) -> TierlogOptions:
        """The read options, parsed on first use (a write takes other options)."""
        parsed: TierlogOptions | None = getattr(self, "_parsed", None)
        if parsed is None:  # Spark may rebuild the instance without __init__
            parsed = self._parsed = TierlogOptions.parse(self.options)
        return parsed

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """``df.write.format("tierlog")``: see tierlog.spark.write."""
        from tierlog.spark.write import TierlogBatchWriter

        return TierlogBatchWriter(self.options)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``df.writeStream.format("tierlog")``: see tierlog.spark.write."""
        from tierlog.spark.write import TierlogStreamWriter

        return TierlogStreamWriter(self.options)

    def schema(self) -> str:
        return schema_ddl(include_headers=self.parsed.include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader yielding ``schema``'s columns: the whole Kafka schema, or the columns a
        user's ``.schema("value binary, offset long")`` names (Spark 4.3 does not prune the
        columns of a Python source; fewer columns ship less to the JVM)."""
        self.parsed.check_batch()
        columns = self._columns(schema, self.parsed.include_headers)
        if self.parsed.filter_pushdown:
            return TierlogPushdownReader(self.parsed, columns)
        return TierlogReader(self.parsed, columns)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("tierlog")``: see tierlog.spark.stream (a stream starts
        at ``latest`` by default and refuses the ending options, as Spark's Kafka source)."""
        from tierlog.spark.stream import TierlogStreamReader

        options = TierlogOptions.parse(self.options, streaming=True)
        return TierlogStreamReader(options, self._columns(schema, options.include_headers))

    @staticmethod
    def _columns(schema: StructType | None, include_headers: bool) -> list[str] | None:
        """The columns a read yields for Spark's ``schema`` (``read_columns``; None: all, or
        called outside Spark)."""
        if schema is None:
            return None
        from pyspark.sql.pandas.types import to_arrow_schema

        return read_columns(to_arrow_schema(schema, timezone="UTC"),
                            include_headers=include_headers)


def register(spark: SparkSession, *, check: bool = True) -> None:
    """Make ``spark.read.format("tierlog")`` available in ``spark``'s session, with its
    errors as the first line Spark shows (``session.show_errors_first``). With ``check``, a
    one-task job first proves the workers' Python imports tierlog (``session.check_workers``:
    SparkWorkerError saying how to fix it if not)."""
    if check:
        check_workers(spark)
    show_errors_first(spark)
    spark.dataSource.register(TierlogDataSource)
