"""RemoteLogManager and its parts: copy and retention, remote reads and tail
publication, quotas, backoff, index caches and byte checks.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.remote.rlm.rlm import RemoteLimits, RemoteLogManager, TierResult

_EXPORTS = {
    "RemoteLimits": "tierlog.remote.rlm.rlm",
    "RemoteLogManager": "tierlog.remote.rlm.rlm",
    "TierResult": "tierlog.remote.rlm.rlm",
}


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = ["RemoteLimits", "RemoteLogManager", "TierResult"]
