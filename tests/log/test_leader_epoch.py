"""LeaderEpochFileCache: Kafka's assign, truncation and endOffsetFor rules, and its checkpoint."""

from __future__ import annotations

import itertools
import threading

import pytest

from tierlog.checkpoint.checkpoint_file import EpochEntry, LeaderEpochCheckpointFile
from tierlog.errors import CorruptCheckpointError
from tierlog.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochFileCache

UNDEFINED = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


@pytest.fixture
def checkpoint(tmp_path):
    return LeaderEpochCheckpointFile(tmp_path / "leader-epoch-checkpoint")


def _cache(checkpoint, *pairs):
    cache = LeaderEpochFileCache(checkpoint)
    for epoch, start in pairs:
        cache.assign(epoch, start)
    return cache


def test_assign_flushes_and_a_new_cache_loads_the_checkpoint(checkpoint):
    _cache(checkpoint, (2, 6), (3, 8), (4, 11))
    assert checkpoint.path.read_bytes() == b"0\n3\n2 6\n3 8\n4 11\n"
    reloaded = LeaderEpochFileCache(checkpoint)
    assert reloaded.entries() == [EpochEntry(2, 6), EpochEntry(3, 8), EpochEntry(4, 11)]
    assert reloaded.latest_epoch == 4
    assert reloaded.latest_entry == EpochEntry(4, 11)
    assert reloaded.earliest_entry == EpochEntry(2, 6)


def test_assign_same_epoch_at_higher_offset_is_ignored(checkpoint):
    cache = _cache(checkpoint, (2, 6))
    checkpoint.path.unlink()
    cache.assign(2, 10)
    assert cache.entries() == [EpochEntry(2, 6)]
    assert not checkpoint.path.exists(), "an ignored assign must not rewrite the checkpoint"


def test_assign_same_epoch_at_lower_offset_replaces_it(checkpoint):
    cache = _cache(checkpoint, (1, 0), (2, 6))
    cache.assign(2, 4)
    assert cache.entries() == [EpochEntry(1, 0), EpochEntry(2, 4)]


def test_assign_removes_entries_with_higher_epoch_or_offset(checkpoint):
    cache = _cache(checkpoint, (2, 6), (3, 8), (4, 11))
    cache.assign(5, 8)  # start offset 8 conflicts with (3, 8) and (4, 11)
    assert cache.entries() == [EpochEntry(2, 6), EpochEntry(5, 8)]
    cache.assign(3, 20)  # an older epoch truncates the newer ones
    assert cache.entries() == [EpochEntry(2, 6), EpochEntry(3, 20)]
    assert LeaderEpochCheckpointFile(checkpoint.path).read() == [(2, 6), (3, 20)]


def test_assign_if_newer_ignores_an_older_or_the_same_epoch(checkpoint):
    # The append rule: a batch of an older leader's epoch must not truncate newer entries
    # (assign(3, 20) would leave [(2, 6), (3, 20)]).
    cache = _cache(checkpoint, (2, 6), (4, 11))
    checkpoint.path.unlink()
    cache.assign_if_newer(3, 20)
    cache.assign_if_newer(4, 9)
    assert cache.entries() == [EpochEntry(2, 6), EpochEntry(4, 11)]
    assert not checkpoint.path.exists(), "an ignored assign must not rewrite the checkpoint"
    cache.assign_if_newer(5, 30)
    assert LeaderEpochCheckpointFile(checkpoint.path).read() == [(2, 6), (4, 11), (5, 30)]


def test_assign_if_newer_starts_an_empty_cache(checkpoint):
    cache = LeaderEpochFileCache(checkpoint)
    cache.assign_if_newer(0, 0)
    assert cache.entries() == [EpochEntry(0, 0)]


def test_assign_rejects_negative_values(checkpoint):
    cache = LeaderEpochFileCache(checkpoint)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -5)
    assert cache.entries() == []


def test_loading_drops_non_monotonic_checkpoint_entries(checkpoint):
    checkpoint.path.write_bytes(b"0\n3\n1 0\n3 10\n2 5\n")
    assert LeaderEpochFileCache(checkpoint).entries() == [EpochEntry(1, 0), EpochEntry(2, 5)]


def test_loading_negative_entries_is_a_corrupt_checkpoint(checkpoint):
    checkpoint.path.write_bytes(b"0\n1\n-2 5\n")
    with pytest.raises(CorruptCheckpointError, match="leader-epoch-checkpoint"):
        LeaderEpochFileCache(checkpoint)


def test_neighbour_epochs_and_epoch_for_offset(checkpoint):
    cache = _cache(checkpoint, (2, 6), (3, 8), (5, 11))
    assert cache.previous_epoch(5) == 3
    assert cache.previous_epoch(4) == 3
    assert cache.previous_epoch(2) is None
    assert cache.next_epoch(2) == 3
    assert cache.next_epoch(3) == 5
    assert cache.next_epoch(5) is None
    assert [cache.epoch_for_offset(o) for o in (0, 5, 6, 7, 8, 10, 11, 100)] == [
        None, None, 2, 2, 3, 3, 5, 5,
    ]


def test_end_offset_for(checkpoint):
    cache = _cache(checkpoint, (2, 6), (3, 8), (5, 11))
    assert cache.end_offset_for(UNDEFINED_EPOCH, 20) == UNDEFINED
    assert cache.end_offset_for(5, 20) == (5, 20)  # the latest epoch ends at the LEO
    assert cache.end_offset_for(3, 20) == (3, 11)
    assert cache.end_offset_for(4, 20) == (3, 11)  # unknown epoch: the largest one below it
    assert cache.end_offset_for(2, 20) == (2, 8)
    assert cache.end_offset_for(1, 20) == (1, 6)  # below every epoch: the first start offset
    assert cache.end_offset_for(6, 20) == UNDEFINED  # above every epoch


def test_end_offset_for_an_empty_cache_is_undefined():
    cache = LeaderEpochFileCache(None)
    assert cache.end_offset_for(0, 0) == UNDEFINED
    assert cache.latest_epoch is None
    assert cache.latest_entry is None and cache.earliest_entry is None


def test_truncate_from_end(checkpoint):
    cache = _cache(checkpoint, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(12)
    assert len(cache) == 3
    cache.truncate_from_end(9)
    assert cache.entries() == [EpochEntry(2, 6), EpochEntry(3, 8)]
    cache.truncate_from_end(8)
    assert cache.entries() == [EpochEntry(2, 6)]
    cache.truncate_from_end(-1)  # an undefined end offset changes nothing
    assert LeaderEpochCheckpointFile(checkpoint.path).read() == [(2, 6)]
    cache.truncate_from_end(0)
    assert cache.entries() == []


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (5, [(2, 6), (3, 8), (4, 11)]),  # before the first entry: nothing changes
        (6, [(2, 6), (3, 8), (4, 11)]),
        (7, [(2, 7), (3, 8), (4, 11)]),  # the first epoch now starts at the new start
        (8, [(3, 8), (4, 11)]),
        (9, [(3, 9), (4, 11)]),
        (12, [(4, 12)]),
    ],
)
def test_truncate_from_start(checkpoint, start, expected):
    cache = _cache(checkpoint, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start)
    assert cache.entries() == expected
    assert LeaderEpochCheckpointFile(checkpoint.path).read() == expected


def test_clear_and_flush(checkpoint):
    cache = _cache(checkpoint, (2, 6), (3, 8))
    cache.clear_and_flush()
    assert cache.entries() == []
    assert checkpoint.path.read_bytes() == b"0\n0\n"


def test_epochs_between_leaves_the_cache_alone(checkpoint):
    cache = _cache(checkpoint, (2, 6), (3, 8), (4, 11), (5, 15))
    assert cache.epochs_between(9, 15) == [EpochEntry(3, 9), EpochEntry(4, 11)]
    assert cache.epochs_between(0, 100) == cache.entries()
    assert len(cache) == 4


def test_cache_without_checkpoint_is_in_memory(tmp_path):
    cache = LeaderEpochFileCache(None)
    cache.assign(0, 0)
    cache.assign(1, 10)
    cache.truncate_from_start(5)
    assert cache.entries() == [EpochEntry(0, 5), EpochEntry(1, 10)]
    assert list(tmp_path.iterdir()) == []


def test_kafka_fixture_checkpoint(kafka_logdir):
    path = kafka_logdir / "__cluster_metadata-0" / "leader-epoch-checkpoint"
    cache = LeaderEpochFileCache(LeaderEpochCheckpointFile(path))
    assert cache.entries() == [EpochEntry(1, 0)]
    assert cache.end_offset_for(1, 4814) == (1, 4814)
    assert cache.end_offset_for(0, 4814) == (0, 0)


def test_concurrent_updates_keep_entries_monotonic_and_flushed(checkpoint):
    cache = LeaderEpochFileCache(checkpoint)

    def worker(base: int) -> None:
        for i in range(30):
            cache.assign(base + i, (base + i) * 10)
            if i % 7 == 0:
                cache.truncate_from_end((base + i) * 10 - 5)

    threads = [threading.Thread(target=worker, args=(b,)) for b in (0, 10, 20, 30)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    entries = cache.entries()
    assert entries, "some entries survive"
    assert all(a.epoch < b.epoch and a.start_offset < b.start_offset
               for a, b in itertools.pairwise(entries))
    assert LeaderEpochCheckpointFile(checkpoint.path).read() == entries
