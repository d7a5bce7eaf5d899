"""1 MiB fetches sent to a loopback TCP socket: Log.read(...).write_to vs raw os.sendfile.

Issue target: tierlog >= 70% of raw os.sendfile of the same byte ranges, same run.
"""

from __future__ import annotations

import os
import socket
import threading

from _util import best_of, report, scratch_dir

from tierlog import Log, Record
from tierlog.records import build_batch

FETCH_BYTES = 1 << 20
LOG_BYTES = 64 << 20


class Drain:
    """A loopback receiver that discards everything it is sent."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.sender = socket.create_connection(self.server.getsockname())
        self.receiver, _ = self.server.accept()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        buf = bytearray(1 << 20)
        while self.receiver.recv_into(buf):
            pass

    def close(self) -> None:
        self.sender.close()
        self.thread.join(timeout=10)
        self.receiver.close()
        self.server.close()


def main() -> dict[str, float]:
    records = [Record(key=b"key-%d" % i, value=os.urandom(100)) for i in range(140)]
    batch = build_batch(records)
    with scratch_dir("sendfile") as root:
        log = Log.open(root / "fetch-0")
        for _ in range(LOG_BYTES // len(batch)):
            log.append(batch)
        offsets = []
        offset = 0
        while offset < log.log_end_offset:
            res = log.read(offset, FETCH_BYTES)
            offsets.append((offset, res.data.position, res.size_in_bytes))
            last = None
            for b in res.batches():
                last = b
            offset = last.next_offset
        drain = Drain()
        out_fd = drain.sender.fileno()
        log_fd = os.open(log.segments.active.path, os.O_RDONLY)

        def raw() -> None:
            for _, position, size in offsets:
                sent = 0
                while sent < size:
                    sent += os.sendfile(out_fd, log_fd, position + sent, size - sent)

        def tierlog_fetch() -> None:
            for fetch_offset, _, _ in offsets:
                log.read(fetch_offset, FETCH_BYTES).write_to(drain.sender)

        raw(), tierlog_fetch()  # warm up the connection (TCP buffers autotune)
        raw_times, tl_times = [], []
        for _ in range(7):  # alternate, so both see the same connection and machine state
            raw_times.append(best_of(raw, 1)[0])
            tl_times.append(best_of(tierlog_fetch, 1)[0])
        raw_best, raw_med = min(raw_times), sorted(raw_times)[3]
        tl_best, tl_med = min(tl_times), sorted(tl_times)[3]
        total = sum(size for _, _, size in offsets) / (1 << 20)
        os.close(log_fd)
        drain.close()
        log.close()
    ratio = raw_best / tl_best
    report(f"fetch + write_to: {len(offsets)} fetches of 1 MiB ({total:.0f} MiB) over loopback TCP", [
        ("raw os.sendfile", f"{total / raw_best:8.0f} MiB/s (median {total / raw_med:.0f})"),
        ("tierlog read().write_to", f"{total / tl_best:8.0f} MiB/s (median {total / tl_med:.0f})"),
        ("ratio tierlog/raw", f"{ratio:8.0%}   best/best (medians: {raw_med / tl_med:.0%}; "
                              f"target >= 70%)"),
    ])
    return {"sendfile_ratio": ratio}


if __name__ == "__main__":
    main()
