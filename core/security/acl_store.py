"""Durable ACLs in the cluster metadata store: CreateAcls, DescribeAcls and DeleteAcls over one
object holding every binding and a version counter, each change a compare-and-swap.

The object (key ``security/acls``) holds, compactly, one array per binding in Kafka's names::

    {"version": 7, "acls": [["TOPIC", "orders", "LITERAL", "User:alice", "*", "READ", "ALLOW"]]}

``version`` counts the changes, so that an authorizer learns whether its snapshot is current
from one read. A change re-reads and tries again when another writer got there first, so that
concurrent creates from two nodes both land. The object is bounded by the store's limit
(``MAX_OBJECT_BYTES``, about 15,000 bindings): a create beyond it is refused whole with
AclLimitError. Thread-safe (all state is in the store).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.errors import (
    AclLimitError,
    CorruptRemoteMetadataError,
    InvalidAclError,
    InvalidMetadataValueError,
    MetadataConflictError,
)
from tierlog.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["ACLS_KEY", "AclCreateResult", "AclDeleteResult", "AclSet", "AclStore"]

log = logging.getLogger(__name__)

#: The key of the object holding every ACL.
ACLS_KEY = "security/acls"
#: How many times a change re-reads after losing a compare-and-swap before it gives up (with
#: the MetadataConflictError, which is retriable): each loss means another change landed.
MAX_ATTEMPTS = 32
_FIELDS = 7


@dataclass(frozen=True, slots=True)
class AclSet:
    """Every stored binding at one version of the store's object."""

    version: int
    """The change counter: 0 before the first change, one more with each."""
    bindings: frozenset[AclBinding]
    """The bindings, each once."""


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """The outcome of one binding of a create (CreateAcls' per-creation result)."""

    binding: AclBinding
    error: InvalidAclError | None = None
    """None: stored (or already stored); else why it was refused."""


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """The outcome of one filter of a delete (DeleteAcls' per-filter result)."""

    filter: AclBindingFilter
    deleted: tuple[AclBinding, ...] = ()
    """The bindings this filter matched and removed (a binding matched by several filters of
    one delete is reported under each)."""
    error: InvalidAclError | None = None
    """None, or why the filter was refused (then nothing was deleted for it)."""


def _encode(acls: AclSet) -> dict[str, Any]:
    rows = sorted([b.resource_type.name, b.name, b.pattern_type.name, b.principal, b.host,
                   b.operation.name, b.permission.name] for b in acls.bindings)
    return {"version": acls.version, "acls": rows}


def _decode(found: Versioned) -> AclSet:
    """The ACL set a stored object holds; CorruptRemoteMetadataError naming the key and the
    entry for anything else."""
    value = found.value
    version, rows = value.get("version"), value.get("acls")
    where = f"cluster metadata {found.key!r}"
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise CorruptRemoteMetadataError(f"{where}: version {version!r:.40} is not a count")
    if not isinstance(rows, list):
        raise CorruptRemoteMetadataError(f"{where}: 'acls' is not a list")
    bindings = set()
    for i, row in enumerate(rows):
        if not (isinstance(row, list) and len(row) == _FIELDS
                and all(isinstance(v, str) for v in row)):
            raise CorruptRemoteMetadataError(f"{where}: entry {i} is not {_FIELDS} strings")
        kind, name, pattern, principal, host, operation, permission = row
        binding = AclBinding(ResourceType.parse(kind), name, PatternType.parse(pattern),
                             principal, host, AclOperation.parse(operation),
                             AclPermissionType.parse(permission))
        try:
            bindings.add(binding.validate())
        except InvalidAclError as e:
            raise CorruptRemoteMetadataError(f"{where}: entry {i}: {e}") from e
    return AclSet(version, frozenset(bindings))


class AclStore:
    """The cluster's ACLs in ``store`` (shared by every node that shares the store; a
    ``LocalMetadataStore`` over a directory when nodes do not). Each method reads the object
    once; a change writes it once, again after each lost race."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"AclStore({self.store!r})"

    def all(self) -> AclSet:
        """Every stored binding and the version (one read): an authorizer's snapshot."""
        return self._read()[0]

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The stored bindings ``acl_filter`` matches, sorted (DescribeAcls); InvalidAclError
        for a filter with an UNKNOWN field."""
        acl_filter.validate()
        return sorted(b for b in self.all().bindings if acl_filter.matches(b))

    def create(self, bindings: Sequence[AclBinding]) -> list[AclCreateResult]:
        """Store ``bindings`` (CreateAcls): one result per binding, in order, with its
        InvalidAclError when refused. The valid ones are stored together, in one write (none
        when all were stored already); AclLimitError when they would not fit (none stored)."""
        results, valid = [], set()
        for binding in bindings:
            try:
                valid.add(binding.validate())
                results.append(AclCreateResult(binding))
            except InvalidAclError as e:
                results.append(AclCreateResult(binding, e))
        if valid:
            self._change(lambda current: current | valid)
            log.info("created %d ACL(s)", len(valid))
            log.debug("created ACLs: %s", "; ".join(map(str, sorted(valid))))
        return results

    def delete(self, filters: Sequence[AclBindingFilter]) -> list[AclDeleteResult]:
        """Remove the bindings each filter matches (DeleteAcls): one result per filter, in
        order, with the bindings it removed, or its InvalidAclError (a field UNKNOWN). All
        removals land together, in one write (none when nothing matched)."""
        checked: list[tuple[AclBindingFilter, InvalidAclError | None]] = []
        for acl_filter in filters:
            try:
                checked.append((acl_filter.validate(), None))
            except InvalidAclError as e:
                checked.append((acl_filter, e))
        matched: dict[AclBindingFilter, tuple[AclBinding, ...]] = {}

        def remove(current: frozenset[AclBinding]) -> frozenset[AclBinding]:
            matched.clear()  # a retry matches against the state it read again
            for acl_filter, error in checked:
                if error is None:
                    matched[acl_filter] = tuple(sorted(b for b in current
                                                       if acl_filter.matches(b)))
            gone = {b for found in matched.values() for b in found}
            return current - gone

        self._change(remove)
        removed = {b for found in matched.values() for b in found}
        if removed:
            log.info("deleted %d ACL(s)", len(removed))
            log.debug("deleted ACLs: %s", "; ".join(map(str, sorted(removed))))
        return [AclDeleteResult(f, matched.get(f, ()), error) for f, error in checked]

    def _read(self) -> tuple[AclSet, Versioned | None]:
        found = self.store.read(ACLS_KEY)
        return (AclSet(0, frozenset()) if found is None else _decode(found)), found

    def _change(self, change: Callable[[frozenset[AclBinding]], frozenset[AclBinding]]
                ) -> AclSet:
        """Apply ``change`` to the stored bindings by compare-and-swap, re-reading after each
        lost race (at most MAX_ATTEMPTS times); no write when it changes nothing."""
        for attempt in range(1, MAX_ATTEMPTS + 1):
            current, found = self._read()
            bindings = change(current.bindings)
            if bindings == current.bindings:
                return current
            updated = AclSet(current.version + 1, bindings)
            try:
                if found is None:
                    self.store.create(ACLS_KEY, _encode(updated))
                else:
                    self.store.replace(ACLS_KEY, _encode(updated), found)
                return updated
            except MetadataConflictError:
                if attempt == MAX_ATTEMPTS:
                    raise
                log.debug("ACL change lost a race (attempt %d): reading again", attempt)
            except InvalidMetadataValueError as e:
                raise AclLimitError(
                    f"{len(bindings)} ACLs do not fit in the cluster store's object "
                    f"{ACLS_KEY!r} ({e}); nothing was changed: delete unused ACLs, or use "
                    f"PREFIXED and wildcard patterns to need fewer") from e
        raise AssertionError("unreachable")  # the loop returns or raises

