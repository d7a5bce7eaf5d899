"""The Prometheus side: a Collector that reads a LogManager's metrics on scrape, a registry to
mount, and the isolation that keeps one failing metric or collector from breaking the others.

Nothing is recorded into prometheus_client between scrapes: the engine's counters are the
state, and :class:`StorageCollector` turns them into metric families when asked. A metric
whose reader raises (a log closing under the scrape, a third-party metadata store failing) is
logged, rate-limited, and left out of that scrape; the other metrics still come out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector, CollectorRegistry

from tierlog.plugins.metrics import catalog
from tierlog.plugins.metrics.catalog import METRICS, Scrape

if TYPE_CHECKING:
    from tierlog.manager import LogManager

__all__ = ["IsolatedCollector", "StorageCollector", "registry_for"]

log = logging.getLogger(__name__)

#: A failing metric or collector is logged at most once per this many seconds.
FAILURE_LOG_INTERVAL_S = 60.0


class _FailureLog:
    """Rate-limited error logging, one clock per failing thing."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def report(self, what: str, exc: BaseException) -> None:
        now = self._clock()
        with self._lock:
            last = self._last.get(what)
            if last is not None and now - last < FAILURE_LOG_INTERVAL_S:
                return
            self._last[what] = now
        log.error("metrics: %s failed and was left out of the scrape: %s: %s", what,
                  type(exc).__name__, exc, exc_info=exc)


_failures = _FailureLog()


def _family(metric: catalog.Metric) -> Any:
    name, labels = metric.prometheus, list(metric.labels)
    if metric.kind == "counter":
        return CounterMetricFamily(name.removesuffix("_total"), metric.help, labels=labels)
    if metric.kind == "timer":
        return SummaryMetricFamily(name, metric.help, labels=labels)
    return GaugeMetricFamily(name, metric.help, labels=labels)


def _add(family: Any, metric: catalog.Metric, labels: list[str], value: catalog.Value) -> None:
    if metric.kind == "timer":
        assert isinstance(value, tuple)
        family.add_metric(labels, count_value=value[0], sum_value=value[1])
    else:
        family.add_metric(labels, float(value))  # type: ignore[arg-type]


class StorageCollector(Collector):
    """Every metric of :data:`catalog.METRICS` for one LogManager, read when scraped."""

    def __init__(self, manager: LogManager,
                 metrics: Iterable[catalog.Metric] = METRICS) -> None:
        self.manager = manager
        self.metrics = tuple(metrics)

    def describe(self) -> list[Metric]:
        """The families without samples (so registering reads no log)."""
        return [_family(metric) for metric in self.metrics]

    def collect(self) -> Iterator[Metric]:
        try:
            scrape = Scrape(self.manager)
        except Exception as exc:  # noqa: BLE001 - a scrape must never raise into the server
            _failures.report("reading the LogManager", exc)
            return
        for metric in self.metrics:
            family = _family(metric)
            for labels, log_ in scrape.samples(metric.scope):
                try:
                    value = metric.read(scrape, log_)
                except Exception as exc:  # noqa: BLE001 - one metric's failure stays its own
                    where = "" if log_ is None else f" of {log_.directory.name}"
                    _failures.report(f"{metric.mbean}{where}", exc)
                    continue
                _add(family, metric, list(labels), value)
            yield family


class IsolatedCollector(Collector):
    """Wraps any collector so that its failure is logged and yields nothing, instead of
    failing the whole registry's scrape."""

    def __init__(self, inner: Collector, name: str | None = None) -> None:
        self.inner = inner
        self.name = name or type(inner).__name__

    def describe(self) -> list[Metric]:
        describe = getattr(self.inner, "describe", None)
        if describe is None:
            return []
        try:
            return list(describe())
        except Exception as exc:  # noqa: BLE001
            _failures.report(f"collector {self.name}", exc)
            return []

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self.inner.collect())
        except Exception as exc:  # noqa: BLE001 - a plugin's collector must not break others
            _failures.report(f"collector {self.name}", exc)
            return iter(())
        return iter(families)


def registry_for(manager: LogManager, *extra: Collector) -> CollectorRegistry:
    """A new CollectorRegistry exporting ``manager``'s storage metrics (and the lifecycle
    event counts of the metrics plugin), each collector isolated; ``extra`` collectors are
    added isolated too. Mount it with prometheus_client (``generate_latest(registry)``,
    ``make_wsgi_app(registry)``, ``start_http_server(port, registry=registry)``) or
    :func:`tierlog.plugins.metrics.serve_metrics`."""
    from tierlog.plugins.metrics.plugin import EventCollector

    registry = CollectorRegistry(auto_describe=True)
    registry.register(IsolatedCollector(StorageCollector(manager), "storage"))
    registry.register(IsolatedCollector(EventCollector(manager), "events"))
    for collector in extra:
        registry.register(IsolatedCollector(collector))
    return registry
