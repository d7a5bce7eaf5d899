"""Cleanup policies: ``delete`` (retention by time, size and log start offset) and ``compact``.

Each policy is a plugin registered through ``tierlog_register_cleanup_policies``.
"""

from __future__ import annotations

from tierlog.contracts.cleanup_policy import CleanupResult

__all__ = ["CleanupResult"]
