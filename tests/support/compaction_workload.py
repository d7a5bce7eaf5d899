"""A compacted log and a seeded random workload for it, with the dict model of what it holds:
the cleaner's tests (tests/cleaner) append through :class:`Workload` and check the log they
compacted against :meth:`Workload.latest` and what a read_committed consumer sees."""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.clock import FakeClock
from tierlog import Log, Record
from tierlog.records import RecordBatch
from tierlog.records.compression import CODEC_NAMES

CODECS = tuple(CODEC_NAMES)
TOPIC_DIR = "compacted-0"
IDEMPOTENT_PRODUCER = 1000
TXN_PRODUCERS = (2000, 2001, 2002)


def open_log(directory: Path, clock: FakeClock, **overrides: Any) -> Log:
    """A compacted log of small (4 KiB) segments; ``overrides`` are topic configs."""
    config = {"cleanup.policy": "compact", "segment.bytes": 4096, **overrides}
    return Log.open(directory, config, time_ms=clock, auto_high_watermark=True)


def read_batches(log: Log, max_bytes: int = 1 << 30) -> list[RecordBatch]:
    """Every batch of the log, in order (views over copied bytes), in reads of ``max_bytes``
    (small reads start inside segments, through their offset indexes)."""
    out: list[RecordBatch] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        batches = list(log.read(offset, max_bytes).batches())
        if not batches:
            break
        out.extend(batches)
        offset = batches[-1].next_offset
    return out


def read_all(log: Log, *, include_control: bool = False, max_bytes: int = 1 << 30) -> list[Record]:
    """Every record physically in the log (aborted ones too), in offset order."""
    records: list[Record] = []
    for batch in read_batches(log, max_bytes):
        if include_control or not batch.is_control:
            records.extend(batch.records())
    return records


def key_of(record: Record) -> bytes:
    """The record's key: every record of a compacted log has one."""
    assert record.key is not None, f"record {record.offset} of a compacted log has no key"
    return record.key


def committed_view(log: Log) -> dict[bytes, bytes]:
    """What a read_committed consumer reading from the start ends up with, key by key."""
    view: dict[bytes, bytes] = {}
    offset = log.log_start_offset
    while offset < log.last_stable_offset:
        info = log.read(offset, 1 << 30, isolation="read_committed")
        batches = list(info.batches())
        if not batches:
            break
        for record in info.records():
            if record.value is None:
                view.pop(key_of(record), None)
            else:
                view[key_of(record)] = record.value
        offset = batches[-1].next_offset
    return view


@dataclass
class Written:
    """One record the workload appended, and whether its transaction aborted."""

    offset: int
    key: bytes
    value: bytes | None
    aborted: bool = False


class Workload:
    """A seeded random mix of plain, idempotent and transactional appends (committed and
    aborted, several producers interleaved), every codec, tombstones and headers; it keeps
    the model of what was written."""

    def __init__(self, log: Log, clock: FakeClock, seed: int, keys: int = 40) -> None:
        self.log = log
        self.clock = clock
        self.rng = random.Random(seed)
        self.keys = keys
        self.written: list[Written] = []
        self.sequence: dict[int, int] = defaultdict(int)
        self.open_txns: dict[int, list[Written]] = {}
        self.codecs_used: set[str] = set()

    def run(self, steps: int) -> Workload:
        for _ in range(steps):
            self.clock.advance(self.rng.randrange(50))
            choice = self.rng.random()
            if choice < 0.45:
                self.append(-1)
            elif choice < 0.6:
                self.append(IDEMPOTENT_PRODUCER)
            elif choice < 0.85:
                self.append(self.rng.choice(TXN_PRODUCERS), transactional=True)
            elif self.open_txns:
                self.end_txn(self.rng.choice(sorted(self.open_txns)), self.rng.random() < 0.6)
        return self

    def append(self, pid: int, transactional: bool = False) -> None:
        rng = self.rng
        records = [
            Record(
                key=b"key-%d" % rng.randrange(self.keys),
                value=None if rng.random() < 0.12 else b"value-%d" % rng.randrange(10**9),
                headers=(("h", b"%d" % rng.randrange(9)),) if rng.random() < 0.2 else (),
            )
            for _ in range(rng.randint(1, 4))
        ]
        codec = rng.choice(CODECS)
        self.codecs_used.add(codec)
        producer: dict[str, Any] = {}
        if pid >= 0:
            producer = {"producer_id": pid, "producer_epoch": 0,
                        "base_sequence": self.sequence[pid], "transactional": transactional}
            self.sequence[pid] += len(records)
        info = self.log.append_records(records, codec, **producer)
        written = [Written(info.first_offset + i, key_of(r), r.value)
                   for i, r in enumerate(records)]
        self.written.extend(written)
        if transactional:
            self.open_txns.setdefault(pid, []).extend(written)

    def end_txn(self, pid: int, commit: bool) -> None:
        self.log.append_marker(pid, 0, commit=commit)
        for written in self.open_txns.pop(pid):
            written.aborted = not commit

    def finish(self) -> Workload:
        for pid in sorted(self.open_txns):
            self.end_txn(pid, self.rng.random() < 0.6)
        return self

    def latest(self) -> dict[bytes, bytes]:
        """The model: the latest committed value of each key (a tombstone deletes it)."""
        view: dict[bytes, bytes] = {}
        for written in self.written:
            if written.aborted or any(written in txn for txn in self.open_txns.values()):
                continue
            if written.value is None:
                view.pop(written.key, None)
            else:
                view[written.key] = written.value
        return view

    def expected_below(self, end_offset: int, keep_tombstones: bool = True) -> list[int]:
        """Offsets below ``end_offset`` a clean keeps: each key's latest non-aborted record
        there (tombstones only while their horizon has not passed)."""
        latest: dict[bytes, Written] = {}
        for written in self.written:
            if written.offset < end_offset and not written.aborted:
                latest[written.key] = written
        return sorted(w.offset for w in latest.values() if w.value is not None or keep_tombstones)
