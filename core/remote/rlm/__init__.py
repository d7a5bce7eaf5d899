"""RemoteLogManager and its parts: copy and retention, remote reads and tail
publication, quotas, backoff, index caches and byte checks.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog.remote.rlm.rlm import RemoteLimits, RemoteLogManager, TierResult

_EXPORTS = {
    "RemoteLimits": "tierlog.remote.rlm.rlm",
    "RemoteLogManager": "tierlog.remote.rlm.rlm",
    "TierResult": "tierlog.remote.rlm.rlm",
}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = ["RemoteLimits", "RemoteLogManager", "TierResult"]
