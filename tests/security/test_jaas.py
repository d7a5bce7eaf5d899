"""Kafka's sasl.jaas.config strings (tierlog.security.jaas): the PlainLoginModule and
ScramLoginModule forms, quoted values with Java's escapes, comments, and bad syntax refused by a
ConfigError naming the setting and the place but never a value."""

from __future__ import annotations

import pytest

from tierlog.errors import ConfigError
from tierlog.security.jaas import (
    PLAIN_LOGIN_MODULE,
    SCRAM_LOGIN_MODULE,
    parse_jaas_config,
)

SECRET = "s3cr3t-Value"

PLAIN = (f'{PLAIN_LOGIN_MODULE} required username="admin" password="admin-secret" '
         f'user_admin="admin-secret" user_alice="alice-secret";')


def test_kafkas_plain_login_module_form() -> None:
    jaas = parse_jaas_config(PLAIN)
    assert (jaas.login_module, jaas.control_flag) == (PLAIN_LOGIN_MODULE, "required")
    assert dict(jaas.options) == {"username": "admin", "password": "admin-secret",
                                  "user_admin": "admin-secret", "user_alice": "alice-secret"}


def test_kafkas_scram_login_module_form_over_lines_with_comments() -> None:
    jaas = parse_jaas_config(
        f"{SCRAM_LOGIN_MODULE} REQUIRED // the broker's own client\n"
        f"  username='admin' /* inter-broker */ password=\"admin-secret\"\n"
        f"  tokenauth=false ;\n")
    assert (jaas.login_module, jaas.control_flag) == (SCRAM_LOGIN_MODULE, "required")
    assert dict(jaas.options) == {"username": "admin", "password": "admin-secret",
                                  "tokenauth": "false"}


@pytest.mark.parametrize(("quoted", "value"), [
    (r'"a \"quoted\" word"', 'a "quoted" word'),
    (r'"back\\slash"', "back\\slash"),
    (r"'it\'s'", "it's"),
    (r'"tab\tand\nnewline"', "tab\tand\nnewline"),
    (r'"octal\101\1012"', "octalAA2"),
    (r'"semi;colon = equals // not a comment"', "semi;colon = equals // not a comment"),
    ('""', ""),
])
def test_quoted_values_and_their_escapes(quoted: str, value: str) -> None:
    jaas = parse_jaas_config(f"{PLAIN_LOGIN_MODULE} required password={quoted};")
    assert jaas.options["password"] == value


def test_repr_names_the_options_never_their_values() -> None:
    jaas = parse_jaas_config(f'{PLAIN_LOGIN_MODULE} required password="{SECRET}";')
    assert SECRET not in repr(jaas) and SECRET not in str(jaas)
    assert "password" in repr(jaas)


def test_a_repeated_option_keeps_the_last_value_as_kafka_does(
        caplog: pytest.LogCaptureFixture) -> None:
    jaas = parse_jaas_config(f'{PLAIN_LOGIN_MODULE} required user_a="{SECRET}" user_a="2";')
    assert jaas.options["user_a"] == "2"
    assert "user_a" in caplog.text and SECRET not in caplog.text


@pytest.mark.parametrize(("text", "why"), [
    ("", "Login module not specified"),
    ("// only a comment", "Login module not specified"),
    (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}"', "not terminated by semi-colon"),
    (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}', "unterminated quoted value"),
    (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}\n";', "unterminated quoted value"),
    (f'{PLAIN_LOGIN_MODULE} required password={SECRET} {SECRET}x;', "expected an option name"),
    (f'{PLAIN_LOGIN_MODULE} required password=;', "Value not specified for key 'password'"),
    (f'{PLAIN_LOGIN_MODULE} required password= = "{SECRET}";', "Value not specified"),
    (f'{PLAIN_LOGIN_MODULE} required "{SECRET}"="x";', "expected an option name"),
    (f'{PLAIN_LOGIN_MODULE} reqired password="{SECRET}";', "control flag 'reqired'"),
    (f'{PLAIN_LOGIN_MODULE} "{SECRET}";', "invalid login module control flag at"),
    (f'{PLAIN_LOGIN_MODULE}', "control flag not specified"),
    (f'"{SECRET}" required;', "expected a login module class name"),
    (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}"; {SCRAM_LOGIN_MODULE} required;',
     "contains 2 login modules, should be 1"),
    (f'{PLAIN_LOGIN_MODULE} required password="{SECRET}" /* open', "unterminated comment"),
    (f'{PLAIN_LOGIN_MODULE} required password=a/{SECRET};', "unexpected '/'"),
])
def test_bad_syntax_names_the_setting_never_a_value(text: str, why: str) -> None:
    key = "listener.name.sasl_ssl.plain.sasl.jaas.config"
    with pytest.raises(ConfigError, match=why) as refused:
        parse_jaas_config(text, key)
    assert refused.value.key == key
    assert SECRET not in str(refused.value)
