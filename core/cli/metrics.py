"""``tierlog metrics``: a snapshot of the storage metrics of the data dirs, as a table or in
Prometheus' text format (the names and meanings are in the README's metrics section).

The snapshot is what a LogManager opened on the data dirs reports right away: the levels
(sizes, segment counts, offsets, copy lag, remote log size) are the data's; the event counters
start at zero in a fresh process, so they say something only from a long-running command
(``--metrics-port`` on ``tierlog serve``, ``tier`` or ``produce``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tierlog.cli._common import open_manager, settings


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "metrics", parents=[common], help="print a snapshot of the storage metrics",
        description="Open the data dirs and print their storage metrics once: log size, "
                    "segment count, offsets, remote log size and copy/delete lag per "
                    "partition (Kafka's metric names mapped to Prometheus names).")
    parser.add_argument("--format", choices=("table", "prometheus"), default="table",
                        help="a table (default) or Prometheus' text exposition format")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tierlog.plugins.metrics import prometheus_text, registry_for, table

    st = settings(args)
    with open_manager(st) as mgr:
        registry = registry_for(mgr)
        text = prometheus_text(registry) if args.format == "prometheus" else table(registry)
    sys.stdout.write(text)
    return 0
