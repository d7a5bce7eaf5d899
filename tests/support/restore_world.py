"""A topic written and tiered by a LogManager whose disks are then lost, for the restore tests
(``LogManager.restore_topic``, ``tierlog restore``): :func:`lose_disks_after` writes a history
of plain, idempotent and transactional batches (:class:`HistoryWriter`), tiers it, records what
a reader saw (:class:`Source`) and deletes the data dir, leaving only the tier."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from support.clock import FakeClock
from support.s3 import S3_BUCKET
from support.txn_layouts import ABORTER, COMMITTER, consumer_view
from tierlog import Log
from tierlog.checkpoint.checkpoint_file import EpochEntry
from tierlog.manager.log_manager import LogManager
from tierlog.records.record import Record
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.remote.tier.ownership import tier_of

#: The first timestamp: a batch's timestamp is T0 + its base offset.
T0 = 1_700_000_000_000
#: The idempotent producer of the history.
IDEM = 100


@dataclass
class HistoryWriter:
    """Appends to one log, timestamps one ms apart per batch, and remembers the offsets the
    tests cut at."""

    log: Log
    sequences: dict[int, int] = field(default_factory=dict)
    n: int = 0
    marks: dict[str, int] = field(default_factory=dict)
    last_idem: tuple[list[Record], int] | None = None

    def _records(self, prefix: str, count: int) -> list[Record]:
        out = [Record(key=f"{prefix}-{self.n + i}".encode(), value=b"v" * 50,
                      timestamp=T0 + self.log.log_end_offset) for i in range(count)]
        self.n += count
        return out

    def mark(self, name: str) -> None:
        self.marks[name] = self.log.log_end_offset

    def plain(self, count: int = 2) -> None:
        self.log.append_records(self._records("p", count))

    def idem(self, count: int = 2) -> None:
        seq = self.sequences.get(IDEM, 0)
        records = self._records("i", count)
        self.log.append_records(records, producer_id=IDEM, producer_epoch=0, base_sequence=seq)
        self.sequences[IDEM] = seq + count
        self.last_idem = (records, seq)

    def txn(self, pid: int, count: int = 2) -> None:
        seq = self.sequences.get(pid, 0)
        prefix = "a" if pid == ABORTER else "c"
        self.log.append_records(self._records(prefix, count), producer_id=pid,
                                producer_epoch=0, base_sequence=seq, transactional=True)
        self.sequences[pid] = seq + count

    def end(self, pid: int) -> None:
        self.log.append_marker(pid, 0, commit=pid != ABORTER)


def history(w: HistoryWriter) -> None:
    """Six segments (five closed, tiered): idempotent batches, an aborted transaction whose
    marker is in the next segment, committed ones spanning segments."""
    w.plain(3); w.idem(); w.txn(ABORTER); w.plain()
    w.log.roll()
    w.idem(); w.end(ABORTER); w.mark("committer-first"); w.txn(COMMITTER); w.plain()
    w.log.roll()
    w.plain(); w.mark("committer-marker"); w.end(COMMITTER); w.mark("after-marker"); w.idem()
    w.plain()
    w.log.roll()
    w.mark("seg3"); w.txn(COMMITTER); w.plain()
    w.log.roll()
    w.plain(); w.end(COMMITTER)
    w.log.roll()
    w.plain()  # the active segment: never tiered


def raw_batches(log: Log, start: int, end: int) -> list[bytes]:
    """The bytes of every batch based in ``[start, end)``, read 300 bytes at a time."""
    out: list[bytes] = []
    offset = start
    while offset < end:
        batches = list(log.read(offset, max_bytes=300).batches())
        assert batches, f"no batch at {offset}"
        out += [bytes(b.view()) for b in batches if b.base_offset < end]
        offset = batches[-1].next_offset
    return out


def at_each_offset(log: Log, start: int, end: int) -> list[bytes]:
    """The first batch a read from each offset returns."""
    return [bytes(next(iter(log.read(o, max_bytes=1).batches())).view())
            for o in range(start, end)]


@dataclass
class Source:
    """What the lost LogManager wrote, as read through it before the disks went."""

    data: Path
    config: dict[str, Any]
    topic_id: str
    tier_end: int
    marks: dict[str, int]
    batches: list[bytes]
    each: list[bytes]
    view: list[tuple[int, bytes]]
    last_idem: tuple[list[Record], int]
    epochs: list[EpochEntry]


def tier_config(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A LogManager config tiering everything to a ``local`` tier under ``tmp_path`` or to a
    fresh prefix of the moto bucket (``s3``)."""
    # Reads from moto on a loaded CI host can pass Kafka's 500 ms remote.fetch.max.wait.ms.
    base = {"segment.bytes": 1 << 20, "local.retention.bytes": 0,
            "remote.fetch.max.wait.ms": 30_000}
    if kind == "local":
        return {**base, "remote.storage.manager": "local",
                "remote.storage.url": f"file://{tmp_path}/tier"}
    options = request.getfixturevalue("s3_options")
    return {**base, "remote.storage.manager": "s3",
            "remote.storage.url": f"s3://{S3_BUCKET}/restore-{uuid.uuid4().hex[:12]}",
            **{f"remote.storage.options.{k}": v for k, v in options.items()}}


def lose_disks_after(tmp_path: Path, config: dict[str, Any], clock: FakeClock,
                     write: Callable[[HistoryWriter], None] = history,
                     log_start: str | None = None) -> Source:
    """Write ``orders`` (partition 0) through a LogManager (with its log start offset
    raised to the mark ``log_start`` before anything is tiered: DeleteRecords), tier it,
    read back everything the tier holds, close and delete the data dir."""
    data = tmp_path / "data"
    with LogManager.open(data, config, time_ms=clock, start_scheduler=False) as mgr:
        (log,) = mgr.create_topic("orders", 1, {"remote.storage.enable": True})
        w = HistoryWriter(log)
        write(w)
        log.update_high_watermark(log.log_end_offset)
        if log_start is not None:
            log.delete_records_before(w.marks[log_start])
        assert not mgr.tier_now()["orders-0"].errors
        mgr.scheduler.run_due()
        end = log.highest_offset_in_remote + 1
        assert log.local_log_start_offset == end  # the tiered segments are gone locally
        start = log.log_start_offset
        source = Source(data, config, log.topic_id, end, w.marks, raw_batches(log, start, end),
                        at_each_offset(log, start, end), consumer_view(log, start, end),
                        w.last_idem or ([], -1), log.leader_epoch_cache.entries())
    shutil.rmtree(data)
    return source


def manager_tier(mgr: LogManager) -> RemoteTier:
    """The tier the LogManager's remote storage manager writes."""
    rlm = mgr.remote_log_manager
    assert rlm is not None
    tier = tier_of(rlm.rsm)
    assert tier is not None
    return tier
