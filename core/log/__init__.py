"""One partition's log (Kafka's UnifiedLog and LocalLog): segments, appends, reads,
recovery, the leader-epoch cache and the producer hot path.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog.log.log import (
        EARLIEST_TIMESTAMP,
        LATEST_TIMESTAMP,
        MAX_TIMESTAMP,
        Log,
        LogAppendInfo,
    )

_EXPORTS = {
    "EARLIEST_TIMESTAMP": "tierlog.log.log",
    "LATEST_TIMESTAMP": "tierlog.log.log",
    "Log": "tierlog.log.log",
    "LogAppendInfo": "tierlog.log.log",
    "MAX_TIMESTAMP": "tierlog.log.log",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = ["EARLIEST_TIMESTAMP", "LATEST_TIMESTAMP", "MAX_TIMESTAMP", "Log", "LogAppendInfo"]
