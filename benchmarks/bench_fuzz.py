"""Hostile request frames against a real ``tierlog serve`` (issue 21, defect 10): at least
100,000 frames over every API and version the server advertises, each with lengths, counts
and sizes up to 2^63 or a null where none is allowed (tests/support/hostile_frames.py), one
connection per frame. Reports frames sent, connections the server closed (malformed frames
refused), frames answered, the server's exit status (a clean SIGTERM stop: 0) and the time.

``TIERLOG_BENCH_FUZZ_FRAMES`` sets the number of frames (default 100,000),
``TIERLOG_BENCH_FUZZ_SEED`` the seed. The server runs with ``max.broker.partitions`` =
:data:`MAX_PARTITIONS`: valid CreateTopics and CreatePartitions frames ask for up to 1,000
partitions, and at the default cap (4,000) one of them keeps a worker (and a clean stop)
busy for minutes on a slow disk; the cap is exercised either way.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time

from _util import ROOT, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))

from support.hostile_frames import Tally, frame, served_versions, throw
from server_process import start

FRAMES = int(os.environ.get("TIERLOG_BENCH_FUZZ_FRAMES", "100000"))
SEED = int(os.environ.get("TIERLOG_BENCH_FUZZ_SEED", "21"))
#: Frames built and thrown per round (bounds the client's memory).
ROUND = 5000
#: Probability that each length in a frame is a hostile one.
HOSTILE = 0.1
#: Connections open at once, and how long one waits for its answer before hanging up (a
#: valid request may long-poll: a fetch's max wait, a group join).
CONCURRENCY, WAIT_S = 32, 0.5
MAX_PARTITIONS = 400


def main() -> None:
    rng = random.Random(SEED)
    with scratch_dir("fuzz") as tmp:
        server = start(tmp, {"max.broker.partitions": MAX_PARTITIONS})
        try:
            versions = served_versions(server.host, server.port)
            total = Tally()
            started = time.monotonic()
            sent = 0
            while sent < FRAMES:
                count = min(ROUND, FRAMES - sent)
                frames = [frame(*rng.choice(versions), rng, HOSTILE, correlation_id=i)
                          for i in range(count)]
                tally = asyncio.run(throw(server.host, server.port, frames,
                                          concurrency=CONCURRENCY, timeout=WAIT_S))
                for name in ("frames", "answered", "closed", "timed_out"):
                    setattr(total, name, getattr(total, name) + getattr(tally, name))
                sent += count
                if not server.alive():
                    break
            elapsed = time.monotonic() - started
            alive = server.alive()
        finally:
            code = server.terminate()
        malformed = server.log_text().count(": malformed ")
        tracebacks = server.log_text().count("Traceback")
    report("tierlog serve under hostile frames", [
        ("APIs x versions", str(len(versions))),
        ("frames sent", f"{total.frames:,}"),
        ("connections closed by the server", f"{total.closed:,}"),
        ("  of which logged as malformed", f"{malformed:,}"),
        ("frames answered", f"{total.answered:,}"),
        ("long polls we hung up on", f"{total.timed_out:,}"),
        ("server alive after the run", str(alive)),
        ("server exit status (SIGTERM)", str(code)),
        ("server exits == 0", str(code == 0)),
        ("tracebacks in the server log", str(tracebacks)),
        ("time", f"{elapsed:.1f} s ({total.frames / elapsed:,.0f} frames/s)"),
    ])
    if not alive or code != 0:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
