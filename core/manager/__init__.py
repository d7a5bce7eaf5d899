"""LogManager: every partition of the broker's log dirs, its configuration, the
remote tier's wiring and the lock that keeps one process per data dir.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager

_EXPORTS = {"LogManager": "tierlog.manager.log_manager"}


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


__all__ = ["LogManager"]
