"""The Prometheus side: a Collector that reads a LogManager's (and a server's) metrics on
scrape, a registry to mount, and the isolation that keeps one failing metric or collector from
breaking the others.

Nothing is recorded into prometheus_client between scrapes: the engine's and the server's
counters are the state, and :class:`StorageCollector` turns them into metric families when
asked, each sample named by :mod:`tierlog.plugins.metrics.names` (the jmx_exporter rules). A
metric whose reader raises (a log closing under the scrape, a third-party metadata store
failing) is logged, rate-limited, and left out of that scrape; the other metrics still come
out.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import TYPE_CHECKING

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from tierlog.common.stats import QUANTILES, percentiles
from tierlog.plugins.metrics import catalog, names
from tierlog.plugins.metrics.catalog import METRICS, SCOPE_TAGS, Scrape

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager
    from tierlog.server.server import Server

__all__ = ["IsolatedCollector", "StorageCollector", "registry_for"]

log = logging.getLogger(__name__)

#: A failing metric or collector is logged at most once per this many seconds.
FAILURE_LOG_INTERVAL_S = 60.0

_FAMILY_TYPE = {"meter": "counter", "gauge": "gauge", "attribute": "gauge",
                "histogram": "summary"}


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


def attributes(metric: catalog.Metric) -> list[str]:
    """The JMX attributes a metric of its kind has (what the rules are applied to)."""
    if metric.kind == "meter":
        return ["Count"]
    if metric.kind == "histogram":
        return ["Count", *(name for name, _ in QUANTILES)]
    return [metric.attribute or "Value"]


@lru_cache(maxsize=1024)
def _template(mbean: str, keys: tuple[str, ...], attribute: str) -> names.NameTemplate | None:
    return names.template(mbean, keys, attribute)


def sample_name(metric: catalog.Metric, keys: tuple[str, ...], values: tuple[str, ...],
                attribute: str) -> tuple[str, dict[str, str]] | None:
    """The exported name and labels of one attribute of one sample (None: no rule)."""
    found = _template(metric.mbean, keys, attribute)
    if found is not None:
        return found.name, found.labels_for(values)
    exported = names.export(names.with_tags(metric.mbean, dict(zip(keys, values, strict=True))),
                            attribute)
    return None if exported is None else (exported.name, dict(exported.labels))


def _family_name(metric: catalog.Metric, sample: str) -> str:
    if metric.kind == "meter":
        return sample.removesuffix("_total")
    return sample


class StorageCollector(Collector):
    """Every metric of :data:`catalog.METRICS` for one LogManager (and the server serving it,
    if given), read when scraped. ``idle_internal``: export internal topics' partitions that
    never held a record too."""

    def __init__(self, manager: LogManager, metrics: Iterable[catalog.Metric] = METRICS, *,
                 server: Server | None = None, idle_internal: bool = False) -> None:
        self.manager = manager
        self.metrics = tuple(metrics)
        self.server = server
        self.idle_internal = idle_internal
        self._retired = catalog.Retired()

    def describe(self) -> list[Metric]:
        """The families whose names do not depend on a sample (registering reads no log)."""
        families: dict[str, Metric] = {}
        for metric in self.metrics:
            if metric.scope in ("broker", "broker_topic", "request", "listener") \
                    and self.server is None:
                continue
            found = _template(metric.mbean, SCOPE_TAGS[metric.scope], attributes(metric)[-1])
            if found is not None:
                name = _family_name(metric, found.name)
                families.setdefault(name, Metric(name, metric.help,
                                                 _FAMILY_TYPE[metric.kind]))
        return list(families.values())

    def collect(self) -> Iterator[Metric]:
        try:
            scrape = Scrape(self.manager, self.server, self.idle_internal, self._retired)
        except Exception as exc:  # noqa: BLE001 - a scrape must never raise into the server
            _failures.report("reading the LogManager", exc)
            return
        for metric in self.metrics:
            families: dict[str, Metric] = {}
            for keys, values, subject in scrape.samples(metric.scope):
                try:
                    value = metric.read(scrape, subject)
                    self._add(families, metric, keys, values, value)
                except Exception as exc:  # noqa: BLE001 - one metric's failure stays its own
                    where = f" of {dict(zip(keys, values, strict=True))}" if keys else ""
                    _failures.report(f"{metric.mbean}{where}", exc)
            yield from families.values()

    @staticmethod
    def _add(families: dict[str, Metric], metric: catalog.Metric, keys: tuple[str, ...],
             values: tuple[str, ...], value: catalog.Value) -> None:
        if isinstance(value, list):
            readings = [float(sum(h.count for h in value)), *percentiles(value)]
        else:
            readings = [float(value)]
        for attribute, reading in zip(attributes(metric), readings, strict=True):
            named = sample_name(metric, keys, values, attribute)
            if named is None:
                continue
            name, labels = named
            family_name = _family_name(metric, name)
            if metric.kind == "histogram" and attribute == "Count":
                family_name = name.removesuffix("_count")
            family = families.get(family_name)
            if family is None:
                family = families[family_name] = Metric(family_name, metric.help,
                                                         _FAMILY_TYPE[metric.kind])
            family.add_sample(name, labels, reading)


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
        except Exception as exc:  # noqa: BLE001 - a plugin's collector must not break others
            _failures.report(f"collector {self.name}", exc)
            return []

    def collect(self) -> Iterator[Metric]:
        try:
            families = list(self.inner.collect())
        except Exception as exc:  # noqa: BLE001 - a plugin's collector must not break others
            _failures.report(f"collector {self.name}", exc)
            return iter(())
        return iter(families)


def registry_for(manager: LogManager, *extra: Collector, server: Server | None = None,
                 idle_internal: bool = False) -> CollectorRegistry:
    """A new CollectorRegistry exporting ``manager``'s storage metrics (and the lifecycle
    event counts of the metrics plugin), each collector isolated; with ``server`` (a running
    :class:`tierlog.server.server.Server` over ``manager``) the broker's request,
    connection, controller and consumer-group lag metrics too. ``idle_internal``: also
    export internal topics' partitions that never held a record. ``extra`` collectors are
    added isolated too. Mount it with prometheus_client (``generate_latest(registry)``,
    ``make_wsgi_app(registry)``) or :func:`tierlog.plugins.metrics.serve_metrics`."""
    from tierlog.plugins.metrics.consumer_lag import ConsumerLagCollector
    from tierlog.plugins.metrics.plugin import EventCollector

    registry = CollectorRegistry(auto_describe=True)
    registry.register(IsolatedCollector(
        StorageCollector(manager, server=server, idle_internal=idle_internal), "storage"))
    registry.register(IsolatedCollector(EventCollector(manager), "events"))
    if server is not None:
        registry.register(IsolatedCollector(ConsumerLagCollector(manager, server),
                                            "consumer lag"))
    for collector in extra:
        registry.register(IsolatedCollector(collector))
    return registry
