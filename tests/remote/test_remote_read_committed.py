"""read_committed across the remote tier: for every layout of a transaction's data and its
ABORT marker over remote and local segments, ``Log.read`` served from the tier and
``tierlog.reader`` return what the local path returns, and what Kafka's consumer rule says
(no record of an aborted transaction, no control record)."""

from __future__ import annotations

import pytest
from support.txn_layouts import LAYOUTS, RC, LayoutWriter, consumer_view, visible

from tierlog.index.aborted_txns import AbortedTxnList, collect_aborted_txns
from tierlog.index.transaction_index import AbortedTxn
from tierlog.reader import RemoteTopicReader

MANAGER_CONFIG = {"segment.bytes": 1 << 20, "local.retention.bytes": 0,
                  "remote.storage.enable": True, "remote.storage.manager": "local"}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_log_read_from_the_tier_skips_aborted_records_like_the_local_path(manager, layout):
    log = manager.create_topic("orders", 1)[0]
    w = LayoutWriter(log)
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
    w = LayoutWriter(log)
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
    w = LayoutWriter(log)
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
