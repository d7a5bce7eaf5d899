"""SASL/PLAIN (tierlog.security.plain): RFC 4616's one message checked against the
PlainLoginModule's ``user_<name>`` options as Kafka checks it, driven by kafka-python's own PLAIN
client; wrong passwords, unknown users, a foreign authzid and malformed messages refused with
Kafka's words and without the password."""

from __future__ import annotations

import pytest
from kafka.net.sasl.plain import SaslMechanismPlain

from tierlog.errors import ConfigError, SaslAuthenticationError
from tierlog.security.jaas import PLAIN_LOGIN_MODULE, SCRAM_LOGIN_MODULE, parse_jaas_config
from tierlog.security.plain import PlainServer, plain_users

JAAS = parse_jaas_config(f'{PLAIN_LOGIN_MODULE} required username="admin" '
                         f'password="admin-secret" user_admin="admin-secret" '
                         f'user_alice="alice-secret" user_="nobody";')


def test_the_users_are_the_user_options() -> None:
    assert dict(plain_users(JAAS)) == {"admin": "admin-secret", "alice": "alice-secret"}


def test_users_come_from_a_plain_login_module_only() -> None:
    with pytest.raises(ConfigError, match="PlainLoginModule"):
        plain_users(parse_jaas_config(f'{SCRAM_LOGIN_MODULE} required user_a="x";'))


def test_kafka_pythons_client_authenticates() -> None:
    client = SaslMechanismPlain(sasl_plain_username="alice", sasl_plain_password="alice-secret")
    plain = PlainServer(plain_users(JAAS))
    assert not plain.complete
    client.receive(plain.evaluate(client.auth_bytes()))
    assert client.is_authenticated()
    assert plain.complete and plain.principal == "alice"


@pytest.mark.parametrize("message", [
    b"\0alice\0wrong-secret",
    b"\0mallory\0alice-secret",
    b"\0alice\0alice-secret ",
    b"\0Alice\0alice-secret",
])
def test_a_wrong_password_and_an_unknown_user_fail_alike(message: bytes) -> None:
    plain = PlainServer(plain_users(JAAS))
    with pytest.raises(SaslAuthenticationError) as refused:
        plain.evaluate(message)
    assert str(refused.value) == "Authentication failed: Invalid username or password"
    assert not plain.complete
    with pytest.raises(SaslAuthenticationError, match="not completed"):
        _ = plain.principal


def test_an_authzid_is_the_user_or_refused() -> None:
    assert PlainServer(plain_users(JAAS)).evaluate(b"alice\0alice\0alice-secret") == b""
    with pytest.raises(SaslAuthenticationError, match="authorization id that is different"):
        PlainServer(plain_users(JAAS)).evaluate(b"admin\0alice\0alice-secret")


@pytest.mark.parametrize(("message", "why"), [
    (b"alice\0alice-secret", "expected 3 tokens, got 2"),
    (b"\0alice\0alice-secret\0", "expected 3 tokens, got 4"),
    (b"\0\0alice-secret", "username not specified"),
    (b"\0alice\0", "password not specified"),
    (b"\0alice\0\xffalice-secret", "not UTF-8"),
])
def test_a_malformed_message_is_refused_without_the_password(message: bytes, why: str) -> None:
    with pytest.raises(SaslAuthenticationError, match=why) as refused:
        PlainServer(plain_users(JAAS)).evaluate(message)
    assert "alice-secret" not in str(refused.value)


def test_an_exchange_takes_one_message() -> None:
    plain = PlainServer(plain_users(JAAS))
    plain.evaluate(b"\0alice\0alice-secret")
    with pytest.raises(SaslAuthenticationError, match="one message"):
        plain.evaluate(b"\0admin\0admin-secret")
    assert plain.principal == "alice"
