"""Append throughput of pre-built 16 KiB uncompressed batches vs raw os.write of the same bytes.

Issue target: tierlog >= 60% of raw os.write throughput, same disk, same run, both on a bare
``Log`` and on a log of a running ``LogManager`` (its scheduler started, default flush,
retention and checkpoint intervals). The bare Log is measured with the default
record.validation=full (every record's framing walked, as a Kafka broker does) and with
record.validation=crc (the batch CRC trusted).

The same run also measures what the armed C appender (``tierlog.log.segment_appender``) is worth,
all on a bare Log with the default config: the C appender (the default when built), its
pure-Python twin ``PlainAppenderPy``, and the general path alone (the hot path never armed).
The issue's rule: keep the C appender only if it gains >= 5% over the general path. The library
has no switch for either and gets none: the benchmark sets ``Log._fast_append = False`` on its
own instance for the general path, and swaps ``tierlog.log.segment_appender.PlainAppender`` (the
type a segment arms) for the Python twin around the Python writer's own chunks only.

This VM's page-cache write speed drifts by 20-30% between phases that last seconds, so whole
runs one after the other can compare a fast phase with a slow one. Each pass therefore writes
one file per writer side by side in 8 MiB chunks, in turn (the order rotating chunk by chunk),
timing every chunk: a phase change hits all writers alike. Reported: the best pass of each
(best/best), and the median over all chunks of the paired ratio of chunk times (raw / tierlog,
or general / appender for the gains).
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from _util import report, scratch_dir

from tierlog import Log, LogManager, Record
from tierlog.log import segment_appender
from tierlog.log.segment_appender import PlainAppenderPy
from tierlog.records import build_batch

BATCH_BYTES = 16 * 1024
TOTAL_BYTES = 128 * 1024 * 1024
CHUNK_BATCHES = 512  # 8 MiB
PASSES = 5
#: The issue's floor for tierlog / raw os.write, and the C appender's floor over the general path.
TARGET_RATIO = 0.60
C_APPENDER_MIN_GAIN = 0.05
#: The type segments arm when built (``TIERLOG_PURE_PYTHON=1`` or no compiler: the Python twin).
ARMED_TYPE = segment_appender.PlainAppender
C_BUILT = ARMED_TYPE is not PlainAppenderPy


def build_batches() -> list[bytes]:
    records = [Record(key=b"key-%d" % i, value=os.urandom(100)) for i in range(200)]
    n = 1
    while len(build_batch(records[: n + 1])) <= BATCH_BYTES:
        n += 1
    batch = build_batch(records[:n])
    return [batch] * (TOTAL_BYTES // len(batch))


@contextmanager
def armed_type(cls: type) -> Iterator[None]:
    """Segments arm ``cls`` while inside (the benchmark's switch; the library has none)."""
    saved = segment_appender.PlainAppender
    segment_appender.PlainAppender = cls
    try:
        yield
    finally:
        segment_appender.PlainAppender = saved


class Writer:
    """One file filled chunk by chunk: its write callable and the appender type it arms."""

    def __init__(self, write: Callable[[bytes], object], arms: type = ARMED_TYPE,
                 log: Log | None = None) -> None:
        self.write = write
        self.arms = arms
        self.log = log

    def timed_chunk(self, chunk: list[bytes]) -> float:
        write = self.write
        with armed_type(self.arms):  # outside the timed loop
            start = time.perf_counter()
            for batch in chunk:
                write(batch)
            return time.perf_counter() - start


def check_paths(writers: dict[str, Writer]) -> None:
    """Each tierlog writer took the path its row claims (else the figures would mislead)."""
    expected = {"full": ARMED_TYPE, "crc": ARMED_TYPE, "manager": ARMED_TYPE,
                "python": PlainAppenderPy, "general": type(None)}
    for name, want in expected.items():
        log = writers[name].log
        assert log is not None
        appender = log._plain_appender
        got = type(appender if appender is not None and appender.armed else None)
        if got is not want:
            raise RuntimeError(f"bench_append: writer {name!r} ended with {got.__name__} "
                               f"armed, expected {want.__name__}")


def one_pass(root: Path, batches: list[bytes], number: int) -> dict[str, list[float]]:
    """One file per writer, filled chunk by chunk in turn; the time of every chunk."""
    with ExitStack() as stack:
        # Each pass frees its disk on the way out (callbacks run last first: close, then remove).
        path = root / f"raw-{number}.log"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        stack.callback(path.unlink)
        stack.callback(os.close, fd)

        def bare(name: str, config: dict[str, str] | None = None) -> Log:
            directory = root / f"{name}{number}-0"
            stack.callback(shutil.rmtree, directory, ignore_errors=True)
            log = Log.open(directory, config or {})
            stack.callback(log.close)
            return log

        stack.callback(shutil.rmtree, root / f"manager{number}", ignore_errors=True)
        manager = stack.enter_context(LogManager.open(root / f"manager{number}"))
        manager.create_topic("bench", 1)
        managed = manager.log("bench", 0)
        general = bare("general")
        general._fast_append = False  # this instance never arms: every append is general
        full, crc, python = bare("full"), bare("crc", {"record.validation": "crc"}), bare("py")
        writers = {
            "raw": Writer(lambda batch, fd=fd, write=os.write: write(fd, batch)),
            "full": Writer(full.append, log=full),
            "crc": Writer(crc.append, log=crc),
            "manager": Writer(managed.append, log=managed),
            "general": Writer(general.append, log=general),
            "python": Writer(python.append, PlainAppenderPy, log=python),
        }
        order = list(writers)
        times: dict[str, list[float]] = {name: [] for name in writers}
        for number_of_chunk, first in enumerate(range(0, len(batches), CHUNK_BATCHES)):
            chunk = batches[first:first + CHUNK_BATCHES]
            shift = number_of_chunk % len(order)
            for name in order[shift:] + order[:shift]:
                times[name].append(writers[name].timed_chunk(chunk))
        check_paths(writers)
    return times


def paired(passes: list[dict[str, list[float]]], slow: str, fast: str) -> float:
    """Median over all chunks of time(slow) / time(fast), chunk by chunk."""
    return statistics.median(s / f for p in passes for s, f in zip(p[slow], p[fast]))


def main() -> dict[str, float]:
    batches = build_batches()
    total = sum(len(b) for b in batches)
    with scratch_dir("append") as root:
        passes = [one_pass(root, batches, number) for number in range(PASSES)]
    best = {name: min(sum(p[name]) for p in passes) for name in passes[0]}
    mib = total / (1 << 20)
    per_batch = 1e6 / len(batches)

    def speed(name: str) -> str:
        return f"{mib / best[name]:6.0f} MiB/s, {best[name] * per_batch:5.2f} us a batch"

    def vs_raw(name: str) -> str:
        return (f"{speed(name)}  {best['raw'] / best[name]:4.0%} of raw "
                f"(paired {paired(passes, 'raw', name):4.0%})")

    def gain(slow: str, fast: str) -> str:
        return (f"{best[slow] / best[fast] - 1:+6.1%} best/best "
                f"(paired {paired(passes, slow, fast) - 1:+.1%})")

    target = f">= {TARGET_RATIO:.0%} of raw"
    rows = [
        ("raw os.write (same run, same disk)", speed("raw")),
        (f"bare Log, default full walk [{target}]", vs_raw("full")),
        ("bare Log, record.validation=crc", vs_raw("crc")),
        (f"LogManager log, scheduler running [{target}]", vs_raw("manager")),
        ("  LogManager log / bare Log", (f"{best['full'] / best['manager']:6.0%} best/best "
                                        f"(paired {paired(passes, 'full', 'manager'):.0%})")),
        ("-- the C appender decision (bare Log, default config)", ""),
        ("general path only (never armed)", vs_raw("general")),
        ("pure-Python appender (PlainAppenderPy)", vs_raw("python")),
        ("  its gain over the general path", gain("general", "python")),
    ]
    figures = {
        "append_ratio": best["raw"] / best["full"],
        "append_ratio_crc": best["raw"] / best["crc"],
        "append_ratio_manager": best["raw"] / best["manager"],
        "append_ratio_general": best["raw"] / best["general"],
        "append_ratio_python_appender": best["raw"] / best["python"],
        "python_appender_gain": best["general"] / best["python"] - 1,
    }
    if C_BUILT:
        c_gain = figures["c_appender_gain"] = best["general"] / best["full"] - 1
        verdict = "keeps its place" if c_gain >= C_APPENDER_MIN_GAIN else "should go"
        rows += [
            ("C appender (the default above)", vs_raw("full")),
            ("  its gain over the general path", gain("general", "full")),
            ("  its gain over the pure-Python appender", gain("python", "full")),
            (f"  verdict (needs {C_APPENDER_MIN_GAIN:+.0%} over the general path)", verdict),
        ]
    else:  # TIERLOG_PURE_PYTHON=1 or not built: "full" armed the Python twin too
        rows.append(("C appender", "not built (or TIERLOG_PURE_PYTHON=1): no figure"))
    report(f"append: {len(batches)} batches of {len(batches[0])} bytes ({mib:.0f} MiB) per "
           f"writer, {PASSES} passes, page cache, timing the write/append loops only", rows)
    return figures

if __name__ == "__main__":
    main()
