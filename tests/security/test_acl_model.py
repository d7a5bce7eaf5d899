"""``authorize`` (the reference scan) and the indexed ``Authorizer`` against a deliberately simple
model of Kafka's rules, on random ACL sets over a small alphabet (so that literal, prefixed and
wildcard names, principals and hosts collide often)."""

from __future__ import annotations

import tempfile

from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.cluster.open_store import open_metadata_store
from tierlog.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    Action,
    PatternType,
    ResourceType,
    authorize,
)
from tierlog.security.acl_store import AclStore
from tierlog.security.authorizer import Authorizer

Op = AclOperation
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
OPERATIONS = [Op.ALL, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.CREATE, Op.DESCRIBE,
              Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
ASKED = [op for op in OPERATIONS if op is not Op.ALL]

#: Names that are prefixes of one another, and the wildcard: most ACLs apply to most requests.
names = st.sampled_from(["a", "ab", "aba", "abb", "b", "*"])
bindings = st.builds(
    AclBinding,
    resource_type=st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
    name=names,
    pattern_type=st.sampled_from([PatternType.LITERAL, PatternType.PREFIXED]),
    principal=st.sampled_from(["User:alice", "User:bob", "User:*"]),
    host=st.sampled_from(["10.0.0.1", "10.0.0.2", "*"]),
    operation=st.sampled_from(OPERATIONS),
    permission=st.sampled_from([ALLOW, DENY]),
)
requests = st.tuples(st.sampled_from(["User:alice", "User:bob"]),
                     st.sampled_from(["10.0.0.1", "10.0.0.2"]),
                     st.sampled_from(ASKED),
                     st.sampled_from([ResourceType.TOPIC, ResourceType.GROUP]),
                     names)


def model(acls: list[AclBinding], principal: str, host: str, op: AclOperation,
          kind: ResourceType, name: str, super_users: frozenset[str], allow_if_none: bool
          ) -> bool:
    """Kafka's rules, written as plainly as possible."""
    if principal in super_users:
        return True

    def covers(b: AclBinding) -> bool:
        if b.resource_type != kind:
            return False
        if b.pattern_type == PatternType.LITERAL:
            return b.name == name or b.name == "*"
        return name[:len(b.name)] == b.name

    def is_for_me(b: AclBinding) -> bool:
        return b.principal in (principal, "User:*") and b.host in (host, "*")

    relevant = [b for b in acls if covers(b)]
    if not relevant:
        return allow_if_none
    if any(is_for_me(b) and b.permission == DENY and b.operation in (op, Op.ALL)
           for b in relevant):
        return False
    granting = {Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
                Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}}.get(op, {op})
    return any(is_for_me(b) and b.permission == ALLOW
               and (b.operation == Op.ALL or b.operation in granting) for b in relevant)


@settings(max_examples=300, deadline=None)
@given(acls=st.lists(bindings, max_size=8), request=requests,
       super_users=st.sampled_from([frozenset(), frozenset({"User:bob"})]),
       allow_if_none=st.booleans())
def test_authorize_matches_the_model(acls: list[AclBinding],
                                     request: tuple[str, str, AclOperation, ResourceType, str],
                                     super_users: frozenset[str], allow_if_none: bool) -> None:
    expected = model(acls, *request, super_users, allow_if_none)
    assert authorize(acls, *request, super_users=super_users,
                     allow_if_no_acl=allow_if_none) is expected


@settings(max_examples=100, deadline=None)
@given(acls=st.lists(bindings, max_size=8),
       asked=st.lists(requests, min_size=1, max_size=12), allow_if_none=st.booleans())
def test_indexed_authorizer_matches_the_model(
        acls: list[AclBinding], asked: list[tuple[str, str, AclOperation, ResourceType, str]],
        allow_if_none: bool) -> None:
    with tempfile.TemporaryDirectory() as directory:
        authorizer = Authorizer(AclStore(open_metadata_store(directory)),
                                allow_everyone_if_no_acl_found=allow_if_none)
        assert all(r.error is None for r in authorizer.create_acls(acls))
        for principal, host, op, kind, name in asked:
            expected = model(acls, principal, host, op, kind, name, frozenset(), allow_if_none)
            assert authorizer.authorize(principal, host, op, kind, name) is expected
        # The batch form answers the same, per action, for one principal and host.
        principal, host = asked[0][:2]
        actions = [Action(op, kind, name) for _, _, op, kind, name in asked]
        assert authorizer.authorize_actions(principal, host, actions) == [
            model(acls, principal, host, *a, frozenset(), allow_if_none) for a in actions]
