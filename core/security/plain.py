"""SASL/PLAIN (RFC 4616) as Kafka's broker checks it (``PlainSaslServer`` with its default
``PlainServerCallbackHandler``): one client message ``authzid NUL authcid NUL passwd``, checked
against the users of the PlainLoginModule's JAAS options ``user_<name>="<password>"``.

PLAIN sends the password itself: use it over TLS (``SASL_SSL``). Pure: no I/O.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Mapping
from types import MappingProxyType

from tierlog.errors import ConfigError, SaslAuthenticationError
from tierlog.security.jaas import JAAS_CONFIG, PLAIN_LOGIN_MODULE, JaasConfig

__all__ = ["PLAIN", "USER_OPTION_PREFIX", "PlainServer", "plain_users"]

log = logging.getLogger(__name__)

#: The mechanism's SASL name.
PLAIN = "PLAIN"
#: A PlainLoginModule option ``user_<name>`` holds user ``<name>``'s password.
USER_OPTION_PREFIX = "user_"
#: What an unknown user's password is compared with, so that it costs what a known one does.
_NO_PASSWORD = b"\0" * 32


def plain_users(jaas: JaasConfig, key: str = JAAS_CONFIG) -> Mapping[str, str]:
    """The users and passwords of a PlainLoginModule entry's ``user_<name>`` options
    (read-only). ConfigError naming ``key`` when the entry is another login module (its users
    would never be found: Kafka reads them from the PlainLoginModule's entry only)."""
    if jaas.login_module != PLAIN_LOGIN_MODULE:
        raise ConfigError(key, f"SASL/PLAIN reads its users from a {PLAIN_LOGIN_MODULE} "
                               f"entry, not from {jaas.login_module!r}")
    return MappingProxyType({name.removeprefix(USER_OPTION_PREFIX): password
                             for name, password in jaas.options.items()
                             if name.startswith(USER_OPTION_PREFIX)
                             and len(name) > len(USER_OPTION_PREFIX)})


class PlainServer:
    """The server's side of one SASL/PLAIN exchange: :meth:`evaluate` checks the client's one
    message and answers with empty bytes, then :attr:`principal` is the user. Every failure
    raises SaslAuthenticationError in Kafka's words, never holding the password; an unknown
    user and a wrong password get the same error after the same compare. An authorization id
    other than the user is refused, as Kafka does. Not thread-safe: one per exchange."""

    mechanism = PLAIN

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._principal: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        """True once the user was authenticated."""
        return self._principal is not None

    @property
    def principal(self) -> str:
        """The authenticated user name (Kafka's principal is ``User:<name>``);
        SaslAuthenticationError before the exchange completed."""
        if self._principal is None:
            raise SaslAuthenticationError("the PLAIN exchange has not completed")
        return self._principal

    def evaluate(self, response: bytes) -> bytes:
        """Check ``response`` (``authzid NUL authcid NUL passwd``, UTF-8): empty bytes when the
        password is the user's, SaslAuthenticationError otherwise. One call per exchange."""
        if self._done:
            raise SaslAuthenticationError("Authentication failed: a PLAIN exchange takes one "
                                          "message")
        self._done = True
        try:
            text = bytes(response).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslAuthenticationError(
                "Authentication failed: the SASL/PLAIN response is not UTF-8") from None
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise SaslAuthenticationError(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}")
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._users.get(username)
        matches = hmac.compare_digest(
            password.encode("utf-8"),
            _NO_PASSWORD if expected is None else expected.encode("utf-8"))
        if expected is None or not matches:
            log.debug("PLAIN: authentication of user %r failed", username)
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationError("Authentication failed: Client requested an "
                                          "authorization id that is different from username")
        self._principal = username
        return b""
