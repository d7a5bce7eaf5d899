"""AclStore on a local directory and on moto's S3: CreateAcls, DescribeAcls and DeleteAcls with
Kafka's per-binding and per-filter results, durable across store objects, concurrent creates
from two stores both landing, a corrupt object and the size limit refused clearly."""

from __future__ import annotations

import threading

import pytest

from tierlog.cluster.store import MetadataStore
from tierlog.errors import AclLimitError, CorruptRemoteMetadataError
from tierlog.security.acl import (
    ANY_FILTER,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tierlog.security.acl_store import ACLS_KEY, AclStore

Op = AclOperation
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY


def binding(name: str, op: AclOperation = Op.READ, who: str = "User:alice",
            kind: ResourceType = TOPIC, permission: AclPermissionType = ALLOW,
            pattern: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(kind, name, pattern, who, "*", op, permission)


def test_create_and_describe(store: MetadataStore) -> None:
    acls = AclStore(store)
    assert acls.all().version == 0 and acls.describe(ANY_FILTER) == []
    wanted = [binding("orders"), binding("orders", Op.WRITE, "User:bob"),
              binding("app-", kind=GROUP, pattern=PatternType.PREFIXED)]
    bad = binding("orders", who="alice")
    results = acls.create([wanted[0], bad, *wanted[1:], wanted[0]])
    assert [r.binding for r in results] == [wanted[0], bad, *wanted[1:], wanted[0]]
    assert [r.error is None for r in results] == [True, False, True, True, True]
    assert "principal 'alice' is not of the form Type:name" in str(results[1].error)
    # Durable: another AclStore (another node) reads the same bindings, each once.
    again = AclStore(store)
    assert again.describe(ANY_FILTER) == sorted(wanted)
    assert again.all().version == 1  # one write for the whole request
    assert again.describe(AclBindingFilter(TOPIC, "orders", PatternType.MATCH)) == sorted(
        wanted[:2])
    # Creating what is stored already changes nothing, and writes nothing.
    assert all(r.error is None for r in again.create([wanted[1]]))
    assert again.all().version == 1


def test_delete_answers_per_filter(store: MetadataStore) -> None:
    acls = AclStore(store)
    stored = [binding("orders"), binding("orders", Op.WRITE), binding("pay", who="User:bob"),
              binding("g", kind=GROUP)]
    acls.create(stored)
    results = acls.delete([AclBindingFilter(name="orders", operation=Op.READ),
                           AclBindingFilter(resource_type=ResourceType.UNKNOWN),
                           AclBindingFilter(resource_type=TOPIC, name="orders"),
                           AclBindingFilter(name="nothing")])
    assert results[0].deleted == (stored[0],) and results[0].error is None
    assert results[1].deleted == () and "unknown resource type" in str(results[1].error)
    # A binding matched by two filters of one delete is reported under each.
    assert results[2].deleted == tuple(sorted(stored[:2]))
    assert results[3].deleted == () and results[3].error is None
    assert acls.describe(ANY_FILTER) == sorted(stored[2:])
    assert acls.all().version == 2
    # Nothing matched: no write.
    acls.delete([AclBindingFilter(name="orders")])
    assert acls.all().version == 2


def test_concurrent_creates_from_two_stores_both_land(store: MetadataStore) -> None:
    nodes = [AclStore(store), AclStore(type(store)(store.tier))]
    per_node = 8
    barrier = threading.Barrier(len(nodes))
    failures: list[BaseException] = []

    def work(node: int) -> None:
        try:
            barrier.wait(timeout=30)
            for i in range(per_node):
                results = nodes[node].create([binding(f"t{node}-{i}")])
                assert results[0].error is None
        except Exception as e:  # noqa: BLE001 (reported by the main thread)
            failures.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(len(nodes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not failures
    found = AclStore(store).all()
    assert found.bindings == {binding(f"t{n}-{i}") for n in range(2) for i in range(per_node)}
    assert found.version == 2 * per_node


def test_corrupt_object_is_named(store: MetadataStore) -> None:
    store.create(ACLS_KEY, {"version": 1, "acls": [["TOPIC", "t", "LITERAL", "User:a", "*",
                                                    "READ", "ALLOW"], ["TOPIC", "t"]]})
    with pytest.raises(CorruptRemoteMetadataError, match="'security/acls': entry 1"):
        AclStore(store).all()


def test_more_than_the_store_holds_is_refused_whole(store: MetadataStore) -> None:
    acls = AclStore(store)
    acls.create([binding("kept")])
    too_many = [binding("t" * 240 + f"{i:05}") for i in range(5_000)]
    with pytest.raises(AclLimitError, match="5001 ACLs do not fit") as e:
        acls.create(too_many)
    assert e.value.code == -1
    assert acls.describe(ANY_FILTER) == [binding("kept")]
    assert acls.all().version == 1
