"""The broker's request counters: what Kafka's request and topic metrics count, bumped by the
server as it works and read by an exporter (the ``metrics`` plugin) when scraped.

:class:`RequestStats` lives on the server's :class:`~tierlog.server.services.Services`
(``services.request_stats``) and counts: each request's total time by API, from its frame
being taken to its response being written (Kafka's ``RequestMetrics`` ``TotalTimeMs``), the
open connections, and per topic what Kafka's ``BrokerTopicMetrics`` count of produce and fetch
requests: partitions produced to and fetched from, the ones that failed, and the bytes fetched
(``BytesOut``). The bytes and records appended (``BytesIn``, ``MessagesIn``) are the engine's
own counters (``log.stats``).

As Kafka, a partition's produce or fetch "failed" only for an error that is not the
client's own: an unknown partition, a too-large or corrupt batch, a fetch offset out of
range and the like are answered but not counted as failures.

Every call comes from the server's event loop (one thread): plain ints and dicts, no lock;
a scrape on another thread reads them as they are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map

from tierlog.common.stats import Histogram, perf_ns

if TYPE_CHECKING:
    from tierlog.server.api.fetch import PartitionRead
    from tierlog.server.api.produce_wire import Outcome

__all__ = ["RequestStats", "TopicCounts", "request_name"]

FETCH_KEY = 1

#: Errors a partition is answered with that Kafka does not count as a failed produce.
_CLIENTS_OWN_PRODUCE = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.corrupt_message,
    ErrorCode.kafka_storage_error, ErrorCode.invalid_topic_exception})
#: ... and as a failed fetch.
_CLIENTS_OWN_FETCH = frozenset({
    ErrorCode.unknown_topic_or_partition, ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_leader_epoch, ErrorCode.fenced_leader_epoch,
    ErrorCode.replica_not_available, ErrorCode.kafka_storage_error,
    ErrorCode.offset_out_of_range, ErrorCode.inconsistent_topic_id})


def request_name(api_key: int) -> str:
    """Kafka's request name of an API key, as RequestMetrics tags it (``Produce``,
    ``FetchConsumer``, ``ListOffsets``, ...; ``ApiKey<n>`` for a key kio does not know)."""
    if api_key == FETCH_KEY:
        return "FetchConsumer"  # one node: every fetch is a consumer's
    name = api_key_map.get(api_key)
    return "".join(w.capitalize() for w in name.split("_")) if name else f"ApiKey{api_key}"


class TopicCounts:
    """Produce and fetch counts of one topic (or of all topics)."""

    __slots__ = ("bytes_out", "failed_fetch", "failed_produce", "total_fetch",
                 "total_produce")

    def __init__(self) -> None:
        self.total_produce = 0
        self.failed_produce = 0
        self.total_fetch = 0
        self.failed_fetch = 0
        self.bytes_out = 0


class RequestStats:
    """The server's request, connection and per-topic counters (see the module docstring)."""

    def __init__(self) -> None:
        #: Connections open now.
        self.connections = 0
        #: Every topic's counts together (they never go down, even when a topic goes).
        self.all_topics = TopicCounts()
        self._topics: dict[str, TopicCounts] = {}
        self._times: dict[int, Histogram] = {}

    # -- the server's calls (on its event loop) ------------------------------------------

    def track_connection(self, task: asyncio.Task[None]) -> None:
        """A connection opened; it closes when ``task`` (the one serving it) ends."""
        self.connections += 1
        task.add_done_callback(self._closed)

    def _closed(self, _: object) -> None:
        self.connections -= 1

    def request_done(self, frame: bytes, started_ns: int) -> None:
        """A request (``frame``, starting with its API key) was answered; it was taken at
        ``started_ns`` (``perf_ns``)."""
        api_key = (frame[0] << 8) | frame[1]
        times = self._times.get(api_key)
        if times is None:
            times = self._times[api_key] = Histogram()
        now = perf_ns()
        times.record(now - started_ns, now)

    def _topic(self, topic: str) -> TopicCounts:
        counts = self._topics.get(topic)
        if counts is None:
            counts = self._topics[topic] = TopicCounts()
        return counts

    def produced(self, outcomes: Iterable[Outcome]) -> None:
        """A Produce request's outcome per partition: (topic, partition, the append's info
        or an ErrorCode, message)."""
        every = self.all_topics
        for topic, _, result, _ in outcomes:
            counts = self._topic(topic)
            counts.total_produce += 1
            every.total_produce += 1
            if isinstance(result, ErrorCode) and result not in _CLIENTS_OWN_PRODUCE:
                counts.failed_produce += 1
                every.failed_produce += 1

    def fetched(self, reads: Iterable[PartitionRead]) -> None:
        """A Fetch response's reads."""
        every = self.all_topics
        for read in reads:
            counts = self._topic(read.tp[0])
            counts.total_fetch += 1
            every.total_fetch += 1
            if read.error != ErrorCode.none:
                if read.error not in _CLIENTS_OWN_FETCH:
                    counts.failed_fetch += 1
                    every.failed_fetch += 1
                continue
            size = read.size
            counts.bytes_out += size
            every.bytes_out += size

    # -- readers (any thread) -----------------------------------------------------------

    def topics(self) -> dict[str, TopicCounts]:
        """Each topic's counts (a copy of the map; the counts are live)."""
        return self._topics.copy()

    def request_times(self) -> dict[str, Histogram]:
        """Each API's request times, by Kafka's request name."""
        return {request_name(key): times for key, times in sorted(self._times.copy().items())}
