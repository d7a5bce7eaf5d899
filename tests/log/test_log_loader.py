"""LogLoader: leftover ``.deleted``/``.tmp``/``.cleaned``/``.swap`` files are finished or
discarded as Kafka's loader does, stray snapshots go, and a log start offset beyond the data
empties the log."""

from __future__ import annotations

import shutil

from support.log_invariants import check_indexes, check_offsets_contiguous, log_batches

from tierlog import Log, Record
from tierlog.records import build_batch

CONFIG = {"segment.bytes": 1024}


def _build(directory, clock, batches=30):
    with Log.open(directory, CONFIG, time_ms=clock, auto_high_watermark=True) as log:
        for i in range(batches):
            log.append(build_batch([Record(key=b"k%d" % (i % 4), value=b"v" * 80)],
                                   producer_id=3, producer_epoch=0, base_sequence=i,
                                   now_ms=clock.now))
        return log.segments.base_offsets(), log.log_end_offset


def _names(directory):
    return sorted(p.name for p in directory.iterdir())


def test_deleted_and_tmp_files_are_removed(tmp_path, clock):
    directory = tmp_path / "t-0"
    _bases, leo = _build(directory, clock)
    leftovers = ["00000000000000000000.log.deleted", "00000000000000000000.index.deleted",
                 "leader-epoch-checkpoint.tmp", f"{leo:020d}.snapshot.tmp"]
    for name in leftovers:
        (directory / name).write_bytes(b"junk")
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        assert sorted(log.recovery.files_removed) == sorted(leftovers)
        assert log.log_end_offset == leo
    assert not set(leftovers) & set(_names(directory))


def test_cleaned_files_of_an_unfinished_cleaning_are_discarded(tmp_path, clock):
    directory = tmp_path / "t-0"
    bases, leo = _build(directory, clock)
    before = _names(directory)
    for suffix in (".log", ".index", ".timeindex"):
        (directory / f"00000000000000000000{suffix}.cleaned").write_bytes(b"partial")
    # A .swap at or above the lowest .cleaned offset belongs to an unfinished split.
    (directory / f"{bases[1]:020d}.log.swap").write_bytes(b"half a split")
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        assert log.recovery.swaps_completed == []
        assert len(log.recovery.files_removed) == 4
        assert log.segments.base_offsets() == bases and log.log_end_offset == leo
    assert _names(directory) == before


def _compacted_swap(tmp_path, clock, keep_offsets, directory):
    """Write the batches at ``keep_offsets`` (offsets kept) as a cleaned segment at base 0
    and rename its files ``.swap`` in ``directory``, as the cleaner's step 1 leaves them."""
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        kept = [bytes(b.view()) for b in log_batches(log) if b.base_offset in keep_offsets]
    scratch = tmp_path / "scratch" / "c-0"
    with Log.open(scratch, {"segment.bytes": 1 << 20}, time_ms=clock) as cleaned:
        cleaned.append(b"".join(kept), assign_offsets=False, origin="replication")
    for suffix in (".log", ".index", ".timeindex"):
        shutil.copy(scratch / f"00000000000000000000{suffix}",
                    directory / f"00000000000000000000{suffix}.swap")
    return kept


def test_interrupted_swap_is_completed(tmp_path, clock):
    directory = tmp_path / "t-0"
    bases, leo = _build(directory, clock)
    replaced_end = bases[2]  # the swap replaces the first two segments
    keep = {1, 3, replaced_end - 1}
    kept = _compacted_swap(tmp_path, clock, keep, directory)
    # The crash came after the cleaner renamed one replaced segment's .log to .deleted.
    (directory / f"{bases[1]:020d}.log").rename(directory / f"{bases[1]:020d}.log.deleted")
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        report = log.recovery
        assert sorted(report.swaps_completed) == [
            "00000000000000000000.index", "00000000000000000000.log",
            "00000000000000000000.timeindex"]
        assert log.segments.base_offsets() == [0, *bases[2:]]
        batches = log_batches(log)
        assert [bytes(b.view()) for b in batches[:len(kept)]] == kept
        assert batches[len(kept)].base_offset == replaced_end
        assert log.log_end_offset == leo
        check_indexes(log, recovered=False)
        # Producer state is rebuilt across the swapped-in segment.
        assert log.producer_state.last_entry(3).last_seq == leo - 1
    assert not any(n.endswith((".swap", ".deleted")) for n in _names(directory))
    assert not (directory / f"{bases[1]:020d}.index").exists()
    assert not (directory / f"{bases[1]:020d}.snapshot").exists()


def test_swap_after_a_crash_is_completed_then_recovered(tmp_path, clock):
    directory = tmp_path / "t-0"
    bases, leo = _build(directory, clock)
    _compacted_swap(tmp_path, clock, {0, bases[1] - 1}, directory)
    with Log.open(directory, CONFIG, time_ms=clock, recovery_point=0) as log:
        assert log.segments.base_offsets() == [0, *bases[1:]]
        assert "00000000000000000000.log" in log.recovery.indexes_rebuilt
        check_indexes(log)
        assert log.log_end_offset == leo


def test_stray_snapshots_are_removed(tmp_path, clock):
    directory = tmp_path / "t-0"
    bases, leo = _build(directory, clock)
    snapshot = directory / f"{leo:020d}.snapshot"
    data = snapshot.read_bytes()
    for offset in (bases[1] + 2, bases[2] + 1):  # match no segment and are not the newest
        (directory / f"{offset:020d}.snapshot").write_bytes(data)
    with Log.open(directory, CONFIG, time_ms=clock, had_clean_shutdown=True) as log:
        assert log.producer_state.last_entry(3).last_seq == leo - 1
    offsets = sorted(int(p.name[:20]) for p in directory.glob("*.snapshot"))
    assert offsets == [*bases[1:], leo]


def test_log_start_offset_beyond_the_data_empties_the_log(tmp_path, clock):
    directory = tmp_path / "t-0"
    bases, leo = _build(directory, clock)
    with Log.open(directory, CONFIG, time_ms=clock, log_start_offset=leo + 50,
                  recovery_point=leo) as log:
        assert log.segments.base_offsets() == [leo + 50]
        assert (log.log_start_offset, log.log_end_offset) == (leo + 50, leo + 50)
        assert log.recovery.segments_deleted == bases
        assert log.leader_epoch_cache.entries() == []
        assert dict(log.producer_state.active_producers) == {}
        assert log.append_records([Record(value=b"x")]).first_offset == leo + 50
        check_offsets_contiguous(log)


def test_a_crash_mid_roll_with_a_preallocated_segment_opens(tmp_path, clock):
    """Killed in a roll: the next segment's .log exists without its indexes, and the rolled,
    preallocated segment still has its zero tail. The open recovers the old segment first
    (keeping every batch) instead of replaying producer state through its zeros."""
    directory = tmp_path / "t-0"
    log = Log.open(directory, {"segment.bytes": 1 << 16, "preallocate": True}, time_ms=clock)
    for sequence in range(20):
        log.append_records([Record(key=b"k", value=b"v" * 100)], producer_id=7,
                           producer_epoch=0, base_sequence=sequence)
    (directory / "00000000000000000020.log").touch()  # the roll's first file, and no more
    del log  # the process dies: no close, so segment 0 keeps its preallocated zeros
    reopened = Log.open(directory, {"segment.bytes": 1 << 16, "preallocate": True},
                        time_ms=clock, recovery_point=0)
    assert reopened.log_end_offset == 20
    assert [r.offset for r in reopened.read(0, 1 << 20).records()] == list(range(20))
    duplicate = reopened.append_records([Record(key=b"k", value=b"v" * 100)], producer_id=7,
                                        producer_epoch=0, base_sequence=19)
    assert duplicate.duplicate and duplicate.first_offset == 19
    reopened.close()
