"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's broker speaks them (its
``ScramSaslServer``): the two mechanisms, the credential a server keeps, and the server's side
of one exchange.

An exchange is two client messages, each answered by the server::

    client-first   n,,n=<user>,r=<client nonce>[,<extension>=<value>...]
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=biws,r=<both nonces>,p=<base64 ClientProof>
    server-final   v=<base64 ServerSignature>

The server keeps ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey =
HMAC(SaltedPassword, "Server Key")``, never the password nor the salted password. Pure: no I/O
but the ``credential_lookup`` the caller passes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from tierlog.errors import SaslAuthenticationError, UnsupportedSaslMechanismError

__all__ = ["MAX_ITERATIONS", "MECHANISMS", "MIN_ITERATIONS", "SCRAM_SHA_256", "SCRAM_SHA_512",
           "CredentialLookup", "ScramCredential", "ScramMechanism", "ScramServer",
           "salted_password", "scram_mechanism"]

log = logging.getLogger(__name__)

#: Kafka's ScramMechanism.minIterations: fewer is refused, when stored and when used.
MIN_ITERATIONS = 4096
#: Kafka's ScramMechanism.maxIterations: the most a credential set through the admin API
#: (AlterUserScramCredentials) may ask for.
MAX_ITERATIONS = 16384
#: Bytes of a salt made here (``ScramCredential.from_password``, an unknown user's answer).
SALT_BYTES = 32
#: The only channel-binding data this server accepts: base64 of the gs2 header ``n,,``.
_NO_CHANNEL_BINDING = "n,,"
_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII but ','
_EXTENSION_NAME = re.compile(r"[A-Za-z]+")
#: Kafka's SCRAM extension asking for delegation-token authentication.
TOKEN_AUTH_EXTENSION = "tokenauth"


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, its hash, and its number in Kafka's admin API."""

    name: str
    """The SASL mechanism name, e.g. ``SCRAM-SHA-256``."""
    hash_name: str
    """The :mod:`hashlib` name of its hash (``sha256``)."""
    type_id: int
    """Kafka's ScramMechanism number in AlterUserScramCredentials and
    DescribeUserScramCredentials (1: SHA-256, 2: SHA-512; 0 is UNKNOWN)."""

    @property
    def digest_size(self) -> int:
        """Bytes of the hash's output, hence of a salted password, a key, a proof."""
        return hashlib.new(self.hash_name).digest_size

    def hmac(self, key: bytes, message: bytes) -> bytes:
        """HMAC(key, message) with this mechanism's hash."""
        return hmac.new(key, message, self.hash_name).digest()

    def hash(self, data: bytes) -> bytes:
        """H(data)."""
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
#: The SCRAM mechanisms by SASL name, as Kafka offers them.
MECHANISMS: Mapping[str, ScramMechanism] = MappingProxyType(
    {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)})


def scram_mechanism(mechanism: str | int | ScramMechanism) -> ScramMechanism:
    """The mechanism a SASL name (``SCRAM-SHA-512``) or Kafka's admin-API number (2) names;
    UnsupportedSaslMechanismError naming it and the known ones otherwise."""
    if isinstance(mechanism, ScramMechanism):
        return mechanism
    for known in MECHANISMS.values():
        if mechanism in (known.name, known.type_id) and not isinstance(mechanism, bool):
            return known
    raise UnsupportedSaslMechanismError(
        f"unknown SCRAM mechanism {str(mechanism)[:40]!r} (known: {', '.join(MECHANISMS)})")


def salted_password(mechanism: str | ScramMechanism, password: str, salt: bytes,
                    iterations: int) -> bytes:
    """RFC 5802's ``Hi(password, salt, i)``: PBKDF2 with the mechanism's HMAC (what a client
    computes, and what Kafka's admin API carries instead of the password)."""
    found = scram_mechanism(mechanism)
    return hashlib.pbkdf2_hmac(found.hash_name, password.encode("utf-8"), salt, iterations)


@dataclass(frozen=True, slots=True, repr=False)
class ScramCredential:
    """What a server keeps of one user's SCRAM password for one mechanism (Kafka's
    ScramCredential): enough to check a proof and sign the answer, not to log in as the user.
    ``repr`` shows the iterations only."""

    salt: bytes
    """The salt the client hashes its password with."""
    stored_key: bytes
    """H(ClientKey): a proof is checked against it."""
    server_key: bytes
    """HMAC(SaltedPassword, "Server Key"): signs the server's final message."""
    iterations: int
    """PBKDF2 iterations of the salted password."""

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    @classmethod
    def from_salted_password(cls, mechanism: str | ScramMechanism, salt: bytes,
                             salted: bytes, iterations: int) -> ScramCredential:
        """The credential of a salted password (``Hi(password, salt, iterations)``)."""
        found = scram_mechanism(mechanism)
        client_key = found.hmac(salted, b"Client Key")
        return cls(salt, found.hash(client_key), found.hmac(salted, b"Server Key"), iterations)

    @classmethod
    def from_password(cls, mechanism: str | ScramMechanism, password: str, *,
                      iterations: int = MIN_ITERATIONS,
                      salt: bytes | None = None) -> ScramCredential:
        """The credential of ``password`` with ``salt`` (a new random one when None)."""
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        salted = salted_password(mechanism, password, salt, iterations)
        return cls.from_salted_password(mechanism, salt, salted, iterations)


#: Finds the credential of a user for a mechanism's SASL name; None when there is none.
CredentialLookup = Callable[[str, str], ScramCredential | None]

#: A per-process key that makes an unknown user's salt (stable for that user, unrelated to any
#: real one); a cluster passes its own ``fake_salt_key`` so all its nodes answer alike.
_FAKE_SALT_KEY = secrets.token_bytes(32)


def _server_nonce() -> str:
    return secrets.token_urlsafe(24)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class ScramServer:
    """The server's side of one SCRAM exchange (Kafka's ScramSaslServer): :meth:`first` answers
    the client-first message, :meth:`final` checks the proof and answers with the server's
    signature, then :attr:`principal` is the authenticated user name. :meth:`evaluate` does
    either step, in order, for a caller that only relays SaslAuthenticate bytes.

    Every failure raises SaslAuthenticationError and ends the exchange; its message never holds
    the proof or the password. An unknown user gets the answer of a credential that no proof
    matches (a salt derived from the name, stable across attempts), so it fails at the same
    step and with the same error as a wrong password. Channel binding (gs2 ``y``/``p``), an
    authorization id other than the user, mandatory extensions (``m=``) and delegation tokens
    (the ``tokenauth`` extension) are refused; other extensions are ignored, as Kafka does.
    Not thread-safe: one per connection's exchange."""

    def __init__(self, mechanism: str | ScramMechanism, credential_lookup: CredentialLookup, *,
                 fake_salt_key: bytes | None = None,
                 nonce_factory: Callable[[], str] = _server_nonce) -> None:
        self.mechanism = scram_mechanism(mechanism)
        self._lookup = credential_lookup
        self._fake_salt_key = _FAKE_SALT_KEY if fake_salt_key is None else fake_salt_key
        self._nonce_factory = nonce_factory
        self._state = "first"
        self._username: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._nonce = ""
        self._auth_prefix = ""  # client-first-bare "," server-first

    @property
    def complete(self) -> bool:
        """True once the client's proof was checked and the server's signature sent."""
        return self._state == "complete"

    @property
    def principal(self) -> str:
        """The authenticated user name (Kafka's authorization id; its principal is
        ``User:<name>``). SaslAuthenticationError before the exchange completed."""
        if self._state != "complete" or self._username is None:
            raise SaslAuthenticationError(
                f"the {self.mechanism.name} exchange has not completed")
        return self._username

    def evaluate(self, response: bytes) -> bytes:
        """The answer to the client's next message: :meth:`first`, then :meth:`final`."""
        return self.first(response) if self._state == "first" else self.final(response)

    def first(self, client_first: bytes) -> bytes:
        """The server-first message answering ``client_first``."""
        self._expect("first")
        try:
            text = self._decode(client_first, "client-first")
            gs2_header, bare = self._split_gs2_header(text)
            username, client_nonce = self._parse_client_first_bare(bare)
            authzid = gs2_header[2:-1].removeprefix("a=")
            if authzid and _unescape_username(authzid) != username:
                raise self._failure("Client requested an authorization id that is different "
                                    "from username")
            credential = self._lookup(username, self.mechanism.name)
            if credential is None:
                log.debug("%s: no credential for user %r", self.mechanism.name, username)
                credential = self._fake_credential(username)
            elif credential.iterations < MIN_ITERATIONS:
                raise self._failure(f"Iterations {credential.iterations} is less than the "
                                    f"minimum {MIN_ITERATIONS} for {self.mechanism.name}")
        except SaslAuthenticationError:
            self._state = "failed"
            raise
        self._username, self._credential, self._gs2_header = username, credential, gs2_header
        self._nonce = client_nonce + self._nonce_factory()
        server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._auth_prefix = f"{bare},{server_first}"
        self._state = "final"
        return server_first.encode("ascii")

    def final(self, client_final: bytes) -> bytes:
        """The server-final message (``v=<ServerSignature>``) once ``client_final``'s proof
        is the user's; SaslAuthenticationError otherwise."""
        self._expect("final")
        try:
            signature = self._check_final(client_final)
        except SaslAuthenticationError:
            self._state = "failed"
            raise
        self._state = "complete"
        return f"v={_b64(signature)}".encode("ascii")

    def _check_final(self, client_final: bytes) -> bytes:
        credential = self._credential
        assert credential is not None  # set by first()
        text = self._decode(client_final, "client-final")
        without_proof, separator, proof_text = text.rpartition(",p=")
        if not separator:
            raise self._failure("the client-final message has no proof (p=)")
        attributes = without_proof.split(",")
        if not attributes[0].startswith("c=") or len(attributes) < 2 \
                or not attributes[1].startswith("r="):
            raise self._failure("the client-final message does not start with c=...,r=...")
        if attributes[0][2:] != _b64(self._gs2_header.encode("utf-8")):
            raise self._failure("the channel binding (c=) does not match the gs2 header of the "
                                "client-first message: channel binding is not supported")
        # Kafka's ScramSaslServer asks only that the nonce *end* with the server-first one:
        # librdkafka's builtin SCRAM (kcat, librdkafka 2.0 and older) sends the client nonce
        # twice. The proof below covers the message as sent, so nothing is weakened.
        if not attributes[1][2:].endswith(self._nonce):
            raise self._failure("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except (binascii.Error, ValueError):
            raise self._failure("the client proof (p=) is not base64") from None
        auth_message = f"{self._auth_prefix},{without_proof}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise self._invalid_credentials()
        client_key = bytes(p ^ s for p, s in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mechanism.hash(client_key), credential.stored_key):
            raise self._invalid_credentials()
        return self.mechanism.hmac(credential.server_key, auth_message)

    def _expect(self, state: str) -> None:
        if self._state != state:
            why = ("the exchange is over" if self._state in ("complete", "failed")
                   else f"the {self._state} message was expected")
            raise SaslAuthenticationError(
                f"Authentication failed: a {self.mechanism.name} message out of order ({why})")

    def _decode(self, message: bytes, name: str) -> str:
        try:
            return bytes(message).decode("utf-8")
        except UnicodeDecodeError:
            raise self._failure(f"the {name} message is not UTF-8") from None

    def _split_gs2_header(self, text: str) -> tuple[str, str]:
        """``text``'s gs2 header (``n,,`` or ``n,a=<authzid>,``) and its client-first-bare."""
        flag, comma, rest = text.partition(",")
        if flag == "y" or flag.startswith("p="):
            raise self._failure(f"channel binding is not supported (the gs2 header starts "
                                f"{flag[:20]!r}; use 'n')")
        if flag != "n" or not comma:
            raise self._failure("the client-first message does not start with a gs2 header "
                                "('n,,')")
        authzid, comma, bare = rest.partition(",")
        if not comma or (authzid and not authzid.startswith("a=")):
            raise self._failure("the gs2 header's authorization id is malformed")
        return f"n,{authzid},", bare

    def _parse_client_first_bare(self, bare: str) -> tuple[str, str]:
        """The user name (unescaped) and the client nonce of a client-first-bare message."""
        attributes = bare.split(",")
        if attributes[0].startswith("m="):
            raise self._failure("mandatory extensions (m=) are not supported")
        if len(attributes) < 2 or not attributes[0].startswith("n=") \
                or not attributes[1].startswith("r="):
            raise self._failure("the client-first message does not hold n=<user>,r=<nonce>")
        username = _unescape_username(attributes[0][2:])
        if username is None:
            raise self._failure("the user name is empty or holds '=' not written as =2C or "
                                "=3D")
        nonce = attributes[1][2:]
        if not _NONCE.fullmatch(nonce):
            raise self._failure("the client nonce is empty or not printable ASCII")
        for extension in attributes[2:]:
            name, equals, value = extension.partition("=")
            if not equals or not _EXTENSION_NAME.fullmatch(name):
                raise self._failure("a SCRAM extension is not <name>=<value>")
            if name == TOKEN_AUTH_EXTENSION and value.lower() == "true":
                raise self._failure("delegation tokens (the tokenauth extension) are not "
                                    "supported")
            log.debug("%s: extension %r ignored", self.mechanism.name, name)
        return username, nonce

    def _fake_credential(self, username: str) -> ScramCredential:
        """The credential an unknown user is answered with: the salt stable for the name (a
        retry sees the same one, as for a real user), keys random, so no proof matches."""
        salt = hmac.new(self._fake_salt_key,
                        f"{self.mechanism.name}\0{username}".encode(), "sha256").digest()
        size = self.mechanism.digest_size
        return ScramCredential(salt[:SALT_BYTES], secrets.token_bytes(size),
                               secrets.token_bytes(size), MIN_ITERATIONS)

    def _failure(self, why: str) -> SaslAuthenticationError:
        return SaslAuthenticationError(f"Authentication failed: {why}")

    def _invalid_credentials(self) -> SaslAuthenticationError:
        # Kafka's wording, which its clients show: the same for a wrong password and a user
        # that does not exist.
        return SaslAuthenticationError(
            f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {self.mechanism.name}")


def _unescape_username(saslname: str) -> str | None:
    """RFC 5802's saslname decoded (``=2C`` is ',', ``=3D`` is '='); None when it is empty or
    holds another '=' (or a NUL)."""
    parts = saslname.split("=")
    out = [parts[0]]
    for part in parts[1:]:
        if part[:2] == "2C":
            out.append("," + part[2:])
        elif part[:2] == "3D":
            out.append("=" + part[2:])
        else:
            return None
    name = "".join(out)
    return name if name and "\0" not in name else None
