"""Producer id blocks from the cluster store: no two nodes ever hold one id (a shared id makes
one producer's batches the other's duplicates, and they are dropped)."""

from __future__ import annotations

import threading

import pytest

from tierlog.cluster.keys import PRODUCER_IDS
from tierlog.cluster.producer_ids import reserve_producer_ids
from tierlog.cluster.store import MetadataStore
from tierlog.errors import CorruptRemoteMetadataError
from tierlog.server.coordinator.txn.txn_producer_ids import ProducerIdBlocks


def test_nodes_draw_disjoint_blocks(store: MetadataStore, tmp_path) -> None:  # type: ignore[no-untyped-def]
    nodes = [ProducerIdBlocks(tmp_path / f"node-{n}", block_size=5,
                              reserve=lambda at, size: reserve_producer_ids(store, at, size))
             for n in range(3)]
    ids = [node.allocate() for _ in range(7) for node in nodes]
    assert len(set(ids)) == len(ids) == 21


def test_racing_reservations_never_overlap(store: MetadataStore) -> None:
    blocks: list[int] = []
    lock = threading.Lock()

    def reserve() -> None:
        for _ in range(5):
            start = reserve_producer_ids(store, 0, 100)
            with lock:
                blocks.append(start)

    threads = [threading.Thread(target=reserve) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(blocks) == list(range(0, 2000, 100))


def test_a_block_starts_above_the_ids_in_use(store: MetadataStore) -> None:
    assert reserve_producer_ids(store, 0, 10) == 0
    assert reserve_producer_ids(store, 5_000, 10) == 5_000  # the logs hold ids below 5,000
    assert reserve_producer_ids(store, 0, 10) == 5_010


def test_a_damaged_record_is_named(store: MetadataStore) -> None:
    store.create(PRODUCER_IDS, {"nextBlockStart": "soon"})
    with pytest.raises(CorruptRemoteMetadataError, match="producer-ids"):
        reserve_producer_ids(store, 0, 10)
