"""How a user-facing message shows a timestamp: epoch milliseconds with ISO-8601 UTC beside
them (``1700000000000 (2023-11-14T22:13:20.000Z)``), one helper for every error and log line.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

#: Kafka's "no timestamp" (RecordBatch.NO_TIMESTAMP).
NO_TIMESTAMP = -1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def format_timestamp_ms(timestamp_ms: int) -> str:
    """``timestamp_ms`` followed by its ISO-8601 UTC spelling in parentheses; ``-1 (no
    timestamp)`` for Kafka's NO_TIMESTAMP, and the bare number for one no calendar holds."""
    if timestamp_ms == NO_TIMESTAMP:
        return f"{timestamp_ms} (no timestamp)"
    try:
        when = _EPOCH + timedelta(milliseconds=timestamp_ms)
    except OverflowError:
        return str(timestamp_ms)
    return f"{timestamp_ms} ({when.isoformat(timespec='milliseconds').replace('+00:00', 'Z')})"
