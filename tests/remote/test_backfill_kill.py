"""SIGKILL tests of the tier writer: a subprocess runs a Spark writer's job (the data source's
task ``write`` and driver ``commit``, tests/backfill_crash_driver.py) and kills itself at a
deterministic point mid-write or mid-commit. Every reader (tierlog.reader, the Spark source's
planning, scrub) then sees none of the job or all of it, in every partition at once (issue 21,
defect 12: a kill between manifests left partition 0 alone readable), and the next job, or a
LogManager adopting the topic, rolls a started commit forward exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from fsspec.implementations.local import LocalFileSystem
from support.backfill_crash_driver import rows
from support.backfill_crash_driver import run_job as run_job_here

from tierlog.common.partitioner import partition_for_key
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader, read_split
from tierlog.remote.ops.backfill_visibility import job_record_names
from tierlog.remote.ops.scrub import scrub_tier
from tierlog.remote.tier.object_store import RemoteTier
from tierlog.spark import TierlogOptions, plan_read

DRIVER = Path(__file__).resolve().parents[1] / "support" / "backfill_crash_driver.py"
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


def spark_visible(url: str) -> dict[int, list[dict]]:
    """What the Spark source's planning and its tasks read (no SparkSession needed)."""
    if "t" not in RemoteTopicReader(url).list_topics():
        return {}
    out: dict[int, list[dict]] = {}
    for split in plan_read(TierlogOptions.parse({"path": url, "subscribe": "t"})):
        for r in (r for b in read_split(split) for r in b.to_pylist()):
            out.setdefault(r["partition"], []).append(r)
    return out


def job_rows(seen: dict[int, list[dict]]) -> dict[int, Counter]:
    """Each partition's visible records, partitions showing none left out."""
    return {p: as_counter(records) for p, records in seen.items() if records}


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


KILL_POINTS = [
    ("StagedPartitionWriter._finish_chunk:3", False),  # mid-write: a task staging chunks
    ("BackfillCommitter._plan:1", False),  # the driver planning, no job record yet
    ("BackfillCommitter._apply:1", True),  # job record written, generation not raised
    ("BackfillCommitter._copy_segment:3", True),  # copying the first partition's segments
    ("RemoteLogMetadataManager.finish_remote_log_segments:2", True),  # between manifests
    ("BackfillCommitter.abort:1", True),  # every manifest replaced, staging not deleted
    ("RemoteTier.delete:1", True),  # staging deleted, about to delete the job record
]


def assert_none_or_all_of_the_job(url: str) -> None:
    """What a killed commit leaves visible, to every reader: the job in every partition or
    in none (issue 21, defect 12); scrub counts none of a part as committed."""
    first = {p: c for p, c in expected(*FIRST_JOB).items() if c}
    assert len(first) == 2  # the job writes both partitions
    seen = job_rows(visible(url))
    assert seen in ({}, first), {p: sum(c.values()) for p, c in seen.items()}
    assert job_rows(spark_visible(url)) == seen
    reader = RemoteTopicReader(url)
    readable = sum(len(reader.list_segments("t", p)) for p in first) if seen else 0
    report = scrub_tier(url, grace_ms=0)
    assert report.segments == readable
    assert not [f for f in report.findings if f.kind.name in ("GAP", "OVERLAP")]


@pytest.mark.parametrize(("kill_at", "committed"), KILL_POINTS)
def test_a_killed_writer_leaves_all_or_nothing_and_the_next_job_recovers(tmp_path, kill_at,
                                                                         committed):
    url = f"file://{tmp_path}/tier"
    run_killed(url, kill_at)
    first = expected(*FIRST_JOB)
    assert_none_or_all_of_the_job(url)
    if not committed:
        assert job_rows(visible(url)) == {}
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
    assert not job_record_names(RemoteTier(LocalFileSystem(), str(tier)))


def test_a_topic_adopted_after_a_killed_commit_reads_the_whole_job_once(tmp_path):
    """Log.read through adoption: adopt_topic rolls the commit killed between manifests
    forward first, so the adopted logs hold every record of the job, exactly once, at
    contiguous offsets."""
    url = f"file://{tmp_path}/tier"
    run_killed(url, "RemoteLogMetadataManager.finish_remote_log_segments:2")
    mgr = LogManager.open(tmp_path / "data", {"remote.storage.enable": True,
                                              "remote.storage.manager": "local",
                                              "remote.storage.url": url},
                          start_scheduler=False)
    try:
        logs = mgr.adopt_topic("t")
        for p, want in expected(*FIRST_JOB).items():
            log = logs[p]
            records, offset = [], log.log_start_offset
            while offset < log.log_end_offset:
                batch = list(log.read(offset, max_bytes=1 << 20).records())
                records += batch
                offset = batch[-1].offset + 1
            assert [r.offset for r in records] == list(range(len(records)))
            assert Counter((r.key, r.value, r.timestamp) for r in records) == Counter(
                {(k, v, int(ts.timestamp() * 1000)): n for (k, v, ts), n in want.items()})
    finally:
        mgr.close()
