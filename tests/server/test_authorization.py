"""tierlog.server.authorization on its own: Kafka's ``authorizeByResourceType`` rule (an
idempotent producer may init with WRITE on some topic), the authorized-operations bit field,
checks without an authorizer, and which config values DescribeConfigs hides."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.cluster.open_store import open_metadata_store
from tierlog.security.acl import (
    WILDCARD,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tierlog.security.acl_store import AclStore
from tierlog.security.authorizer import Authorizer
from tierlog.server.api.admin_configs import sensitive
from tierlog.server.authorization import RequestAuth, allowed_by_resource_type

ALICE, HOST = "User:alice", "10.0.0.1"
_W, _T = AclOperation.WRITE, ResourceType.TOPIC
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def _acl(name: str, pattern: PatternType = LITERAL, permission: AclPermissionType = ALLOW,
         principal: str = ALICE, operation: AclOperation = _W) -> AclBinding:
    return AclBinding(_T, name, pattern, principal, WILDCARD, operation, permission)


@pytest.mark.parametrize(("bindings", "expected"), [
    ([], False),
    ([_acl("orders")], True),
    ([_acl("ord", PREFIXED)], True),
    ([_acl("orders", principal="User:*")], True),
    ([_acl("orders", operation=AclOperation.ALL)], True),
    ([_acl("orders", operation=AclOperation.READ)], False),
    ([_acl("orders", principal="User:bob")], False),
    ([_acl("orders"), _acl("orders", permission=DENY)], False),
    ([_acl("orders"), _acl("ord", PREFIXED, DENY)], False),  # a DENY prefix covers it
    ([_acl("ord", PREFIXED), _acl("o", PREFIXED, DENY)], False),
    ([_acl("ord", PREFIXED), _acl("orders", permission=DENY)], True),  # other names remain
    ([_acl("orders"), _acl(WILDCARD, permission=DENY)], False),  # DENY of every topic
    ([_acl("orders"), _acl("payments"), _acl("orders", permission=DENY)], True),
])
def test_kafkas_authorize_by_resource_type(bindings: list[AclBinding], expected: bool) -> None:
    assert allowed_by_resource_type(bindings, ALICE, HOST, _W) is expected


def test_without_an_authorizer_every_check_passes_and_every_operation_is_reported() -> None:
    auth = RequestAuth(None, ALICE, HOST)
    assert auth.may(AclOperation.DELETE, _T, "anything") and auth.any_allowed(_W, _T)
    assert auth.names(AclOperation.READ, _T, ["a", "b", "a"]) == {"a", "b"}
    assert auth.operations(ResourceType.GROUP, "g") == (
        1 << AclOperation.READ | 1 << AclOperation.DESCRIBE | 1 << AclOperation.DELETE)


def test_the_operations_field_holds_what_the_principal_may_do(tmp_path: Path) -> None:
    authorizer = Authorizer(AclStore(open_metadata_store(str(tmp_path))))
    authorizer.create_acls([_acl("orders", operation=AclOperation.READ),
                            _acl("orders", operation=AclOperation.ALTER_CONFIGS)])
    auth = RequestAuth(authorizer, ALICE, HOST)
    # READ implies DESCRIBE, ALTER_CONFIGS implies DESCRIBE_CONFIGS (Kafka's rule)
    assert auth.operations(_T, "orders") == sum(1 << op for op in (
        AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS))
    assert auth.operations(_T, "payments") == 0
    assert not auth.any_allowed(_W, _T)
    authorizer.create_acls([_acl("pay", PREFIXED)])
    assert auth.any_allowed(_W, _T)


@pytest.mark.parametrize(("name", "hidden"), [
    ("ssl.keystore.password", True),
    ("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", True),
    ("remote.log.table.catalog.credential", True),
    ("retention.ms", False),
    ("remote.storage.url", False),
])
def test_describe_configs_hides_every_secret(name: str, hidden: bool) -> None:
    assert sensitive(name) is hidden
