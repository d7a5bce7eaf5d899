"""DescribeConfigs and IncrementalAlterConfigs of topics (and a read-only view of the
broker's settings), over LogManager.topic_config / alter_topic_config; on a replicating node a
topic's overrides live in its record in the cluster store (changed there, described from
there, applied by every replica at its next poll), the broker's stay the node's own. A secret's value
(``sensitive``) is answered null with ``is_sensitive`` set, as Kafka answers its passwords;
each resource needs DESCRIBE_CONFIGS or ALTER_CONFIGS on its topic or on the cluster."""

from __future__ import annotations

import datetime
from collections.abc import Container, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tierlog.cluster.keys import TopicRecord
from tierlog.config import LogConfig, is_sensitive_config, topic_config_key
from tierlog.errors import ConfigError, UnknownTopicOrPartitionError
from tierlog.manager.log_manager import LogManager
from tierlog.security.acl import CLUSTER_NAME, AclOperation, Action, ResourceType
from tierlog.security.sensitive import is_sensitive
from tierlog.server.authorization import DENIED, RequestAuth, request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import make, nested
from tierlog.server.registry import Endpoint, register
from tierlog.server.replication.node import ClusterNode
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import (
        DescribeConfigsRequest,
        DescribeConfigsResponse,
        IncrementalAlterConfigsRequest,
        IncrementalAlterConfigsResponse,
    )

TOPIC, BROKER = 2, 4
#: Kafka's ConfigSource values.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
#: IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
#: Kafka's ConfigType values by tierlog's key types.
CONFIG_TYPES = {"bool": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6,
                "list": 7}
_NO_THROTTLE = datetime.timedelta(0)
#: (name, value, source, type) of each config a resource describes.
_Entries = list[tuple[str, str | None, int, int]]


class ConfigOp(Protocol):
    """An AlterableConfig of IncrementalAlterConfigs (the same in every version)."""

    @property
    def name(self) -> str: ...
    @property
    def config_operation(self) -> int: ...
    @property
    def value(self) -> str | None: ...


def format_value(value: object) -> str | None:
    """A parsed config value as Kafka's text (``true``, ``delete,compact``)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def sensitive(name: str) -> bool:
    """Whether a config's value is a secret DescribeConfigs answers as null (Kafka's
    PASSWORD configs, the tier's credentials, a table catalog's secrets)."""
    return is_sensitive(name) or is_sensitive_config(name)


#: The resource an authorizer checks for each config resource type, and the error it answers.
_ACL_RESOURCES = {TOPIC: ResourceType.TOPIC, BROKER: ResourceType.CLUSTER}


def config_refusals(auth: RequestAuth, operation: AclOperation,
                    asked: Sequence[tuple[int, str]]) -> dict[int, tuple[ErrorCode, str]]:
    """By index in ``asked`` ((resource type, name) of each resource), the resources whose
    configs the principal may not describe or alter (``operation``): a topic's need the
    operation on the topic (TOPIC_AUTHORIZATION_FAILED), the broker's on the cluster
    (CLUSTER_AUTHORIZATION_FAILED), as Kafka's ``ConfigHelper`` checks them."""
    if not auth.enabled:
        return {}
    checked = [(i, _ACL_RESOURCES[rtype], CLUSTER_NAME if rtype == BROKER else name)
               for i, (rtype, name) in enumerate(asked) if rtype in _ACL_RESOURCES]
    answers = auth.allowed([Action(operation, kind, name) for _, kind, name in checked])
    return {i: (DENIED[kind], f"not authorized to {operation.name} of {kind.name} {name}")
            for (i, kind, name), ok in zip(checked, answers, strict=True) if not ok}


def describe_topic(manager: LogManager, topic: str,
                   keys: Iterable[str] | None) -> _Entries:
    """(name, value, source, type) of each requested topic config (a sensitive one's value is
    null, as Kafka answers for passwords)."""
    return describe_config(manager, manager.topic_config(topic), manager.topic_overrides(topic),
                           keys)


def describe_cluster_topic(manager: LogManager, record: TopicRecord | None, topic: str,
                           keys: Iterable[str] | None) -> _Entries:
    """:func:`describe_topic` of a replicated topic, from its record in the cluster store
    (what every replica applies), not from this node's logs."""
    if record is None:
        raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
    overrides = dict(record.configs)
    return describe_config(manager, manager.config.topic_defaults.with_overrides(overrides),
                           overrides, keys)


def describe_config(manager: LogManager, config: LogConfig, overrides: Container[str],
                    keys: Iterable[str] | None) -> _Entries:
    """The entries of a topic whose config is ``config`` with ``overrides`` set on it."""
    broker_set = manager.config.topic_defaults.overrides
    names = sorted(config) if keys is None else list(keys)
    out = []
    for name in names:
        key = topic_config_key(name)
        if key is None or name not in config:
            continue
        source = (DYNAMIC_TOPIC_CONFIG if name in overrides
                  else STATIC_BROKER_CONFIG if name in broker_set else DEFAULT_CONFIG)
        value = None if sensitive(name) else format_value(config[name])
        out.append((name, value, source, CONFIG_TYPES.get(key.type, 0)))
    return out


def alter_topic(manager: LogManager, topic: str, ops: Iterable[ConfigOp],
                validate_only: bool) -> None:
    """Apply one resource's SET/DELETE/APPEND/SUBTRACT operations (all validated first)."""
    if not manager.partitions(topic):
        raise UnknownTopicOrPartitionError(f"unknown topic {topic}")
    set_configs, deleted = planned_changes(manager.topic_config(topic), ops)
    if validate_only:  # the config the alter would make, checked as the alter checks it
        own = {k: v for k, v in {**manager.topic_overrides(topic), **set_configs}.items()
               if k not in deleted}
        manager.check_topic_change(topic, manager.topic_config(topic), own)
        return
    manager.alter_topic_config(topic, set_configs, deleted)


def altered_overrides(manager: LogManager, topic: str, current: Mapping[str, str],
                      ops: Iterable[ConfigOp]) -> dict[str, str]:
    """A replicated topic's overrides (as its record keeps them, text) after ``ops``, checked
    as an alter checks them (ConfigError naming the key)."""
    config = manager.config.topic_defaults.with_overrides(current)
    set_configs, deleted = planned_changes(config, ops)
    own = {k: v for k, v in {**current, **set_configs}.items() if k not in deleted}
    manager.check_topic_change(topic, config, own)
    return own


def planned_changes(config: LogConfig, ops: Iterable[ConfigOp]
                    ) -> tuple[dict[str, str], list[str]]:
    """The overrides one resource's operations set (text values) and those they delete,
    against the topic's current ``config``. ConfigError naming the key for an unknown key or
    operation, or APPEND/SUBTRACT of a config that is not a list."""
    set_configs: dict[str, str] = {}
    deleted: list[str] = []
    for op in ops:
        name, operation = op.name, int(op.config_operation)
        key = topic_config_key(name)
        if key is None:
            raise ConfigError(name, "unknown topic configuration key")
        if operation == SET:
            if op.value is None:
                raise ConfigError(name, "SET needs a value (DELETE removes an override)")
            set_configs[name] = op.value
        elif operation == DELETE:
            deleted.append(name)
        elif operation in (APPEND, SUBTRACT):
            if key.type != "list":
                raise ConfigError(name, "APPEND and SUBTRACT apply to list configs only")
            current = ([v for v in set_configs[name].split(",") if v] if name in set_configs
                       else list(config[name] or ()))
            items = [v.strip() for v in (op.value or "").split(",") if v.strip()]
            if operation == APPEND:
                current += [v for v in items if v not in current]
            else:
                current = [v for v in current if v not in items]
            set_configs[name] = ",".join(current)
        else:
            raise ConfigError(name, f"unknown config operation {operation}")
    return set_configs, deleted


def _describe_resource(manager: LogManager, cluster: ClusterNode | None, rtype: int, name: str,
                       keys: Sequence[str] | None) -> tuple[ErrorCode, str | None, _Entries]:
    """One DescribeConfigs resource: (error code, message, its entries); a topic of a
    replicating node from its record in the cluster store."""
    try:
        if rtype == TOPIC and cluster is not None:
            return ErrorCode.none, None, describe_cluster_topic(
                manager, cluster.view.topics.get(name), name, keys)
        if rtype == TOPIC:
            return ErrorCode.none, None, describe_topic(manager, name, keys)
        if rtype == BROKER:
            return ErrorCode.none, None, [
                (k, None if sensitive(k) else format_value(v), STATIC_BROKER_CONFIG, 0)
                for k, v in sorted(manager.config.broker.items())
                if keys is None or k in keys]
        return ErrorCode.invalid_request, f"resource type {rtype} is not supported", []
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc), []


async def describe_configs(services: Services, ctx: RequestContext,
                           request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    """The configs of each topic (and the broker's, read-only)."""
    manager, cluster = services.manager, services.cluster
    asked = [(int(r.resource_type), r.resource_name, r.configuration_keys)
             for r in request.resources]
    denied = config_refusals(request_auth(services, ctx), AclOperation.DESCRIBE_CONFIGS,
                             [(rtype, name) for rtype, name, _ in asked])
    described = await services.run_blocking(lambda: [
        (*denied[i], []) if i in denied
        else _describe_resource(manager, cluster, rtype, name, keys)
        for i, (rtype, name, keys) in enumerate(asked)])
    cls: type[DescribeConfigsResponse] = ctx.response_type
    result_t, entry_t = (nested(cls, "DescribeConfigsResult"),
                         nested(cls, "DescribeConfigsResourceResult"))
    return make(cls, throttle_time=_NO_THROTTLE, results=tuple(
        make(result_t, error_code=code, error_message=message, resource_type=rtype,
             resource_name=name, configs=tuple(
                 make(entry_t, name=k, value=v, read_only=rtype == BROKER,
                      config_source=src, is_default=src == DEFAULT_CONFIG,
                      is_sensitive=sensitive(k),
                      synonyms=(), config_type=ctype,
                      documentation=None)
                 for k, v, src, ctype in entries))
        for (rtype, name, _), (code, message, entries) in zip(asked, described, strict=True)))


def _alter_resource(manager: LogManager, rtype: int, name: str, ops: Sequence[ConfigOp],
                    validate_only: bool) -> tuple[ErrorCode, str | None]:
    """One IncrementalAlterConfigs resource: (error code, message)."""
    try:
        if rtype != TOPIC:
            raise ConfigError(name, "only topic configs can be altered on a running tierlog "
                                    "server")
        alter_topic(manager, name, ops, validate_only)
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc)
    return ErrorCode.none, None


async def _alter_in_cluster(manager: LogManager, cluster: ClusterNode, rtype: int, name: str,
                            ops: Sequence[ConfigOp], validate_only: bool
                            ) -> tuple[ErrorCode, str | None]:
    """One IncrementalAlterConfigs resource on a replicating node: a topic's overrides
    changed in its cluster record (answered once stored)."""
    try:
        if rtype != TOPIC:
            raise ConfigError(name, "only topic configs can be altered on a running tierlog "
                                    "server")
        await cluster.alter_topic_configs(
            name, lambda current: altered_overrides(manager, name, current, ops), validate_only)
    except Exception as exc:  # noqa: BLE001 - an item's own error code
        return error_code_for(exc), error_message(exc)
    return ErrorCode.none, None


async def incremental_alter_configs(
        services: Services, ctx: RequestContext,
        request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    """Apply each topic's SET/DELETE/APPEND/SUBTRACT operations; on a replicating node, to
    the topic's record in the cluster store, which every replica applies at its next poll."""
    manager = services.manager
    validate_only = bool(request.validate_only)
    asked: list[tuple[int, str, Sequence[ConfigOp]]] = [
        (int(r.resource_type), r.resource_name, r.configs) for r in request.resources]
    denied = config_refusals(request_auth(services, ctx), AclOperation.ALTER_CONFIGS,
                             [(rtype, name) for rtype, name, _ in asked])
    cluster = services.cluster
    if cluster is not None:
        results = [denied[i] if i in denied
                   else await _alter_in_cluster(manager, cluster, rtype, name, ops, validate_only)
                   for i, (rtype, name, ops) in enumerate(asked)]
    else:
        results = await services.run_blocking(lambda: [
            denied[i] if i in denied
            else _alter_resource(manager, rtype, name, ops, validate_only)
            for i, (rtype, name, ops) in enumerate(asked)])
    cls: type[IncrementalAlterConfigsResponse] = ctx.response_type
    result_t = nested(cls, "AlterConfigsResourceResponse")
    return make(cls, throttle_time=_NO_THROTTLE, responses=tuple(
        make(result_t, error_code=code, error_message=message, resource_type=rtype,
             resource_name=name)
        for (rtype, name, _), (code, message) in zip(asked, results, strict=True)))


ENDPOINTS = (
    Endpoint(32, describe_configs, 1, 4),
    Endpoint(44, incremental_alter_configs, 0, 1),
)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
