"""LogManager: every partition of the broker's log dirs, its configuration, the
remote tier's wiring and the lock that keeps one process per data dir.

Its public names are importable from the package itself; each is imported on first use
(PEP 562), so importing one module of the room does not load the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tierlog.common.lazy_exports import lazy_getattr

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager

_EXPORTS = {"LogManager": "tierlog.manager.log_manager"}


__getattr__ = lazy_getattr(__name__, _EXPORTS, globals())


__all__ = ["LogManager"]
