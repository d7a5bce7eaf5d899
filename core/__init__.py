"""tierlog: Apache Kafka's storage engine in Python, byte-compatible on disk, with tiered storage.

The public names are re-exported here; see the README for the tour.
"""

from __future__ import annotations

from tierlog import errors
from tierlog.config import LogConfig
from tierlog.fetch import FetchDataInfo
from tierlog.log import Log, LogAppendInfo
from tierlog.manager import LogManager
from tierlog.records.record import Record

__all__ = ["FetchDataInfo", "Log", "LogAppendInfo", "LogConfig", "LogManager", "Record", "errors"]
__version__ = "0.1.0"
