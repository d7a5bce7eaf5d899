"""tierlog: Apache Kafka's storage engine in Python, byte-compatible on disk, with tiered storage.

The public names are re-exported here; see the README for the tour.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog import errors
    from tierlog.config import LogConfig
    from tierlog.log.fetch_info import FetchDataInfo
    from tierlog.log.log import Log, LogAppendInfo
    from tierlog.manager.log_manager import LogManager
    from tierlog.records.record import Record

#: Public name -> the module that defines it, imported on first use (PEP 562): importing a light
#: part of the package (tierlog.errors, ``tierlog --help``) does not load the whole engine.
_EXPORTS = {"LogConfig": "tierlog.config", "FetchDataInfo": "tierlog.log.fetch_info",
            "Log": "tierlog.log.log", "LogAppendInfo": "tierlog.log.log",
            "LogManager": "tierlog.manager.log_manager", "Record": "tierlog.records.record"}


_exported = lazy_getattr(__name__, _EXPORTS, globals())


def __getattr__(name: str) -> object:
    if name == "errors":  # a submodule, not a name defined in one
        return importlib.import_module("tierlog.errors")
    return _exported(name)


__all__ = ["FetchDataInfo", "Log", "LogAppendInfo", "LogConfig", "LogManager", "Record", "errors"]
__version__ = "0.1.0"
