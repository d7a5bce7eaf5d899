"""``tierlog dump-log``: Kafka's ``kafka-dump-log.sh`` (DumpLogSegments) for segment files:
batch headers and records of ``.log`` files, ``.index``/``.timeindex`` entries checked against
their ``.log``, ``.txnindex`` entries and producer ``.snapshot`` files, in Kafka's output format.
"""

from __future__ import annotations

import argparse
import mmap
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.cli._common import CliError, Subcommands
from tierlog.common.filenames import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
)
from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import CorruptIndexError, CorruptRecordError, CorruptSnapshotError
from tierlog.index import OffsetIndex, TimeIndex, TransactionIndex
from tierlog.producer.append import decrement_sequence, increment_sequence
from tierlog.producer.snapshot import read_snapshot
from tierlog.records.batch import HEADER_SIZE, LOG_APPEND_TIME, RecordBatch
from tierlog.records.compression import codec_name
from tierlog.records.control import ABORT, COMMIT, decode_control_record
from tierlog.records.record import Record

#: Kafka prints record lines with this prefix.
RECORD_INDENT = "|"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, SNAPSHOT_SUFFIX)
#: Local names (``00000000000000000042.log``) and remote-tier names (``...0042-<uuid>.log``).
_BASE_OFFSET_RE = re.compile(r"(\d+)(?:-[A-Za-z0-9_-]+)?$")


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "dump-log", parents=[common], help="print segment, index and snapshot files (Kafka's "
                                          "kafka-dump-log.sh)",
        description="Print the contents of .log, .index, .timeindex, .txnindex and .snapshot "
                    "files (or of every such file in a directory) in the format of Kafka's "
                    "kafka-dump-log.sh. Exit status 1 when a file is missing or unreadable, or "
                    "(with --verify) when any check fails.")
    parser.add_argument("files", nargs="*", metavar="FILE",
                        help="segment files or partition directories")
    parser.add_argument("--files", dest="files_csv", metavar="FILE1,FILE2",
                        help="comma-separated files (Kafka's spelling)")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print each record's key and payload (implies --deep-iteration)")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only batch headers")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="with --print-data-log, print only keys and payloads")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only run the startup sanity check on .index/.timeindex files")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the .log without printing them")
    parser.add_argument("--verify", action="store_true",
                        help="check everything (batch CRCs and record framing, index entries, "
                             "snapshot CRCs) and print only problems and a summary per file")
    parser.add_argument("--max-bytes", type=int, default=INT32_MAX, metavar="BYTES",
                        help="read at most this many bytes of each .log file")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    names = list(args.files)
    if args.files_csv:
        names += [n for n in args.files_csv.split(",") if n]
    if not names:
        raise CliError("dump-log needs at least one FILE (or --files)")
    dumper = Dumper(
        print_data=args.print_data_log,
        deep=args.deep_iteration or args.print_data_log,
        skip_record_metadata=args.skip_record_metadata,
        sanity_only=args.index_sanity_check,
        verify_index_only=args.verify_index_only or args.verify,
        verify=args.verify,
        max_bytes=args.max_bytes,
    )
    for name in names:
        path = Path(name)
        if path.is_dir():
            for child in sorted(path.iterdir()):
                if child.suffix in SUFFIXES:
                    dumper.dump(child)
        else:
            dumper.dump(path)
    dumper.print_errors()
    return 1 if dumper.failed else 0


def base_offset_of(path: Path) -> int | None:
    """The base offset a segment file's name starts with (local or remote-tier name)."""
    match = _BASE_OFFSET_RE.fullmatch(path.name.split(".", 1)[0])
    return None if match is None else int(match.group(1))


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_long(value: int | None) -> str:
    """Java's OptionalLong.toString(), as Kafka's tool prints it."""
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def _map(path: Path) -> bytes | mmap.mmap:
    """The file's bytes, memory-mapped (read-only) unless it is empty."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        return mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) if size else b""


def _timestamp_type(batch: RecordBatch) -> str:
    return "LogAppendTime" if batch.timestamp_type == LOG_APPEND_TIME else "CreateTime"


@dataclass
class Dumper:
    """Dumps files one by one to stdout, collecting what Kafka reports at the end on stderr.

    Not thread-safe (one command's state)."""

    print_data: bool = False
    deep: bool = False
    skip_record_metadata: bool = False
    sanity_only: bool = False
    verify_index_only: bool = False
    verify: bool = False
    max_bytes: int = INT32_MAX
    failed: bool = False
    out: Callable[[str], Any] = field(default_factory=lambda: sys.stdout.write)
    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def dump(self, path: Path) -> None:
        suffix = path.suffix
        if suffix not in SUFFIXES:
            print(f"Ignoring unknown file {path}", file=sys.stderr)
            return
        self.out(f"Dumping {path}\n")
        if not path.is_file():
            self._error(f"{path}: No such file")
            return
        base = base_offset_of(path)
        if base is None:
            self._error(f"{path}: the file name does not start with the segment's base offset")
            return
        try:
            if suffix == LOG_SUFFIX:
                self.dump_log(path, base)
            elif suffix == INDEX_SUFFIX:
                self.dump_index(path, base)
            elif suffix == TIME_INDEX_SUFFIX:
                self.dump_time_index(path, base)
            elif suffix == TXN_INDEX_SUFFIX:
                self.dump_txn_index(path, base)
            else:
                self.dump_snapshot(path)
        except (CorruptRecordError, CorruptIndexError, CorruptSnapshotError) as exc:
            self._error(f"{path}: {exc}")
        except BrokenPipeError:
            raise
        except OSError as exc:
            self._error(f"{path}: {exc.strerror or exc}")

    def _error(self, message: str) -> None:
        self.failed = True
        sys.stdout.flush()
        print(f"tierlog: error: {message}", file=sys.stderr)

    # -- .log ----------------------------------------------------------------------------

    def dump_log(self, path: Path, base: int) -> None:
        buf = _map(path)
        if not self.verify:
            self.out(f"Log starting offset: {base}\n")
        limit = min(len(buf), self.max_bytes)
        view = memoryview(buf)[:limit] if limit < len(buf) else buf
        position = batches = records = invalid = 0
        last_offset = -1
        while position + HEADER_SIZE <= limit:
            batch = RecordBatch(view, position, header_only=True)
            if position + batch.size_in_bytes > limit:
                break
            batch = RecordBatch(view, position)
            valid = batch.is_valid()
            lines = [] if self.verify else [self._batch_line(batch, valid)]
            problem = None if valid else (f"stored crc {batch.crc} != computed crc "
                                          f"{batch.compute_crc()}")
            if self.deep or self.verify:
                try:
                    decoded = batch.records(verify_crc=False)  # its CRC is reported above
                except CorruptRecordError as exc:
                    decoded, problem = [], problem or str(exc)
                for record in decoded:
                    if last_offset != -1 and record.offset != last_offset + 1:
                        self.non_consecutive.setdefault(str(path.absolute()), []).append(
                            (last_offset, record.offset))
                    last_offset = record.offset
                    if self.deep and not self.verify:
                        lines.append(self._record_line(batch, record))
                records += len(decoded)
            if problem is not None and self.verify:
                invalid += 1
                self._error(f"{path}: batch at position {position} (offsets "
                            f"{batch.base_offset}-{batch.last_offset}) is invalid: {problem}")
            if lines:
                self.out("\n".join(lines) + "\n")
            batches += 1
            position += batch.size_in_bytes
        trailing = len(buf) - position
        if trailing > 0 and self.max_bytes == INT32_MAX:
            if self.verify:
                self._error(f"{path}: {trailing} invalid bytes at the end")
            else:
                self.out(f"Found {trailing} invalid bytes at the end of {path.name}\n")
        if self.verify:
            verdict = "all valid" if not invalid and not trailing else f"{invalid} invalid"
            self.out(f"{path}: {batches} batches, {records} records, {verdict}\n")

    def _batch_line(self, batch: RecordBatch, valid: bool) -> str:
        return (
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.record_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_bool(batch.is_transactional)} "
            f"isControl: {_bool(batch.is_control)} "
            f"deleteHorizonMs: {_optional_long(batch.delete_horizon_ms)} "
            f"position: {batch.position} {_timestamp_type(batch)}: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} "
            f"compresscodec: {codec_name(batch.compression)} crc: {batch.crc} "
            f"isvalid: {_bool(valid)}"
        )

    def _record_line(self, batch: RecordBatch, record: Record) -> str:
        parts = []
        prefix = f"{RECORD_INDENT} "
        if not self.skip_record_metadata:
            sequence = (-1 if batch.base_sequence < 0 else
                        increment_sequence(batch.base_sequence, record.offset - batch.base_offset))
            header_keys = ",".join(key for key, _ in record.headers)
            parts.append(
                f"{prefix}offset: {record.offset} {_timestamp_type(batch)}: {record.timestamp} "
                f"keySize: {-1 if record.key is None else len(record.key)} "
                f"valueSize: {-1 if record.value is None else len(record.value)} "
                f"sequence: {sequence} headerKeys: [{header_keys}]")
            prefix = " "
            if batch.is_control:
                parts.append(_control_text(record))
        if self.print_data and not batch.is_control:
            if record.key is not None:
                parts.append(f"{prefix}key: {record.key.decode('utf-8', 'replace')}")
                prefix = " "
            if record.value is not None:
                parts.append(f" payload: {record.value.decode('utf-8', 'replace')}")
        return "".join(parts)

    # -- indexes -------------------------------------------------------------------------

    def dump_index(self, path: Path, base: int) -> None:
        index = OffsetIndex(path, base, writable=False)
        try:
            unused = _leave_out_zeroed_tail(index)
            if index.entries == 0:
                self.out(f"{path} is empty.\n")
                return
            if self.sanity_only:
                self._sanity_check(index, path)
                return
            log_buf = _sibling_log(path)
            mismatches = self.index_mismatches.setdefault(str(path.absolute()), [])
            for i in range(index.entries):
                offset, position = index.entry(i)
                if log_buf is not None:
                    found = _last_offset_at(log_buf, position)
                    if found != offset:
                        mismatches.append((offset, found))
                if not self.verify_index_only:
                    self.out(f"offset: {offset} position: {position}\n")
            if self.verify:
                self.out(f"{path}: {index.entries} entries, "
                         f"{len(mismatches) or 'no'} mismatches{unused}\n")
                if mismatches:
                    self._error(f"{path}: {len(mismatches)} entries do not point at the batch "
                                f"ending at their offset")
        finally:
            index.close()

    def dump_time_index(self, path: Path, base: int) -> None:
        time_index = TimeIndex(path, base, writable=False)
        offset_path = path.with_name(path.name[:-len(TIME_INDEX_SUFFIX)] + INDEX_SUFFIX)
        offset_index = (OffsetIndex(offset_path, base, writable=False)
                        if offset_path.is_file() else None)
        try:
            unused = _leave_out_zeroed_tail(time_index)
            if offset_index is not None:
                _leave_out_zeroed_tail(offset_index)  # its lookups search the slots in use
            if self.sanity_only:
                self._sanity_check(time_index, path)
                return
            log_buf = _sibling_log(path)
            key = str(path.absolute())
            previous = -1
            problems = 0
            for i in range(time_index.entries):
                timestamp, offset = time_index.entry(i)
                if log_buf is not None:
                    position = offset_index.lookup(offset).position if offset_index else 0
                    problems += self._check_time_entry(log_buf, position, timestamp, offset,
                                                       previous, key)
                if not self.verify_index_only:
                    self.out(f"timestamp: {timestamp} offset: {offset}\n")
                previous = timestamp
            if self.verify:
                self.out(f"{path}: {time_index.entries} entries, {problems or 'no'} "
                         f"problems{unused}\n")
                if problems:
                    self._error(f"{path}: {problems} entries disagree with the log")
        finally:
            time_index.close()
            if offset_index is not None:
                offset_index.close()

    def _check_time_entry(self, log_buf: bytes | mmap.mmap, position: int, timestamp: int,
                          offset: int, previous: int, key: str) -> int:
        """Kafka's checks of one time index entry; returns how many failed."""
        batch = _first_batch_reaching(log_buf, position, offset)
        if batch is None or batch.last_offset != offset:
            found = -1 if batch is None else batch.last_offset
            self.time_not_found.setdefault(key, []).append((offset, found))
            return 1
        problems = 0
        max_timestamp = max((r.timestamp for r in batch.records() if r.timestamp is not None),
                            default=-1)
        if max_timestamp != timestamp:
            self.time_mismatches.setdefault(key, []).append((timestamp, max_timestamp))
            problems += 1
        if previous >= timestamp:
            self.time_out_of_order.setdefault(key, []).append((timestamp, previous))
            problems += 1
        return problems

    def _sanity_check(self, index: OffsetIndex | TimeIndex, path: Path) -> None:
        try:
            index.sanity_check()
        except CorruptIndexError as exc:
            self._error(str(exc))
            return
        self.out(f"{path} passed sanity check.\n")

    def dump_txn_index(self, path: Path, base: int) -> None:
        index = TransactionIndex(path, base, create=False)  # dump-log never writes
        try:
            if self.verify:
                index.sanity_check()
            entries = index.all_aborted_txns()
            if self.verify:
                self.out(f"{path}: {len(entries)} aborted transactions, valid\n")
                return
            for txn in entries:
                self.out(f"version: 0 producerId: {txn.producer_id} "
                         f"firstOffset: {txn.first_offset} lastOffset: {txn.last_offset} "
                         f"lastStableOffset: {txn.last_stable_offset}\n")
        finally:
            index.close()

    def dump_snapshot(self, path: Path) -> None:
        entries = read_snapshot(path)
        if self.verify:
            self.out(f"{path}: {len(entries)} producers, valid\n")
            return
        for entry in entries:
            first_txn = entry.current_txn_first_offset
            line = (f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
                    f"coordinatorEpoch: {entry.coordinator_epoch} "
                    f"currentTxnFirstOffset: {_optional_long(first_txn if first_txn >= 0 else None)} "
                    f"lastTimestamp: {entry.timestamp}")
            if entry.last_offset >= 0:
                line += (f" firstSequence: "
                         f"{decrement_sequence(entry.last_sequence, entry.offset_delta)} "
                         f"lastSequence: {entry.last_sequence} lastOffset: {entry.last_offset} "
                         f"offsetDelta: {entry.offset_delta} timestamp: {entry.timestamp}")
            self.out(line + "\n")

    # -- the end-of-run report -----------------------------------------------------------

    def print_errors(self) -> None:
        """What Kafka prints on stderr once every file is dumped."""
        sys.stdout.flush()
        err = sys.stderr
        for name, pairs in self.index_mismatches.items():
            if pairs:
                print(f"Mismatches in :{name}", file=err)
                for index_offset, log_offset in pairs:
                    print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for index_ts, log_ts in pairs:
                print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
        for name, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for index_ts, previous in pairs:
                print(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {previous}",
                      file=err)
        for pairs in self.time_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for index_offset, log_offset in pairs:
                print(f"Indexed offset: {index_offset}, found log offset: {log_offset}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=err)


def _control_text(record: Record) -> str:
    control = decode_control_record(record.key, record.value)
    if control.type in (ABORT, COMMIT):
        return f" endTxnMarker: {control.type_name} coordinatorEpoch: {control.coordinator_epoch}"
    return f" controlType: {control.type_name}({control.type})"


def _leave_out_zeroed_tail(index: OffsetIndex | TimeIndex) -> str:
    """Serve only the slots before the index's zeroed tail (``zero_tail_start``: a live
    active segment's preallocated, unused space, where Kafka's tool stops too, is not
    damage); returns a note of how many slots it left out, for the ``--verify`` summary."""
    total = index.entries
    index.use_first(index.zero_tail_start())
    left_out = total - index.entries
    return f" ({left_out} preallocated slots unused)" if left_out else ""


def _sibling_log(path: Path) -> bytes | mmap.mmap | None:
    """The ``.log`` beside an index (same stem), or None (with a note) when there is none."""
    log_path = path.with_name(path.name.split(".", 1)[0] + LOG_SUFFIX)
    if not log_path.is_file():
        print(f"{path}: no {log_path.name} beside it; entries are not checked", file=sys.stderr)
        return None
    return _map(log_path)


def _last_offset_at(buf: bytes | mmap.mmap, position: int) -> int:
    """The last offset of the batch starting at ``position``, or -1 if none starts there."""
    if position + HEADER_SIZE > len(buf):
        return -1
    try:
        return RecordBatch(buf, position, header_only=True).last_offset
    except CorruptRecordError:
        return -1


def _first_batch_reaching(buf: bytes | mmap.mmap, position: int, offset: int
                          ) -> RecordBatch | None:
    """The first batch from ``position`` whose last offset is >= ``offset``."""
    while position + HEADER_SIZE <= len(buf):
        try:
            batch = RecordBatch(buf, position)
        except CorruptRecordError:
            return None
        if batch.last_offset >= offset:
            return batch
        position += batch.size_in_bytes
    return None
