"""``tierlog acls --bootstrap-server``: kafka-acls.sh's verbs (``--add``, ``--remove``,
``--list``) with its option names, through a broker's CreateAcls, DeleteAcls and DescribeAcls
(confluent-kafka's AdminClient): any Kafka broker's ACLs, tierlog's own included.

As kafka-acls: ``--allow-principal``/``--deny-principal`` with ``--allow-host``/``--deny-host``
(default ``*``), ``--operation`` (default All), resources ``--topic``, ``--group``,
``--cluster``, ``--transactional-id`` and ``--resource-pattern-type``, and the shortcuts
``--producer`` and ``--consumer``. ``--remove`` does not ask for confirmation (``--force`` is
accepted for kafka-acls' scripts).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tierlog.cli._common import CliError
from tierlog.cli.wire import (
    REQUEST_TIMEOUT_S,
    add_bootstrap_options,
    admin_client,
    kafka,
    result,
    uses_broker,
)
from tierlog.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tierlog.server.authorization import SUPPORTED_OPERATIONS

if TYPE_CHECKING:
    from confluent_kafka.admin import AdminClient

#: What each shortcut grants, per resource type (kafka-acls' --producer and --consumer).
_PRODUCER = {ResourceType.TOPIC: (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE),
             ResourceType.TRANSACTIONAL_ID: (AclOperation.WRITE, AclOperation.DESCRIBE)}
_CONSUMER = {ResourceType.TOPIC: (AclOperation.READ, AclOperation.DESCRIBE),
             ResourceType.GROUP: (AclOperation.READ,)}
#: (resource type, name, pattern type) of one resource the command names.
_Resource = tuple[ResourceType, str, PatternType]
#: (principal, host, operation, permission) of one entry.
_Entry = tuple[str, str, AclOperation, AclPermissionType]


def add_parser(sub: argparse._SubParsersAction,  # type: ignore[type-arg]
               common: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "acls", parents=[common],
        help="add, remove or list a broker's ACLs (Kafka's kafka-acls.sh)",
        description="Add, remove or list a broker's ACLs through the Kafka protocol, with "
                    "kafka-acls.sh's options.")
    verb = parser.add_mutually_exclusive_group(required=True)
    verb.add_argument("--add", action="store_true", help="add ACLs")
    verb.add_argument("--remove", action="store_true", help="remove the ACLs the options match")
    verb.add_argument("--list", action="store_true", help="list the ACLs the options match")
    who = parser.add_argument_group("principals and hosts")
    who.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                     help="a principal (Type:name, e.g. User:alice; User:* for any) to allow")
    who.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL",
                     help="a principal to deny")
    who.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                     help="a host the allowed principals connect from (default: *)")
    who.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                     help="a host the denied principals connect from (default: *)")
    who.add_argument("--principal", action="append", default=[], metavar="PRINCIPAL",
                     help="with --list: only the ACLs of this principal")
    what = parser.add_argument_group("operations")
    what.add_argument("--operation", action="append", default=[], metavar="OPERATION",
                      help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                           "DescribeConfigs, AlterConfigs, IdempotentWrite or All (default)")
    what.add_argument("--producer", action="store_true",
                      help="the ACLs of a producer: Write, Describe, Create on the topics "
                           "(and Write, Describe on --transactional-id)")
    what.add_argument("--consumer", action="store_true",
                      help="the ACLs of a consumer: Read, Describe on the topics, Read on "
                           "the --group")
    resources = parser.add_argument_group("resources")
    resources.add_argument("--topic", action="append", default=[], help="a topic (* for all)")
    resources.add_argument("--group", action="append", default=[],
                           help="a consumer group (* for all)")
    resources.add_argument("--transactional-id", action="append", default=[],
                           help="a transactional id (* for all)")
    resources.add_argument("--cluster", action="store_true", help="the cluster")
    resources.add_argument("--resource-pattern-type", default=None,
                           metavar="LITERAL|PREFIXED|ANY|MATCH",
                           help="how the names match: LITERAL (default) or PREFIXED; --list "
                                "and --remove also take ANY and MATCH (default for --list: "
                                "ANY)")
    parser.add_argument("--force", action="store_true",
                        help="accepted for kafka-acls' scripts (--remove never asks)")
    add_bootstrap_options(parser, required=True)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    uses_broker(args)
    pattern = _pattern_type(args)
    named = _resources(args, pattern)
    admin = admin_client(args)
    if args.add:
        _add(admin, args, named)
    elif args.remove:
        _remove(admin, args, named)
    else:
        _list(admin, args, named)
    return 0


def _pattern_type(args: argparse.Namespace) -> PatternType:
    default = "ANY" if args.list else "LITERAL"
    pattern = PatternType.parse(args.resource_pattern_type or default)
    allowed = ((PatternType.LITERAL, PatternType.PREFIXED) if args.add
               else (PatternType.LITERAL, PatternType.PREFIXED, PatternType.ANY,
                     PatternType.MATCH))
    if pattern not in allowed:
        raise CliError(f"--resource-pattern-type {args.resource_pattern_type!r}: expected one "
                       f"of {', '.join(p.name for p in allowed)}")
    return pattern


def _resources(args: argparse.Namespace, pattern: PatternType) -> list[_Resource]:
    named: list[_Resource] = [(ResourceType.TOPIC, t, pattern) for t in args.topic]
    named += [(ResourceType.GROUP, g, pattern) for g in args.group]
    named += [(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id]
    if args.cluster:
        named.append((ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    if any(not name for _, name, _ in named):
        raise CliError("a resource name is empty")
    if args.producer and not args.topic:
        raise CliError("--producer needs --topic")
    if args.consumer and not (args.topic and args.group):
        raise CliError("--consumer needs --topic and --group")
    if (args.add or args.remove) and not named:
        raise CliError(f"--{'add' if args.add else 'remove'} needs a resource: --topic, "
                       "--group, --transactional-id or --cluster")
    return named


def _operations(args: argparse.Namespace, kind: ResourceType) -> list[AclOperation]:
    """The operations to add or remove on a resource of ``kind``."""
    if args.producer or args.consumer:
        shortcuts = [s for on, s in ((args.producer, _PRODUCER), (args.consumer, _CONSUMER))
                     if on]
        return list(dict.fromkeys(op for s in shortcuts for op in s.get(kind, ())))
    names = args.operation or (["ANY"] if args.remove else ["ALL"])
    operations: list[AclOperation] = []
    for name in names:
        operation = AclOperation.parse(name.replace("-", "_").replace(" ", "_"))
        if operation == AclOperation.UNKNOWN:
            operation = _camel(name)
        if operation in (AclOperation.UNKNOWN, AclOperation.ANY) and not (
                args.remove and operation == AclOperation.ANY):
            raise CliError(f"--operation {name!r} is not one of Kafka's operations "
                           "(Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                           "DescribeConfigs, AlterConfigs, IdempotentWrite, All)")
        if operation not in (AclOperation.ALL, AclOperation.ANY) \
                and operation not in SUPPORTED_OPERATIONS[kind]:
            raise CliError(f"--operation {name}: a {kind.name} has only "
                           f"{', '.join(op.name for op in SUPPORTED_OPERATIONS[kind])}")
        operations.append(operation)
    return operations


def _camel(name: str) -> AclOperation:
    """Kafka's CamelCase operation names (``ClusterAction``, ``IdempotentWrite``)."""
    snake = "".join(f"_{c}" if c.isupper() and i else c for i, c in enumerate(name))
    return AclOperation.parse(snake)


def _entries(args: argparse.Namespace, kind: ResourceType) -> list[_Entry]:
    entries = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            if ":" not in principal.strip(":"):
                raise CliError(f"principal {principal!r} is not of the form Type:name "
                               "(e.g. User:alice)")
            for host in hosts or [WILDCARD]:
                entries += [(principal, host, op, permission) for op in _operations(args, kind)]
    return entries


def _kafka(binding: AclBinding | AclBindingFilter) -> Any:  # noqa: ANN401 - librdkafka's
    """confluent-kafka's AclBinding or AclBindingFilter of one of ours (the one conversion)."""
    admin = kafka().admin
    make = admin.AclBinding if isinstance(binding, AclBinding) else admin.AclBindingFilter
    return make(int(binding.resource_type), binding.name, int(binding.pattern_type),
                binding.principal, binding.host, int(binding.operation), int(binding.permission))


def _code(value: object) -> int:
    """A code of a confluent-kafka enum (or the int it may be)."""
    code = getattr(value, "value", value)
    if not isinstance(code, int):
        raise CliError(f"the broker answered an ACL field {value!r} that is not a code")
    return code


def _ours(found: Any) -> AclBinding:  # noqa: ANN401 - confluent-kafka's AclBinding
    """One of ours from a binding confluent-kafka listed or deleted."""
    return AclBinding(ResourceType(_code(found.restype)), str(found.name),
                      PatternType(_code(found.resource_pattern_type)), str(found.principal),
                      str(found.host), AclOperation(_code(found.operation)),
                      AclPermissionType(_code(found.permission_type)))


def _binding(resource: _Resource, entry: _Entry) -> AclBinding:
    (kind, name, pattern), (principal, host, operation, permission) = resource, entry
    return AclBinding(kind, name, pattern, principal, host, operation, permission)


def _filter(resource: _Resource, entry: _Entry | None = None) -> AclBindingFilter:
    """The filter of a resource's ACLs: those of ``entry``, or every one."""
    kind, name, pattern = resource
    if entry is None:
        return AclBindingFilter(kind, name, pattern)
    principal, host, operation, permission = entry
    return AclBindingFilter(kind, name, pattern, principal, host, operation, permission)


def _add(admin: AdminClient, args: argparse.Namespace, named: Sequence[_Resource]) -> None:
    bindings = list(dict.fromkeys(_binding(resource, entry) for resource in named
                                  for entry in _entries(args, resource[0])))
    if not bindings:
        raise CliError("--add needs --allow-principal or --deny-principal")
    futures = admin.create_acls([_kafka(b) for b in bindings], request_timeout=REQUEST_TIMEOUT_S)
    for binding, future in zip(bindings, futures.values(), strict=True):
        result(future, f"adding {_entry_text(binding)} on {_pattern_text(binding)}")
    for resource in named:
        print(f"Adding ACLs for resource `{_pattern_text(_filter(resource))}`:")
        for entry in _entries(args, resource[0]):
            print(f" \t{_entry_text(_binding(resource, entry))}")
    _list(admin, args, named)


def _remove(admin: AdminClient, args: argparse.Namespace, named: Sequence[_Resource]) -> None:
    filters = []
    for resource in named:
        entries = _entries(args, resource[0])
        filters += ([_filter(resource, entry) for entry in entries] if entries
                    else [_filter(resource)])  # no principal: every ACL of it
    filters = list(dict.fromkeys(filters))
    futures = admin.delete_acls([_kafka(f) for f in filters], request_timeout=REQUEST_TIMEOUT_S)
    removed = 0
    for acl_filter, future in zip(filters, futures.values(), strict=True):
        removed += len(result(future, f"removing ACLs of {_pattern_text(acl_filter)}"))
    print(f"Removed {removed} ACL(s).")


def _list(admin: AdminClient, args: argparse.Namespace, named: Sequence[_Resource]) -> None:
    principals: list[str | None] = list(args.principal) or [None]
    filters = [AclBindingFilter(kind, name, pattern, principal)
               for kind, name, pattern in named for principal in principals]
    if not named:
        filters = [AclBindingFilter(pattern_type=_pattern_type(args), principal=principal)
                   for principal in principals]
    found: set[AclBinding] = set()
    for acl_filter in filters:
        listed = result(admin.describe_acls(_kafka(acl_filter),
                                            request_timeout=REQUEST_TIMEOUT_S), "listing ACLs")
        found.update(_ours(b) for b in listed)
    if not found:
        # librdkafka drops DescribeAcls' error code: a refusal reads as an empty list
        print("No ACLs found. (librdkafka does not report a refused DescribeAcls: an empty "
              "list also means this client may not DESCRIBE the cluster, or the broker has "
              "no authorizer)", file=sys.stderr)
    by_pattern: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for binding in sorted(found):
        key = (binding.resource_type, binding.name, binding.pattern_type)
        by_pattern.setdefault(key, []).append(binding)
    for (kind, name, pattern), bindings in by_pattern.items():
        pattern_text = _pattern_text(AclBindingFilter(kind, name, pattern))
        print(f"Current ACLs for resource `{pattern_text}`:")
        for binding in bindings:
            print(f" \t{_entry_text(binding)}")
        print()


def _pattern_text(binding: AclBinding | AclBindingFilter) -> str:
    """As kafka-acls prints a resource pattern."""
    return (f"ResourcePattern(resourceType={binding.resource_type.name}, name={binding.name}, "
            f"patternType={binding.pattern_type.name})")


def _entry_text(binding: AclBinding) -> str:
    """As kafka-acls prints an access control entry."""
    return (f"(principal={binding.principal}, host={binding.host}, "
            f"operation={binding.operation.name}, permissionType={binding.permission.name})")
