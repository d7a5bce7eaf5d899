"""SCRAM credentials kept durably, per user and mechanism: what Kafka's
AlterUserScramCredentials and DescribeUserScramCredentials change and show, and what a SCRAM
exchange looks up. Salted, never in clear.

One object per user in the cluster metadata store (a shared one when nodes share it, a
``LocalMetadataStore`` over a directory otherwise), every change a compare-and-swap::

    scram-credentials/u_<base32 of the user's UTF-8, lower case, unpadded>
    {"user": "alice", "mechanisms": {"SCRAM-SHA-256":
        "salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=8192"}}

Each mechanism's value is Kafka's own credential string (``ScramCredentialUtils``). The store
has no delete, so a user whose last credential is deleted keeps an object with no mechanisms,
which every read skips.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.errors import (
    CorruptRemoteMetadataError,
    CredentialNotFoundError,
    MetadataConflictError,
    UnacceptableCredentialError,
)
from tierlog.security.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    scram_mechanism,
)

__all__ = ["CREDENTIALS", "MAX_USER_BYTES", "ScramCredentialStore", "credential_key"]

log = logging.getLogger(__name__)

#: The prefix of every user's credentials object.
CREDENTIALS = "scram-credentials"
#: The longest user name stored, in UTF-8 bytes: its key segment (``u_`` and base32, plus the
#: store's ``.json`` and a temporary file's 46 characters) must fit a file name's 255 bytes.
MAX_USER_BYTES = 128
#: Compare-and-swap attempts of one change before its conflict is raised (retriable).
CAS_ATTEMPTS = 8
_FIELDS = ("salt", "stored_key", "server_key", "iterations")


def credential_key(user: str) -> str:
    """The key of ``user``'s credentials; UnacceptableCredentialError for an empty name or
    one longer than MAX_USER_BYTES."""
    data = user.encode("utf-8")
    if not data:
        raise UnacceptableCredentialError("Username must not be empty")
    if len(data) > MAX_USER_BYTES:
        raise UnacceptableCredentialError(
            f"user name {user[:40]!r}... is {len(data)} bytes of UTF-8 (at most "
            f"{MAX_USER_BYTES} are stored)")
    segment = base64.b32encode(data).decode("ascii").rstrip("=").lower()
    return f"{CREDENTIALS}/u_{segment}"


def credential_to_text(credential: ScramCredential) -> str:
    """Kafka's credential string: ``salt=<b64>,stored_key=<b64>,server_key=<b64>,
    iterations=<n>``."""
    return (f"salt={_b64(credential.salt)},stored_key={_b64(credential.stored_key)},"
            f"server_key={_b64(credential.server_key)},iterations={credential.iterations}")


def credential_from_text(text: object, source: str) -> ScramCredential:
    """The credential of Kafka's credential string; CorruptRemoteMetadataError naming
    ``source`` when it is not one (the message shows no field's value)."""
    if not isinstance(text, str):
        raise CorruptRemoteMetadataError(f"{source}: a credential is not a string")
    fields = {}
    for part in text.split(","):
        name, _, field = part.partition("=")
        fields[name] = field
    if sorted(fields) != sorted(_FIELDS):
        raise CorruptRemoteMetadataError(
            f"{source}: a credential holds fields {sorted(fields)}, not {list(_FIELDS)}")
    try:
        salt, stored_key, server_key = (base64.b64decode(fields[name], validate=True)
                                        for name in _FIELDS[:3])
        iterations = int(fields["iterations"])
    except (binascii.Error, ValueError):
        raise CorruptRemoteMetadataError(f"{source}: a credential field is not base64 or "
                                         f"its iterations not a number") from None
    return ScramCredential(salt, stored_key, server_key, iterations)


def _key_or_none(user: str) -> str | None:
    try:
        return credential_key(user)
    except UnacceptableCredentialError:
        return None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class ScramCredentialStore:
    """SCRAM credentials by (user, mechanism) in a :class:`MetadataStore`, checked as Kafka's
    controller checks AlterUserScramCredentials: errors in Kafka's terms
    (UnacceptableCredentialError, UnsupportedSaslMechanismError, CredentialNotFoundError).
    Thread-safe and safe across nodes sharing the store: each change is a compare-and-swap of
    the user's object, retried on a lost race (MetadataConflictError after CAS_ATTEMPTS)."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    @classmethod
    def in_directory(cls, path: str | os.PathLike[str]) -> ScramCredentialStore:
        """The credentials of a node without a shared store: a ``LocalMetadataStore`` over
        ``path`` (created when missing)."""
        return cls(open_metadata_store(os.fspath(path)))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r})"

    def upsert(self, user: str, mechanism: str | int | ScramMechanism, salt: bytes,
               salted_password: bytes, iterations: int) -> ScramCredential:
        """Store ``user``'s credential for ``mechanism`` from the salted password Kafka's admin
        API sends (``Hi(password, salt, iterations)``), replacing any earlier one; returns what
        is stored (the salted password itself is not). UnacceptableCredentialError for an
        empty or too long user, iterations outside MIN_ITERATIONS..MAX_ITERATIONS, an empty
        salt or a salted password of another length than the mechanism's hash;
        UnsupportedSaslMechanismError for an unknown mechanism."""
        key = credential_key(user)
        found = scram_mechanism(mechanism)
        if iterations < MIN_ITERATIONS:
            raise UnacceptableCredentialError(
                f"Too few iterations for user {user!r} ({found.name}): {iterations} (at least "
                f"{MIN_ITERATIONS})")
        if iterations > MAX_ITERATIONS:
            raise UnacceptableCredentialError(
                f"Too many iterations for user {user!r} ({found.name}): {iterations} (at most "
                f"{MAX_ITERATIONS})")
        if not salt:
            raise UnacceptableCredentialError(f"empty salt for user {user!r} ({found.name})")
        if len(salted_password) != found.digest_size:
            raise UnacceptableCredentialError(
                f"the salted password for user {user!r} ({found.name}) is "
                f"{len(salted_password)} bytes, not the {found.digest_size} of its hash")
        credential = ScramCredential.from_salted_password(found, salt, salted_password,
                                                          iterations)

        def put(mechanisms: dict[str, str]) -> None:
            mechanisms[found.name] = credential_to_text(credential)

        self._change(key, user, put)
        log.info("SCRAM credential of user %r for %s stored (%d iterations)", user, found.name,
                 iterations)
        return credential

    def delete(self, user: str, mechanism: str | int | ScramMechanism) -> None:
        """Delete ``user``'s credential for ``mechanism``; CredentialNotFoundError (Kafka's
        RESOURCE_NOT_FOUND) when there is none."""
        key = credential_key(user)
        found = scram_mechanism(mechanism)

        def remove(mechanisms: dict[str, str]) -> None:
            if mechanisms.pop(found.name, None) is None:
                raise CredentialNotFoundError(
                    f"Attempt to delete a user credential that does not exist: user {user!r}, "
                    f"{found.name}")

        self._change(key, user, remove)
        log.info("SCRAM credential of user %r for %s deleted", user, found.name)

    def describe(self, users: Iterable[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """Each user's mechanisms and iterations, sorted by mechanism, for the ``users`` named
        (None: every user with a credential). A named user without credentials (or whose name
        could not be stored) is left out: DescribeUserScramCredentials answers it
        RESOURCE_NOT_FOUND."""
        if users is None:
            keys = self.store.list_keys(CREDENTIALS)
        else:
            keys = [key for key in map(_key_or_none, dict.fromkeys(users)) if key is not None]
        described: dict[str, list[tuple[str, int]]] = {}
        for key in keys:
            version = self.store.read(key)
            if version is None:
                continue
            user, mechanisms = self._parse(version)
            if mechanisms:
                described[user] = sorted(
                    (name, credential_from_text(text, self._source(key)).iterations)
                    for name, text in mechanisms.items())
        return described

    def lookup(self, user: str, mechanism: str | int | ScramMechanism) -> ScramCredential | None:
        """``user``'s credential for ``mechanism``, or None (also for a name that could not be
        stored); the ``credential_lookup`` of a :class:`~tierlog.security.scram.ScramServer`.
        UnsupportedSaslMechanismError for an unknown mechanism."""
        found = scram_mechanism(mechanism)
        key = _key_or_none(user)
        version = None if key is None else self.store.read(key)
        if key is None or version is None:
            return None
        text = self._parse(version)[1].get(found.name)
        return None if text is None else credential_from_text(text, self._source(key))

    def _change(self, key: str, user: str, change: Callable[[dict[str, str]], None]) -> None:
        """Apply ``change`` to the user's mechanisms and store them, a compare-and-swap at the
        version read, re-read and re-applied after a lost race."""
        for attempt in range(1, CAS_ATTEMPTS + 1):
            current = self.store.read(key)
            mechanisms = {} if current is None else self._parse(current)[1]
            change(mechanisms)
            value: dict[str, Any] = {"user": user, "mechanisms": mechanisms}
            try:
                if current is None:
                    self.store.create(key, value)
                else:
                    self.store.replace(key, value, current)
                return
            except MetadataConflictError:
                if attempt == CAS_ATTEMPTS:
                    raise
                log.debug("credentials of user %r changed meanwhile; retrying", user)

    def _parse(self, version: Versioned) -> tuple[str, dict[str, str]]:
        """The user name and the mechanisms' credential strings of a stored object."""
        value: Mapping[str, Any] = version.value
        user, mechanisms = value.get("user"), value.get("mechanisms")
        if not isinstance(user, str) or _key_or_none(user) != version.key \
                or not isinstance(mechanisms, dict) \
                or not all(isinstance(v, str) for v in mechanisms.values()):
            raise CorruptRemoteMetadataError(
                f"{self._source(version.key)} is not a user's SCRAM credentials")
        return user, dict(mechanisms)

    def _source(self, key: str) -> str:
        return f"cluster metadata {key!r} ({self.store.path(key)})"
