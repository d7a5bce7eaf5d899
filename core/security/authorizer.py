"""The authorizer a server asks on every request: Kafka's ACL rules (``tierlog.security.acl``)
over a snapshot of the stored ACLs (``AclStore``), indexed so that a check costs O(the ACLs
that apply to the resource), not O(all ACLs), plus ``super.users`` and
``allow.everyone.if.no.acl.found``.

The snapshot is refreshed at once after a change made through this authorizer, and otherwise
read again when it is older than ``refresh_interval_ms`` (one read of the store; the index is
rebuilt only when the ACLs' version changed), so a change made on another node is seen within
that bound. A failed refresh keeps the last snapshot (logged) and is tried again an interval
later; the first load has no snapshot to keep and raises.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from tierlog.common.clock import system_time_ms
from tierlog.config import parse_bool
from tierlog.errors import ConfigError
from tierlog.security.acl import (
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    Action,
    PatternType,
    ResourceType,
    decide,
)
from tierlog.security.acl_store import AclCreateResult, AclDeleteResult, AclSet, AclStore

__all__ = ["DEFAULT_REFRESH_INTERVAL_MS", "AclIndex", "Authorizer", "parse_super_users"]

log = logging.getLogger(__name__)
#: Kafka's audit logger name: one line per refused request (at INFO, as Kafka logs a denial).
audit_log = logging.getLogger("kafka.authorizer.logger")

SUPER_USERS = "super.users"
ALLOW_EVERYONE_IF_NO_ACL_FOUND = "allow.everyone.if.no.acl.found"
#: How stale the snapshot may grow before a check reads the store again.
DEFAULT_REFRESH_INTERVAL_MS = 5_000


def parse_super_users(value: str) -> frozenset[str]:
    """The principals of a ``super.users`` value (``User:alice;User:bob``, spaces ignored);
    ConfigError naming the setting for an entry not of the form ``Type:name``."""
    users = frozenset(u.strip() for u in value.split(";") if u.strip())
    for user in users:
        kind, _, name = user.partition(":")
        if not (kind and name):
            raise ConfigError(SUPER_USERS, f"{user!r} is not a principal of the form Type:name "
                                           f"(e.g. User:alice)")
    return users


class AclIndex:
    """An immutable index of one ACL set: the LITERAL bindings by (resource type, name) (the
    ``*`` wildcard among them), and per resource type the PREFIXED names, sorted, with their
    bindings. :meth:`applicable` finds the bindings that apply to a resource with a few
    dictionary lookups and bisections (one per prefix found). Thread-safe (never changes)."""

    __slots__ = ("_literal", "_prefixed", "bindings", "version")

    def __init__(self, acls: AclSet) -> None:
        literal: dict[tuple[ResourceType, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = defaultdict(
            lambda: defaultdict(list))
        for binding in acls.bindings:
            if binding.pattern_type == PatternType.PREFIXED:
                prefixed[binding.resource_type][binding.name].append(binding)
            else:
                literal[(binding.resource_type, binding.name)].append(binding)
        self.version = acls.version
        self.bindings = acls.bindings
        self._literal = {key: tuple(found) for key, found in literal.items()}
        self._prefixed = {kind: (sorted(names), {n: tuple(b) for n, b in names.items()})
                          for kind, names in prefixed.items()}

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """The bindings that apply to the resource: LITERAL of ``name`` or ``*``, PREFIXED of
        a prefix of ``name``."""
        found = list(self._literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found.extend(self._literal.get((resource_type, WILDCARD), ()))
        by_prefix = self._prefixed.get(resource_type)
        if by_prefix is not None:
            names, bindings = by_prefix
            for prefix in _prefixes_of(names, name):
                found.extend(bindings[prefix])
        return found


def _prefixes_of(names: Sequence[str], name: str) -> Iterable[str]:
    """The entries of ``names`` (sorted) that start ``name``. Each step bisects for the
    greatest entry <= ``key`` (a prefix of ``name`` that every prefix not yet found starts):
    if it starts ``key`` it is one, and the rest start it without its last character; if not,
    the rest start the part of ``key`` it shares (anything longer would sort after it)."""
    key = name
    while key:
        at = bisect.bisect_right(names, key)
        if at == 0:
            return
        candidate = names[at - 1]
        if key.startswith(candidate):
            yield candidate
            key = candidate[:-1]
        else:
            shared = 0
            for a, b in zip(candidate, key, strict=False):
                if a != b:
                    break
                shared += 1
            key = key[:shared]


@dataclass(frozen=True, slots=True)
class _Snapshot:
    index: AclIndex
    read_at_ms: int


class Authorizer:
    """Kafka's ACL authorizer over ``acls`` (see the module docstring for the refresh).
    Thread-safe: a check reads one immutable snapshot; one refresh runs at a time and the
    other checks meanwhile use the previous snapshot."""

    def __init__(self, acls: AclStore, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False,
                 refresh_interval_ms: int = DEFAULT_REFRESH_INTERVAL_MS,
                 time_ms: Callable[[], int] = system_time_ms) -> None:
        if refresh_interval_ms < 0:
            raise ValueError(f"refresh_interval_ms {refresh_interval_ms} is negative")
        self.acls = acls
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.refresh_interval_ms = refresh_interval_ms
        self._time_ms = time_ms
        self._snapshot: _Snapshot | None = None
        self._refresh_lock = threading.Lock()

    @classmethod
    def from_config(cls, acls: AclStore, config: Mapping[str, object], *,
                    refresh_interval_ms: int = DEFAULT_REFRESH_INTERVAL_MS,
                    time_ms: Callable[[], int] = system_time_ms) -> Authorizer:
        """An authorizer with ``super.users`` and ``allow.everyone.if.no.acl.found`` (default
        false) from a broker's ``config``; ConfigError naming a bad setting."""
        super_users = config.get(SUPER_USERS, "")
        if not isinstance(super_users, str):
            raise ConfigError(SUPER_USERS, f"expected a ';'-separated list, got {super_users!r}")
        allow = parse_bool(ALLOW_EVERYONE_IF_NO_ACL_FOUND,
                            config.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND, False))
        return cls(acls, super_users=parse_super_users(super_users),
                   allow_everyone_if_no_acl_found=allow,
                   refresh_interval_ms=refresh_interval_ms, time_ms=time_ms)

    def __repr__(self) -> str:
        return (f"Authorizer({self.acls!r}, super_users={sorted(self.super_users)}, "
                f"allow_everyone_if_no_acl_found={self.allow_everyone_if_no_acl_found})")

    # --- checks -------------------------------------------------------------------------------

    def authorize(self, principal: str, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str, *, audit: bool = True) -> bool:
        """Whether ``principal`` (``Type:name``) connected from ``host`` may do ``operation``
        on the resource ``resource_type``/``name``. A refusal is logged to
        ``kafka.authorizer.logger`` at INFO unless ``audit`` is False (as Kafka does not log
        the checks that only filter what a client sees, e.g. Metadata's topic list)."""
        if principal in self.super_users:
            return True
        return self._check(self._index(), principal, host, Action(operation, resource_type, name),
                           audit)

    def authorize_actions(self, principal: str, host: str, actions: Iterable[Action], *,
                          audit: bool = True) -> list[bool]:
        """:meth:`authorize` for each of a request's actions, in order, on one snapshot."""
        if principal in self.super_users:
            return [True for _ in actions]
        index = self._index()
        return [self._check(index, principal, host, action, audit) for action in actions]

    def _check(self, index: AclIndex, principal: str, host: str, action: Action,
               audit: bool) -> bool:
        operation, resource_type, name = action
        allowed = decide(index.applicable(resource_type, name), principal, host, operation,
                         allow_if_no_acl=self.allow_everyone_if_no_acl_found)
        if not allowed and audit and audit_log.isEnabledFor(logging.INFO):
            audit_log.info("Principal = %s is Denied operation = %s from host = %s on resource "
                           "= %s:%s", principal, AclOperation(operation).name, host,
                           ResourceType(resource_type).name, name)
        return allowed

    # --- ACL changes (CreateAcls, DescribeAcls, DeleteAcls) -----------------------------------

    def create_acls(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """:meth:`AclStore.create`, then this authorizer's snapshot is refreshed."""
        try:
            return self.acls.create(bindings)
        finally:
            self.refresh()

    def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The stored bindings ``acl_filter`` matches (read from the store, not the
        snapshot); InvalidAclError for a filter with an UNKNOWN field."""
        return self.acls.describe(acl_filter)

    def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """:meth:`AclStore.delete`, then this authorizer's snapshot is refreshed."""
        try:
            return self.acls.delete(filters)
        finally:
            self.refresh()

    # --- the snapshot -------------------------------------------------------------------------

    def cached_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings of the current snapshot ``acl_filter`` matches, sorted: no read of the
        store (at most ``refresh_interval_ms`` behind another node's change), for checks that
        look at ACLs by type (Kafka's ``authorizeByResourceType``) on a request's path."""
        return sorted(b for b in self._index().bindings if acl_filter.matches(b))

    @property
    def version(self) -> int:
        """The version of the ACLs the snapshot holds (loading it if not yet loaded)."""
        return self._index().version

    def refresh(self) -> None:
        """Read the store now and take its ACLs when their version changed. The error of the
        read when there is no snapshot yet; otherwise logged, and the last snapshot kept."""
        with self._refresh_lock:
            self._load()

    def _index(self) -> AclIndex:
        snapshot = self._snapshot
        if snapshot is None:
            with self._refresh_lock:
                if self._snapshot is None:
                    self._load()
            snapshot = self._snapshot
            assert snapshot is not None
        elif self._time_ms() - snapshot.read_at_ms >= self.refresh_interval_ms \
                and self._refresh_lock.acquire(blocking=False):
            try:  # another thread already refreshing: this check uses the current snapshot
                self._load()
            finally:
                self._refresh_lock.release()
            snapshot = self._snapshot
            assert snapshot is not None
        return snapshot.index

    def _load(self) -> None:
        """Read the store into the snapshot (the caller holds the refresh lock)."""
        now, old = self._time_ms(), self._snapshot
        try:
            acls = self.acls.all()
        except (OSError, ValueError) as e:  # the tier's and the store's errors derive from them
            if old is None:
                raise
            log.warning("could not read the ACLs (%s); checks keep using version %d and try "
                        "again in %d ms", e, old.index.version, self.refresh_interval_ms)
            self._snapshot = _Snapshot(old.index, now)
            return
        if old is not None and old.index.version == acls.version:
            self._snapshot = _Snapshot(old.index, now)
            return
        self._snapshot = _Snapshot(AclIndex(acls), now)
        log.info("ACLs at version %d: %d binding(s)", acls.version, len(acls.bindings))

