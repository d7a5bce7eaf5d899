"""Produce: the engine validates and appends each partition's batches (every codec,
idempotent and transactional producers); errors come back per partition with Kafka's codes.

One node is the whole in-sync replica set: the high watermark follows the append (the flush
policy's fsync, ``flush.messages=1``, happens inside it), so acks=1 and acks=-1 are answered
once the append returned, and acks=0 gets no response at all.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.append_plan import LogAppendInfo
from tierlog.manager import LogManager
from tierlog.server.context import RequestContext
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import make, nested
from tierlog.server.registry import Registry
from tierlog.server.services import Services

log = logging.getLogger(__name__)

API_KEY = 0
MIN_VERSION, MAX_VERSION = 3, 9

#: One partition's outcome: (topic, partition, info or error code, error message).
_Outcome = tuple[str, int, LogAppendInfo | ErrorCode, str | None]


def append_all(manager: LogManager, request: Any) -> list[_Outcome]:
    """Append every partition's records (on a worker thread); one outcome per partition."""
    outcomes: list[_Outcome] = []
    for topic in request.topic_data:
        for part in topic.partition_data:
            name, index = topic.name, part.index
            if part.records is None or len(part.records) == 0:
                outcomes.append((name, index, ErrorCode.corrupt_message,
                                 f"no records for {name}-{index}"))
                continue
            try:
                info = manager.log(name, index).append(part.records)
            except Exception as exc:  # noqa: BLE001 - an item's own error code
                outcomes.append((name, index, error_code_for(exc), error_message(exc)))
            else:
                outcomes.append((name, index, info, None))
    return outcomes


def install(registry: Registry, services: Services) -> None:
    manager = services.manager

    async def handle(ctx: RequestContext, request: Any) -> Any:
        acks = int(request.acks)
        if acks not in (0, 1, -1):
            outcomes: list[_Outcome] = [(t.name, p.index, ErrorCode.invalid_required_acks,
                                         f"acks must be 0, 1 or -1, got {acks}")
                                        for t in request.topic_data for p in t.partition_data]
        else:
            outcomes = await services.run_blocking(lambda: append_all(manager, request))
            services.appended()
        if acks == 0:
            return None
        cls = ctx.response_type
        topic_t, part_t = (nested(cls, "TopicProduceResponse"),
                           nested(cls, "PartitionProduceResponse"))
        by_topic: dict[str, list[Any]] = {}
        for name, index, result, message in outcomes:
            if isinstance(result, ErrorCode):
                part = make(part_t, index=index, error_code=result, base_offset=-1,
                            log_append_time=None, log_start_offset=-1, record_errors=(),
                            error_message=message)
            else:
                append_time = (None if result.log_append_time < 0 else
                               datetime.datetime.fromtimestamp(result.log_append_time / 1000,
                                                               datetime.UTC))
                part = make(part_t, index=index, error_code=ErrorCode.none,
                            base_offset=result.first_offset, log_append_time=append_time,
                            log_start_offset=result.log_start_offset, record_errors=(),
                            error_message=None)
            by_topic.setdefault(name, []).append(part)
        return make(cls, responses=tuple(make(topic_t, name=n, partition_responses=tuple(ps))
                                         for n, ps in by_topic.items()),
                    throttle_time=datetime.timedelta(0))

    registry.add(API_KEY, handle, min_version=MIN_VERSION, max_version=MAX_VERSION)
