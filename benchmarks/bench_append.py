"""Append throughput of pre-built 16 KiB uncompressed batches vs raw os.write of the same bytes.

Issue target: tierlog >= 60% of raw os.write throughput, same disk, same run.
"""

from __future__ import annotations

import os

from _util import best_of, report, scratch_dir

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
    with scratch_dir("append") as root:
        def raw() -> None:
            path = root / "raw.log"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            write = os.write
            for batch in batches:
                write(fd, batch)
            os.close(fd)
            path.unlink()

        counter = iter(range(1_000_000))

        def tierlog_append() -> None:
            directory = root / f"bench-{next(counter)}"
            log = Log.open(directory)
            append = log.append
            for batch in batches:
                append(batch)
            log.close()
            for p in directory.iterdir():
                p.unlink()
            directory.rmdir()

        raw_best, raw_med = best_of(raw, 5)
        tl_best, tl_med = best_of(tierlog_append, 5)
    mib = total / (1 << 20)
    ratio = raw_best / tl_best
    report(f"append: {len(batches)} batches of {len(batches[0])} bytes ({mib:.0f} MiB)", [
        ("raw os.write", f"{mib / raw_best:8.0f} MiB/s (median {mib / raw_med:.0f})"),
        ("tierlog Log.append", f"{mib / tl_best:8.0f} MiB/s (median {mib / tl_med:.0f})"),
        ("ratio tierlog/raw", f"{ratio:8.0%}   (target >= 60%)"),
    ])
    return {"append_ratio": ratio}


if __name__ == "__main__":
    main()
