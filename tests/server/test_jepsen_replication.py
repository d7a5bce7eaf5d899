"""The Jepsen-style run of issue 24, briefly (``benchmarks/bench_jepsen.py`` runs it at
length): three nodes, an idempotent acks=all producer, a transactional producer and a live
consumer under SIGKILLs, SIGSTOPs, restarts and cut links; after the heal every acknowledged
record is present exactly once and in order, no record read live vanished, every transaction
is whole or absent to a read_committed reader (committed ones whole, aborted ones absent), and
the replicas are byte-identical up to the high watermark."""

from __future__ import annotations

from pathlib import Path

from support.jepsen_run import run_jepsen


def test_faults_lose_no_acknowledged_record(tmp_path: Path) -> None:
    report = run_jepsen(tmp_path, seconds=20, seed=7, mean_gap_ms=2000)
    assert report.violations == [], report.summary() + "\n" + "\n".join(report.violations[:20])
    assert sum(report.faults.values()) >= 3, report.summary()
    assert report.acknowledged > 500 and report.consumed > 0, report.summary()
    assert report.transactions.get("committed", 0) > 0, report.summary()
