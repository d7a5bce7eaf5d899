"""Getting the metrics out: an HTTP endpoint for Prometheus (``--metrics-port`` and
``--metrics-host``), the text format, and the human table of ``tierlog metrics``."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from prometheus_client import generate_latest, start_http_server
from prometheus_client.registry import CollectorRegistry

from tierlog.errors import MetricsBindError
from tierlog.plugins.metrics.catalog import METRICS, SCOPE_TAGS
from tierlog.plugins.metrics.collector import attributes, registry_for, sample_name

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from tierlog.manager.log_manager import LogManager
    from tierlog.server.server import Server

__all__ = ["DEFAULT_HOST", "MetricsServer", "catalog_table", "prometheus_text", "serve_metrics",
           "table"]

log = logging.getLogger(__name__)

#: Where the endpoint listens unless told otherwise: loopback, as the metrics name every topic.
DEFAULT_HOST = "127.0.0.1"


class MetricsServer:
    """A running ``/metrics`` endpoint (prometheus_client's HTTP server on its own daemon
    thread); ``close()`` stops it."""

    def __init__(self, server: WSGIServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread
        host, port = server.server_address[:2]
        self.host = host.decode() if isinstance(host, bytes) else str(host)
        self.port = int(port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve_metrics(manager: LogManager, port: int, host: str = DEFAULT_HOST,
                  registry: CollectorRegistry | None = None, *, server: Server | None = None,
                  idle_internal: bool = False) -> MetricsServer:
    """Serve ``manager``'s metrics (or ``registry``) for Prometheus at
    ``http://host:port/metrics``; port 0 picks a free port (see ``.port``). Loopback unless
    ``host`` says otherwise (``0.0.0.0``: every interface): the metrics name every topic.
    ``server`` and ``idle_internal`` are passed to :func:`registry_for`. MetricsBindError
    names the host and port when they cannot be bound (in use, not this machine's)."""
    if registry is None:
        registry = registry_for(manager, server=server, idle_internal=idle_internal)
    try:
        http_server, thread = start_http_server(port, host, registry)
    except OSError as exc:
        raise MetricsBindError(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}") from exc
    served = MetricsServer(http_server, thread)
    log.info("tierlog metrics on %s", served.url)  # start-up information, not a warning
    return served


def prometheus_text(registry: CollectorRegistry) -> str:
    """The registry in Prometheus' text exposition format."""
    return generate_latest(registry).decode()


def table(registry: CollectorRegistry) -> str:
    """One line per sample, ``name{labels}  value``, names aligned; counters end in
    ``_total`` and timers show as ``_count`` / ``_sum`` (seconds)."""
    rows: list[tuple[str, str]] = []
    for family in registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sample.labels.items())
            name = f"{sample.name}{{{labels}}}" if labels else sample.name
            value = sample.value
            shown = f"{int(value)}" if float(value).is_integer() else f"{value:.6g}"
            rows.append((name, shown))
    if not rows:
        return "no metrics\n"
    width = max(len(name) for name, _ in rows)
    return "".join(f"{name:<{width}}  {value}\n" for name, value in rows)


_EXAMPLE_TAGS = {"listener": "PLAINTEXT", "networkProcessor": "0"}
_TOPIC_SCOPES = ("topic", "tiered_topic", "broker_topic")
_TYPES = {"meter": "counter", "gauge": "gauge", "attribute": "gauge",
          "histogram": "summary (ms)"}


def catalog_table() -> str:
    """docs/metrics.md's table of every storage and broker metric, in Markdown, made from the
    catalog and named by the rules (``tierlog metrics --catalog`` prints it)."""
    rows = ["| Prometheus name | Type | Labels | Meaning | Kafka MBean |",
            "|---|---|---|---|---|"]
    for metric in METRICS:
        keys = SCOPE_TAGS[metric.scope]
        values = tuple(_EXAMPLE_TAGS.get(k, k) for k in keys)
        names = []
        for attribute in attributes(metric)[:2]:
            named = sample_name(metric, keys, values, attribute)
            if named is not None:
                names.append(f"`{named[0]}`")
        labels = ", ".join(k for k in keys if k not in _EXAMPLE_TAGS) or "-"
        if metric.scope in _TOPIC_SCOPES:
            labels += " (and one sample without: all topics)"
        if metric.kind == "histogram":
            labels += "; quantile"
        bean = metric.mbean + (f" ({metric.attribute})" if metric.attribute else "")
        shown = " ".join(sorted(set(names), key=len))
        rows.append(f"| {shown} | {_TYPES[metric.kind]} | {labels} | {metric.help} | "
                    f"`{bean}` |")
    return "\n".join(rows) + "\n"
