"""``tierlog topics``: create, list and describe topics (Kafka's kafka-topics.sh verbs);
describe shows each partition's offsets and its local and remote segments.
"""

from __future__ import annotations

import argparse
from typing import Any

from tierlog.cli._common import (
    CliError,
    common_parser,
    human_bytes,
    open_manager,
    parse_assignments,
    plural,
    read_properties,
    settings,
    topic_partitions,
)
from tierlog.log import Log
from tierlog.manager import TOPIC_CONFIG_FILE, LogManager
from tierlog.remote.rlm import topic_id_partition
from tierlog.remote.storage import RemoteLogSegmentState


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``common`` is not used: this command's ``--config`` is Kafka's topic override."""
    parser = sub.add_parser(
        "topics", parents=[common_parser(config_file=False)],
        help="create, list or describe topics",
        description="Create, list or describe topics. Describe shows, per partition, the log "
                    "start, local log start and end offsets, the high watermark, the last "
                    "stable offset, and the local and remote segments. A broker config file "
                    "goes before the command here: tierlog --config FILE topics ...")
    verb = parser.add_mutually_exclusive_group(required=True)
    verb.add_argument("--create", action="store_true", help="create --topic")
    verb.add_argument("--list", action="store_true", help="list topic names")
    verb.add_argument("--describe", action="store_true",
                      help="describe --topic, or every topic")
    parser.add_argument("--topic", help="the topic to create or describe")
    parser.add_argument("--partitions", type=int, metavar="N",
                        help="partitions of the new topic (default: num.partitions)")
    parser.add_argument("--config", dest="topic_config", action="append", metavar="KEY=VALUE",
                        help="a topic config override for --create, e.g. segment.bytes=1048576 "
                             "or remote.storage.enable=true (repeatable)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    st = settings(args)
    if args.create:
        if not args.topic:
            raise CliError("--create needs --topic")
        overrides = parse_assignments(args.topic_config, "--config")
        with open_manager(st, must_exist=False) as mgr:
            logs = mgr.create_topic(args.topic, args.partitions, overrides)
            print(f"Created topic {args.topic} with {plural(len(logs), 'partition')} in "
                  f"{', '.join(str(d) for d in st.data_dirs)}.")
        return 0
    if args.topic_config or args.partitions is not None:
        raise CliError("--config and --partitions go with --create")
    with open_manager(st) as mgr:
        if args.list:
            for topic in mgr.topics():
                print(topic)
            return 0
        topics = [args.topic] if args.topic else mgr.topics()
        for topic in topics:
            topic_partitions(mgr, topic)
            _describe(mgr, topic)
    return 0


def _describe(mgr: LogManager, topic: str) -> None:
    partitions = mgr.partitions(topic)
    first = mgr.log(topic, partitions[0])
    overrides = ",".join(f"{k}={v}" for k, v in sorted(_topic_overrides(first).items()))
    print(f"Topic: {topic}\tTopicId: {first.topic_id}\tPartitionCount: {len(partitions)}\t"
          f"Configs: {overrides}")
    for partition in partitions:
        log = mgr.log(topic, partition)
        remote_count, remote_bytes = _remote_segments(mgr, log)
        segments = log.segments.values()
        print(f"\tTopic: {topic}\tPartition: {partition}\t"
              f"LogStartOffset: {log.log_start_offset}\t"
              f"LocalLogStartOffset: {log.local_log_start_offset}\t"
              f"LogEndOffset: {log.log_end_offset}\tHighWatermark: {log.high_watermark}\t"
              f"LastStableOffset: {log.last_stable_offset}\t"
              f"LocalSegments: {len(segments)}\tLocalBytes: {log.size_in_bytes} "
              f"({human_bytes(log.size_in_bytes)})\t"
              f"RemoteSegments: {remote_count}\tRemoteBytes: {remote_bytes} "
              f"({human_bytes(remote_bytes)})")


def _topic_overrides(log: Log) -> dict[str, str]:
    """The topic's own config overrides, as persisted beside its partition (not the broker's
    topic defaults, which LogConfig merges in)."""
    path = log.directory / TOPIC_CONFIG_FILE
    return read_properties(path) if path.is_file() else {}


def _remote_segments(mgr: LogManager, log: Log) -> tuple[int, int]:
    """Count and ``.log`` bytes of the partition's readable (COPY_SEGMENT_FINISHED) segments."""
    rlm = mgr.remote_log_manager
    if rlm is None or log.remote is None:
        return 0, 0
    copied = [m for m in rlm.rlmm.list_remote_log_segments(topic_id_partition(log))
              if m.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
    return len(copied), sum(m.segment_size_in_bytes for m in copied)

