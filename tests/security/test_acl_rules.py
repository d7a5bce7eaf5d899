"""Kafka's ACL rules, one table row per rule: which bindings apply to a resource, which match a
request, DENY over ALLOW, implied operations, super users and allow.everyone.if.no.acl.found;
CreateAcls' validation; filters' ANY and MATCH semantics; the wire codes."""

from __future__ import annotations

import pytest

from tierlog.errors import InvalidAclError
from tierlog.security.acl import (
    ANY_FILTER,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    authorize,
)

Op = AclOperation
RT = ResourceType
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def acl(name: str, op: AclOperation = Op.READ, permission: AclPermissionType = ALLOW, *,
        pattern: PatternType = LIT, principal: str = "User:alice", host: str = "*",
        kind: ResourceType = RT.TOPIC) -> AclBinding:
    return AclBinding(kind, name, pattern, principal, host, op, permission)


def alice_reads(acls: list[AclBinding], topic: str = "orders", op: AclOperation = Op.READ, *,
                host: str = "10.0.0.1", principal: str = "User:alice", **kw: object) -> bool:
    return authorize(acls, principal, host, op, RT.TOPIC, topic, **kw)  # type: ignore[arg-type]


def test_wire_codes_are_kafkas() -> None:
    kinds = [RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID, RT.DELEGATION_TOKEN, RT.USER]
    assert kinds == [2, 3, 4, 5, 6, 7]
    assert [PatternType.ANY, PatternType.MATCH, LIT, PRE] == [1, 2, 3, 4]
    operations = [Op.ANY, Op.ALL, Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER,
                  Op.DESCRIBE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                  Op.IDEMPOTENT_WRITE, Op.CREATE_TOKENS, Op.DESCRIBE_TOKENS]
    assert operations == list(range(1, 15))
    assert [AclPermissionType.ANY, DENY, ALLOW] == [1, 2, 3]
    # A code Kafka does not know reads as UNKNOWN, as its fromCode does.
    assert Op(99) is Op.UNKNOWN and RT(42) is RT.UNKNOWN and PatternType(9) is PatternType.UNKNOWN
    assert AclBinding(2, "t", 3, "User:a", "*", 3, 3).operation is Op.READ


@pytest.mark.parametrize("acls, topic, expected", [
    ([acl("orders")], "orders", True),                       # LITERAL of the name
    ([acl("order")], "orders", False),                       # LITERAL is not a prefix
    ([acl("orders")], "order", False),
    ([acl("*")], "orders", True),                            # LITERAL * is every name
    ([acl("ord", pattern=PRE)], "orders", True),             # PREFIXED of a prefix
    ([acl("orders", pattern=PRE)], "orders", True),          # a prefix of itself
    ([acl("orders-x", pattern=PRE)], "orders", False),       # longer than the name
    ([acl("pay", pattern=PRE)], "orders", False),
    ([acl("*", pattern=PRE)], "orders", False),              # PREFIXED * is the literal char
    ([acl("orders", kind=RT.GROUP)], "orders", False),       # another resource type
], ids=["literal", "literal-shorter", "literal-longer", "wildcard", "prefixed", "prefixed-whole",
        "prefixed-longer", "prefixed-other", "prefixed-star", "other-type"])
def test_which_bindings_apply(acls: list[AclBinding], topic: str, expected: bool) -> None:
    assert alice_reads(acls, topic) is expected


@pytest.mark.parametrize("binding, expected", [
    (acl("orders", principal="User:alice"), True),
    (acl("orders", principal="User:*"), True),               # the wildcard principal
    (acl("orders", principal="User:bob"), False),
    (acl("orders", principal="Group:*"), False),             # only User:* is a wildcard
    (acl("orders", host="10.0.0.1"), True),
    (acl("orders", host="10.0.0.2"), False),
    (acl("orders", host="*"), True),
], ids=["principal", "principal-wildcard", "other-principal", "group-star", "host",
        "other-host", "host-wildcard"])
def test_principal_and_host_match_exactly_or_by_wildcard(binding: AclBinding,
                                                         expected: bool) -> None:
    assert alice_reads([binding]) is expected


@pytest.mark.parametrize("granted, asked, expected", [
    (Op.READ, Op.READ, True),
    (Op.READ, Op.WRITE, False),
    (Op.ALL, Op.WRITE, True),
    (Op.ALL, Op.DESCRIBE_CONFIGS, True),
    (Op.READ, Op.DESCRIBE, True),                            # implied DESCRIBE
    (Op.WRITE, Op.DESCRIBE, True),
    (Op.DELETE, Op.DESCRIBE, True),
    (Op.ALTER, Op.DESCRIBE, True),
    (Op.CREATE, Op.DESCRIBE, False),
    (Op.DESCRIBE, Op.READ, False),                           # implication goes one way
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, True),
    (Op.ALTER_CONFIGS, Op.DESCRIBE, False),
    (Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, False),
])
def test_operations_and_what_an_allow_implies(granted: AclOperation, asked: AclOperation,
                                              expected: bool) -> None:
    assert alice_reads([acl("orders", granted)], op=asked) is expected


@pytest.mark.parametrize("acls, asked, expected", [
    ([acl("orders"), acl("orders", Op.READ, DENY)], Op.READ, False),           # DENY wins
    ([acl("*"), acl("ord", Op.ALL, DENY, pattern=PRE)], Op.READ, False),       # from any pattern
    ([acl("orders"), acl("orders", Op.READ, DENY, host="10.0.0.2")], Op.READ, True),
    ([acl("orders", Op.ALL), acl("*", Op.WRITE, DENY, principal="User:*")], Op.WRITE, False),
    # A DENY of READ does not deny the DESCRIBE an ALLOW grants: implication is ALLOW's only.
    ([acl("orders", Op.DESCRIBE), acl("orders", Op.READ, DENY)], Op.DESCRIBE, True),
    ([acl("orders", Op.ALL, DENY)], Op.DESCRIBE, False),
])
def test_deny_wins(acls: list[AclBinding], asked: AclOperation, expected: bool) -> None:
    assert alice_reads(acls, op=asked) is expected


def test_allow_everyone_if_no_acl_found_only_when_no_binding_applies() -> None:
    assert alice_reads([]) is False                                       # Kafka's default
    assert alice_reads([], allow_if_no_acl=True) is True
    # A binding of the resource for another principal or operation: ACLs exist, so no.
    assert alice_reads([acl("orders", principal="User:bob")], allow_if_no_acl=True) is False
    assert alice_reads([acl("orders", Op.WRITE)], allow_if_no_acl=True) is False
    # One on another resource does not count.
    assert alice_reads([acl("payments", principal="User:bob")], allow_if_no_acl=True) is True


def test_super_users_are_always_allowed() -> None:
    denied = [acl("orders", Op.ALL, DENY, principal="User:*")]
    assert alice_reads(denied, super_users={"User:alice"}) is True
    assert alice_reads(denied, principal="User:bob", super_users={"User:alice"}) is False


@pytest.mark.parametrize("binding, problem", [
    (acl("t", kind=RT.ANY), "invalid resource type ANY"),
    (acl("t", kind=RT.UNKNOWN), "invalid resource type UNKNOWN"),
    (acl("t", pattern=PatternType.ANY), "invalid pattern type ANY"),
    (acl("t", pattern=PatternType.MATCH), "invalid pattern type MATCH"),
    (acl("t", pattern=PatternType(0)), "invalid pattern type UNKNOWN"),
    (acl("t", Op.ANY), "invalid operation ANY"),
    (acl("t", Op(77)), "invalid operation UNKNOWN"),
    (acl("t", permission=AclPermissionType.ANY), "invalid permission type ANY"),
    (acl(""), "the resource name is empty"),
    (acl("cluster", kind=RT.CLUSTER), "only valid name for the CLUSTER resource"),
    (acl("t", principal="alice"), "not of the form Type:name"),
    (acl("t", principal="User:"), "not of the form Type:name"),
    (acl("t", principal=":alice"), "not of the form Type:name"),
    (acl("t", host=""), "the host is empty"),
])
def test_create_validation_as_kafka(binding: AclBinding, problem: str) -> None:
    with pytest.raises(InvalidAclError, match=problem) as e:
        binding.validate()
    assert e.value.code == 42  # INVALID_REQUEST
    assert "ACL binding (" in str(e.value)


def test_valid_bindings_pass() -> None:
    for binding in (acl("kafka-cluster", Op.CLUSTER_ACTION, kind=RT.CLUSTER),
                    acl("*", principal="User:*"), acl("tx-", Op.WRITE, DENY, pattern=PRE,
                                                      kind=RT.TRANSACTIONAL_ID)):
        assert binding.validate() is binding


STORED = [acl("orders"), acl("*", Op.WRITE), acl("ord", pattern=PRE, principal="User:bob"),
          acl("orders", kind=RT.GROUP, host="10.0.0.1"), acl("pay", Op.DESCRIBE, DENY)]


@pytest.mark.parametrize("acl_filter, expected", [
    (ANY_FILTER, [0, 1, 2, 3, 4]),
    (AclBindingFilter(resource_type=RT.TOPIC), [0, 1, 2, 4]),
    (AclBindingFilter(name="orders"), [0, 3]),                           # ANY: exact name
    (AclBindingFilter(name="orders", pattern_type=LIT), [0, 3]),
    (AclBindingFilter(name="ord", pattern_type=PRE), [2]),
    (AclBindingFilter(name="orders", pattern_type=PRE), []),
    # MATCH: every binding that applies to a resource of that name.
    (AclBindingFilter(RT.TOPIC, "orders", PatternType.MATCH), [0, 1, 2]),
    (AclBindingFilter(RT.ANY, "payments", PatternType.MATCH), [1]),       # not LITERAL pay
    (AclBindingFilter(pattern_type=PatternType.MATCH), [0, 1, 2, 3, 4]),   # no name: all
    (AclBindingFilter(principal="User:bob"), [2]),
    (AclBindingFilter(host="10.0.0.1"), [3]),
    (AclBindingFilter(operation=Op.WRITE), [1]),
    (AclBindingFilter(permission=DENY), [4]),
    (AclBindingFilter(operation=Op.ALL), []),         # a filter's ALL is the ACL's ALL only
])
def test_filter_matching(acl_filter: AclBindingFilter, expected: list[int]) -> None:
    assert [i for i, b in enumerate(STORED) if acl_filter.matches(b)] == expected


def test_filter_with_unknown_field_is_refused() -> None:
    for bad in (AclBindingFilter(resource_type=RT(0)), AclBindingFilter(pattern_type=0),
                AclBindingFilter(operation=Op(99)), AclBindingFilter(permission=0)):
        with pytest.raises(InvalidAclError, match="unknown"):
            bad.validate()
    assert ANY_FILTER.validate() is ANY_FILTER
