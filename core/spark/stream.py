"""The streaming ``tierlog`` source: ``spark.readStream.format("tierlog")`` reads Kafka topics
from tierlog's remote tier as a stream, exactly once, with no broker.

```python
import tierlog.spark
spark = tierlog.spark.session()
stream = (spark.readStream.format("tierlog").option("path", "s3://bucket/tier")
          .option("subscribe", "orders").option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "100000").load())
```

Offsets are Spark's Kafka source's JSON (``{"orders": {"0": 123}}``, the next offset to read
of each partition), so a checkpoint reads like one of Spark's Kafka source. ``latestOffset``
is each partition's published end in the tier: with tail publishing
(``remote.log.tail.ms``) the high watermark (or last stable offset under read_committed), so
a stream sees a record within the tail interval of it being committed. Planning a batch
(``tierlog.spark.stream_plan.plan_range``) is deterministic, which exactly once rests on.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from tierlog.spark.options import TierlogOptions
from tierlog.spark.planning import select_columns
from tierlog.spark.stream_offsets import Offsets, from_json, rate_limit, to_json
from tierlog.spark.stream_plan import (
    StreamSplit,
    earliest_offset,
    initial_offsets,
    latest_offsets,
    open_reader,
    plan_range,
    read_stream_split,
)

log = logging.getLogger(__name__)


class TierlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream reader of the tier. The driver's instance lives for the query: it
    keeps the target of ``Trigger.AvailableNow``; tasks get the planned splits only."""

    def __init__(self, options: TierlogOptions, columns: list[str] | None = None) -> None:
        self.options = options
        self.columns = columns
        """The columns to yield (a user's ``.schema(...)``; None: all)."""
        self._target: Offsets | None = None

    # -- offsets ------------------------------------------------------------------------

    def initialOffset(self) -> dict[str, dict[str, int]]:
        """Where a new query starts (a restarted one starts from its checkpoint)."""
        offsets = initial_offsets(self.options, open_reader(self.options))
        log.info("%s: a new stream starts at %s", self.options.url, to_json(offsets))
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxOffsetsPerTrigger`` as Spark's ReadMaxRows, else everything available."""
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: the published ends now are where the query stops."""
        self._target = latest_offsets(self.options, open_reader(self.options))
        log.info("%s: Trigger.AvailableNow reads up to %s", self.options.url,
                 to_json(self._target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit
                     ) -> dict[str, dict[str, int]]:
        """The end of the next micro-batch: each partition's published end (the
        AvailableNow target when there is one), never behind ``start``, cut down to
        ``limit`` (ReadMaxRows: shared among partitions in proportion to their backlog)."""
        begin = from_json(start, "start offset")
        reader = open_reader(self.options)
        latest = dict(self._target) if self._target is not None \
            else latest_offsets(self.options, reader)
        for tp, offset in begin.items():
            if tp not in latest or latest[tp] < offset:
                if tp in latest:
                    log.warning("%s-%d: the tier's end %d is behind the stream's offset %d "
                                "(a truncated log?); waiting for it", tp[0], tp[1],
                                latest[tp], offset)
                latest[tp] = offset
        if isinstance(limit, ReadMaxRows):
            new = {tp: earliest_offset(self.options, reader, *tp)
                   for tp in latest if tp not in begin}
            latest = rate_limit(limit.max_rows, begin, latest, new)
        return to_json(latest)

    def reportLatestOffset(self) -> dict[str, dict[str, int]] | None:
        latest = latest_offsets(self.options, open_reader(self.options))
        return to_json(latest) if latest else None

    # -- reading ------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        """One InputPartition per split of ``[start, end)``, planned as the batch source
        plans (same start and end, same records: see ``stream_plan.plan_range``)."""
        splits = plan_range(self.options, open_reader(self.options),
                            from_json(start, "start offset"), from_json(end, "end offset"))
        return [InputPartition(s) for s in splits]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        part = partition.value
        if not isinstance(part, StreamSplit):  # Spark's stand-in for nothing to read
            return iter(())
        return select_columns(read_stream_split(part), self.columns)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the tier keeps no consumer state."""
        log.debug("%s: committed %s", self.options.url, end)

    def stop(self) -> None:
        log.debug("%s: stream stopped", self.options.url)
