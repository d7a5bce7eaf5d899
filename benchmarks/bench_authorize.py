"""The cost of one authorization check (issue 25) with 10, 1,000 and 10,000 ACLs in the store.

Each ACL set is a realistic mix: per-topic LITERAL grants to a few principals, PREFIXED grants
per team, a LITERAL ``*`` grant and some DENYs. A check asks for a topic that has ACLs (an
allowed principal, then one with none: refused). Baselines in the same run: the same call
answered by a function that does nothing (what a server without an authorizer pays), and the
reference scan ``tierlog.security.acl.authorize`` over every ACL, which the index avoids.
Target: the indexed check stays flat (O(ACLs that apply)) from 10 to 10,000 ACLs.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from functools import partial

from _util import report, scratch_dir

from tierlog.cluster.open_store import open_metadata_store
from tierlog.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    authorize,
)
from tierlog.security.acl_store import AclStore
from tierlog.security.authorizer import Authorizer

CHECKS = 20_000
TEAMS = 20
TOPIC = ResourceType.TOPIC


def acl_set(size: int) -> tuple[list[AclBinding], list[str]]:
    """``size`` bindings and the topics they name."""
    rng = random.Random(size)
    acls = [AclBinding(TOPIC, "*", PatternType.LITERAL, "User:monitor", "*",
                       AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    acls += [AclBinding(TOPIC, f"team{t}.", PatternType.PREFIXED, f"User:team{t}", "*",
                        AclOperation.ALL, AclPermissionType.ALLOW)
             for t in range(min(TEAMS, size // 10))]
    topics: list[str] = []
    while len(acls) < size:
        topic = f"team{rng.randrange(TEAMS)}.topic-{len(topics)}"
        topics.append(topic)
        for principal, op, permission in (
                ("User:app", AclOperation.WRITE, AclPermissionType.ALLOW),
                ("User:reader", AclOperation.READ, AclPermissionType.ALLOW),
                ("User:intern", AclOperation.READ, AclPermissionType.DENY)):
            acls.append(AclBinding(TOPIC, topic, PatternType.LITERAL, principal, "*", op,
                                   permission))
    return acls[:size], topics


def cost(check: Callable[[str, str, AclOperation, ResourceType, str], bool],
         principal: str, topics: list[str], checks: int = CHECKS) -> float:
    """Best-of-5 seconds per call of ``check`` on ``checks`` random topics."""
    rng = random.Random(7)
    names = [rng.choice(topics) for _ in range(checks)]
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for name in names:
            check(principal, "10.0.0.1", AclOperation.READ, TOPIC, name)
        best = min(best, (time.perf_counter() - start) / checks)
    return best


def no_authorizer(principal: str, host: str, op: AclOperation, kind: ResourceType,
                  name: str) -> bool:
    return True


def main() -> dict[str, float]:
    rows: list[tuple[str, str]] = []
    figures: dict[str, float] = {}
    baseline = 0.0
    for size in (10, 1_000, 10_000):
        acls, topics = acl_set(size)
        topics = topics or ["team0.topic"]
        with scratch_dir("authorize") as root:
            store = AclStore(open_metadata_store(str(root / "cluster")))
            store.create(acls)
            authorizer = Authorizer(store)
            allowed = cost(authorizer.authorize, "User:reader", topics)
            refused = cost(authorizer.authorize, "User:nobody", topics)
        # The scan is O(ACLs): fewer calls keep the run short.
        scan = cost(partial(authorize, acls), "User:reader", topics,
                    checks=max(20, CHECKS * 10 // size))
        baseline = cost(no_authorizer, "User:reader", topics)
        rows.append((f"{size:>6,} ACLs  indexed, allowed", f"{allowed * 1e6:7.2f} us"))
        rows.append((f"{size:>6,} ACLs  indexed, refused", f"{refused * 1e6:7.2f} us"))
        rows.append((f"{size:>6,} ACLs  scan of all (reference)", f"{scan * 1e6:7.2f} us"))
        figures[f"authorize_{size}_us"] = allowed * 1e6
    rows.append(("no authorizer (baseline call)", f"{baseline * 1e6:7.2f} us"))
    ratio = figures["authorize_10000_us"] / figures["authorize_10_us"]
    rows.append(("indexed 10,000 / 10 ACLs", f"{ratio:7.2f}x   (target: flat, < 2x)"))
    report("authorization check per request", rows)
    figures["authorize_ratio"] = ratio
    return figures


if __name__ == "__main__":
    main()
