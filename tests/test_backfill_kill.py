"""SIGKILL tests of the tier writer: a subprocess runs a Spark writer's job (the data source's
task ``write`` and driver ``commit``, tests/backfill_crash_driver.py) and kills itself at a
deterministic point mid-write or mid-commit. Readers then see each partition all or nothing,
and the next job rolls a started commit forward, cleans the staging and continues after it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from backfill_crash_driver import rows
from backfill_crash_driver import run_job as run_job_here

from tierlog.partitioner import partition_for_key
from tierlog.reader import RemoteTopicReader

DRIVER = Path(__file__).with_name("backfill_crash_driver.py")
FIRST_JOB = (0, 150)
NEXT_JOB = (1000, 30)


def expected(first: int, n: int) -> dict[int, Counter]:
    out: dict[int, Counter] = {0: Counter(), 1: Counter()}
    for r in rows(first, n).to_pylist():
        out[partition_for_key(r["key"], 2)][(r["key"], r["value"], r["timestamp"])] += 1
    return out


def visible(url: str) -> dict[int, list[dict]]:
    reader = RemoteTopicReader(url)
    if "t" not in reader.list_topics():
        return {}
    table = reader.read_table("t").to_pylist()
    out: dict[int, list[dict]] = {}
    for r in sorted(table, key=lambda r: (r["partition"], r["offset"])):
        out.setdefault(r["partition"], []).append(r)
    return out


def as_counter(records: list[dict]) -> Counter:
    return Counter((r["key"], r["value"], r["timestamp"].replace(tzinfo=None)) for r in records)


def run_killed(url: str, kill_at: str) -> None:
    env = {**os.environ, "TIERLOG_TEST_KILL_AT": kill_at,
           "PYTHONPATH": os.pathsep.join([str(DRIVER.parent), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(DRIVER), url, *map(str, FIRST_JOB)],
                          check=False, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr[-3000:]
    assert "committed" not in proc.stdout


@pytest.mark.parametrize(("kill_at", "committed"), [
    ("StagedPartitionWriter._finish_chunk:3", False),  # mid-write: a task staging chunks
    ("BackfillCommitter._plan:1", False),  # the driver planning, no job record yet
    ("BackfillCommitter._apply:1", True),  # job record written, nothing copied
    ("BackfillCommitter._copy_segment:3", True),  # copying the first partition's segments
    ("RemoteLogMetadataManager.finish_remote_log_segments:2", True),  # between manifests
    ("BackfillCommitter.abort:1", True),  # every manifest replaced, staging not deleted
])
def test_a_killed_writer_leaves_all_or_nothing_and_the_next_job_recovers(tmp_path, kill_at,
                                                                         committed):
    url = f"file://{tmp_path}/tier"
    run_killed(url, kill_at)
    first = expected(*FIRST_JOB)
    seen = visible(url)
    for p, records in seen.items():  # each partition: nothing of the job or all of it
        assert as_counter(records) in (Counter(), first[p]), p
    if not committed:
        assert seen == {} or all(not r for r in seen.values())
    # The next job (same driver code, in this process) rolls forward and cleans up.
    run_job_here(url, *NEXT_JOB)
    nxt = expected(*NEXT_JOB)
    after = visible(url)
    for p in (0, 1):
        records = after.get(p, [])
        assert [r["offset"] for r in records] == list(range(len(records)))  # contiguous
        want = nxt[p] + (first[p] if committed else Counter())
        assert as_counter(records) == want  # exactly once each
        if committed:  # the first job's records come first
            assert as_counter(records[:sum(first[p].values())]) == first[p]
    tier = tmp_path / "tier"
    assert not [p for p in (tier / "_staging").rglob("*") if p.is_file()] \
        if (tier / "_staging").exists() else True
    assert not list((tier / "_jobs").glob("*.json")) if (tier / "_jobs").exists() else True
