"""read_committed across the remote tier: for every layout of a transaction's data and its
ABORT marker over remote and local segments, ``Log.read`` served from the tier and
``tierlog.reader`` return what the local path returns, and what Kafka's consumer rule says
(no record of an aborted transaction, no control record)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tierlog import Record
from tierlog.index.aborted_txns import AbortedTxnList, collect_aborted_txns
from tierlog.index.transaction_index import AbortedTxn
from tierlog.reader import RemoteTopicReader

ABORTER, COMMITTER = 7, 8
RC = "read_committed"


class Writer:
    """Appends to one log and names each record by what must happen to it: ``a-*`` records
    belong to aborted transactions, every other record is visible under read_committed."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.sequences: dict[int, int] = {}
        self.n = 0

    def _records(self, prefix: str, count: int) -> list[Record]:
        out = []
        for _ in range(count):
            out.append(Record(key=f"{prefix}-{self.n}".encode(), value=b"v" * 60))
            self.n += 1
        return out

    def plain(self, count: int = 4) -> None:
        self.log.append_records(self._records("p", count))

    def txn(self, pid: int, count: int = 3) -> None:
        prefix = "a" if pid == ABORTER else "c"
        seq = self.sequences.get(pid, 0)
        self.log.append_records(self._records(prefix, count), producer_id=pid,
                                producer_epoch=0, base_sequence=seq, transactional=True)
        self.sequences[pid] = seq + count

    def end(self, pid: int) -> None:
        self.log.append_marker(pid, 0, commit=pid != ABORTER)


def consumer_view(log: Any, start: int, upper: int | None = None) -> list[tuple[int, bytes]]:
    """(offset, key) of every record a read_committed consumer gets from ``start`` up to
    ``upper`` (the log's last stable offset when None), fetching as a consumer does."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while True:
        info = log.read(offset, max_bytes=700, isolation=RC, max_offset=upper)
        batches = list(info.batches())
        if not batches:
            return out
        out += [(r.offset, r.key) for r in info.records()]
        offset = batches[-1].next_offset


def visible(view: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    return [(o, k) for o, k in view if not k.startswith(b"a-")]


def _data_and_marker_in_one_segment(w: Writer) -> None:
    w.plain(); w.txn(ABORTER); w.txn(COMMITTER); w.plain(); w.txn(ABORTER)
    w.end(ABORTER); w.end(COMMITTER); w.plain()
    w.log.roll()
    w.plain()
    w.log.roll()


def _marker_in_the_next_segment(w: Writer) -> None:
    w.plain(); w.txn(ABORTER); w.txn(COMMITTER); w.plain()
    w.log.roll()
    w.plain(); w.end(ABORTER); w.plain(); w.end(COMMITTER)
    w.log.roll()
    w.plain()
    w.log.roll()


def _marker_still_local(w: Writer) -> None:
    w.plain(); w.txn(ABORTER); w.plain(); w.txn(ABORTER)
    w.log.roll()
    w.plain(); w.end(ABORTER); w.plain()  # the active segment: never tiered


def _data_spanning_two_segments(w: Writer) -> None:
    w.plain(); w.txn(ABORTER); w.plain()
    w.log.roll()
    w.txn(ABORTER); w.txn(COMMITTER); w.plain()
    w.log.roll()
    w.plain(); w.end(COMMITTER); w.end(ABORTER); w.plain()
    w.log.roll()
    w.plain()
    w.log.roll()


def _marker_after_empty_segments(w: Writer) -> None:
    w.plain(); w.txn(ABORTER)
    for _ in range(3):
        w.log.roll()
        w.plain(6)
    w.log.roll()
    w.end(ABORTER); w.plain()
    w.log.roll()


LAYOUTS: dict[str, Callable[[Writer], None]] = {
    "same-segment": _data_and_marker_in_one_segment,
    "marker-in-next-remote-segment": _marker_in_the_next_segment,
    "marker-still-local": _marker_still_local,
    "data-spanning-two-segments": _data_spanning_two_segments,
    "marker-after-segments-without-aborts": _marker_after_empty_segments,
}


MANAGER_CONFIG = {"segment.bytes": 1 << 20, "local.retention.bytes": 0,
                  "remote.storage.enable": True, "remote.storage.manager": "local"}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_log_read_from_the_tier_skips_aborted_records_like_the_local_path(manager, layout):
    log = manager.create_topic("orders", 1)[0]
    w = Writer(log)
    LAYOUTS[layout](w)
    local = consumer_view(log, 0)
    assert (local == visible(local) and any(k.startswith(b"c-") for _, k in local)) \
        or layout in ("marker-still-local", "marker-after-segments-without-aborts")
    manager.tier_now()
    assert log.local_log_start_offset > 0  # the first segments are only in the tier now
    assert log.read(0, isolation=RC).from_remote
    assert consumer_view(log, 0) == local
    # Starting at every offset gives the same answer as the local path did.
    for start in range(log.last_stable_offset):
        assert consumer_view(log, start) == [(o, k) for o, k in local if o >= start]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_marker_beyond_the_reads_upper_bound(manager, layout):
    log = manager.create_topic("orders", 1)[0]
    w = Writer(log)
    LAYOUTS[layout](w)
    bounds = range(1, log.last_stable_offset, 3)
    local = {upper: consumer_view(log, 0, upper) for upper in bounds}
    manager.tier_now()
    for upper in bounds:
        got = consumer_view(log, 0, upper)
        assert got == local[upper] == visible(local[upper]), upper


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tier_reader_agrees_with_the_local_path(manager, tmp_path, layout):
    log = manager.create_topic("orders", 1)[0]
    w = Writer(log)
    LAYOUTS[layout](w)
    local = consumer_view(log, 0)
    manager.tier_now()
    tier_end = log.highest_offset_in_remote + 1
    reader = RemoteTopicReader(f"file://{tmp_path}/tier")
    latest = reader.offset_range("orders", 0, isolation_level=RC)[1]
    expected = [(o, k) for o, k in local if o < latest]
    assert latest <= tier_end
    rows = reader.read_table("orders", isolation_level=RC).to_pylist()
    assert [(r["offset"], r["key"]) for r in rows] == expected == visible(expected)
    for end in range(1, latest, 3):  # markers beyond the read's end
        rows = reader.read_table("orders", isolation_level=RC,
                                 ending_offsets={0: end}).to_pylist()
        assert [(r["offset"], r["key"]) for r in rows] == [(o, k) for o, k in expected
                                                           if o < end], end


def test_collection_stops_at_the_first_complete_source() -> None:
    asked: list[int] = []

    def sources():
        for i, entries in enumerate([
            [AbortedTxn(1, 0, 5, 3)],
            [AbortedTxn(2, 4, 12, 20), AbortedTxn(1, 0, 5, 3)],
            [AbortedTxn(3, 25, 30, 40)],
        ]):
            asked.append(i)
            yield None if i == 0 and not entries else AbortedTxnList(entries)

    found = collect_aborted_txns(sources(), 2, 15)
    assert found == [AbortedTxn(1, 0, 5, 3), AbortedTxn(2, 4, 12, 20)]  # duplicate kept once
    assert asked == [0, 1]  # the third index is never fetched
