"""Quickstart: tierlog's library API in one page. Create a topic, append records with a codec,
read them back, look an offset up by timestamp, and reopen the log directory.

Run: python examples/quickstart.py [DATA_DIR]   (default: a fresh temporary directory)
"""

from __future__ import annotations

import sys
import tempfile
import time

from tierlog import Record
from tierlog.manager import LogManager


def main(data_dir: str) -> None:
    now = int(time.time() * 1000)
    with LogManager.open(data_dir, {"segment.bytes": 1024}) as mgr:
        log = mgr.create_topic("orders", partitions=1)[0]
        for batch in range(20):
            records = [Record(key=b"customer-%d" % (n % 7), value=b"order %d" % (batch * 50 + n),
                              headers=[("source", b"quickstart")], timestamp=now + batch)
                       for n in range(50)]
            info = log.append_records(records, compression="zstd")  # one v2 batch each
        print(f"appended offsets up to {info.last_offset} in {len(log.segments)} segments")

        res = log.read(0, max_bytes=4096)  # whole batches from the one holding offset 0
        for record in list(res.records())[:3]:
            print(record.offset, record.timestamp, record.key, record.value, record.headers)

        offset = log.offset_for_timestamp(now + 10)  # earliest offset stamped >= now + 10
        print(f"first offset at or after now+10ms: {offset}")

    with LogManager.open(data_dir) as mgr:  # reopens cleanly, every record still there
        log = mgr.log("orders", 0)
        print(f"reopened: log start {log.log_start_offset}, log end {log.log_end_offset}, "
              f"high watermark {log.high_watermark}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory(prefix="tierlog-quickstart-") as tmp:
            main(tmp)
