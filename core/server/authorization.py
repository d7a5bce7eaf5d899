"""Which ACL each API needs, and the checks its handler makes: the one home of Kafka's table
(``KafkaApis``; "Operations and Resources on Protocols" in Kafka's authorization docs).

:data:`REQUIRED` names, per API key, what a principal must be allowed; each handler asks
:class:`RequestAuth` (built once per request by :func:`request_auth`), which sends all of a
request's resources to :meth:`Authorizer.authorize_actions` at once (one snapshot). Without an
authorizer (``authorizer.class.name`` unset) every check passes, as on a Kafka broker without
one. The error a refused resource answers is Kafka's for its type (:data:`DENIED`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, cast

from kio.schema.errors import ErrorCode

from tierlog.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Action,
    PatternType,
    ResourceType,
)

if TYPE_CHECKING:
    from tierlog.security.authorizer import Authorizer
    from tierlog.server.context import RequestContext

__all__ = ["DENIED", "REQUIRED", "SUPPORTED_OPERATIONS", "UNKNOWN_OPERATIONS", "RequestAuth",
           "allowed_by_resource_type", "authorizer_of", "request_auth"]

TOPIC, GROUP, CLUSTER, TXN = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                              ResourceType.TRANSACTIONAL_ID)

#: API key -> what a principal must be allowed, as Kafka's KafkaApis checks it. "filtered":
#: what it may not see is left out of the answer rather than refused. Every API the server
#: serves has a row (tests/server/test_server_acls.py fails for one without).
REQUIRED: Mapping[int, str] = MappingProxyType({
    0: "Produce: WRITE topic; transactional records: WRITE transactional id",
    1: "Fetch: consumer READ topic; follower (replica_id >= 0) CLUSTER_ACTION cluster",
    2: "ListOffsets: DESCRIBE topic",
    3: "Metadata: DESCRIBE topic (filtered when all topics are asked); auto-create: CREATE "
       "cluster or topic",
    8: "OffsetCommit: READ group, READ topic",
    9: "OffsetFetch: DESCRIBE group, DESCRIBE topic (filtered when all are asked)",
    10: "FindCoordinator: DESCRIBE group or transactional id",
    11: "JoinGroup: READ group",
    12: "Heartbeat: READ group",
    13: "LeaveGroup: READ group",
    14: "SyncGroup: READ group",
    15: "DescribeGroups: DESCRIBE group",
    16: "ListGroups: DESCRIBE cluster, else DESCRIBE group (filtered)",
    17: "SaslHandshake: none",
    18: "ApiVersions: none",
    19: "CreateTopics: CREATE cluster or topic (an existing topic without DESCRIBE: "
        "TOPIC_AUTHORIZATION_FAILED)",
    20: "DeleteTopics: DELETE topic",
    21: "DeleteRecords: DELETE topic",
    22: "InitProducerId: WRITE transactional id; idempotent: IDEMPOTENT_WRITE cluster or "
        "WRITE on some topic",
    23: "OffsetsForLeaderEpoch: CLUSTER_ACTION cluster, else DESCRIBE topic",
    24: "AddPartitionsToTxn: WRITE transactional id, WRITE topic",
    25: "AddOffsetsToTxn: WRITE transactional id, READ group",
    26: "EndTxn: WRITE transactional id",
    27: "WriteTxnMarkers: CLUSTER_ACTION cluster",
    28: "TxnOffsetCommit: WRITE transactional id, READ group, READ topic",
    29: "DescribeAcls: DESCRIBE cluster",
    30: "CreateAcls: ALTER cluster",
    31: "DeleteAcls: ALTER cluster",
    32: "DescribeConfigs: DESCRIBE_CONFIGS topic or cluster (broker)",
    33: "AlterConfigs: ALTER_CONFIGS topic or cluster (broker)",
    36: "SaslAuthenticate: none",
    37: "CreatePartitions: ALTER topic",
    42: "DeleteGroups: DELETE group",
    44: "IncrementalAlterConfigs: ALTER_CONFIGS topic or cluster (broker)",
    47: "OffsetDelete: DELETE group, READ topic",
    50: "DescribeUserScramCredentials: DESCRIBE cluster",
    51: "AlterUserScramCredentials: ALTER cluster",
})

#: The error a refused resource of each type answers.
DENIED: Mapping[ResourceType, ErrorCode] = MappingProxyType({
    TOPIC: ErrorCode.topic_authorization_failed,
    GROUP: ErrorCode.group_authorization_failed,
    CLUSTER: ErrorCode.cluster_authorization_failed,
    TXN: ErrorCode.transactional_id_authorization_failed,
})

#: The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what an
#: ``authorized_operations`` bit field is made of.
SUPPORTED_OPERATIONS: Mapping[ResourceType, tuple[AclOperation, ...]] = MappingProxyType({
    TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
            AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
            AclOperation.ALTER_CONFIGS),
    GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
              AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
              AclOperation.DESCRIBE),
    TXN: (AclOperation.DESCRIBE, AclOperation.WRITE),
})

#: ``authorized_operations`` when the client did not ask for it (Kafka's INT32_MIN).
UNKNOWN_OPERATIONS = -2147483648


def authorizer_of(services: object) -> Authorizer | None:
    """The authorizer of a server's services (None: no authorizer; a coordinator's
    services are typed by what they offer the coordinators, which is not this)."""
    return cast("Authorizer | None", getattr(services, "authorizer", None))


@dataclass(frozen=True, slots=True)
class RequestAuth:
    """The checks of one request: who asks, from where, and the authorizer (None: every
    check passes)."""

    authorizer: Authorizer | None
    principal: str
    host: str

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    def allowed(self, actions: Sequence[Action], *, audit: bool = True) -> list[bool]:
        """Whether each action is allowed, in order, on one snapshot of the ACLs. ``audit``
        False for checks that only filter what a client sees (Kafka logs no denial then)."""
        if self.authorizer is None:
            return [True] * len(actions)
        return self.authorizer.authorize_actions(self.principal, self.host, actions,
                                                 audit=audit)

    def may(self, operation: AclOperation, resource_type: ResourceType, name: str, *,
            audit: bool = True) -> bool:
        """Whether ``operation`` on one resource is allowed."""
        return self.allowed([Action(operation, resource_type, name)], audit=audit)[0]

    def may_cluster(self, operation: AclOperation, *, audit: bool = True) -> bool:
        """Whether ``operation`` on the cluster is allowed."""
        return self.may(operation, CLUSTER, CLUSTER_NAME, audit=audit)

    def names(self, operation: AclOperation, resource_type: ResourceType,
              names: Iterable[str], *, audit: bool = True) -> set[str]:
        """Those of ``names`` (each checked once) on which ``operation`` is allowed."""
        unique = list(dict.fromkeys(names))
        if self.authorizer is None:
            return set(unique)
        answers = self.allowed([Action(operation, resource_type, n) for n in unique],
                               audit=audit)
        return {n for n, ok in zip(unique, answers, strict=True) if ok}

    def any_allowed(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of the type may get ``operation`` (Kafka's
        ``authorizeByResourceType``, e.g. WRITE on some topic for an idempotent producer).
        Reads the stored ACLs of the type: call it on a worker thread."""
        authorizer = self.authorizer
        if authorizer is None or self.principal in authorizer.super_users:
            return True
        bindings = authorizer.describe_acls(AclBindingFilter(resource_type=resource_type))
        return allowed_by_resource_type(bindings, self.principal, self.host, operation)

    def operations(self, resource_type: ResourceType, name: str) -> int:
        """The ``authorized_operations`` bit field of a resource (bit ``1 << code`` of each
        operation of its type this principal may do; all of them without an authorizer)."""
        supported = SUPPORTED_OPERATIONS[resource_type]
        answers = self.allowed([Action(op, resource_type, name) for op in supported],
                               audit=False)
        return sum(1 << int(op) for op, ok in zip(supported, answers, strict=True) if ok)


def allowed_by_resource_type(bindings: Iterable[AclBinding], principal: str, host: str,
                             operation: AclOperation) -> bool:
    """Kafka's ``authorizeByResourceType`` over the bindings of one resource type: true when
    an ALLOW of ``operation`` (or ALL) for this principal and host names a resource (LITERAL,
    or a PREFIXED pattern) that no matching DENY covers (a DENY of the LITERAL ``*`` covers
    every one, a PREFIXED DENY every name it starts)."""
    allow_literal: set[str] = set()
    allow_prefix: set[str] = set()
    deny_literal: set[str] = set()
    deny_prefix: set[str] = set()
    for binding in bindings:
        if binding.operation not in (operation, AclOperation.ALL) \
                or binding.principal not in (principal, WILDCARD_PRINCIPAL) \
                or binding.host not in (host, WILDCARD):
            continue
        prefixed = binding.pattern_type == PatternType.PREFIXED
        if binding.permission == AclPermissionType.DENY:
            (deny_prefix if prefixed else deny_literal).add(binding.name)
        elif binding.permission == AclPermissionType.ALLOW:
            (allow_prefix if prefixed else allow_literal).add(binding.name)
    if WILDCARD in deny_literal:
        return False

    def denied(name: str) -> bool:
        return any(name.startswith(p) for p in deny_prefix)

    return (any(n not in deny_literal and not denied(n) for n in allow_literal)
            or any(not denied(p) for p in allow_prefix))


def request_auth(services: object, ctx: RequestContext) -> RequestAuth:
    """The checks of the request ``ctx`` against the server's authorizer."""
    return RequestAuth(authorizer_of(services), ctx.principal, ctx.client_host)
