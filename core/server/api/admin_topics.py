"""The topic admin APIs: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and
OffsetsForLeaderEpoch, over the LogManager (one node: a replication factor above 1 is
refused with INVALID_REPLICATION_FACTOR, as a one-broker Kafka cluster refuses it)."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.common.filenames import validate_topic
from tierlog.config import LogConfig
from tierlog.errors import UnknownTopicOrPartitionError
from tierlog.manager.log_manager import LogManager
from tierlog.server.api.metadata import topic_uuid
from tierlog.server.context import RequestContext
from tierlog.server.coordinator.internal_topics import AdminChange, refusal
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import by_topic, make, nested
from tierlog.server.partition_limits import new_partitions_check
from tierlog.server.registry import Registry
from tierlog.server.services import Services

#: (error code, message) of one item; ErrorCode.none and None when it succeeded.
_Result = tuple[ErrorCode, str | None]
_OK: _Result = (ErrorCode.none, None)


def _attempt(fn: Callable[[], Any]) -> _Result:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc)
    return _OK


def create_topic(manager: LogManager, topic: Any, default_partitions: int,
                 validate_only: bool, check_new: Callable[[int], None]) -> _Result:
    """One CreatableTopic: checks (``check_new(count)`` raises when the broker may not take
    ``count`` more partitions), then (unless ``validate_only``) the topic."""
    replication = int(topic.replication_factor)
    if replication not in (-1, 1):
        return (ErrorCode.invalid_replication_factor,
                f"replication factor {replication} is larger than the 1 available broker")
    count = int(topic.num_partitions)
    if topic.assignments:
        count = len(topic.assignments)
    if count == -1:
        count = default_partitions
    if count < 1:
        return ErrorCode.invalid_partitions, f"number of partitions must be positive, got {count}"
    configs = {c.name: c.value for c in topic.configs if c.value is not None}

    def run() -> None:
        validate_topic(topic.name)
        LogConfig(configs)
        if manager.partitions(topic.name):
            manager.create_topic(topic.name, count, configs)  # raises TopicExistsError
        check_new(count)
        if not validate_only:
            manager.create_topic(topic.name, count, configs)

    return _attempt(run)


def install(registry: Registry, services: Services) -> None:
    manager = services.manager
    zero = datetime.timedelta(0)
    check_new = new_partitions_check(services)

    async def create_topics(ctx: RequestContext, request: Any) -> Any:
        default = services.manager.config["num.partitions"]
        results = await services.run_blocking(lambda: [
            create_topic(manager, t, default, bool(getattr(request, "validate_only", False)),
                         check_new)
            for t in request.topics])
        cls = ctx.response_type
        result_t = nested(cls, "CreatableTopicResult")
        topics = []
        for topic, (code, message) in zip(request.topics, results, strict=True):
            parts = manager.partitions(topic.name) if code == ErrorCode.none else []
            topic_id = manager.log(topic.name, parts[0]).topic_id if parts else None
            topics.append(make(result_t, name=topic.name, topic_id=topic_uuid(topic_id),
                               error_code=code, error_message=message,
                               topic_config_error_code=0,
                               num_partitions=len(parts) if parts else -1,
                               replication_factor=1 if parts else -1, configs=()))
        return make(cls, throttle_time=zero, topics=tuple(topics))

    async def delete_topics(ctx: RequestContext, request: Any) -> Any:
        names = ([t.name for t in request.topics] if hasattr(request, "topics")
                 else list(request.topic_names))

        def run() -> list[_Result]:
            out: list[_Result] = []
            for name in names:
                if name is None:
                    out.append((ErrorCode.unknown_topic_id, ("deleting by topic id is not "
                                                            "supported: name the topic")))
                elif (refused := refusal(name, AdminChange.DELETE_TOPIC)) is not None:
                    out.append(refused)
                else:
                    out.append(_attempt(partial(manager.delete_topic, name)))
            return out

        results = await services.run_blocking(run)
        cls = ctx.response_type
        result_t = nested(cls, "DeletableTopicResult")
        return make(cls, throttle_time=zero, responses=tuple(
            make(result_t, name=name, topic_id=topic_uuid(None), error_code=code,
                 error_message=message)
            for name, (code, message) in zip(names, results, strict=True)))

    async def create_partitions(ctx: RequestContext, request: Any) -> Any:
        validate_only = bool(request.validate_only)

        def one(topic: Any) -> _Result:
            if (refused := refusal(topic.name, AdminChange.CREATE_PARTITIONS)) is not None:
                return refused
            current = manager.partitions(topic.name)
            if not current:
                return ErrorCode.unknown_topic_or_partition, f"unknown topic {topic.name}"
            if int(topic.count) <= len(current):
                return (ErrorCode.invalid_partitions,
                        (f"topic {topic.name} has {len(current)} partitions; the new count "
                        f"{topic.count} must be larger"))
            checked = _attempt(lambda: check_new(int(topic.count) - len(current)))
            if validate_only or checked != _OK:
                return checked
            return _attempt(lambda: manager.create_partitions(topic.name, int(topic.count)))

        results = await services.run_blocking(lambda: [one(t) for t in request.topics])
        cls = ctx.response_type
        result_t = nested(cls, "CreatePartitionsTopicResult")
        return make(cls, throttle_time=zero, results=tuple(
            make(result_t, name=t.name, error_code=code, error_message=message)
            for t, (code, message) in zip(request.topics, results, strict=True)))

    async def delete_records(ctx: RequestContext, request: Any) -> Any:
        def run() -> list[tuple[str, int, ErrorCode, int]]:
            out = []
            for topic in request.topics:
                for part in topic.partitions:
                    if (refused := refusal(topic.name, AdminChange.DELETE_RECORDS)):
                        out.append((topic.name, part.partition_index, refused[0], -1))
                        continue
                    try:
                        partition_log = manager.log(topic.name, part.partition_index)
                        offset = int(part.offset)
                        if offset == -1:
                            offset = partition_log.high_watermark
                        low = partition_log.delete_records_before(offset)
                    except Exception as exc:  # noqa: BLE001 - an item's own error code
                        out.append((topic.name, part.partition_index, error_code_for(exc), -1))
                    else:
                        out.append((topic.name, part.partition_index, ErrorCode.none, low))
            return out

        results = await services.run_blocking(run)
        cls = ctx.response_type
        topic_t, part_t = (nested(cls, "DeleteRecordsTopicResult"),
                           nested(cls, "DeleteRecordsPartitionResult"))
        return make(cls, throttle_time=zero, topics=by_topic(topic_t, "name", (
            (name, make(part_t, partition_index=index, low_watermark=low, error_code=code))
            for name, index, code, low in results)))

    async def offsets_for_leader_epoch(ctx: RequestContext, request: Any) -> Any:
        def run() -> list[tuple[str, int, ErrorCode, int, int]]:
            out = []
            for topic in request.topics:
                for part in topic.partitions:
                    try:
                        partition_log = manager.log(topic.topic, part.partition)
                        epoch, end = partition_log.leader_epoch_cache.end_offset_for(
                            int(part.leader_epoch), partition_log.log_end_offset)
                    except UnknownTopicOrPartitionError as exc:
                        out.append((topic.topic, part.partition, error_code_for(exc), -1, -1))
                    else:
                        out.append((topic.topic, part.partition, ErrorCode.none, epoch, end))
            return out

        results = await services.run_blocking(run)
        cls = ctx.response_type
        topic_t, part_t = (nested(cls, "OffsetForLeaderTopicResult"),
                           nested(cls, "EpochEndOffset"))
        return make(cls, throttle_time=zero, topics=by_topic(topic_t, "topic", (
            (name, make(part_t, error_code=code, partition=index, leader_epoch=epoch,
                        end_offset=end))
            for name, index, code, epoch, end in results)))

    registry.add(19, create_topics, min_version=2, max_version=7)
    registry.add(20, delete_topics, min_version=1, max_version=6)
    registry.add(37, create_partitions, min_version=0, max_version=3)
    registry.add(21, delete_records, min_version=0, max_version=2)
    registry.add(23, offsets_for_leader_epoch, min_version=2, max_version=4)
