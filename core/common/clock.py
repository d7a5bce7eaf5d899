"""The wall clock in Unix epoch milliseconds: the one real ``time_ms`` behind every component.

Components take a ``time_ms`` callable (so tests drive a fake clock); this is the default they
fall back to. It imports nothing of tierlog, so every layer can use it.
"""

from __future__ import annotations

import time

__all__ = ["system_time_ms"]


def system_time_ms() -> int:
    """Now, in milliseconds since the Unix epoch (Kafka's ``Time.SYSTEM.milliseconds()``)."""
    return time.time_ns() // 1_000_000
