"""``tierlog plugins``: every discovered plugin, its distribution and the hooks it implements,
the registries they fill, and plugins that failed to load (exit 1 when any did).
"""

from __future__ import annotations

import argparse
import sys

from tierlog.cli._common import Subcommands


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "plugins", parents=[common], help="list plugins and the hooks they implement",
        description="List every discovered plugin (built-in and entry points), its "
                    "distribution and hook implementations.")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from tierlog.plugin_manager import get_plugins

    host = get_plugins()
    rows = host.plugins()
    width = max((len(p.name) for p in rows), default=4)
    dist_width = max((len(p.distribution) for p in rows), default=12)
    print(f"{'plugin':<{width}}  {'distribution':<{dist_width}}  hooks")
    for plugin in rows:
        print(f"{plugin.name:<{width}}  {plugin.distribution:<{dist_width}}  "
              f"{', '.join(plugin.hooks)}")
    registries = host.registries
    print(f"\nindex types:       {', '.join(sorted(registries.index_types)) or '-'}")
    print(f"cleanup policies:  {', '.join(sorted(registries.cleanup_policies)) or '-'}")
    print(f"remote storage:    {', '.join(sorted(registries.remote_storage)) or '-'}")
    print(f"metadata stores:   {', '.join(sorted(registries.remote_metadata_managers)) or '-'}")
    for failure in host.failures:
        print(f"FAILED {failure.name} ({failure.distribution}): {failure.error}", file=sys.stderr)
    return 1 if host.failures else 0
