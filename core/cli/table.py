"""``tierlog table``: a topic's Iceberg table in its tier. ``build`` converts every committed
segment the table does not cover yet (``tierlog.remote.table.build``; with ``--spark`` the
conversions run on Spark's executors), resumable and exactly once, with a progress bar over
the links and their bytes and a summary line; ``compact`` merges the files of consecutive
segments into fewer, larger run files (``tierlog.remote.table.compact``), so a query opens
fewer files; ``show`` prints the table's current snapshot: per partition its start, covered
end, files, segments they hold, rows and bytes (``--json``: one JSON object).
The tier and its storage options are found as every command finds them
(``tierlog.cli._tier_options``).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from tierlog.cli._common import (
    CliError,
    Subcommands,
    human_bytes,
    parse_assignments,
    plural,
    progress_bar,
    settings,
)
from tierlog.cli._tier_options import tier_options
from tierlog.errors import UnknownTopicOrPartitionError
from tierlog.remote.tier.object_store import RemoteTier

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "table", parents=[common], help="build or show a topic's Iceberg table in the tier",
        description="A topic's Iceberg table in the remote tier at URL (_tables/ beside its "
                    "segments). 'build' converts each committed segment the table does not "
                    "cover yet, below the tier's last stable offset, and commits them in "
                    "batches: a rerun continues where a stopped one left off, and no row is "
                    "ever added twice. 'compact' merges the files of consecutive segments into "
                    "fewer, larger files (rows unchanged). 'show' prints the table's current "
                    "snapshot.",
        epilog="usage of the actions:\n"
               "  tierlog table build [URL] --topic T [--topic-id ID] [--spark] "
               "[--catalog KEY=VALUE] [--batch-links N] [--option KEY=VALUE] [--quiet]\n"
               "  tierlog table compact [URL] --topic T [--topic-id ID] [--partition P] "
               "[--target-bytes N] [--max-links N] [--catalog KEY=VALUE] [--dry-run] "
               "[--quiet]\n"
               "  tierlog table show [URL] --topic T [--topic-id ID] [--option KEY=VALUE] "
               "[--json]",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    build = actions.add_parser(
        "build", help="convert the segments the table does not cover yet",
        description="Create the topic's table if it has none and convert every committed "
                    "segment above its covered end and below the tier's last stable offset, "
                    "committing every --batch-links segments.")
    _tier_arguments(build)
    build.add_argument("--spark", action="store_true",
                       help="convert on Spark's executors (a local SparkSession; needs "
                            "tierlog[spark])")
    _catalog_argument(build)
    build.add_argument("--batch-links", type=int, default=None, metavar="N",
                       help="commit after every N converted segments (default 64)")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    build.set_defaults(func=run_build)
    compact = actions.add_parser(
        "compact", help="merge the files of consecutive segments into fewer, larger files",
        description="Merge each partition's runs of small files (one per segment) into run "
                    "files of up to --target-bytes, each committed as one snapshot that "
                    "removes the files it replaces; rows and coverage do not change. Safe "
                    "beside running brokers: a run whose files changed meanwhile is skipped "
                    "and planned again by the next compaction.")
    _tier_arguments(compact)
    compact.add_argument("--partition", type=int, action="append", metavar="P",
                         help="compact only this partition (repeatable; default: all)")
    compact.add_argument("--target-bytes", type=int, default=None, metavar="N",
                         help="the largest run file, in bytes (default: the table's "
                              "write.target-file-size-bytes, else 536870912)")
    compact.add_argument("--max-links", type=int, default=None, metavar="N",
                         help="the most segments in one run file (default 16)")
    _catalog_argument(compact)
    compact.add_argument("--dry-run", action="store_true",
                         help="print the runs it would merge; change nothing")
    compact.add_argument("--quiet", action="store_true", help="no progress bar")
    compact.set_defaults(func=run_compact)
    show = actions.add_parser("show", help="print the table's current snapshot",
                              description="The table's current snapshot: per partition its "
                                          "start, covered end, files, rows and bytes.")
    _tier_arguments(show)
    show.add_argument("--json", action="store_true", help="print it as one JSON object")
    show.set_defaults(func=run_show)


def _catalog_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--catalog", action="append", metavar="KEY=VALUE",
                        help="a property of the user's catalog that owns the topic's table "
                             "(its remote.log.table.catalog.* without the prefix, e.g. "
                             "type=sql; repeatable; default: the tier's own catalog)")


def _user_catalog(tier: RemoteTier, args: argparse.Namespace) -> Catalog | None:
    """The user's catalog named by ``--catalog``, or None (the tier's own)."""
    if not args.catalog:
        return None
    from tierlog.remote.table.catalogs import open_catalog

    return open_catalog(tier, parse_assignments(args.catalog, "--catalog"))


def _tier_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", nargs="?", default=None,
                        help="the tier: s3://bucket/prefix, file:///dir or a path (default: "
                             "remote.storage.url of the settings)")
    parser.add_argument("--topic", required=True, metavar="T", help="the topic")
    parser.add_argument("--topic-id", default=None, metavar="ID",
                        help="the topic's incarnation (default: the newest in the tier)")
    parser.add_argument("--option", "--storage-option", "-o", dest="option", action="append",
                        metavar="KEY=VALUE",
                        help="a storage option of the tier (endpoint_url, key, secret, region, "
                             "...; repeatable)")


def _open_tier(args: argparse.Namespace, purpose: str) -> RemoteTier:
    from tierlog.remote.tier.storage_from_url import open_storage

    tier = tier_options(settings(args), args.url, args.option, purpose=purpose)
    storage: Any = open_storage(tier.url, tier.options, manager=tier.manager)
    opened: RemoteTier = storage.tier
    return opened


def run_build(args: argparse.Namespace) -> int:
    from tierlog.remote.table.build import DEFAULT_BATCH_LINKS, BuildProgress, build_table

    tier = _open_tier(args, "build a table in")
    batch = DEFAULT_BATCH_LINKS if args.batch_links is None else args.batch_links
    if batch < 1:
        raise CliError(f"--batch-links must be at least 1, got {batch}")
    with progress_bar(desc="table build", unit="B", unit_scale=True, quiet=args.quiet) as bar:
        def progress(step: BuildProgress) -> None:
            bar.total = step.bytes_total
            bar.set_postfix_str(f"{step.links_done}/{step.links_total} segments, "
                                f"p{step.tip.partition}@{step.link.last_offset}", refresh=False)
            bar.update(step.bytes_done - bar.n)
        catalog = _user_catalog(tier, args)
        try:
            if args.spark:
                from tierlog.spark.convert_job import build_table_on_spark

                report = build_table_on_spark(tier, args.topic, topic_id=args.topic_id,
                                              catalog=catalog, progress=progress,
                                              batch_links=batch)
            else:
                report = build_table(tier, args.topic, topic_id=args.topic_id, catalog=catalog,
                                     progress=progress, batch_links=batch)
        except UnknownTopicOrPartitionError as exc:
            raise CliError(f"no topic to build a table of: {exc}") from exc
    covered = ", ".join(f"p{p}<{o}" for p, o in sorted(report.covered.items())) or "nothing"
    print(f"{report.table}: {plural(report.links, 'segment')} converted "
          f"({plural(report.records, 'row')}, {human_bytes(report.segment_bytes)} of segments), "
          f"{plural(report.committed, 'file')} added in {plural(report.commits, 'commit')}"
          + (f", {report.skipped} already covered" if report.skipped else "")
          + f"; snapshot {report.snapshot_id}, covered {covered}")
    return 0


def run_compact(args: argparse.Namespace) -> int:
    from tierlog.remote.table.compact import DEFAULT_MAX_LINKS, CompactionProgress, compact_table
    from tierlog.remote.table.naming import MAX_RUN_LINKS

    max_links = DEFAULT_MAX_LINKS if args.max_links is None else args.max_links
    if not 2 <= max_links <= MAX_RUN_LINKS:
        raise CliError(f"--max-links must be 2 to {MAX_RUN_LINKS}, got {max_links}")
    if args.target_bytes is not None and args.target_bytes < 1 << 20:
        raise CliError(f"--target-bytes must be at least 1 MiB (1048576), got "
                       f"{args.target_bytes}")
    if any(p < 0 for p in args.partition or ()):
        raise CliError(f"--partition must be a partition number, got {args.partition}")
    tier = _open_tier(args, "compact a table in")
    quiet = args.quiet or args.dry_run
    with progress_bar(desc="table compact", unit="B", unit_scale=True, quiet=quiet) as bar:
        def progress(step: CompactionProgress) -> None:
            bar.total = step.bytes_total
            bar.set_postfix_str(f"{step.runs_done}/{step.runs_total} runs, "
                                f"p{step.tip.partition}", refresh=False)
            bar.update(step.bytes_done - bar.n)
        try:
            report = compact_table(tier, args.topic, topic_id=args.topic_id,
                                   catalog=_user_catalog(tier, args),
                                   partitions=args.partition, target_bytes=args.target_bytes,
                                   max_links=max_links, dry_run=args.dry_run,
                                   progress=progress)
        except UnknownTopicOrPartitionError as exc:
            raise CliError(f"no table to compact: {exc}") from exc
    if args.dry_run:
        for partition, first, last, files in report.planned:
            print(f"p{partition} [{first}, {last}]: would merge {plural(files, 'file')}")
        print(f"{report.table}: {plural(len(report.planned), 'run')} planned; nothing changed")
        return 0
    print(f"{report.table}: {plural(report.runs, 'run file')} written "
          f"({human_bytes(report.bytes_written)}) in place of "
          f"{plural(report.files_removed, 'file')} ({human_bytes(report.bytes_read)})"
          + (f"; {plural(report.stale, 'run')} skipped (its files changed meanwhile)"
             if report.stale else ""))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from tierlog.remote.table.catalogs import load_topic_table
    from tierlog.remote.table.commit import current_files
    from tierlog.remote.table.coverage import Coverage
    from tierlog.remote.tier.topics import topic_partitions

    tier = _open_tier(args, "show a table of")
    tips = topic_partitions(tier, args.topic, args.topic_id)
    topic_id = args.topic_id or (next(iter(tips.values())).topic_id if tips else None)
    if topic_id is None:
        raise CliError(f"{args.topic}: the tier at {tier.root} holds no partition of it")
    table = load_topic_table(tier, args.topic, topic_id)  # a user catalog's by its pointer
    if table is None:
        raise CliError(f"{args.topic} (topic id {topic_id}) has no table in the tier; "
                       f"'tierlog table build' makes one")
    name = ".".join(table.name())
    snapshot = table.current_snapshot()
    coverage = Coverage.of_snapshot(snapshot, name)
    partitions: dict[int, dict[str, Any]] = {
        p: {"start": coverage.start.get(p), "covered": coverage.end(p), "files": 0,
            "segments": 0, "rows": 0, "bytes": 0}
        for p in sorted({*tips, *coverage.covered})}
    for f in current_files(table):
        entry = partitions[f.partition]
        entry["files"] += 1
        entry["segments"] += f.links
        entry["rows"] += f.data_file.record_count
        entry["bytes"] += f.data_file.file_size_in_bytes
    shown = {"table": name, "location": table.location(),
             "snapshot_id": None if snapshot is None else snapshot.snapshot_id,
             "partitions": {str(p): e for p, e in partitions.items()}}
    if args.json:
        print(json.dumps(shown))
        return 0
    print(f"{name}  snapshot {shown['snapshot_id']}  {table.location()}")
    print(f"{'partition':>9} {'start':>12} {'covered':>12} {'files':>7} {'segments':>8} "
          f"{'rows':>12} {'bytes':>10}")
    for p, e in partitions.items():
        print(f"{p:>9} {_or_dash(e['start']):>12} {_or_dash(e['covered']):>12} "
              f"{e['files']:>7,} {e['segments']:>8,} {e['rows']:>12,} "
              f"{human_bytes(e['bytes']):>10}")
    return 0


def _or_dash(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
