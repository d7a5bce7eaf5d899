"""tierlog's storage metrics for Prometheus: the ``metrics`` plugin.

``registry_for(manager)`` is a prometheus_client CollectorRegistry exporting a LogManager's
storage metrics (Kafka's names mapped by :mod:`tierlog.plugins.metrics.names`; the list is
:data:`tierlog.plugins.metrics.catalog.METRICS`), read from the engine's counters when scraped;
``serve_metrics(manager, port)`` serves it over HTTP. The plugin module
(:mod:`tierlog.plugins.metrics.plugin`) counts lifecycle events.
"""

from tierlog.plugins.metrics.collector import IsolatedCollector, StorageCollector, registry_for
from tierlog.plugins.metrics.export import MetricsServer, prometheus_text, serve_metrics, table

__all__ = ["IsolatedCollector", "MetricsServer", "StorageCollector", "prometheus_text",
           "registry_for", "serve_metrics", "table"]
