"""Transactions laid out over a log's segments, for the read_committed tests of the tier: a
writer naming each record by its fate (``a-*`` aborted, the rest visible), the layouts of a
transaction's data and its marker over remote and local segments (``LAYOUTS``), and what a
read_committed consumer fetches from a log (``consumer_view``)."""

from __future__ import annotations

from collections.abc import Callable

from tierlog import Log, Record

ABORTER, COMMITTER = 7, 8
RC = "read_committed"


class LayoutWriter:
    """Appends to one log and names each record by what must happen to it: ``a-*`` records
    belong to aborted transactions, every other record is visible under read_committed."""

    def __init__(self, log: Log) -> None:
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


def consumer_view(log: Log, start: int, upper: int | None = None) -> list[tuple[int, bytes]]:
    """(offset, key) of every record a read_committed consumer gets from ``start`` up to
    ``upper`` (the log's last stable offset when None), fetching as a consumer does."""
    out: list[tuple[int, bytes]] = []
    offset = start
    while True:
        info = log.read(offset, max_bytes=700, isolation=RC, max_offset=upper)
        batches = list(info.batches())
        if not batches:
            return out
        for r in info.records():
            assert r.key is not None, f"record {r.offset} has no key: the writers name each one"
            out.append((r.offset, r.key))
        offset = batches[-1].next_offset


def visible(view: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    """The records of ``view`` no aborted transaction wrote (keys not starting ``a-``)."""
    return [(o, k) for o, k in view if not k.startswith(b"a-")]


def _data_and_marker_in_one_segment(w: LayoutWriter) -> None:
    w.plain(); w.txn(ABORTER); w.txn(COMMITTER); w.plain(); w.txn(ABORTER)
    w.end(ABORTER); w.end(COMMITTER); w.plain()
    w.log.roll()
    w.plain()
    w.log.roll()


def _marker_in_the_next_segment(w: LayoutWriter) -> None:
    w.plain(); w.txn(ABORTER); w.txn(COMMITTER); w.plain()
    w.log.roll()
    w.plain(); w.end(ABORTER); w.plain(); w.end(COMMITTER)
    w.log.roll()
    w.plain()
    w.log.roll()


def _marker_still_local(w: LayoutWriter) -> None:
    w.plain(); w.txn(ABORTER); w.plain(); w.txn(ABORTER)
    w.log.roll()
    w.plain(); w.end(ABORTER); w.plain()  # the active segment: never tiered


def _data_spanning_two_segments(w: LayoutWriter) -> None:
    w.plain(); w.txn(ABORTER); w.plain()
    w.log.roll()
    w.txn(ABORTER); w.txn(COMMITTER); w.plain()
    w.log.roll()
    w.plain(); w.end(COMMITTER); w.end(ABORTER); w.plain()
    w.log.roll()
    w.plain()
    w.log.roll()


def _marker_after_empty_segments(w: LayoutWriter) -> None:
    w.plain(); w.txn(ABORTER)
    for _ in range(3):
        w.log.roll()
        w.plain(6)
    w.log.roll()
    w.end(ABORTER); w.plain()
    w.log.roll()


#: Where a transaction's data and its marker lie over the segments, by name: each writes the
#: log and rolls the segments the tier is to hold (the active one stays local).
LAYOUTS: dict[str, Callable[[LayoutWriter], None]] = {
    "same-segment": _data_and_marker_in_one_segment,
    "marker-in-next-remote-segment": _marker_in_the_next_segment,
    "marker-still-local": _marker_still_local,
    "data-spanning-two-segments": _data_spanning_two_segments,
    "marker-after-segments-without-aborts": _marker_after_empty_segments,
}
