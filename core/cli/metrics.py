"""``tierlog metrics``: a snapshot of the storage metrics of the data dirs, as a table or in
Prometheus' text format, or the catalog of every metric (the names and meanings are in
docs/metrics.md).

The snapshot is what a LogManager opened on the data dirs reports right away: the levels
(sizes, segment counts, offsets, copy lag, remote log size) are the data's; the event counters
start at zero in a fresh process, so they say something only from a long-running command
(``--metrics-port`` on ``tierlog serve``, ``tier`` or ``produce``; ``serve`` adds the broker's
request, connection and consumer-group metrics).
"""

from __future__ import annotations

import argparse
import sys

from tierlog.cli._common import Subcommands, open_manager, settings


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "metrics", parents=[common], help="print a snapshot of the storage metrics",
        description="Open the data dirs and print their storage metrics once: log size, "
                    "segment count, offsets, remote log size and copy/delete lag per "
                    "partition, named as the Prometheus jmx_exporter's Kafka rules name "
                    "Kafka's MBeans (docs/metrics.md).")
    parser.add_argument("--format", choices=("table", "prometheus"), default="table",
                        help="a table (default) or Prometheus' text exposition format")
    parser.add_argument("--idle-internal", action="store_true",
                        help="also show internal topics' partitions that never held a record "
                             "(left out by default: 50 empty __consumer_offsets partitions)")
    parser.add_argument("--catalog", action="store_true",
                        help="print every metric tierlog exports (name, type, labels, "
                             "meaning, Kafka MBean) as a Markdown table instead, and exit")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tierlog.plugins.metrics import prometheus_text, registry_for, table
    from tierlog.plugins.metrics.export import catalog_table

    if args.catalog:
        sys.stdout.write(catalog_table())
        return 0
    st = settings(args)
    with open_manager(st, read_only=True) as mgr:  # beside a live server too; writes nothing
        registry = registry_for(mgr, idle_internal=args.idle_internal)
        text = prometheus_text(registry) if args.format == "prometheus" else table(registry)
    sys.stdout.write(text)
    return 0
