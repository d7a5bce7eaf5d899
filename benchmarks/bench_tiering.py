"""Tiering to S3 (moto's server over HTTP on loopback):

- copying a 64 MiB segment with its indexes, snapshot, epochs and metadata commit, against
  s3fs ``put_file`` of the same ``.log`` alone (target: at most 1.25x), same run;
- object requests per remote fetch with a cold and a warm index cache (target: 2 and 1).
"""

from __future__ import annotations

import logging
import os
import time

import s3fs
from _util import report, scratch_dir
from moto.server import ThreadedMotoServer

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch

BUCKET = "bench"
SEGMENT_BYTES = 64 << 20
CREDENTIALS = {"key": "AKIABENCHMARKKEY0001", "secret": "bench-secret"}


def _options(endpoint: str) -> dict[str, str]:
    return {"endpoint_url": endpoint, "region": "us-east-1", **CREDENTIALS}


def _fill(log, total_bytes: int) -> None:
    records = [Record(key=b"key-%d" % i, value=os.urandom(100)) for i in range(140)]
    batch = build_batch(records)
    for _ in range(total_bytes // len(batch)):
        log.append(batch)


def main() -> dict[str, float]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's per-request access log
    os.environ.setdefault("AWS_ACCESS_KEY_ID", CREDENTIALS["key"])
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", CREDENTIALS["secret"])
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    fs = s3fs.S3FileSystem(endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"},
                           skip_instance_cache=True, **CREDENTIALS)
    fs.call_s3("create_bucket", Bucket=BUCKET)
    copy_times, put_times = [], []
    try:
        with scratch_dir("tiering") as root:
            for run in range(3):
                config = {
                    "segment.bytes": SEGMENT_BYTES + (1 << 20),
                    "remote.storage.enable": True, "remote.storage.manager": "s3",
                    "remote.storage.url": f"s3://{BUCKET}/tier-{run}",
                    **{f"remote.storage.options.{k}": v for k, v in _options(endpoint).items()},
                }
                mgr = LogManager.open(root / f"data-{run}", config, start_scheduler=False)
                log = mgr.create_topic("bench", 1)[0]
                _fill(log, SEGMENT_BYTES)
                log.roll()
                segment = log.segments.values()[0]
                start = time.perf_counter()
                put_path = f"{BUCKET}/baseline-{run}/segment.log"
                fs.put_file(str(segment.log.path), put_path)
                put_times.append(time.perf_counter() - start)
                start = time.perf_counter()
                copied = mgr.tier_now()["bench-0"].copied
                copy_times.append(time.perf_counter() - start)
                assert len(copied) == 1, copied
                if run == 0:
                    requests = _fetch_requests(mgr, log)
                mgr.close()
    finally:
        server.stop()
    size_mib = SEGMENT_BYTES / (1 << 20)
    copy, put = min(copy_times), min(put_times)
    ratio = copy / put
    report(f"tiering a {size_mib:.0f} MiB segment to moto S3 over HTTP (best of 3)", [
        ("s3fs put_file of the .log alone", f"{put:6.2f} s  ({size_mib / put:5.0f} MiB/s)"),
        ("tierlog copy (.log, indexes, snapshot, epochs, metadata)",
         f"{copy:6.2f} s  ({size_mib / copy:5.0f} MiB/s)"),
        ("ratio copy/put_file", f"{ratio:6.2f}x  (target <= 1.25x)"),
        ("requests per remote fetch, cold index cache", f"{requests[0]}  (target <= 2)"),
        ("requests per remote fetch, warm index cache", f"{requests[1]}  (target 1)"),
    ])
    return {"copy_ratio": ratio, "cold_requests": requests[0], "warm_requests": requests[1]}


def _fetch_requests(mgr, log) -> tuple[int, int]:
    """Object requests of a 1 MiB read served by the remote tier (``log.remote``, what
    ``log.read`` calls below the local log start offset) with a cold, then a warm, index
    cache."""
    stats = mgr.remote_log_manager.rsm.stats
    stats.reset()
    log.remote.read(1000, 1 << 20, "log_end", log.log_end_offset, True)
    cold = stats.total
    stats.reset()
    log.remote.read(20_000, 1 << 20, "log_end", log.log_end_offset, True)
    return cold, stats.total


if __name__ == "__main__":
    main()
