"""Tail publishing (``remote.log.tail.ms`` = 1000): how soon a record is visible to a reader of
the tier, and what the tail costs in object requests.

- latency: append + high-watermark advance (a LogManager log's append advances it) -> the
  partition's published end (``_tail.json``, what ``RemoteTopicReader.latest_offsets`` reads)
  covers it; p50/p99 over PARTITIONS x ROUNDS samples, each appended at a random phase of the
  interval, with a running LogManager and its real scheduler (a local tier, fsynced; THREADS
  publisher threads, ``remote.log.manager.thread.pool.size``; the reader polls each pending
  partition's tail manifest every POLL_S);
- requests per partition-hour: the tier requests of the writer (uploads, size checks of the
  uploads, manifest replacements, deletes) with every partition appended to continuously
  (busy), and with no append at all (idle: the target is 0).
"""

from __future__ import annotations

import logging
import random
import statistics
import time

from _util import report, scratch_dir

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.reader import RemoteTopicReader
from tierlog.remote.tier.tail_manifest import read_tail_manifest

PARTITIONS = 100
ROUNDS = 10
INTERVAL_MS = 1000
POLL_S = 0.005
WINDOW_S = 5.0
THREADS = 8
TOPIC = "tail"


def _latency(mgr: LogManager, url: str) -> list[float]:
    reader = RemoteTopicReader(url)
    tier = reader._tier  # the reader's own tier: one GET of _tail.json per poll
    logs = [mgr.log(TOPIC, p) for p in range(PARTITIONS)]
    tips = {p: tip for p, tip in enumerate(
        reader._tip(TOPIC, p, None) for p in range(PARTITIONS))}
    rng = random.Random(13)
    samples: list[float] = []
    for _ in range(ROUNDS):
        phases = sorted((rng.uniform(0, INTERVAL_MS / 1000), p) for p in range(PARTITIONS))
        began = time.perf_counter()
        appended: dict[int, tuple[float, int]] = {}
        pending = set(range(PARTITIONS))
        while pending:
            now = time.perf_counter() - began
            while phases and phases[0][0] <= now:
                _, p = phases.pop(0)
                logs[p].append_records([Record(key=b"k", value=b"v" * 100)])
                appended[p] = (time.perf_counter(), logs[p].high_watermark)
            for p in [p for p in pending if p in appended]:
                tail = read_tail_manifest(tier, tips[p])  # type: ignore[arg-type]
                if tail is not None and tail.high_watermark >= appended[p][1]:
                    samples.append(time.perf_counter() - appended[p][0])
                    pending.discard(p)
            time.sleep(POLL_S)
    return samples


def _requests_per_partition_hour(mgr: LogManager, busy: bool) -> float:
    stats = mgr.remote_log_manager.rsm.stats  # type: ignore[union-attr]
    logs = [mgr.log(TOPIC, p) for p in range(PARTITIONS)]
    time.sleep(2 * INTERVAL_MS / 1000)  # let the last publishes finish
    mgr.await_tail_publishing(30)
    before = stats.total
    began = time.perf_counter()
    while time.perf_counter() - began < WINDOW_S:
        if busy:
            for lg in logs:
                lg.append_records([Record(key=b"k", value=b"v" * 100)])
        time.sleep(0.1)
    elapsed_h = (time.perf_counter() - began) / 3600
    return (stats.total - before) / PARTITIONS / elapsed_h


def main() -> None:
    logging.disable(logging.WARNING)
    with scratch_dir("tail") as d:
        url = (d / "tier").as_uri()
        mgr = LogManager.open(d / "data", {
            "remote.storage.enable": True, "remote.storage.manager": "local",
            "remote.storage.url": url, "remote.log.tail.ms": INTERVAL_MS,
            "segment.bytes": 1 << 20, "remote.log.manager.thread.pool.size": THREADS})
        try:
            mgr.create_topic(TOPIC, PARTITIONS)
            mgr.tier_now()  # the first tiering run's one-time orphan sweep (a GET and a LIST)
            samples = sorted(_latency(mgr, url))
            busy = _requests_per_partition_hour(mgr, busy=True)
            idle = _requests_per_partition_hour(mgr, busy=False)
        finally:
            mgr.close()
    p50 = statistics.median(samples) * 1000
    p99 = samples[int(0.99 * (len(samples) - 1))] * 1000
    report(f"tail publishing, remote.log.tail.ms={INTERVAL_MS}, {PARTITIONS} partitions", [
        (f"append -> visible to a reader, p50 ({len(samples)} samples)", f"{p50:.0f} ms"),
        ("append -> visible to a reader, p99", f"{p99:.0f} ms"),
        ("writer requests per partition-hour, busy", f"{busy:,.0f}"),
        ("writer requests per partition-hour, idle (target 0)", f"{idle:,.0f}"),
    ])


if __name__ == "__main__":
    main()
