"""``tierlog consume``: print a topic's records as text or JSON lines, read through ``Log.read``
(so offsets below the local log start come transparently from the remote tier), or with
``--bootstrap-server`` from a broker, following the topic (:mod:`tierlog.cli.wire_consume`).
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
from collections.abc import Callable, Iterator
from typing import Any

from tierlog.cli._common import (
    CliError,
    Subcommands,
    offset_option,
    open_manager,
    settings,
    topic_partitions,
    warnings_dropped_on_error,
)
from tierlog.cli.wire import add_bootstrap_options, uses_broker
from tierlog.errors import RemoteFetchTimeoutError
from tierlog.log.fetch_info import FetchDataInfo
from tierlog.log.log import Log
from tierlog.records.record import Record

logger = logging.getLogger(__name__)

#: Reads of one offset a slow tier may time out (``remote.fetch.max.wait.ms`` each) before the
#: command gives up: a Kafka consumer retries a timed-out remote fetch, so does this reader.
FETCH_ATTEMPTS = 5

#: Bytes asked of the log per read.
FETCH_BYTES = 1 << 20
#: Kafka's --isolation-level values.
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
#: Kafka's console consumer prints these for absent parts.
NULL = b"null"
NO_HEADERS = b"NO_HEADERS"


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "consume", parents=[common], help="print a topic's records",
        description="Print the records of a topic. From a data dir: partition by partition, "
                    "then exit; offsets below the local log start offset are read from the "
                    "remote tier when the topic is tiered. With --bootstrap-server: as Kafka's "
                    "console consumer, from the group's committed offsets (or the latest, or "
                    "with --from-beginning the earliest), following new records until "
                    "--max-messages, --timeout-ms or Ctrl-C.")
    parser.add_argument("--topic", required=True, help="topic to read")
    parser.add_argument("--partition", type=int, metavar="P",
                        help="read only partition P (default: every partition)")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the log start offset (the default of a data dir; from a "
                            "broker, where a group has no committed offset)")
    start.add_argument("--offset", metavar="OFFSET",
                       help="start at OFFSET (a number, 'earliest' or 'latest'); a number "
                            "needs --partition when the topic has several partitions")
    start.add_argument("--from-timestamp", type=int, metavar="MS",
                       help="start at the first record with a timestamp >= MS (epoch ms)")
    parser.add_argument("--max-messages", type=int, metavar="N",
                        help="stop after N records")
    parser.add_argument("--group", metavar="GROUP",
                        help="with --bootstrap-server: consume as this consumer group and "
                             "commit its offsets (default: a new group that commits nothing)")
    parser.add_argument("--timeout-ms", type=int, metavar="MS",
                        help="with --bootstrap-server: stop when no record came for MS "
                             "milliseconds (default: follow until Ctrl-C or --max-messages)")
    parser.add_argument("--isolation-level", choices=ISOLATION_LEVELS,
                        default="read_uncommitted",
                        help="read_committed stops at the last stable offset and skips aborted "
                             "transactions (default: %(default)s)")
    parser.add_argument("--format", choices=("text", "json"), default="text",
                        help="text: the value (and the parts asked for), tab-separated; json: "
                             "one object per record (default: %(default)s)")
    for part in ("key", "headers", "offset", "partition", "timestamp"):
        parser.add_argument(f"--print-{part}", action="store_true",
                            help=f"text format: print the record's {part}")
    add_bootstrap_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_messages is not None and args.max_messages < 0:
        raise CliError(f"--max-messages must not be negative, got {args.max_messages}")
    if uses_broker(args):
        from tierlog.cli import wire_consume

        return wire_consume.run(args)
    if args.group is not None or args.timeout_ms is not None:
        raise CliError("--group and --timeout-ms go with --bootstrap-server (a data dir is "
                       "read once, without a group)")
    st = settings(args)
    out = sys.stdout.buffer
    total = 0
    with warnings_dropped_on_error(), open_manager(st, read_only=True) as mgr:
        partitions = topic_partitions(mgr, args.topic, args.partition)
        if args.offset not in (None, "earliest", "latest") and len(partitions) > 1:
            raise CliError("--offset with a number needs --partition (the topic has "
                           f"{len(partitions)} partitions)")
        for partition in partitions:
            log = mgr.log(args.topic, partition)
            start = _start_offset(log, args)
            if start is None or total == args.max_messages:
                continue
            formatter = record_formatter(args, log.topic, partition, _timestamp_type(log))
            for record in records_from(log, start, args.isolation_level):
                out.write(formatter(record) + b"\n")
                total += 1
                if total == args.max_messages:
                    break
    out.flush()
    print(f"Processed a total of {total} messages", file=sys.stderr)
    return 0


def _start_offset(log: Log, args: argparse.Namespace) -> int | None:
    if args.from_timestamp is not None:
        return log.offset_for_timestamp(args.from_timestamp)
    if args.offset is None or args.offset == "earliest":
        return log.log_start_offset
    if args.offset == "latest":
        return log.log_end_offset
    return offset_option(args.offset)


def iter_fetches(log: Log, start: int, isolation: str) -> Iterator[FetchDataInfo]:
    """Every read from ``start`` up to the isolation level's bound, in order (local or remote:
    see ``FetchDataInfo.from_remote``). Batches that yield no record (markers, aborted data)
    are stepped over by the next read."""
    offset = start
    while True:
        res = _read_retrying(log, offset, isolation)
        yield res
        next_offset = offset
        for batch in res.batches():
            next_offset = max(next_offset, batch.next_offset)
        if next_offset <= offset or next_offset >= res.upper_bound:
            return
        offset = next_offset


def _read_retrying(log: Log, offset: int, isolation: str) -> FetchDataInfo:
    """``log.read`` at ``offset``, read again when the tier did not answer within
    ``remote.fetch.max.wait.ms`` (retriable), at most FETCH_ATTEMPTS times in all."""
    for attempt in range(1, FETCH_ATTEMPTS + 1):
        try:
            return log.read(offset, FETCH_BYTES, isolation=isolation)
        except RemoteFetchTimeoutError as e:
            if attempt == FETCH_ATTEMPTS:
                raise
            logger.warning("%s; reading again (%d of %d)", e, attempt + 1, FETCH_ATTEMPTS)
    raise AssertionError("unreachable")


def records_from(log: Log, start: int, isolation: str) -> Iterator[Record]:
    """Every record from ``start`` up to the isolation level's bound, as a consumer sees it."""
    for res in iter_fetches(log, start, isolation):
        yield from res.records()


def _timestamp_type(log: Log) -> str:
    return ("LogAppendTime" if log.config["message.timestamp.type"].lower() == "logappendtime"
            else "CreateTime")


def record_formatter(args: argparse.Namespace, topic: str, partition: int,
                     timestamp_type: str) -> Callable[[Record], bytes]:
    """How --format and the --print-* options show a record of ``topic``/``partition``
    (``timestamp_type``: CreateTime or LogAppendTime), as one line without its newline."""
    if args.format == "json":
        def as_json(record: Record) -> bytes:
            obj: dict[str, Any] = {
                "topic": topic, "partition": partition, "offset": record.offset,
                "timestamp": record.timestamp, "timestampType": timestamp_type,
            }
            _put_bytes(obj, "key", record.key)
            _put_bytes(obj, "value", record.value)
            headers = []
            for key, value in record.headers:
                header: dict[str, Any] = {"key": key}
                _put_bytes(header, "value", value)
                headers.append(header)
            obj["headers"] = headers
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
        return as_json

    def as_text(record: Record) -> bytes:
        parts = []
        if args.print_timestamp:
            parts.append(f"{timestamp_type}:{record.timestamp}".encode())
        if args.print_partition:
            parts.append(f"Partition:{partition}".encode())
        if args.print_offset:
            parts.append(f"Offset:{record.offset}".encode())
        if args.print_headers:
            parts.append(b",".join(k.encode() + b":" + (v if v is not None else NULL)
                                   for k, v in record.headers) or NO_HEADERS)
        if args.print_key:
            parts.append(NULL if record.key is None else record.key)
        parts.append(NULL if record.value is None else record.value)
        return b"\t".join(parts)
    return as_text


def _put_bytes(obj: dict[str, Any], name: str, data: bytes | None) -> None:
    """``name``: the UTF-8 text (or null); ``name_base64`` when the bytes are not UTF-8."""
    if data is None:
        obj[name] = None
        return
    try:
        obj[name] = data.decode()
    except UnicodeDecodeError:
        obj[f"{name}_base64"] = base64.b64encode(data).decode()
