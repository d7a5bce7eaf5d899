"""Kafka's ``sasl.jaas.config`` strings: one JAAS login module entry, its control flag and its
options, as Kafka's ``JaasConfig`` parses them::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_admin="admin-secret";

Values are quoted (``"..."`` or ``'...'``, with Java's escapes: ``\\"``, ``\\\\``, ``\\n``, ...)
or bare words; ``//`` and ``/* */`` comments are skipped. The options hold secrets, so neither
an error nor ``repr`` ever shows a value. Pure: parses a string, reads no file.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from tierlog.errors import ConfigError

__all__ = ["CONTROL_FLAGS", "JAAS_CONFIG", "PLAIN_LOGIN_MODULE", "SCRAM_LOGIN_MODULE",
           "JaasConfig", "parse_jaas_config"]

log = logging.getLogger(__name__)

#: The setting's name (a listener's is ``listener.name.<l>.<mechanism>.sasl.jaas.config``).
JAAS_CONFIG = "sasl.jaas.config"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
#: JAAS's login module control flags.
CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")

_QUOTES = "\"'"
_WORD = re.compile(r"[^\s=;\"'/]+")
_SPACE_OR_COMMENT = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)+", re.DOTALL)
# Java's StreamTokenizer escapes inside a quoted string; any other escaped character is itself.
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}
_OCTAL = re.compile(r"[0-7]{1,3}")


@dataclass(frozen=True, slots=True, repr=False)
class JaasConfig:
    """One login module entry of a ``sasl.jaas.config``. ``repr`` names the options, never
    their values."""

    login_module: str
    """The login module's class name, e.g. :data:`PLAIN_LOGIN_MODULE`."""
    control_flag: str
    """``required``, ``requisite``, ``sufficient`` or ``optional``."""
    options: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """The options by name (read-only), e.g. ``username``, ``password``, ``user_<name>``."""

    def __repr__(self) -> str:
        return (f"JaasConfig({self.login_module!r}, {self.control_flag!r}, "
                f"options={sorted(self.options)})")


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "quoted" or the punctuation itself ("=", ";")
    text: str
    position: int


def parse_jaas_config(text: str, key: str = JAAS_CONFIG) -> JaasConfig:
    """The one login module entry ``text`` holds. ConfigError naming ``key`` (the setting, e.g.
    a listener's) and the position for bad syntax, no entry or more than one; the message names
    option names and the place, never a value."""
    tokens = _tokens(text, key)
    entries = []
    while (token := next(tokens, None)) is not None:
        entries.append(_entry(token, tokens, key))
    if not entries:
        raise ConfigError(key, "Login module not specified in JAAS config")
    if len(entries) > 1:
        raise ConfigError(key, f"JAAS config property contains {len(entries)} login modules, "
                               f"should be 1 module")
    return entries[0]


def _entry(first: _Token, tokens: Iterator[_Token], key: str) -> JaasConfig:
    if first.kind != "word":
        raise ConfigError(key, f"expected a login module class name at character "
                               f"{first.position}")
    flag = next(tokens, None)
    if flag is None:
        raise ConfigError(key, f"login module control flag not specified for "
                               f"{first.text!r} in JAAS config")
    if flag.kind != "word" or flag.text.lower() not in CONTROL_FLAGS:
        shown = f" {flag.text[:40]!r}" if flag.kind == "word" else ""
        raise ConfigError(key, f"invalid login module control flag{shown} at character "
                               f"{flag.position} (one of {', '.join(CONTROL_FLAGS)})")
    options: dict[str, str] = {}
    while (name := next(tokens, None)) is not None and name.kind != ";":
        equals = next(tokens, None)
        if name.kind != "word" or equals is None or equals.kind != "=":
            # Not (yet) known to be an option's name: it could be a stray value, so unnamed.
            raise ConfigError(key, f"expected an option name and '=' at character "
                                   f"{name.position} (or the entry's closing ';')")
        value = next(tokens, None)
        if value is None or value.kind not in ("word", "quoted"):
            raise ConfigError(key, f"Value not specified for key {name.text!r} in JAAS config")
        if name.text in options:
            log.warning("%s: option %r is given twice; the last value is used", key, name.text)
        options[name.text] = value.text
    if name is None:
        raise ConfigError(key, "JAAS config entry not terminated by semi-colon")
    return JaasConfig(first.text, flag.text.lower(), MappingProxyType(options))


def _tokens(text: str, key: str) -> Iterator[_Token]:
    """Words, quoted strings (unescaped), ``=`` and ``;``, skipping spaces and comments."""
    position = 0
    while True:
        skipped = _SPACE_OR_COMMENT.match(text, position)
        if skipped:
            position = skipped.end()
        if position >= len(text):
            return
        char = text[position]
        if char in "=;":
            yield _Token(char, char, position)
            position += 1
        elif char in _QUOTES:
            value, end = _quoted(text, position, key)
            yield _Token("quoted", value, position)
            position = end
        elif text.startswith("/*", position):
            raise ConfigError(key, f"unterminated comment at character {position}")
        else:
            word = _WORD.match(text, position)
            if word is None:
                raise ConfigError(key, f"unexpected {char!r} at character {position}")
            yield _Token("word", word.group(), position)
            position = word.end()


def _quoted(text: str, start: int, key: str) -> tuple[str, int]:
    """The unescaped string quoted at ``start`` and the position after its closing quote.
    A quoted string ends on its line, as in Java's StreamTokenizer."""
    quote, out, position = text[start], [], start + 1
    while position < len(text) and text[position] not in (quote, "\n", "\r"):
        char = text[position]
        position += 1
        if char == "\\" and position < len(text):
            escaped = text[position]
            octal = _OCTAL.match(text, position)
            if octal:
                digits = octal.group()
                if len(digits) == 3 and digits[0] > "3":  # Java takes at most \377
                    digits = digits[:2]
                out.append(chr(int(digits, 8)))
                position += len(digits)
                continue
            out.append(_ESCAPES.get(escaped, escaped))
            position += 1
        else:
            out.append(char)
    if position >= len(text) or text[position] != quote:
        raise ConfigError(key, f"unterminated quoted value starting at character {start}")
    return "".join(out), position + 1
