"""CleanupPolicy as the engine runs it: over a Log.

The contract itself (generic in the log, so it sits below the log with the hook specs) is
:mod:`tierlog.contracts.cleanup_policy`; this module keeps its public name here and binds it to
the Log the LogManager hands every policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

from tierlog.contracts.cleanup_policy import CleanupPolicy, CleanupResult

if TYPE_CHECKING:
    from tierlog.log.log import Log

__all__ = ["CleanupPolicy", "CleanupResult", "LogCleanupPolicy"]

#: A cleanup policy of the engine's logs: what ``cleanup.policy`` names and the LogManager runs.
LogCleanupPolicy: TypeAlias = "CleanupPolicy[Log]"
