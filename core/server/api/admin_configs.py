"""DescribeConfigs and IncrementalAlterConfigs of topics (and a read-only view of the
broker's settings), over LogManager.topic_config / alter_topic_config."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.config import TOPIC_CONFIG_KEYS, LogConfig
from tierlog.errors import ConfigError, UnknownTopicOrPartitionError
from tierlog.manager.log_manager import LogManager
from tierlog.server.context import RequestContext
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import make, nested
from tierlog.server.registry import Registry
from tierlog.server.services import Services

TOPIC, BROKER = 2, 4
#: Kafka's ConfigSource values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
#: IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: Kafka's ConfigType values by tierlog's key types.
CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                "list": 7}


def format_value(value: Any) -> str | None:
    """A parsed config value as Kafka's text (``true``, ``delete,compact``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def describe_topic(manager: LogManager, topic: str,
                   keys: Iterable[str] | None) -> list[tuple[str, str | None, int, int]]:
    """(name, value, source, type) of each requested topic config."""
    config = manager.topic_config(topic)
    overrides = manager.topic_overrides(topic)
    broker_set = manager.config.topic_defaults.overrides
    names = sorted(TOPIC_CONFIG_KEYS) if keys is None else list(keys)
    out = []
    for name in names:
        key = TOPIC_CONFIG_KEYS.get(name)
        if key is None:
            continue
        source = (DYNAMIC_TOPIC_CONFIG if name in overrides
                  else STATIC_BROKER_CONFIG if name in broker_set else DEFAULT_CONFIG)
        out.append((name, format_value(config[name]), source, CONFIG_TYPES.get(key.type, 0)))
    return out


def alter_topic(manager: LogManager, topic: str, ops: Iterable[Any], validate_only: bool) -> None:
    """Apply one resource's SET/DELETE/APPEND/SUBTRACT operations (all validated first)."""
    if not manager.partitions(topic):
        raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
    config = manager.topic_config(topic)
    set_configs: dict[str, Any] = {}
    deleted: list[str] = []
    for op in ops:
        name, operation = op.name, int(op.config_operation)
        if name not in TOPIC_CONFIG_KEYS:
            raise ConfigError(name, "unknown topic configuration key")
        if operation == SET:
            set_configs[name] = op.value
        elif operation == DELETE:
            deleted.append(name)
        elif operation in (APPEND, SUBTRACT):
            if TOPIC_CONFIG_KEYS[name].type != "list":
                raise ConfigError(name, "APPEND and SUBTRACT apply to list configs only")
            current = list(set_configs.get(name, config[name]) or ())
            items = [v.strip() for v in (op.value or "").split(",") if v.strip()]
            if operation == APPEND:
                current += [v for v in items if v not in current]
            else:
                current = [v for v in current if v not in items]
            set_configs[name] = ",".join(current)
        else:
            raise ConfigError(name, f"unknown config operation {operation}")
    if validate_only:
        LogConfig({k: v for k, v in set_configs.items()})
        return
    manager.alter_topic_config(topic, set_configs, deleted)


def install(registry: Registry, services: Services) -> None:
    manager = services.manager
    zero = datetime.timedelta(0)

    async def describe_configs(ctx: RequestContext, request: Any) -> Any:
        cls = ctx.response_type
        result_t, entry_t = (nested(cls, "DescribeConfigsResult"),
                             nested(cls, "DescribeConfigsResourceResult"))

        def run() -> list[Any]:
            results = []
            for resource in request.resources:
                rtype, name = int(resource.resource_type), resource.resource_name
                code, message, entries = ErrorCode.none, None, []
                try:
                    if rtype == TOPIC:
                        entries = describe_topic(manager, name, resource.configuration_keys)
                    elif rtype == BROKER:
                        entries = [(k, format_value(v), STATIC_BROKER_CONFIG, 0)
                                   for k, v in sorted(manager.config.broker.items())
                                   if resource.configuration_keys is None
                                   or k in resource.configuration_keys]
                    else:
                        code, message = (ErrorCode.invalid_request,
                                         f"resource type {rtype} is not supported")
                except Exception as exc:  # noqa: BLE001 - an item's own error code
                    code, message = error_code_for(exc), error_message(exc)
                results.append(make(
                    result_t, error_code=code, error_message=message, resource_type=rtype,
                    resource_name=name, configs=tuple(
                        make(entry_t, name=k, value=v, read_only=rtype == BROKER,
                             config_source=src, is_default=src == DEFAULT_CONFIG,
                             is_sensitive=False, synonyms=(), config_type=ctype,
                             documentation=None)
                        for k, v, src, ctype in entries)))
            return results

        return make(cls, throttle_time=zero, results=tuple(await services.run_blocking(run)))

    async def incremental_alter_configs(ctx: RequestContext, request: Any) -> Any:
        cls = ctx.response_type
        result_t = nested(cls, "AlterConfigsResourceResponse")

        def run() -> list[Any]:
            results = []
            for resource in request.resources:
                rtype, name = int(resource.resource_type), resource.resource_name
                code, message = ErrorCode.none, None
                try:
                    if rtype != TOPIC:
                        raise ConfigError(name, "only topic configs can be altered on a "
                                                "running tierlog server")
                    alter_topic(manager, name, resource.configs, bool(request.validate_only))
                except Exception as exc:  # noqa: BLE001 - an item's own error code
                    code, message = error_code_for(exc), error_message(exc)
                results.append(make(result_t, error_code=code, error_message=message,
                                    resource_type=rtype, resource_name=name))
            return results

        return make(cls, throttle_time=zero, responses=tuple(await services.run_blocking(run)))

    registry.add(32, describe_configs, min_version=1, max_version=4)
    registry.add(44, incremental_alter_configs, min_version=0, max_version=1)
