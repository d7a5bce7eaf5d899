"""Kafka's ACL model and its matching rules, pure (no I/O): the enums with the numbers the wire
uses, ``AclBinding`` and ``AclBindingFilter``, CreateAcls' validation, and ``authorize``.

The rules are Kafka's (``StandardAuthorizerData``): the ACLs that apply to a resource are the
LITERAL ones of its name, the LITERAL ``*`` wildcard and the PREFIXED ones whose name starts
it; among those, an ACL matches a request when its principal is the request's or ``User:*``,
its host the client's or ``*``, and its operation the one asked (ALL matches any; an ALLOW of
READ, WRITE, DELETE or ALTER also grants DESCRIBE, an ALLOW of ALTER_CONFIGS also grants
DESCRIBE_CONFIGS). A matching DENY wins over any ALLOW. With no ACL applying to the resource at
all, ``allow.everyone.if.no.acl.found`` decides; with some, but none matching, the answer is no.
Super users are always allowed. ``authorize`` here scans every ACL given: it is the reference;
``tierlog.security.authorizer`` indexes a snapshot and calls :func:`decide` on the few that
apply, so both share one home for the rules.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple, Self

from tierlog.errors import InvalidAclError

__all__ = ["ANY_FILTER", "CLUSTER_NAME", "WILDCARD", "WILDCARD_PRINCIPAL", "AclBinding", "AclBindingFilter",
           "AclOperation", "AclPermissionType", "Action", "PatternType", "ResourceType",
           "acl_result", "applies_to", "authorize", "decide"]

#: The resource name (LITERAL) and host that match any name or host.
WILDCARD = "*"
#: The principal that matches any principal.
WILDCARD_PRINCIPAL = "User:*"
#: The only name a CLUSTER resource has.
CLUSTER_NAME = "kafka-cluster"


class _KafkaEnum(IntEnum):
    """An enum of Kafka's wire codes: a code it does not know reads as UNKNOWN (0), as Kafka's
    ``fromCode`` does, so a newer client's value is refused by validation, not by a crash."""

    @classmethod
    def _missing_(cls, value: object) -> Self:
        return cls(0)

    @classmethod
    def parse(cls, text: str) -> Self:
        """The member named ``text`` (any case, as Kafka's ``fromString``), else UNKNOWN."""
        return cls.__members__.get(text.upper(), cls(0))


class ResourceType(_KafkaEnum):
    """Kafka's ``ResourceType`` codes."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_KafkaEnum):
    """Kafka's ``PatternType`` codes: ANY and MATCH are for filters only."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_KafkaEnum):
    """Kafka's ``AclOperation`` codes: ANY is for filters only; ALL matches every operation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_KafkaEnum):
    """Kafka's ``AclPermissionType`` codes: ANY is for filters only."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: An ALLOW of one of these grants DESCRIBE too (Kafka's IMPLIES_DESCRIBE).
_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER})
#: An ALLOW of one of these grants DESCRIBE_CONFIGS too.
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS,
                                       AclOperation.ALTER_CONFIGS})
_CONCRETE_RESOURCE_TYPES = frozenset(ResourceType) - {ResourceType.UNKNOWN, ResourceType.ANY}


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry, as CreateAcls carries it.
    Codes given as ints become the enums (an unknown code: UNKNOWN); the binding is checked by
    :meth:`validate`, not on construction, so that a request's bad binding gets its own error.
    Ordered by its fields, hashable: a set of bindings holds each ACL once."""

    resource_type: ResourceType
    """What kind of resource: TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, ..."""
    name: str
    """The resource's name, ``*`` (LITERAL: any), or the prefix (PREFIXED)."""
    pattern_type: PatternType
    """LITERAL or PREFIXED."""
    principal: str
    """``Type:name``, e.g. ``User:alice``; ``User:*`` matches every principal."""
    host: str
    """The client's address, or ``*`` for any."""
    operation: AclOperation
    """The operation allowed or denied (ALL: every one)."""
    permission: AclPermissionType
    """ALLOW or DENY."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", ResourceType(self.resource_type))
        object.__setattr__(self, "pattern_type", PatternType(self.pattern_type))
        object.__setattr__(self, "operation", AclOperation(self.operation))
        object.__setattr__(self, "permission", AclPermissionType(self.permission))

    def __str__(self) -> str:
        return (f"{self.permission.name} {self.principal} from {self.host} "
                f"{self.operation.name} on {self.resource_type.name}:"
                f"{self.pattern_type.name}:{self.name}")

    def validate(self) -> AclBinding:
        """This binding when CreateAcls would store it, else InvalidAclError (Kafka's
        INVALID_REQUEST) naming the binding and its bad field: a resource type, pattern type,
        operation or permission that is ANY, MATCH or UNKNOWN; an empty name; a CLUSTER not
        named ``kafka-cluster``; a principal not ``Type:name``; an empty host."""
        def bad(problem: str) -> InvalidAclError:
            return InvalidAclError(f"ACL binding ({self}): {problem}")

        if self.resource_type not in _CONCRETE_RESOURCE_TYPES:
            raise bad(f"invalid resource type {self.resource_type.name}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise bad(f"invalid pattern type {self.pattern_type.name} (LITERAL or PREFIXED)")
        if self.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise bad(f"invalid operation {self.operation.name}")
        if self.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise bad(f"invalid permission type {self.permission.name} (ALLOW or DENY)")
        if not isinstance(self.name, str) or not self.name:
            raise bad("the resource name is empty")
        if self.resource_type == ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise bad(f"the only valid name for the CLUSTER resource is {CLUSTER_NAME!r}")
        kind, _, who = str(self.principal).partition(":")
        if not (isinstance(self.principal, str) and kind and who):
            raise bad(f"principal {self.principal!r} is not of the form Type:name "
                      f"(e.g. User:alice)")
        if not isinstance(self.host, str) or not self.host:
            raise bad("the host is empty (use '*' for any host)")
        return self


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A filter of ACL bindings, as DescribeAcls and DeleteAcls carry it: ANY (or None for the
    strings) matches every value of a field. A ``pattern_type`` of MATCH with a name matches
    the bindings that would apply to a resource of that name (LITERAL of it, the LITERAL ``*``,
    PREFIXED ones it starts with); ANY or a definite pattern type with a name matches bindings
    of exactly that name."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def __post_init__(self) -> None:
        object.__setattr__(self, "resource_type", ResourceType(self.resource_type))
        object.__setattr__(self, "pattern_type", PatternType(self.pattern_type))
        object.__setattr__(self, "operation", AclOperation(self.operation))
        object.__setattr__(self, "permission", AclPermissionType(self.permission))

    def validate(self) -> AclBindingFilter:
        """This filter, unless a field is UNKNOWN (a code Kafka does not know):
        InvalidAclError (Kafka's INVALID_REQUEST) naming the filter and the field."""
        for field, value in (("resource type", self.resource_type),
                             ("pattern type", self.pattern_type),
                             ("operation", self.operation),
                             ("permission type", self.permission)):
            if value == 0:
                raise InvalidAclError(f"ACL filter {self}: unknown {field}")
        return self

    def matches(self, binding: AclBinding) -> bool:
        """Whether ``binding`` passes this filter (Kafka's ``AclBindingFilter.matches``)."""
        if self.resource_type != ResourceType.ANY \
                and self.resource_type != binding.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) \
                and self.pattern_type != binding.pattern_type:
            return False
        if self.name is not None:
            if self.pattern_type == PatternType.MATCH:
                if not applies_to(binding, binding.resource_type, self.name):
                    return False
            elif self.name != binding.name:
                return False
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != binding.operation:
            return False
        return self.permission in (AclPermissionType.ANY, binding.permission)


#: The filter that matches every binding.
ANY_FILTER = AclBindingFilter()


class Action(NamedTuple):
    """One thing a request asks to do: an operation on a resource (for the batch form)."""

    operation: AclOperation
    resource_type: ResourceType
    name: str


def applies_to(binding: AclBinding, resource_type: ResourceType, name: str) -> bool:
    """Whether ``binding``'s pattern covers the resource ``resource_type``/``name``: LITERAL of
    that name or ``*``, or PREFIXED with a prefix of it."""
    if binding.resource_type != resource_type:
        return False
    if binding.pattern_type == PatternType.LITERAL:
        return binding.name == name or binding.name == WILDCARD
    return binding.pattern_type == PatternType.PREFIXED and name.startswith(binding.name)


def acl_result(binding: AclBinding, principal: str, host: str,
               operation: AclOperation) -> bool | None:
    """What ``binding`` (already known to apply to the resource) says about ``principal`` at
    ``host`` doing ``operation``: True (allow), False (deny), or None when it does not match
    (another principal or host, another operation; implied DESCRIBE and DESCRIBE_CONFIGS
    come from ALLOW bindings only)."""
    if binding.principal != principal and binding.principal != WILDCARD_PRINCIPAL:
        return None
    if binding.host != WILDCARD and binding.host != host:
        return None
    allow = binding.permission == AclPermissionType.ALLOW
    granted = binding.operation
    if granted != AclOperation.ALL and granted != operation:
        if not allow:
            return None
        if operation == AclOperation.DESCRIBE:
            if granted not in _IMPLIES_DESCRIBE:
                return None
        elif operation == AclOperation.DESCRIBE_CONFIGS:
            if granted not in _IMPLIES_DESCRIBE_CONFIGS:
                return None
        else:
            return None
    return allow


def decide(applicable: Iterable[AclBinding], principal: str, host: str,
           operation: AclOperation, *, allow_if_no_acl: bool) -> bool:
    """The answer for ``principal`` at ``host`` doing ``operation``, given every binding that
    applies to the resource (and no others): False on the first matching DENY, else True if
    an ALLOW matched, else ``allow_if_no_acl`` when no binding applies at all, else False."""
    any_applies = allowed = False
    for binding in applicable:
        any_applies = True
        result = acl_result(binding, principal, host, operation)
        if result is False:
            return False
        if result:
            allowed = True
    return allowed or (allow_if_no_acl and not any_applies)


def authorize(acls: Iterable[AclBinding], principal: str, host: str, operation: AclOperation,
              resource_type: ResourceType, name: str, *, super_users: Collection[str] = (),
              allow_if_no_acl: bool = False) -> bool:
    """Whether ``principal`` (``Type:name``) connected from ``host`` may do ``operation`` on the
    resource ``resource_type``/``name``, by Kafka's rules over ``acls`` (a scan of them all:
    the reference the indexed authorizer is tested against)."""
    if principal in super_users:
        return True
    return decide((b for b in acls if applies_to(b, resource_type, name)), principal, host,
                  operation, allow_if_no_acl=allow_if_no_acl)
