"""The client side of a node's own connections to other nodes over the inter-broker listener
(``inter.broker.listener.name``): TLS with ``client_context`` when that listener is SSL or
SASL_SSL, and SASL as Kafka's broker authenticates itself when it is SASL_*: the mechanism
``sasl.mechanism.inter.broker.protocol`` (Kafka's default is GSSAPI, which tierlog has not;
tierlog's is PLAIN), with the ``username`` and ``password`` options of that listener's JAAS
entry for the mechanism.

:class:`BrokerSecurity` is what a :class:`~tierlog.server.replication.wire_client.
BrokerConnection` needs; :class:`SaslClient` computes the tokens of one exchange (PLAIN's one
message, SCRAM's client-first and client-final, RFC 5802), checking the server's signature.
Pure but for the TLS context's files; ``repr`` never shows the password.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from tierlog.errors import ConfigError, SaslAuthenticationError
from tierlog.security.listeners import Listener, listener_config
from tierlog.security.plain import PLAIN
from tierlog.security.scram import MIN_ITERATIONS, salted_password, scram_mechanism
from tierlog.security.tls import client_context
from tierlog.server.sasl_session import SUPPORTED_MECHANISMS, jaas_for

__all__ = ["INTER_BROKER_MECHANISM", "BrokerSecurity", "SaslClient"]

#: The setting naming the mechanism a node authenticates to others with.
INTER_BROKER_MECHANISM = "sasl.mechanism.inter.broker.protocol"
#: tierlog's default for it (Kafka's, GSSAPI, is not offered).
DEFAULT_INTER_BROKER_MECHANISM = PLAIN


@dataclass(frozen=True, slots=True)
class BrokerSecurity:
    """How to reach another node: a TLS context (None: plain TCP) and SASL credentials
    (``mechanism`` None: no SASL). ``repr`` shows no password."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = field(default="", repr=False)

    @classmethod
    def for_listener(cls, config: Mapping[str, object],
                     listener: Listener) -> BrokerSecurity | None:
        """The security of connections to ``listener`` (another node's inter-broker
        listener, configured as this node's own); None for PLAINTEXT. ConfigError naming the
        key for a mechanism not offered, or a JAAS entry without ``username``/``password``."""
        view = listener_config(config, listener)
        protocol = listener.security_protocol
        context = client_context(view) if protocol.endswith("SSL") else None
        if not protocol.startswith("SASL_"):
            return None if context is None else cls(context)
        mechanism = str(view.get(INTER_BROKER_MECHANISM) or DEFAULT_INTER_BROKER_MECHANISM)
        mechanism = mechanism.strip().upper()
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(INTER_BROKER_MECHANISM, f"mechanism {mechanism!r} is not offered "
                                                      f"(one of {', '.join(SUPPORTED_MECHANISMS)})")
        found = jaas_for(config, listener, mechanism)
        key = f"{listener.config_prefix}{mechanism.lower()}.sasl.jaas.config"
        if found is None:
            raise ConfigError(key, f"the inter-broker listener {listener.name} uses SASL "
                                   f"{mechanism}: this node's username and password go in its "
                                   "JAAS entry")
        key, jaas = found
        username, password = jaas.options.get("username"), jaas.options.get("password")
        if not username or not password:
            raise ConfigError(key, "needs the username and password options: what this node "
                                   "authenticates with to the inter-broker listener")
        return cls(context, mechanism, username, password)


def _saslname(user: str) -> str:
    return user.replace("=", "=3D").replace(",", "=2C")


class SaslClient:
    """The client's side of one SASL exchange: :meth:`evaluate` answers each server message
    (the first call with ``b""``) until :attr:`complete`. SaslAuthenticationError when the
    server's answer is malformed or its signature wrong. Not thread-safe: one per exchange."""

    def __init__(self, mechanism: str, username: str, password: str, *,
                 nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._username = username
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._step = 0
        self._client_first_bare = ""
        self._server_signature = b""

    def __repr__(self) -> str:
        return f"SaslClient({self.mechanism!r}, {self._username!r})"

    @property
    def complete(self) -> bool:
        return self._step == (1 if self.mechanism == PLAIN else 3)

    def evaluate(self, challenge: bytes) -> bytes | None:
        """The next token to send; None once the exchange is complete (nothing to send)."""
        if self.mechanism == PLAIN:
            self._step = 1
            return f"\0{self._username}\0{self._password}".encode()
        step, self._step = self._step, self._step + 1
        if step == 0:
            self._client_first_bare = f"n={_saslname(self._username)},r={self._nonce}"
            return f"n,,{self._client_first_bare}".encode()
        if step == 1:
            return self._client_final(challenge).encode()
        self._verify(challenge)
        return None

    def _client_final(self, server_first_bytes: bytes) -> str:
        mechanism = scram_mechanism(self.mechanism)
        server_first = server_first_bytes.decode("utf-8", "replace")
        attributes = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
        nonce, salt_text, iterations_text = (attributes.get(k, "") for k in ("r", "s", "i"))
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslAuthenticationError("the server's SCRAM nonce does not extend the client's")
        try:
            salt = base64.b64decode(salt_text, validate=True)
            iterations = int(iterations_text)
        except (binascii.Error, ValueError):
            raise SaslAuthenticationError("the server-first SCRAM message is malformed") \
                from None
        if iterations < MIN_ITERATIONS:
            raise SaslAuthenticationError(f"the server asks for {iterations} SCRAM iterations "
                                          f"(fewer than {MIN_ITERATIONS})")
        salted = salted_password(mechanism, self._password, salt, iterations)
        client_key = mechanism.hmac(salted, b"Client Key")
        without_proof = f"c=biws,r={nonce}"  # biws: base64 of the gs2 header "n,,"
        auth_message = f"{self._client_first_bare},{server_first},{without_proof}".encode()
        signature = mechanism.hmac(mechanism.hash(client_key), auth_message)
        proof = bytes(k ^ s for k, s in zip(client_key, signature, strict=True))
        self._server_signature = mechanism.hmac(mechanism.hmac(salted, b"Server Key"),
                                                auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode('ascii')}"

    def _verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        expected = "v=" + base64.b64encode(self._server_signature).decode("ascii")
        if not hmac.compare_digest(text.encode(), expected.encode()):
            raise SaslAuthenticationError("the server's SCRAM signature does not match: it "
                                          "does not know this user's credential")
