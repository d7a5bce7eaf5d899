"""``tierlog consume --bootstrap-server``: Kafka's console consumer with confluent-kafka's
Consumer. It follows the topic, printing each record as it comes (the same formats as from a
data dir), until --max-messages, --timeout-ms without a record, Ctrl-C or SIGTERM.

As kafka-console-consumer: without --partition it subscribes as --group (committing the
offsets it printed) or as a new group that commits nothing; it starts at the group's committed
offsets, else the latest (the earliest with --from-beginning). --partition reads one
partition without a group's assignment, from --offset (default: latest).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

from tierlog.cli._common import CliError, offset_option, sigterm_stops
from tierlog.cli.consume import record_formatter
from tierlog.cli.wire import consumer, describe_error, kafka, topic_partitions
from tierlog.records.record import Record

if TYPE_CHECKING:
    from confluent_kafka import Consumer, Message, TopicPartition

#: How long one poll waits, so Ctrl-C and --timeout-ms are noticed promptly.
POLL_S = 0.2
#: The name of a group made up for one run (Kafka's console-consumer-<n>).
GROUP_PREFIX = "tierlog-console-consumer-"
#: librdkafka's timestamp types, as the console consumer prints them.
TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}

log = logging.getLogger(__name__)


def run(args: argparse.Namespace) -> int:
    """Consume until a bound, Ctrl-C or SIGTERM (both close the consumer, which leaves its
    group and commits what was printed, and print the count; exit 130 or 143)."""
    with sigterm_stops():
        return _consume(args)


def _consume(args: argparse.Namespace) -> int:
    ck = kafka()
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CliError(f"--timeout-ms must not be negative, got {args.timeout_ms}")
    if args.offset is not None and args.partition is None:
        raise CliError("--offset needs --partition with --bootstrap-server (as "
                       "kafka-console-consumer); a group starts at its committed offsets")
    client = consumer(args, **{
        "group.id": args.group or f"{GROUP_PREFIX}{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": args.group is not None,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": args.isolation_level,
    })
    printed = Printed()
    try:
        partitions = topic_partitions(client, args.topic)
        if args.partition is not None:
            if args.partition not in partitions:
                raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                               f"(partitions 0-{partitions[-1]})")
            start = _start(client, args, args.partition)
            client.assign([ck.TopicPartition(args.topic, args.partition, start)])
        elif args.from_timestamp is not None:
            client.subscribe([args.topic], on_assign=_seek_to_timestamp(args.from_timestamp))
        else:
            client.subscribe([args.topic])
        _print_records(client, args, printed)
    finally:
        client.close()  # commits what was printed when the group commits
        print(f"Processed a total of {printed.count} messages", file=sys.stderr)
    return 0


class Printed:
    """How many records were printed so far (the count Ctrl-C reports too)."""

    def __init__(self) -> None:
        self.count = 0


def _print_records(client: Consumer, args: argparse.Namespace, printed: Printed) -> None:
    """Poll and print until a bound is reached, counting into ``printed``."""
    out = sys.stdout.buffer
    formatters: dict[tuple[int, int], Callable[[Record], bytes]] = {}
    idle_since = time.monotonic()
    while printed.count != args.max_messages:
        message = client.poll(POLL_S)
        if message is None:
            out.flush()  # following: show what came before waiting for more
            if (args.timeout_ms is not None
                    and (time.monotonic() - idle_since) * 1000 >= args.timeout_ms):
                break
            continue
        error = message.error()
        if error is not None:
            if error.fatal() or error.code() == kafka().KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise CliError(f"consuming {args.topic!r}: {describe_error(error)}")
            log.warning("consuming %s: %s", args.topic, describe_error(error))
            continue
        idle_since = time.monotonic()
        timestamp_type, timestamp = message.timestamp()
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None  # a record, not an error
        key = (partition, timestamp_type)
        if key not in formatters:
            formatters[key] = record_formatter(args, args.topic, partition,
                                               TIMESTAMP_TYPES.get(timestamp_type, "CreateTime"))
        record = Record(key=message.key(), value=message.value(),
                        headers=tuple(_consumed_headers(message)), timestamp=timestamp,
                        offset=offset)
        line = formatters[key](record) + b"\n"
        # Counted first: Ctrl-C or SIGTERM lands between two statements, and a record the
        # user has seen (stdout may be unbuffered) must be in the count printed on the way out.
        printed.count += 1
        out.write(line)
    out.flush()


def _consumed_headers(message: Message) -> Iterable[tuple[str, bytes | None]]:
    """A consumed record's headers: librdkafka gives (name, bytes) pairs (its stub also
    allows the str values and the dict a producer may pass)."""
    return cast("Iterable[tuple[str, bytes | None]]", message.headers() or ())


def _start(client: Consumer, args: argparse.Namespace, partition: int) -> int:
    """The first offset of an assigned partition, or one of librdkafka's logical offsets."""
    ck = kafka()
    if args.from_timestamp is not None:
        return _offsets_for_time(client, args.topic, [partition], args.from_timestamp)[partition]
    if args.from_beginning or args.offset == "earliest":
        return int(ck.OFFSET_BEGINNING)
    if args.offset in (None, "latest"):
        return int(ck.OFFSET_STORED if args.group else ck.OFFSET_END)
    return offset_option(args.offset)


def _offsets_for_time(client: Consumer, topic: str, partitions: list[int],
                      timestamp: int) -> dict[int, int]:
    """Partition -> the first offset at or after ``timestamp`` (the end when there is none)."""
    ck = kafka()
    wanted = [ck.TopicPartition(topic, p, timestamp) for p in partitions]
    found = client.offsets_for_times(wanted, timeout=30)
    return {tp.partition: tp.offset if tp.offset >= 0 else int(ck.OFFSET_END) for tp in found}


def _seek_to_timestamp(timestamp: int) -> Callable[[Consumer, list[TopicPartition]], None]:
    """An on_assign callback starting each assigned partition at ``timestamp``."""
    def on_assign(client: Consumer, assigned: list[TopicPartition]) -> None:
        if not assigned:
            return
        topic = assigned[0].topic
        starts = _offsets_for_time(client, topic, [tp.partition for tp in assigned], timestamp)
        for tp in assigned:
            tp.offset = starts[tp.partition]
        client.assign(assigned)
    return on_assign
