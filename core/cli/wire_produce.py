"""``tierlog produce --bootstrap-server``: the same input lines, JSON objects and headers as
into a data dir (:func:`tierlog.cli.produce.input_records`), sent with confluent-kafka's
Producer. Keyed records go where Kafka's Java producer puts them (librdkafka's murmur2
partitioner); the summary comes from the broker's acknowledgements.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tierlog.cli._common import CliError
from tierlog.cli.produce import input_records, print_summary
from tierlog.cli.wire import REQUEST_TIMEOUT_S, describe_error, producer, topic_partitions

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

#: How long to wait for the producer's queue to drain a little when it is full.
QUEUE_FULL_POLL_S = 0.1


class Acknowledged:
    """Per-partition (first offset, last offset, records) of the acknowledged records, and
    the errors of the refused ones, from the producer's delivery reports."""

    def __init__(self) -> None:
        self.count = 0
        self.ranges: dict[int, tuple[int, int, int]] = {}
        self.errors: list[str] = []

    def __call__(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(describe_error(error))
            return
        partition, offset = message.partition(), message.offset()
        assert partition is not None and offset is not None  # delivered: it has both
        first, last, count = self.ranges.get(partition, (offset, offset, 0))
        self.ranges[partition] = (min(first, offset), max(last, offset), count + 1)
        self.count += 1


def run(args: argparse.Namespace) -> int:
    if args.metrics_port is not None:
        raise CliError("--metrics-port serves a data dir's metrics; a broker serves its own")
    client = producer(args, **{"compression.type": args.compression,
                               "batch.num.messages": args.batch_size,
                               "partitioner": "murmur2_random", "enable.idempotence": True})
    partitions = set(topic_partitions(client, args.topic))
    if args.partition is not None and args.partition not in partitions:
        raise CliError(f"topic {args.topic!r} has no partition {args.partition} "
                       f"(partitions 0-{max(partitions)})")
    acked = Acknowledged()
    try:
        for where, record, partition in input_records(args):
            if partition is not None and partition not in partitions:
                raise CliError(f"{where}: topic {args.topic!r} has no partition {partition}")
            fields: dict[str, Any] = {"key": record.key, "value": record.value,
                                      "headers": list(record.headers), "on_delivery": acked}
            if partition is not None:
                fields["partition"] = partition
            if record.timestamp is not None:
                fields["timestamp"] = record.timestamp
            _send(client, args.topic, fields)
    except CliError as exc:
        _drain(client, acked)
        raise CliError(f"{exc} (records produced before it: {acked.count})"
                       if acked.count else str(exc)) from None
    _drain(client, acked)
    print_summary(args.topic, args.compression, acked.count, acked.ranges)
    return 0


def _send(client: Producer, topic: str, fields: dict[str, Any]) -> None:
    """Queue one record, serving delivery reports while librdkafka's queue is full."""
    while True:
        try:
            client.produce(topic, **fields)
        except BufferError:
            client.poll(QUEUE_FULL_POLL_S)
            continue
        client.poll(0)
        return


def _drain(client: Producer, acked: Acknowledged) -> None:
    """Wait for every queued record's acknowledgement; CliError if any was refused."""
    left = client.flush(REQUEST_TIMEOUT_S)
    if left:
        raise CliError(f"{left} records were not acknowledged by the broker in "
                       f"{REQUEST_TIMEOUT_S:.0f} s (acknowledged: {acked.count})")
    if acked.errors:
        raise CliError(f"{len(acked.errors)} records were refused: {acked.errors[0]} "
                       f"(acknowledged: {acked.count})")
