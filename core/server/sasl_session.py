"""One connection's SASL state on a ``SASL_PLAINTEXT`` or ``SASL_SSL`` listener, as Kafka's
``SaslServerAuthenticator`` keeps it: which mechanism the client chose (SaslHandshake), the
exchange in progress (SaslAuthenticate), and the principal once it completed.

Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are served; any
other request closes the connection, as Kafka does. A failed exchange or an unknown mechanism
is answered, then the connection is closed. With ``connections.max.reauth.ms`` (KIP-368) a
session has a lifetime: the client re-authenticates on the same connection before it ends
(same mechanism, same principal), else its next request closes the connection.

:class:`SaslListenerSettings` is what a listener offers (its mechanisms, PLAIN's users from
the JAAS options); :class:`SaslSessions` holds every connection's :class:`SaslSession` by
connection id, so the SaslHandshake and SaslAuthenticate handlers find theirs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol, TypeVar

from tierlog.errors import ConfigError, SaslAuthenticationError
from tierlog.security.jaas import JAAS_CONFIG, JaasConfig, parse_jaas_config
from tierlog.security.listeners import Listener, listener_config, sasl_jaas_config
from tierlog.security.plain import PLAIN, PlainServer, plain_users
from tierlog.security.scram import MECHANISMS, CredentialLookup, ScramServer

__all__ = ["PRE_AUTHENTICATION_KEYS", "SASL_KEYS", "SUPPORTED_MECHANISMS", "SaslListenerSettings",
           "SaslSession", "SaslSessions", "jaas_for"]

_T = TypeVar("_T")

#: What a client may send before it authenticated: ApiVersions, SaslHandshake,
#: SaslAuthenticate (Kafka's rule).
API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY = 18, 17, 36
PRE_AUTHENTICATION_KEYS = frozenset({API_VERSIONS_KEY, SASL_HANDSHAKE_KEY,
                                     SASL_AUTHENTICATE_KEY})
#: The mechanisms tierlog offers (Kafka's GSSAPI and OAUTHBEARER are not).
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS)
#: tierlog's default ``sasl.enabled.mechanisms`` (Kafka's is GSSAPI, which tierlog has not).
DEFAULT_MECHANISMS = (PLAIN,)
#: The SASL keys the server reads (besides ``listener.name.<l>.<mechanism>.sasl.jaas.config``).
SASL_KEYS = frozenset({"sasl.enabled.mechanisms", "sasl.mechanism.inter.broker.protocol",
                       JAAS_CONFIG})


def jaas_for(config: Mapping[str, object], listener: Listener,
             mechanism: str) -> tuple[str, JaasConfig] | None:
    """The JAAS entry ``listener`` uses for ``mechanism`` and the key it came from:
    ``listener.name.<l>.<mechanism>.sasl.jaas.config`` (Kafka's), else the plain
    ``sasl.jaas.config``; None when neither is set. ConfigError naming the key when it does
    not parse (never its value)."""
    text = sasl_jaas_config(config, listener, mechanism)
    key = f"{listener.config_prefix}{mechanism.lower()}.{JAAS_CONFIG}"
    if text is None:
        plain = listener_config(config, listener).get(JAAS_CONFIG)
        if plain is None:
            return None
        text, key = str(plain), JAAS_CONFIG
    return key, parse_jaas_config(text, key)


@dataclass(frozen=True, slots=True)
class SaslListenerSettings:
    """What one SASL listener offers. ``repr`` shows no password."""

    listener: str
    """The listener's name."""
    mechanisms: tuple[str, ...]
    """``sasl.enabled.mechanisms`` (the listener's view), in the order given."""
    plain_users: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}),
                                           repr=False)
    """PLAIN's users and passwords (the PlainLoginModule's ``user_<name>`` options)."""

    @classmethod
    def from_config(cls, config: Mapping[str, object], listener: Listener) -> SaslListenerSettings:
        """Read ``listener``'s mechanisms and PLAIN users; ConfigError naming the key for a
        mechanism tierlog does not offer, or PLAIN without its JAAS users."""
        key = "sasl.enabled.mechanisms"
        raw = listener_config(config, listener).get(key)
        names = (DEFAULT_MECHANISMS if raw is None else
                 tuple(dict.fromkeys(m.strip().upper() for m in str(raw).split(",")
                                     if m.strip())))
        if not names:
            raise ConfigError(key, f"enables no mechanism on listener {listener.name}")
        for name in names:
            if name not in SUPPORTED_MECHANISMS:
                raise ConfigError(key, f"mechanism {name!r} is not offered (one of "
                                       f"{', '.join(SUPPORTED_MECHANISMS)})")
        users: Mapping[str, str] = MappingProxyType({})
        if PLAIN in names:
            found = jaas_for(config, listener, PLAIN)
            if found is None:
                raise ConfigError(f"{listener.config_prefix}plain.{JAAS_CONFIG}",
                                  f"SASL/PLAIN on listener {listener.name} needs a "
                                  "PlainLoginModule entry with its users (user_<name>=...)")
            users = plain_users(found[1], found[0])
        return cls(listener.name, names, users)


class SaslSession:
    """One connection's SASL state: ``handshake`` (no mechanism chosen), ``authenticate`` (an
    exchange in progress), ``complete`` or ``failed`` (the connection is to be closed). Lives
    on the event loop; the credential lookup of a SCRAM exchange is blocking I/O (the caller
    runs :meth:`evaluate` on a worker thread)."""

    def __init__(self, settings: SaslListenerSettings, credentials: CredentialLookup, *,
                 reauth_ms: int = 0, time_ms: Callable[[], int]) -> None:
        self.settings = settings
        self._credentials = credentials
        self._reauth_ms = reauth_ms
        self._time_ms = time_ms
        self.state = "handshake"
        #: The authenticated user name (kept through a re-authentication); None before.
        self.user: str | None = None
        #: The mechanism chosen by the last handshake.
        self.mechanism: str | None = None
        #: After a SaslHandshake v0 the client sends bare SASL tokens, not SaslAuthenticate.
        self.raw_tokens = False
        #: When the session ends (KIP-368), in ``time_ms``; None: never.
        self.expires_ms: int | None = None
        self._exchange: PlainServer | ScramServer | None = None
        #: Why the session failed (Kafka's words, never a secret), for the server's log.
        self.failure: str | None = None

    @property
    def authenticated(self) -> bool:
        return self.user is not None and self.state != "failed"

    @property
    def principal(self) -> str:
        """Kafka's principal of the connection: ``User:<name>`` (``User:ANONYMOUS`` before)."""
        return f"User:{self.user}" if self.user is not None else "User:ANONYMOUS"

    def allows(self, api_key: int) -> bool:
        """Whether a request of ``api_key`` may be served now."""
        return api_key in PRE_AUTHENTICATION_KEYS or (self.authenticated
                                                      and not self.expired())

    def expired(self) -> bool:
        """Whether the session outlived ``connections.max.reauth.ms`` (KIP-368)."""
        return self.expires_ms is not None and self._time_ms() >= self.expires_ms

    def handshake(self, mechanism: str, version: int) -> bool:
        """Choose ``mechanism`` (SaslHandshake ``version``): True when it is enabled, False
        (and the session failed) when not. SaslAuthenticationError when no handshake is
        expected now (an exchange in progress; a re-authentication through v0)."""
        if self.state == "authenticate" or self.state == "failed" \
                or (self.authenticated and version == 0):
            raise SaslAuthenticationError("Unexpected handshake request with client mechanism "
                                          f"{mechanism[:40]}, enabled mechanisms are "
                                          f"{list(self.settings.mechanisms)}")
        if mechanism not in self.settings.mechanisms:
            self._fail(f"Unsupported SASL mechanism {mechanism[:40]}")
            return False
        if self.authenticated and mechanism != self.mechanism:
            # KIP-368: a re-authentication keeps its mechanism
            self._fail(f"SASL mechanism {mechanism[:40]} differs from the session's "
                       f"{self.mechanism} in re-authentication")
            return False
        self.mechanism = mechanism
        self._exchange = (PlainServer(self.settings.plain_users) if mechanism == PLAIN
                          else ScramServer(mechanism, self._credentials))
        self.raw_tokens = version == 0
        self.state = "authenticate"
        return True

    @property
    def expects_token(self) -> bool:
        return self.state == "authenticate"

    def evaluate(self, token: bytes) -> bytes:
        """The answer to the client's next SASL token; SaslAuthenticationError (and the
        session failed) when the exchange fails. Blocking: a SCRAM exchange reads the user's
        credential."""
        exchange = self._exchange
        if self.state != "authenticate" or exchange is None:
            raise SaslAuthenticationError("Unexpected SASL token: no SaslHandshake chose a "
                                          "mechanism")
        try:
            answer = exchange.evaluate(token)
            if exchange.complete:
                user = exchange.principal
                if self.user is not None and user != self.user:
                    raise SaslAuthenticationError(
                        "Cannot change principals during re-authentication from "
                        f"User:{self.user}: User:{user}")
                self.user = user
                self.state = "complete"
                self._exchange = None
                self.expires_ms = (self._time_ms() + self._reauth_ms if self._reauth_ms > 0
                                   else None)
        except SaslAuthenticationError as exc:
            self._fail(str(exc))
            raise
        return answer

    def _fail(self, why: str) -> None:
        self.state = "failed"
        self.failure = why

    def session_lifetime_ms(self) -> int:
        """What SaslAuthenticate v1+ answers once complete: the session's remaining lifetime,
        0 when it has none (KIP-368)."""
        if self.expires_ms is None:
            return 0
        return max(1, self.expires_ms - self._time_ms())


class RunBlocking(Protocol):
    """Runs a blocking call on a worker thread (``Services.run_blocking``)."""

    def __call__(self, fn: Callable[[], _T]) -> Awaitable[_T]: ...


class SaslSessions:
    """Every SASL connection's session by connection id (what the SaslHandshake and
    SaslAuthenticate handlers serve from), and the worker pool their exchanges run on."""

    def __init__(self, run_blocking: RunBlocking) -> None:
        self._sessions: dict[int, SaslSession] = {}
        self.run_blocking = run_blocking

    def open(self, connection_id: int, session: SaslSession) -> None:
        self._sessions[connection_id] = session

    def close(self, connection_id: int) -> None:
        self._sessions.pop(connection_id, None)

    def get(self, connection_id: int) -> SaslSession | None:
        """The session of a connection on a SASL listener; None on any other listener."""
        return self._sessions.get(connection_id)
