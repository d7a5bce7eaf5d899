"""The Jepsen-style harness's verdicts (issue 24): pure checkers over what a run recorded, each
returning its violations (empty: the property held) as messages naming the partition, offset and
value, plus :func:`latency_percentiles` and :func:`replica_batches`, which reads a node's copy
of a partition from its data dir once the run is over.

The shapes, shared by every checker:

- a partition is ``(topic, partition)``; a value is the record's value (``bytes``), unique per
  partition across the whole run (the harness numbers what it sends);
- a *read* of a log is ``{(topic, partition): [(offset, value), ...]}``, in offset order: what a
  consumer got from the log start to the end (control records are not records);
- an *acknowledged* record is ``(topic, partition, value)``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tierlog import Log
from tierlog.errors import CorruptRecordError
from tierlog.records.batch import RecordBatch

TopicPartition = tuple[str, int]
Read = Mapping[TopicPartition, Sequence[tuple[int, bytes]]]
Acked = tuple[str, int, bytes]
#: One node's copy of a partition: its batches as ``(base_offset, batch bytes)``, in order.
ReplicaDump = Sequence[tuple[int, bytes]]


def _tp(tp: TopicPartition) -> str:
    return f"{tp[0]}-{tp[1]}"


def _positions(read: Read) -> dict[TopicPartition, dict[bytes, list[int]]]:
    """Per partition, the offsets at which each value was read."""
    return {tp: _value_offsets(records) for tp, records in read.items()}


def _value_offsets(records: Sequence[tuple[int, bytes]]) -> dict[bytes, list[int]]:
    where: dict[bytes, list[int]] = {}
    for offset, value in records:
        where.setdefault(value, []).append(offset)
    return where


def check_acknowledged_present(acked: Iterable[Acked], read: Read) -> list[str]:
    """Every acknowledged record is in the final read of its partition exactly once, and no
    value (acknowledged or not: an unacknowledged send may or may not have landed) is there
    twice. ``acked`` naming one record twice is the harness's own bug: ValueError."""
    seen = Counter(acked)
    doubled = [a for a, n in seen.items() if n > 1]
    if doubled:
        raise ValueError(f"acknowledged records must be unique; twice: {doubled[:5]!r}")
    positions = _positions(read)
    violations = []
    for topic, partition, value in seen:
        tp = (topic, partition)
        if not positions.get(tp, {}).get(value):
            violations.append(f"{_tp(tp)}: acknowledged value {value!r} is not in the log")
    for tp, where in positions.items():
        for value, offsets in where.items():
            if len(offsets) > 1:
                kind = "acknowledged" if (*tp, value) in seen else "unacknowledged"
                violations.append(f"{_tp(tp)}: {kind} value {value!r} is in the log "
                                  f"{len(offsets)} times (offsets {offsets})")
    return violations


def check_order(sent: Mapping[tuple[Hashable, str, int], Sequence[bytes]],
                read: Read) -> list[str]:
    """Per partition, one producer's acknowledged records are in the log in the order it sent
    them. ``sent`` maps ``(producer, topic, partition)`` to that producer's acknowledged values
    in send order; values missing from the log are check_acknowledged_present's to report, and
    a value read twice is placed at its first offset."""
    positions = _positions(read)
    violations = []
    for (producer, topic, partition), values in sent.items():
        tp = (topic, partition)
        where = positions.get(tp, {})
        previous: tuple[bytes, int] | None = None
        for value in values:
            offsets = where.get(value)
            if not offsets:
                continue
            if previous is not None and offsets[0] < previous[1]:
                violations.append(
                    f"{_tp(tp)}: producer {producer!r} sent {previous[0]!r} before {value!r}, "
                    f"but the log has them at offsets {previous[1]} and {offsets[0]}")
            previous = (value, offsets[0])
    return violations


def check_no_lost_reads(observed: Iterable[tuple[str, int, int, bytes]],
                        final_read: Read) -> list[str]:
    """No consumer read a record that later vanished: every ``(topic, partition, offset,
    value)`` a consumer observed during the run is in the final log at that offset."""
    finals = {tp: dict(records) for tp, records in final_read.items()}
    violations = []
    for topic, partition, offset, value in sorted(set(observed)):
        tp = (topic, partition)
        there = finals.get(tp, {}).get(offset)
        if there != value:
            now = "nothing" if there is None else repr(there)
            violations.append(f"{_tp(tp)}: a consumer read {value!r} at offset {offset}, where "
                              f"the final log holds {now}")
    return violations


def check_replicas_identical(replicas: Mapping[Hashable, ReplicaDump], high_watermark: int, *,
                             from_offset: int | None = None, partition: str = "") -> list[str]:
    """The replicas of one partition hold byte-identical batches below ``high_watermark``.

    ``replicas`` maps a node to its batches (:data:`ReplicaDump`, as :func:`replica_batches`
    reads them). Compared: every batch ending at or after ``from_offset`` (default: the
    greatest first offset among the replicas, as each may have deleted a different prefix) and
    starting below the high watermark. Every replica must hold every such batch, identical, and
    reach the high watermark. ``partition`` names the partition in the messages."""
    where = f"{partition}: " if partition else ""
    violations = []
    parsed: dict[Hashable, dict[int, tuple[int, bytes]]] = {}
    for node, dump in replicas.items():
        batches: dict[int, tuple[int, bytes]] = {}
        for base, data in dump:
            try:
                header = RecordBatch(data, 0, header_only=True)
            except CorruptRecordError as exc:
                violations.append(f"{where}node {node!r}: the batch given at offset {base} is "
                                  f"unreadable: {exc}")
                continue
            if header.base_offset != base or header.size_in_bytes != len(data):
                violations.append(
                    f"{where}node {node!r}: the batch given at offset {base} is not one whole "
                    f"batch starting there ({len(data)} bytes, a header of offset "
                    f"{header.base_offset} and {header.size_in_bytes} bytes)")
                continue
            batches[base] = (header.next_offset, bytes(data))
        parsed[node] = batches
    starts = [min(b) for b in parsed.values() if b]
    start = from_offset if from_offset is not None else max(starts, default=0)
    wanted: dict[Hashable, dict[int, tuple[int, bytes]]] = {
        node: {base: b for base, b in batches.items() if b[0] > start and base < high_watermark}
        for node, batches in parsed.items()}
    for node, batches in wanted.items():
        end = max((b[0] for b in batches.values()), default=start)
        if end < high_watermark:
            violations.append(f"{where}node {node!r} ends at offset {end}, below the high "
                              f"watermark {high_watermark}")
    every = sorted({base for batches in wanted.values() for base in batches})
    for base in every:
        copies = {node: batches.get(base) for node, batches in wanted.items()}
        missing = sorted(repr(n) for n, c in copies.items() if c is None)
        if missing:
            violations.append(f"{where}the batch at offset {base} is missing on node(s) "
                              f"{', '.join(missing)}")
        variants = Counter(c[1] for c in copies.values() if c is not None)
        if len(variants) > 1:
            detail = "; ".join(
                f"node {n!r}: {len(c[1])} bytes" for n, c in copies.items() if c is not None)
            violations.append(f"{where}the replicas differ in the batch at offset {base} "
                              f"({len(variants)} versions; {detail})")
    return violations


Outcome = Literal["committed", "aborted", "unknown"]


@dataclass(frozen=True, slots=True)
class Txn:
    """One transaction a producer ran, and what it learned of its end."""

    outcome: Outcome
    """``committed`` / ``aborted`` when commit/abort was acknowledged, else ``unknown``."""
    records: tuple[Acked, ...]
    """The records it sent, ``(topic, partition, value)``."""
    name: str = ""
    """How the messages name it (transactional id and a number, say)."""


def check_transactions_atomic(txns: Iterable[Txn], committed_read: Read) -> list[str]:
    """What a read_committed reader got (``committed_read``, read to the end after the run)
    shows every transaction whole or not at all: a committed one whole (its commit was
    acknowledged), an aborted one not at all, one of unknown outcome whole or not at all; and
    no record of any of them twice."""
    positions = _positions(committed_read)
    violations = []
    for number, txn in enumerate(txns):
        name = txn.name or f"transaction #{number}"
        counts = [len(positions.get((t, p), {}).get(v, ())) for t, p, v in txn.records]
        present = sum(1 for n in counts if n)
        twice = [r for r, n in zip(txn.records, counts, strict=True) if n > 1]
        if twice:
            violations.append(f"{name} ({txn.outcome}): records read twice: {twice[:5]!r}")
        if txn.outcome == "aborted" and present:
            violations.append(f"{name} was aborted, but a read_committed reader got {present} "
                              f"of its {len(txn.records)} records")
        elif txn.outcome == "committed" and present < len(txn.records):
            violations.append(f"{name} was committed, but a read_committed reader got only "
                              f"{present} of its {len(txn.records)} records")
        elif txn.outcome == "unknown" and 0 < present < len(txn.records):
            violations.append(f"{name} (outcome unknown) is partly visible to a read_committed "
                              f"reader: {present} of its {len(txn.records)} records")
    return violations


def latency_percentiles(samples: Iterable[float]) -> tuple[float, float]:
    """(p50, p99) of ``samples`` by the nearest-rank method (each is one of the samples).
    ValueError when there are none."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("latency_percentiles needs at least one sample")

    def rank(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]

    return rank(50), rank(99)


def replica_batches(data_dir: str | Path, topic: str, partition: int,
                    upto: int | None = None) -> list[tuple[int, bytes]]:
    """A node's batches of ``topic``-``partition`` (those starting below ``upto``, or all),
    as ``(base_offset, bytes)``, read from its data dir with the log opened read-only: no
    file is written or locked, so the node may still be running."""
    log = Log.for_partition(data_dir, topic, partition, read_only=True)
    try:
        batches: list[tuple[int, bytes]] = []
        for segment in log.segments:
            for _, batch in segment.log.batches_from(0):
                if upto is not None and batch.base_offset >= upto:
                    return batches
                batches.append((batch.base_offset, bytes(batch.view())))
        return batches
    finally:
        log.close()
