"""``tierlog restore [URL] --topic T | --all``: rebuild topics in an empty data dir from the
remote tier alone (``LogManager.plan_restore`` then ``apply_restore``), optionally to a point
in time, with a progress bar of the bytes fetched and one line per restored partition.

A restore that would delete from the tier prints its plan (per partition: the cut, the
segments and records deleted) and changes nothing unless ``--execute`` (Kafka's
``--reset-offsets`` convention: a dry run by default); one that would leave a partition
empty also needs ``--allow-empty``. ``--to-topic NEW`` restores into a new topic and leaves
the source's tier data as it is.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from tierlog.cli._common import (
    CliError,
    Subcommands,
    parse_assignments,
    plural,
    progress_bar,
    settings,
)
from tierlog.cli._tier_options import tier_options
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "restore", parents=[common], help="rebuild topics from the remote tier",
        description="Rebuild a topic (or, with --all, every topic) of the remote tier in a data "
                    "dir that does not hold it: the same topic id, partitions, log start offset, "
                    "leader epochs and producer state, so appends continue at the tier's end "
                    "and idempotent producers keep deduplicating. --to-offset / --to-timestamp "
                    "restore to the last stable cut (outside every transaction) at or before "
                    "it; the tier's segments above the cut are deleted from the tier: such a "
                    "restore only prints its plan (the cut, segments and records deleted per "
                    "partition) unless --execute is given, or with --to-topic restores into a "
                    "new topic and leaves the tier's data of the source as it is. The tier "
                    "does not record topic configs: give them with --topic-config.")
    parser.add_argument("url", nargs="?", default=None,
                        help="the tier: s3://bucket/prefix, file:///dir or a path (default: "
                             "remote.storage.url of the settings)")
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", metavar="T", help="the topic to restore")
    which.add_argument("--all", action="store_true", help="every topic the tier holds")
    cut = parser.add_mutually_exclusive_group()
    cut.add_argument("--to-offset", type=int, metavar="N",
                     help="restore offsets below N only (moved down to a stable cut)")
    cut.add_argument("--to-timestamp", metavar="MS|ISO",
                     help="restore batches up to this time only: epoch milliseconds or an ISO "
                          "8601 time (UTC unless it names a zone)")
    parser.add_argument("--execute", action="store_true",
                        help="carry out a restore that deletes from the tier (without it, "
                             "such a restore prints its plan and changes nothing)")
    parser.add_argument("--allow-empty", action="store_true",
                        help="with --execute: allow a cut that leaves a partition empty "
                             "(deleting every record the tier holds of it)")
    parser.add_argument("--to-topic", metavar="NEW",
                        help="restore into a new topic NEW (a new topic id, the records below "
                             "the cut copied under it in the tier); the source topic's tier "
                             "data is not changed")
    parser.add_argument("--force-takeover", action="store_true",
                        help="restore partitions another log owns (_owner.json) and record this "
                             "data dir as their owner")
    parser.add_argument("--topic-config", metavar="KEY=VALUE", action="append",
                        help="a topic config override of the restored topics (repeatable)")
    parser.add_argument("--option", "-o", action="append", metavar="KEY=VALUE",
                        help="a storage option of the tier (endpoint_url, key, secret, ...; "
                             "repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(func=run)


def parse_timestamp(text: str, option: str = "--to-timestamp") -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC unless it names a zone), as ms; a
    mistake is a CliError naming ``option``."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"{option} expects epoch milliseconds or an ISO 8601 time, "
                       f"got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    st = settings(args)
    config = tier_options(st, args.url, args.option, purpose="restore from").apply(st.config)
    topic_config = parse_assignments(args.topic_config, "--topic-config")
    to_timestamp = None if args.to_timestamp is None else parse_timestamp(args.to_timestamp)
    if args.all and args.to_offset is not None:
        raise CliError("--to-offset needs --topic: offsets differ between topics")
    if args.all and args.to_topic is not None:
        raise CliError("--to-topic needs --topic: it names one new topic")
    # The data dir's lock first: a refused restore draws no bar.
    with LogManager.open(st.data_dirs, config, start_scheduler=False) as mgr, \
            progress_bar(unit="B", unit_scale=True, desc="restore", quiet=args.quiet) as bar:
        def fetched(size: int) -> None:
            bar.update(size)

        if args.all:
            plans = mgr.plan_restore_all(to_timestamp=to_timestamp,
                                         force_takeover=args.force_takeover, download=fetched)
        else:
            plans = [mgr.plan_restore(args.topic, to_offset=args.to_offset,
                                      to_timestamp=to_timestamp,
                                      force_takeover=args.force_takeover, download=fetched,
                                      to_topic=args.to_topic)]
        bar.close()
        if args.to_topic is None and any(plan.deletes for plan in plans):
            print("plan (deletes from the tier):")
            for plan in plans:
                for line in plan.describe():
                    print(f"  {line}")
            if not args.execute:
                emptied = [f"{p.tip.topic}-{p.tip.partition}" for plan in plans
                           for p in plan.emptied]
                print("dry run: nothing was restored or deleted; run again with --execute to "
                      "restore and delete the above" + (
                          f" (and --allow-empty: it empties {', '.join(emptied)})"
                          if emptied else ""))
                return 0
        for plan in plans if args.to_topic is None else ():  # all confirmed before any runs
            plan.confirm(execute=args.execute, allow_empty=args.allow_empty)
        restored = {(args.to_topic or plan.topic): mgr.apply_restore(
            plan, config=topic_config, execute=args.execute, allow_empty=args.allow_empty,
            to_topic=args.to_topic) for plan in plans}
        for plan in plans:
            for p in plan.partitions if args.to_topic is None else ():
                if p.dropped:
                    print(f"{p.tip.topic}-{p.tip.partition}: deleted "
                          f"{plural(len(p.dropped), 'segment')} "
                          f"({plural(p.deleted_records, 'record')}) from the tier")
        for logs in restored.values():
            for partition_log in logs:
                print(describe(partition_log))
        count = sum(len(logs) for logs in restored.values())
        into = "" if args.to_topic is None else f" as new topic {args.to_topic!r}"
        print(f"restored {plural(len(restored), 'topic')} ({plural(count, 'partition')})"
              f"{into} into {', '.join(map(str, st.data_dirs))}")
    return 0


def describe(partition_log: Log) -> str:
    """One line: the partition, its restored offsets and where they live."""
    start, end = partition_log.log_start_offset, partition_log.log_end_offset
    local = partition_log.local_log_start_offset
    held = f"offsets {start}-{end - 1}" if end > start else "no offsets"
    return (f"{partition_log.topic}-{partition_log.partition}: {held} (log start {start}, "
            f"end {end}; below {local} in the tier), topic id {partition_log.topic_id}")
