"""A leader's answer to a follower fetching offsets only the remote tier holds (issue 24):
OFFSET_MOVED_TO_TIERED_STORAGE with the offsets and no data (Kafka's leader), while a
consumer fetching the same offsets reads them from the tier."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.server.api.fetch import read_partitions
from tierlog.server.api.fetch_sessions import FetchSessionCache


def test_a_follower_below_the_local_log_start_is_sent_to_the_tier(tmp_path: Path,
                                                                  clock: Any) -> None:
    config = {"segment.bytes": 4096, "remote.storage.enable": True,
              "remote.storage.manager": "local", "local.retention.bytes": 0,
              "remote.storage.url": (tmp_path / "tier").as_uri()}
    with LogManager.open(tmp_path / "data", config, time_ms=clock,
                         start_scheduler=False) as mgr:
        (log,) = mgr.create_topic("orders", 1)
        for i in range(20):
            log.append_records([Record(key=b"k%d" % i, value=b"v" * 500)])
        mgr.tier_now()
        local_start = log.local_log_start_offset
        assert local_start > 0
        wanted = [(("orders", 0), 0, 1 << 20)]
        (moved,) = read_partitions(mgr, FetchSessionCache().context(0, -1, wanted, []),
                                   "log_end", 1 << 20, from_follower=True)
        assert moved.error == ErrorCode.offset_moved_to_tiered_storage
        assert moved.data is None
        assert (moved.log_start_offset, moved.high_watermark) == (0, log.high_watermark)
        (read,) = read_partitions(mgr, FetchSessionCache().context(0, -1, wanted, []),
                                  "read_uncommitted", 1 << 20)
        assert read.error == ErrorCode.none and read.size > 0  # a consumer reads the tier
        at_start = [(("orders", 0), local_start, 1 << 20)]
        (local,) = read_partitions(mgr, FetchSessionCache().context(0, -1, at_start, []),
                                   "log_end", 1 << 20, from_follower=True)
        assert local.error == ErrorCode.none and local.size > 0
