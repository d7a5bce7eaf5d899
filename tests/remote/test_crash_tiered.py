"""SIGKILL rounds with tiering and local retention active (a short run of
benchmarks/bench_crash_tiered.py): after every unclean restart nothing acknowledged is lost and
every idempotent producer's re-sent last batch is deduplicated, also when that batch lives only
in the remote tier. See tests/tiered_crash.py for what each round checks."""

from __future__ import annotations

import pytest
from support.tiered_crash import check_log, run_rounds

ROUNDS = 8


@pytest.mark.slow
@pytest.mark.parametrize("seed", [2, 3])
def test_sigkilled_tiered_writer_keeps_producer_state_over_restarts(tmp_path, seed):
    root, tier_url = tmp_path / "logs", f"file://{tmp_path}/tier"
    totals = run_rounds(root, tier_url, seed, ROUNDS)
    assert totals.failures == []
    assert totals.rounds == ROUNDS and totals.restarts == ROUNDS - 1
    assert totals.duplicates_caught == totals.retries > 0
    leo, _, report = check_log(root, tier_url, seed)
    assert not report.errors
    assert leo > 0
