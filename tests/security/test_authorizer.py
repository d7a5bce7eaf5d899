"""The Authorizer: its index finds exactly the bindings that apply, its snapshot follows the store
(at once for its own changes, within the refresh interval for another node's, on a fake clock),
a failed refresh keeps the last snapshot, its settings are Kafka's, refusals are audited."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.cluster.open_store import open_metadata_store
from tierlog.errors import ConfigError, CorruptRemoteMetadataError
from tierlog.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Action,
    PatternType,
    ResourceType,
    applies_to,
)
from tierlog.security.acl_store import AclSet, AclStore
from tierlog.security.authorizer import AclIndex, Authorizer, parse_super_users

Op = AclOperation
TOPIC = ResourceType.TOPIC
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def read(name: str, who: str = "User:alice", permission: AclPermissionType = ALLOW,
         pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(TOPIC, name, pattern, who, "*", Op.READ, permission)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def acl_store(tmp_path: Path) -> AclStore:
    return AclStore(open_metadata_store(str(tmp_path / "cluster")))


@settings(max_examples=200, deadline=None)
@given(acls=st.lists(st.builds(AclBinding, resource_type=st.sampled_from([TOPIC,
                                                                           ResourceType.GROUP]),
                               name=st.one_of(st.text("abc", min_size=1, max_size=5),
                                              st.just("*")),
                               pattern_type=st.sampled_from([PatternType.LITERAL,
                                                             PatternType.PREFIXED]),
                               principal=st.just("User:a"), host=st.just("*"),
                               operation=st.just(Op.READ), permission=st.just(ALLOW)),
                     max_size=40, unique=True),
       name=st.one_of(st.text("abc", min_size=1, max_size=6), st.just("*")))
def test_index_finds_exactly_the_bindings_that_apply(acls: list[AclBinding], name: str) -> None:
    index = AclIndex(AclSet(1, frozenset(acls)))
    found = index.applicable(TOPIC, name)
    assert sorted(found) == sorted(b for b in acls if applies_to(b, TOPIC, name))


def test_index_of_nested_prefixes() -> None:
    prefixes = ["a", "ab", "abc", "abd", "b", "abcd-x", "ab-"]
    acls = [read(p, pattern=PatternType.PREFIXED) for p in prefixes]
    index = AclIndex(AclSet(1, frozenset(acls)))
    assert sorted(b.name for b in index.applicable(TOPIC, "abcd")) == ["a", "ab", "abc"]
    assert sorted(b.name for b in index.applicable(TOPIC, "ab-1")) == ["a", "ab", "ab-"]
    assert index.applicable(TOPIC, "c") == []


def test_own_changes_are_seen_at_once(acl_store: AclStore) -> None:
    authorizer = Authorizer(acl_store, time_ms=Clock())
    assert not authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    authorizer.create_acls([read("orders")])
    assert authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    authorizer.delete_acls([AclBindingFilter(name="orders")])
    assert not authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert authorizer.version == 2


def test_another_nodes_change_is_seen_within_the_interval(acl_store: AclStore) -> None:
    clock = Clock()
    authorizer = Authorizer(acl_store, refresh_interval_ms=5_000, time_ms=clock)
    assert not authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    other_node = AclStore(acl_store.store)
    other_node.create([read("orders")])
    clock.now += 4_999
    assert not authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")  # cached
    assert authorizer.cached_acls(AclBindingFilter(resource_type=TOPIC)) == []
    assert authorizer.describe_acls(AclBindingFilter(resource_type=TOPIC)) == [read("orders")]
    clock.now += 1
    assert authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert authorizer.cached_acls(AclBindingFilter(resource_type=TOPIC)) == [read("orders")]
    assert authorizer.version == 1


def test_index_is_kept_while_the_version_is_unchanged(acl_store: AclStore) -> None:
    clock = Clock()
    authorizer = Authorizer(acl_store, refresh_interval_ms=10, time_ms=clock)
    authorizer.create_acls([read("orders")])
    first = authorizer._index()
    clock.now += 10
    assert authorizer._index() is first  # read again, same version: not rebuilt
    AclStore(acl_store.store).create([read("payments")])
    clock.now += 10
    assert authorizer._index() is not first


def test_failed_refresh_keeps_the_last_snapshot(acl_store: AclStore,
                                                caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    authorizer = Authorizer(acl_store, refresh_interval_ms=10, time_ms=clock)
    authorizer.create_acls([read("orders")])
    path = Path(acl_store.store.path("security/acls"))
    path.write_bytes(b"not json")
    clock.now += 10
    with caplog.at_level(logging.WARNING, "tierlog.security.authorizer"):
        assert authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert "could not read the ACLs" in caplog.text
    # With no snapshot to keep, the error is the caller's.
    with pytest.raises(CorruptRemoteMetadataError, match="security/acls"):
        Authorizer(acl_store).authorize("User:alice", "h", Op.READ, TOPIC, "orders")


def test_settings_in_kafkas_names(acl_store: AclStore) -> None:
    authorizer = Authorizer.from_config(acl_store, {
        "super.users": " User:admin ; User:ops;", "allow.everyone.if.no.acl.found": "true"})
    assert authorizer.super_users == {"User:admin", "User:ops"}
    assert authorizer.allow_everyone_if_no_acl_found
    assert authorizer.authorize("User:anyone", "h", Op.WRITE, TOPIC, "free")
    authorizer.create_acls([read("orders", who="User:*", permission=DENY)])
    assert not authorizer.authorize("User:alice", "h", Op.READ, TOPIC, "orders")
    assert authorizer.authorize("User:admin", "h", Op.READ, TOPIC, "orders")
    assert authorizer.authorize_actions("User:ops", "h", [Action(Op.READ, TOPIC, "orders")]) \
        == [True]
    default = Authorizer.from_config(acl_store, {})
    assert default.super_users == frozenset() and not default.allow_everyone_if_no_acl_found
    with pytest.raises(ConfigError, match=r"super\.users"):
        parse_super_users("User:admin;admin")
    with pytest.raises(ConfigError, match=r"allow\.everyone\.if\.no\.acl\.found"):
        Authorizer.from_config(acl_store, {"allow.everyone.if.no.acl.found": "yes"})


def test_refusals_are_audited(acl_store: AclStore, caplog: pytest.LogCaptureFixture) -> None:
    authorizer = Authorizer(acl_store)
    with caplog.at_level(logging.INFO, "kafka.authorizer.logger"):
        assert not authorizer.authorize("User:eve", "10.9.9.9", Op.DELETE, TOPIC, "orders")
        assert not authorizer.authorize("User:eve", "10.9.9.9", Op.DESCRIBE, TOPIC, "hidden",
                                        audit=False)
    assert "Principal = User:eve is Denied operation = DELETE from host = 10.9.9.9 on " \
           "resource = TOPIC:orders" in caplog.text
    assert "hidden" not in caplog.text
