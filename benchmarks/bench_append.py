"""Append throughput of pre-built 16 KiB uncompressed batches vs raw os.write of the same bytes.

Issue target: tierlog >= 60% of raw os.write throughput, same disk, same run. Measured with the
default record.validation=full (every record's framing walked, as a Kafka broker does) and with
record.validation=crc (the batch CRC trusted), each against the same raw baseline.
"""

from __future__ import annotations

import os
import shutil
import time

from _util import report, scratch_dir

from tierlog import Log, Record
from tierlog.records import build_batch

BATCH_BYTES = 16 * 1024
TOTAL_BYTES = 128 * 1024 * 1024


def build_batches() -> list[bytes]:
    records = [Record(key=b"key-%d" % i, value=os.urandom(100)) for i in range(200)]
    n = 1
    while len(build_batch(records[: n + 1])) <= BATCH_BYTES:
        n += 1
    batch = build_batch(records[:n])
    return [batch] * (TOTAL_BYTES // len(batch))


def main() -> dict[str, float]:
    batches = build_batches()
    total = sum(len(b) for b in batches)
    counter = iter(range(1_000_000))
    with scratch_dir("append") as root:
        def raw() -> float:
            path = root / "raw.log"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            write = os.write
            start = time.perf_counter()
            for batch in batches:
                write(fd, batch)
            elapsed = time.perf_counter() - start
            os.close(fd)
            path.unlink()
            return elapsed

        def tierlog_append(config: dict[str, str]) -> float:
            directory = root / f"bench-{next(counter)}"
            log = Log.open(directory, config)
            append = log.append
            start = time.perf_counter()
            for batch in batches:
                append(batch)
            elapsed = time.perf_counter() - start
            log.close()
            shutil.rmtree(directory)
            return elapsed

        # Alternate the runs so all see the same machine conditions.
        modes = {"full": {}, "crc": {"record.validation": "crc"}}
        raw_times: list[float] = []
        times: dict[str, list[float]] = {mode: [] for mode in modes}
        for _ in range(5):
            raw_times.append(raw())
            for mode, config in modes.items():
                times[mode].append(tierlog_append(config))
    raw_best, raw_med = min(raw_times), sorted(raw_times)[2]
    mib = total / (1 << 20)
    rows = [("raw os.write", f"{mib / raw_best:8.0f} MiB/s (median {mib / raw_med:.0f})")]
    ratios = {}
    for mode, label in (("full", "default, records walked"), ("crc", "record.validation=crc")):
        best, median = min(times[mode]), sorted(times[mode])[2]
        ratios[mode] = raw_best / best
        rows += [
            (f"Log.append ({label})", f"{mib / best:8.0f} MiB/s (median {mib / median:.0f})"),
            ("  ratio tierlog/raw", f"{ratios[mode]:8.0%}   best/best (medians: "
                                    f"{raw_med / median:.0%}; target >= 60%)"),
        ]
    report(f"append: {len(batches)} batches of {len(batches[0])} bytes ({mib:.0f} MiB), "
           f"page cache, timing the write/append loop only", rows)
    return {"append_ratio": ratios["full"], "append_ratio_crc": ratios["crc"]}


if __name__ == "__main__":
    main()
