"""``tierlog produce``: lines (or JSON objects) from a file or stdin into a topic, many records
per batch, partitioned as Kafka's default partitioner would; prints where the records landed.
Into a data dir, or with ``--bootstrap-server`` through a broker (:mod:`tierlog.cli.wire_produce`).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from tierlog.cli._common import (
    CliError,
    Subcommands,
    add_metrics_port,
    metrics_served,
    open_manager,
    parse_assignment,
    plural,
    settings,
    topic_partitions,
)
from tierlog.cli.wire import add_bootstrap_options, uses_broker
from tierlog.common.partitioner import partition_for_key
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.records.compression import CODEC_NAMES
from tierlog.records.record import Header, Record

#: Fields a ``--json`` line may carry.
JSON_FIELDS = ("key", "value", "key_base64", "value_base64", "headers", "timestamp", "partition")
#: Fields ``consume --format json`` adds, accepted and ignored so its output can be produced.
IGNORED_JSON_FIELDS = ("topic", "offset", "timestampType")
#: Fields of a header given as an object (the form ``tierlog consume --format json`` prints).
_HEADER_FIELDS = frozenset({"key", "value", "value_base64"})
#: Per-record bytes beyond key, value and headers, for the batch size estimate.
RECORD_OVERHEAD = 16
#: Upper bound of the uncompressed bytes put in one batch (halved again by max.message.bytes).
MAX_BATCH_BYTES = 512 * 1024


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "produce", parents=[common], help="append lines or JSON records to a topic",
        description="Append one record per input line (from --file or stdin) to a topic. "
                    "Keyed records go to the partition Kafka's default partitioner picks "
                    "(murmur2 of the key); keyless ones fill one partition per batch.",
        epilog="--json lines look like: {\"key\": \"k\", \"value\": \"v\", \"headers\": "
               "{\"h\": \"1\"}, \"timestamp\": 1700000000000, \"partition\": 0}; key_base64 / "
               "value_base64 carry binary data; a non-string value is stored as its JSON text; "
               "topic, offset and timestampType (from consume --format json) are ignored.")
    parser.add_argument("--topic", required=True, help="topic to append to (must exist)")
    parser.add_argument("--partition", type=int, metavar="P",
                        help="append every record to partition P (over a JSON line's own)")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--key-separator", metavar="SEP",
                     help="split each line at the first SEP into key and value "
                          "(Kafka's parse.key=true key.separator=SEP)")
    fmt.add_argument("--json", action="store_true",
                     help="each line is a JSON object with key, value, headers, timestamp "
                          "and partition (all optional)")
    parser.add_argument("--compression", choices=tuple(CODEC_NAMES), default="none",
                        help="batch compression codec (default: %(default)s)")
    parser.add_argument("--header", action="append", metavar="KEY=VALUE",
                        help="a header added to every record (repeatable)")
    parser.add_argument("--file", metavar="FILE", help="read FILE instead of stdin")
    add_metrics_port(parser)
    parser.add_argument("--batch-size", type=_positive_int, default=1000, metavar="N",
                        help="records per batch at most (default: %(default)s)")
    add_bootstrap_options(parser)
    parser.set_defaults(func=run)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    if uses_broker(args):
        from tierlog.cli import wire_produce

        return wire_produce.run(args)
    st = settings(args)
    with open_manager(st) as mgr:
        topic_partitions(mgr, args.topic, args.partition)
        batcher = Batcher(mgr, args.topic, args.compression, args.batch_size)
        with metrics_served(mgr, args.metrics_port, args.metrics_host):
            try:
                for where, record, partition in input_records(args):
                    batcher.add(record, partition, where)
            except CliError as exc:
                batcher.flush_all()
                raise CliError(f"{exc} (records written before it: {batcher.count})"
                               if batcher.count else str(exc)) from None
        batcher.flush_all()
        print_summary(args.topic, args.compression, batcher.count, batcher.ranges)
    return 0


def input_records(args: argparse.Namespace) -> Iterator[tuple[str, Record, int | None]]:
    """Each input line as (where it is, its record, the partition asked for or None): the
    line or JSON object, the --header headers first, --partition over a JSON line's own."""
    extra_headers: list[Header] = [  # a list: a header key may repeat
        (k, v.encode()) for k, v in (parse_assignment(h, "--header") for h in args.header or ())
    ]
    source = "<stdin>" if args.file is None else args.file
    with _open_input(args.file) as stream:
        for number, line in _lines(stream):
            where = f"{source}, line {number}"
            if args.json:
                if not line.strip():
                    continue
                record, partition = record_from_json(line, where)
            else:
                record, partition = _record_from_line(line, args.key_separator, where)
            if extra_headers:
                record.headers = [*extra_headers, *record.headers]
            yield where, record, partition if args.partition is None else args.partition


@contextmanager
def _open_input(path: str | None) -> Iterator[BinaryIO]:
    """The input as a binary stream: a file (closed afterwards) or stdin (left open)."""
    if path is None:
        yield sys.stdin.buffer
        return
    with open(path, "rb") as stream:
        yield stream


def _lines(stream: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """Numbered lines without their ``\\n`` or ``\\r\\n`` (as Java's readLine)."""
    for number, line in enumerate(stream, 1):
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield number, line


def _record_from_line(line: bytes, separator: str | None, where: str) -> tuple[Record, None]:
    if separator is None:
        return Record(key=None, value=line), None
    key, sep, value = line.partition(separator.encode())
    if not sep:
        raise CliError(f"{where}: no key separator {separator!r} in the line")
    return Record(key=key, value=value), None


def record_from_json(line: bytes, where: str) -> tuple[Record, int | None]:
    """A Record (and the partition it asks for, or None) from one ``--json`` line."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise CliError(f"{where}: not valid JSON: {e.msg} (column {e.colno})") from None
    except UnicodeDecodeError:
        raise CliError(f"{where}: not valid JSON: the line is not UTF-8 text") from None
    if not isinstance(obj, dict):
        raise CliError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(JSON_FIELDS) - set(IGNORED_JSON_FIELDS))
    if unknown:
        raise CliError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(JSON_FIELDS)})")
    record = Record(
        key=_bytes_field(obj, "key", where),
        value=_bytes_field(obj, "value", where),
        headers=_headers(obj.get("headers"), where),
        timestamp=_int_field(obj, "timestamp", where),
    )
    return record, _int_field(obj, "partition", where)


def _bytes_field(obj: dict[str, Any], name: str, where: str) -> bytes | None:
    encoded = f"{name}_base64"
    if encoded in obj:
        if name in obj:
            raise CliError(f"{where}: give {name!r} or {encoded!r}, not both")
        text = obj[encoded]
        if not isinstance(text, str):
            raise CliError(f"{where}: {encoded!r} must be a base64 string")
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error as e:
            raise CliError(f"{where}: {encoded!r} is not valid base64: {e}") from None
    return _to_bytes(obj.get(name))


def _to_bytes(value: object) -> bytes | None:
    """null stays null; a string is stored as UTF-8; any other JSON value as its JSON text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":")).encode()


def _int_field(obj: dict[str, Any], name: str, where: str) -> int | None:
    value = obj.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CliError(f"{where}: {name!r} must be a non-negative integer, got {value!r}")
    return value


def _headers(value: object, where: str) -> list[Header]:
    """``{"k": "v"}``, ``[["k", "v"], ...]`` or ``[{"key": "k", "value": "v"}, ...]`` (or
    ``"value_base64"``), so ``consume --format json`` output produces the same records."""
    if value is None:
        return []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list):
        pairs = []
        for item in value:
            if isinstance(item, list) and len(item) == 2:
                pairs.append((item[0], item[1]))
            elif isinstance(item, dict) and "key" in item and set(item) <= _HEADER_FIELDS:
                pairs.append((item["key"], _bytes_field(item, "value", where)))
            else:
                raise CliError(f"{where}: a header must be [key, value] or "
                               f"{{\"key\": ..., \"value\": ...}}, got {item!r}")
    else:
        raise CliError(f"{where}: 'headers' must be an object or a list, got {value!r}")
    headers: list[Header] = []
    for key, val in pairs:
        if not isinstance(key, str):
            raise CliError(f"{where}: a header key must be a string, got {key!r}")
        headers.append((key, val if isinstance(val, bytes) else _to_bytes(val)))
    return headers


class Batcher:
    """Per-partition buffers appended as one batch each when full, and what they produced.

    Not thread-safe: one producing loop owns it.
    """

    def __init__(self, mgr: LogManager, topic: str, compression: str, batch_size: int) -> None:
        self.topic = topic
        self.partitions = mgr.partitions(topic)
        self._logs: dict[int, Log] = {p: mgr.log(topic, p) for p in self.partitions}
        self._compression = compression
        self._batch_size = batch_size
        config = self._logs[self.partitions[0]].config
        self._batch_bytes = min(MAX_BATCH_BYTES, config["max.message.bytes"] // 2,
                                config["segment.bytes"] // 2)
        self._pending: dict[int, list[Record]] = {p: [] for p in self.partitions}
        self._pending_bytes = dict.fromkeys(self.partitions, 0)
        self._sticky = 0
        self.count = 0
        self.ranges: dict[int, tuple[int, int, int]] = {}  # partition -> first, last, records

    def add(self, record: Record, partition: int | None, where: str) -> None:
        if partition is None:
            if record.key is not None:
                partition = partition_for_key(record.key, len(self.partitions))
            else:
                partition = self.partitions[self._sticky]
        elif partition not in self._logs:
            raise CliError(f"{where}: topic {self.topic!r} has no partition {partition}")
        pending = self._pending[partition]
        pending.append(record)
        size = RECORD_OVERHEAD + len(record.key or b"") + len(record.value or b"")
        for key, value in record.headers:
            size += len(key) + len(value or b"")
        self._pending_bytes[partition] += size
        if len(pending) >= self._batch_size or self._pending_bytes[partition] >= self._batch_bytes:
            self.flush(partition)

    def flush(self, partition: int) -> None:
        records = self._pending[partition]
        if not records:
            return
        info = self._logs[partition].append_records(records, compression=self._compression)
        first, _last, count = self.ranges.get(partition, (info.first_offset, 0, 0))
        self.ranges[partition] = (first, info.last_offset, count + len(records))
        self.count += len(records)
        self._pending[partition] = []
        self._pending_bytes[partition] = 0
        if partition == self.partitions[self._sticky]:
            self._sticky = (self._sticky + 1) % len(self.partitions)

    def flush_all(self) -> None:
        for partition in self.partitions:
            self.flush(partition)


def print_summary(topic: str, compression: str, count: int,
                  ranges: dict[int, tuple[int, int, int]]) -> None:
    """What was produced: the count, then each partition's records and offsets."""
    if not count:
        print(f"no records read; nothing appended to {topic}")
        return
    print(f"produced {plural(count, 'record')} to {topic} (compression {compression})")
    for partition, (first, last, records) in sorted(ranges.items()):
        print(f"  partition {partition}: {plural(records, 'record')} at offsets {first}-{last}")
