"""``tierlog restore [URL] --topic T | --all``: rebuild topics in an empty data dir from the
remote tier alone (``LogManager.restore_topic``), optionally to a point in time, with a
progress bar of the bytes fetched and one line per restored partition.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from typing import Any

from tqdm import tqdm

from tierlog.cli._common import CliError, parse_assignments, plural, settings
from tierlog.log import Log
from tierlog.manager import LogManager
from tierlog.remote.options import OPTIONS_PREFIX, backend_for_url


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "restore", parents=[common], help="rebuild topics from the remote tier",
        description="Rebuild a topic (or, with --all, every topic) of the remote tier in a data "
                    "dir that does not hold it: the same topic id, partitions, log start offset, "
                    "leader epochs and producer state, so appends continue at the tier's end "
                    "and idempotent producers keep deduplicating. --to-offset / --to-timestamp "
                    "restore to the last stable cut (outside every transaction) at or before "
                    "it; the tier's segments above the cut are deleted from the tier. The tier "
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


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds, or an ISO 8601 time (UTC unless it names a zone), as ms."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"--to-timestamp expects epoch milliseconds or an ISO 8601 time, "
                       f"got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def run(args: argparse.Namespace) -> int:
    extra: dict[str, str] = {}
    if args.url is not None:
        extra = {"remote.storage.manager": backend_for_url(args.url),
                 "remote.storage.url": args.url}
    for key, value in parse_assignments(args.option, "--option").items():
        extra[OPTIONS_PREFIX + key] = value
    st = settings(args)
    config = {**st.config, **extra}
    if not config.get("remote.storage.url"):
        raise CliError("no tier to restore from: pass its URL or set remote.storage.url")
    topic_config = parse_assignments(args.topic_config, "--topic-config")
    to_timestamp = None if args.to_timestamp is None else parse_timestamp(args.to_timestamp)
    if args.all and args.to_offset is not None:
        raise CliError("--to-offset needs --topic: offsets differ between topics")
    with tqdm(unit="B", unit_scale=True, desc="restore", disable=args.quiet,
              file=sys.stderr) as bar, \
            LogManager.open(st.data_dirs, config, start_scheduler=False) as mgr:
        def fetched(size: int) -> None:
            bar.update(size)

        if args.all:
            restored = mgr.restore_all(to_timestamp=to_timestamp,
                                       force_takeover=args.force_takeover,
                                       config=topic_config, download=fetched)
        else:
            restored = {args.topic: mgr.restore_topic(
                args.topic, to_offset=args.to_offset, to_timestamp=to_timestamp,
                force_takeover=args.force_takeover, config=topic_config,
                download=fetched)}
        bar.close()
        for logs in restored.values():
            for partition_log in logs:
                print(describe(partition_log))
        count = sum(len(logs) for logs in restored.values())
        print(f"restored {plural(len(restored), 'topic')} ({plural(count, 'partition')}) "
              f"into {', '.join(map(str, st.data_dirs))}")
    return 0


def describe(partition_log: Log) -> str:
    """One line: the partition, its restored offsets and where they live."""
    start, end = partition_log.log_start_offset, partition_log.log_end_offset
    local = partition_log.local_log_start_offset
    held = f"offsets {start}-{end - 1}" if end > start else "no offsets"
    return (f"{partition_log.topic}-{partition_log.partition}: {held} (log start {start}, "
            f"end {end}; below {local} in the tier), topic id {partition_log.topic_id}")
