"""``tierlog topics``: create, list, describe, alter and delete topics (Kafka's kafka-topics.sh
and kafka-configs.sh verbs), in a data dir or, with ``--bootstrap-server``, on a broker
(:mod:`tierlog.cli.wire_topics`). Describe shows each local partition's offsets and its local
and remote segments, and still works when the remote tier is unreachable.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterable
from typing import Any

from tierlog.cli._common import (
    CliError,
    Subcommands,
    common_parser,
    human_bytes,
    open_manager,
    parse_assignment,
    parse_assignments,
    plural,
    settings,
    topic_partitions,
)
from tierlog.cli.wire import add_bootstrap_options, uses_broker
from tierlog.config import is_sensitive_config
from tierlog.errors import RemoteStorageError
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.remote.api import RemoteLogSegmentState
from tierlog.remote.rlm.remote_reader import topic_id_partition


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    """``common`` is not used: this command's ``--config`` is Kafka's topic override."""
    parser = sub.add_parser(
        "topics", parents=[common_parser(config_file=False)],
        help="create, list, describe, alter or delete topics",
        description="Create, list, describe, alter or delete topics, in the data dir or, with "
                    "--bootstrap-server, on a running broker. Describe of a data dir shows, "
                    "per partition, the log start, local log start and end offsets, the high "
                    "watermark, the last stable offset, and the local and remote segments; of "
                    "a broker, kafka-topics' leader, replicas and ISR. A broker config file "
                    "goes before the command here: tierlog --config FILE topics ...")
    verb = parser.add_mutually_exclusive_group(required=True)
    verb.add_argument("--create", action="store_true",
                      help="create --topic (all or nothing: a failure leaves no partition)")
    verb.add_argument("--list", action="store_true", help="list topic names")
    verb.add_argument("--describe", action="store_true",
                      help="describe --topic, or every topic")
    verb.add_argument("--alter", action="store_true",
                      help="grow --topic to --partitions, or change its config overrides "
                           "(--add-config, --delete-config)")
    verb.add_argument("--delete", action="store_true",
                      help="delete --topic, its remote segments first")
    parser.add_argument("--topic", help="the topic to create, describe, alter or delete")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="partitions of the new topic (default: num.partitions), or the "
                             "new partition count with --alter")
    parser.add_argument("--replication-factor", type=int, metavar="N",
                        help="replicas of the new topic's partitions: a data dir is one node "
                             "(1); a broker refuses more than it can place (default: the "
                             "broker's)")
    parser.add_argument("--config", dest="topic_config", action="append", metavar="KEY=VALUE",
                        help="a topic config override for --create, e.g. segment.bytes=1048576 "
                             "or remote.storage.enable=true, remote.log.table.enable=true, "
                             "remote.log.table.catalog.uri=... (repeatable)")
    parser.add_argument("--add-config", action="append", metavar="K=V[,K=V...]",
                        help="with --alter: overrides to set, e.g. retention.ms=3600000,"
                             "cleanup.policy=[compact,delete] (repeatable)")
    parser.add_argument("--delete-config", action="append", metavar="K[,K...]",
                        help="with --alter: overrides to remove (back to the broker default)")
    parser.add_argument("--exclude-internal", action="store_true",
                        help="--list and --describe leave out internal topics "
                             "(__consumer_offsets, __transaction_state); otherwise they come "
                             "after the other topics")
    parser.add_argument("--if-not-exists", action="store_true",
                        help="with --create: do nothing if the topic exists")
    parser.add_argument("--if-exists", action="store_true",
                        help="with --alter or --delete: do nothing if the topic does not exist")
    add_bootstrap_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_options(args)
    if uses_broker(args):
        from tierlog.cli import wire_topics

        return wire_topics.run(args)
    st = settings(args)
    if args.replication_factor not in (None, 1):
        raise CliError(f"--replication-factor {args.replication_factor}: a data dir is one node "
                       "and cannot replicate; use 1 (or --bootstrap-server for a cluster)")
    if args.create:
        overrides = parse_assignments(args.topic_config, "--config")
        with open_manager(st, must_exist=False) as mgr:
            if args.if_not_exists and mgr.partitions(args.topic):
                return 0
            logs = mgr.create_topic(args.topic, args.partitions, overrides)
            print(f"Created topic {args.topic} with {plural(len(logs), 'partition')} in "
                  f"{', '.join(str(d) for d in st.data_dirs)}.")
        return 0
    if args.alter or args.delete:
        with open_manager(st) as mgr:
            if args.if_exists and not mgr.partitions(args.topic):
                return 0
            topic_partitions(mgr, args.topic)
            if args.delete:
                mgr.delete_topic(args.topic)
                print(f"Deleted topic {args.topic}.")
                return 0
            if args.partitions is not None:
                mgr.create_partitions(args.topic, args.partitions)
                print(f"Altered topic {args.topic}: PartitionCount: {args.partitions}")
            if args.add_config or args.delete_config:
                added, removed = config_changes(args)
                mgr.alter_topic_config(args.topic, added, removed)
                shown = _shown_overrides(mgr.topic_overrides(args.topic))
                print(f"Altered topic {args.topic}: Configs: {shown}")
        return 0
    with open_manager(st, read_only=True) as mgr:
        if args.topic:
            topic_partitions(mgr, args.topic)
        from tierlog.server.coordinator.internal_topics import is_internal  # the one list of them

        topics = ([args.topic] if args.topic else
                  listing_order(mgr.topics(), is_internal, args.exclude_internal))
        for topic in topics:
            if args.list:
                print(topic)
            else:
                _describe(mgr, topic)
    return 0


def check_options(args: argparse.Namespace) -> None:
    """The option combinations kafka-topics accepts, the same for a data dir and a broker."""
    verb = next(v for v in ("create", "list", "describe", "alter", "delete") if getattr(args, v))
    if verb in ("create", "alter", "delete") and not args.topic:
        raise CliError(f"--{verb} needs --topic")
    if (args.topic_config or args.replication_factor is not None) and not args.create:
        raise CliError("--config and --replication-factor go with --create")
    if args.partitions is not None and not (args.create or args.alter):
        raise CliError("--partitions goes with --create or --alter")
    if (args.add_config or args.delete_config) and not args.alter:
        raise CliError("--add-config and --delete-config go with --alter")
    if args.if_not_exists and not args.create:
        raise CliError("--if-not-exists goes with --create")
    if args.if_exists and not (args.alter or args.delete):
        raise CliError("--if-exists goes with --alter or --delete")
    if args.alter and args.partitions is None and not (args.add_config or args.delete_config):
        raise CliError("--alter needs --partitions, --add-config or --delete-config")
    for option in ("partitions", "replication_factor"):
        value = getattr(args, option)
        if value is not None and value < 1:
            raise CliError(f"--{option.replace('_', '-')} must be at least 1, got {value}")


def config_changes(args: argparse.Namespace) -> tuple[dict[str, str], list[str]]:
    """``--add-config`` pairs and ``--delete-config`` keys of an --alter."""
    removed = [k.strip() for item in args.delete_config or () for k in item.split(",")
               if k.strip()]
    return parse_config_list(args.add_config), removed


def listing_order(topics: Iterable[str], internal: Callable[[str], bool],
                  exclude_internal: bool) -> list[str]:
    """Topics as --list and --describe show them: the user's by name, then the internal ones
    (a served data dir holds 50 __consumer_offsets partitions) unless they are excluded."""
    names = sorted(topics)
    user = [t for t in names if not internal(t)]
    return user if exclude_internal else user + [t for t in names if internal(t)]


def _describe(mgr: LogManager, topic: str) -> None:
    partitions = mgr.partitions(topic)
    first = mgr.log(topic, partitions[0])
    overrides = _shown_overrides(mgr.topic_overrides(topic))
    print(f"Topic: {topic}\tTopicId: {first.topic_id}\tPartitionCount: {len(partitions)}\t"
          f"Configs: {overrides}")
    for partition in partitions:
        log = mgr.log(topic, partition)
        remote = _remote_segments(mgr, log)
        segments = log.segments.values()
        print(f"\tTopic: {topic}\tPartition: {partition}\t"
              f"LogStartOffset: {log.log_start_offset}\t"
              f"LocalLogStartOffset: {log.local_log_start_offset}\t"
              f"LogEndOffset: {log.log_end_offset}\tHighWatermark: {log.high_watermark}\t"
              f"LastStableOffset: {log.last_stable_offset}\t"
              f"LocalSegments: {len(segments)}\tLocalBytes: {log.size_in_bytes} "
              f"({human_bytes(log.size_in_bytes)})\t"
              + (f"RemoteSegments: {remote[0]}\tRemoteBytes: {remote[1]} "
                 f"({human_bytes(remote[1])})" if remote is not None else
                 "RemoteSegments: unavailable\tRemoteBytes: unavailable"))


def _shown_overrides(overrides: dict[str, Any]) -> str:
    """``k=v,k2=v2`` as kafka-topics shows a topic's configs (lists joined by commas; a
    sensitive value, such as a catalog's secret, is ``null`` as a broker describes it)."""
    def text(name: str, value: object) -> str:
        if is_sensitive_config(name):
            return "null"
        if isinstance(value, tuple):
            return ",".join(value)
        return str(value).lower() if isinstance(value, bool) else str(value)
    return ",".join(f"{k}={text(k, v)}" for k, v in sorted(overrides.items()))


def parse_config_list(items: list[str] | None) -> dict[str, str]:
    """kafka-configs' ``--add-config k=v,k2=[a,b]``: pairs split at commas outside square
    brackets, a bracketed value is a list (brackets removed)."""
    out: dict[str, str] = {}
    for item in items or ():
        depth, start, parts = 0, 0, []
        for i, ch in enumerate(item):
            depth += (ch == "[") - (ch == "]")
            if ch == "," and depth == 0:
                parts.append(item[start:i])
                start = i + 1
        parts.append(item[start:])
        for part in (p for p in parts if p.strip()):
            key, value = parse_assignment(part, "--add-config")
            if value.startswith("[") and value.endswith("]"):
                value = value[1:-1]
            out[key] = value
    return out


def _remote_segments(mgr: LogManager, log: Log) -> tuple[int, int] | None:
    """Count and ``.log`` bytes of the partition's readable (COPY_SEGMENT_FINISHED) segments;
    None when the remote tier is unavailable (the reason is logged, the rest still shows)."""
    if mgr.remote_unavailable(log.topic, log.partition) is not None:
        return None
    rlm = mgr.remote_log_manager
    if rlm is None or log.remote is None:
        return 0, 0
    try:
        copied = [m for m in rlm.rlmm.list_remote_log_segments(topic_id_partition(log))
                  if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    except RemoteStorageError as exc:
        logging.getLogger(__name__).error("%s: remote tier unavailable: %s",
                                          log.directory.name, exc)
        return None
    return len(copied), sum(m.segment_size_in_bytes for m in copied)

