"""What the storage metrics cost the append path: throughput with metrics on vs off, same run.

"On" is a LogManager log whose metrics are exported: the metrics plugin loaded and a scraper
thread collecting the whole registry (``registry_for(manager)``, every metric rendered as
Prometheus text) every 50 ms, 20x a usual scrape rate. "Off" is the same kind of log with no
registry and no scraper. The engine's counters (tierlog.common.stats) are always there; what they
cost the hot path is measured apart: the same appends with the two per-batch counter increments
done twice (the extra pair is the cost of the pair), paired chunk by chunk.

Each writer appends pre-built batches to its own log; the writers take turns chunk by chunk
(the order rotating), so a drift in the VM's page-cache speed hits both alike. Reported: the
median over chunks of the paired ratio of chunk times, for 16 KiB batches (bench_append's) and
small 1 KiB batches, where a per-batch cost shows most; the same figure for two writers that
differ in nothing ("A/A": the noise floor of the run); and a scrape's time. Goal: on/off within
3%. On a busy machine, more chunks (TIERLOG_BENCH_CHUNKS) steady the medians.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _util import report, scratch_dir

from tierlog import LogManager, Record
from tierlog.plugins.metrics import prometheus_text, registry_for
from tierlog.records import build_batch

CHUNK_BATCHES = 400
#: Chunks per writer (TIERLOG_BENCH_CHUNKS: more for a steadier median on a busy machine).
CHUNKS = int(os.environ.get("TIERLOG_BENCH_CHUNKS", "40"))
SCRAPE_INTERVAL_S = 0.05
GOAL = 0.03


def _batch(target: int) -> bytes:
    records = [Record(key=b"key-%d" % i, value=os.urandom(100)) for i in range(400)]
    n = 1
    while n < len(records) and len(build_batch(records[: n + 1])) <= target:
        n += 1
    return build_batch(records[:n])


class Scraper:
    """Collects a registry as Prometheus text every SCRAPE_INTERVAL_S until stopped."""

    def __init__(self, manager: LogManager) -> None:
        self.registry = registry_for(manager)
        prometheus_text(self.registry)  # the first scrape imports and caches: not timed
        self.scrapes = 0
        self.times: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(SCRAPE_INTERVAL_S):
            started = time.perf_counter()
            prometheus_text(self.registry)
            self.times.append(time.perf_counter() - started)
            self.scrapes += 1

    def median_ms(self) -> float:
        return statistics.median(self.times) * 1000 if self.times else 0.0

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _paired(writers: dict[str, Callable[[], None]]) -> dict[str, list[float]]:
    """Chunk times of each writer, taking turns (the order rotating each chunk)."""
    names = list(writers)
    times: dict[str, list[float]] = {n: [] for n in names}
    for chunk in range(CHUNKS):
        order = names[chunk % len(names):] + names[: chunk % len(names)]
        for name in order:
            started = time.perf_counter()
            writers[name]()
            times[name].append(time.perf_counter() - started)
    return times


def _ratio(slow: list[float], fast: list[float]) -> float:
    """Median paired ratio slow/fast - 1 (positive: ``slow`` costs more)."""
    return statistics.median(s / f for s, f in zip(slow, fast, strict=True)) - 1


def run_size(root: Path, size: int) -> list[tuple[str, str]]:
    batch = _batch(size)
    on_mgr = LogManager.open(root / f"on-{size}", {"segment.bytes": 1 << 30})
    off_mgr = LogManager.open(root / f"off-{size}", {"segment.bytes": 1 << 30})
    on_log = on_mgr.create_topic("on", 1)[0]
    off_log = off_mgr.create_topic("off", 1)[0]
    counted_log = off_mgr.create_topic("counted", 1)[0]
    scraper = Scraper(on_mgr)

    def writer(log_: object, count_twice: bool = False) -> Callable[[], None]:
        append = log_.append  # type: ignore[attr-defined]
        stats = log_.stats  # type: ignore[attr-defined]

        def write() -> None:
            for _ in range(CHUNK_BATCHES):
                info = append(batch)
                if count_twice:  # the hot path's pair of increments, once more
                    stats.append_bytes += info.valid_bytes
                    stats.append_messages += info.record_count
        return write

    def plain(log_: object) -> Callable[[], None]:
        append = log_.append  # type: ignore[attr-defined]

        def write() -> None:
            for _ in range(CHUNK_BATCHES):
                info = append(batch)
                _ = info.valid_bytes, info.record_count  # the same reads, no counting
        return write

    try:
        for log_ in (on_log, off_log, counted_log):  # arm the hot path, warm the caches
            for _ in range(100):
                log_.append(batch)
        times = _paired({"on": writer(on_log), "off": writer(off_log),
                         "counted twice": writer(counted_log, True),
                         "counted once": plain(counted_log)})
    finally:
        scraper.stop()
        on_mgr.close()
        off_mgr.close()
    per_batch = {n: statistics.median(t) / CHUNK_BATCHES * 1e6 for n, t in times.items()}
    exporter = _ratio(times["on"], times["off"])
    counters = _ratio(times["counted twice"], times["counted once"])
    same = _ratio(times["counted once"], times["off"])
    return [
        (f"{len(batch)}-byte batches, metrics off", f"{per_batch['off']:.2f} us a batch"),
        (f"{len(batch)}-byte batches, metrics on ({scraper.scrapes} scrapes)",
         f"{per_batch['on']:.2f} us a batch"),
        ("  on vs off (median paired)",
         f"{exporter:+.1%}  [goal within {GOAL:.0%}: {'met' if abs(exporter) <= GOAL else 'MISSED'}]"),
        ("  A/A, no metrics on either (median paired)", f"{same:+.1%}"),
        ("  the hot path's counter increments (median paired)", f"{counters:+.1%}"),
        ("  a scrape (median)", f"{scraper.median_ms():.2f} ms"),
    ]


def main() -> None:
    with scratch_dir("metrics") as root:
        rows = run_size(root, 16 * 1024) + run_size(root, 1024)
    report(f"append with metrics on vs off: {CHUNKS} chunks of {CHUNK_BATCHES} batches per "
           f"writer, interleaved", rows)


if __name__ == "__main__":
    main()
