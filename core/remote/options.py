"""Parsing of ``remote.storage.options.*`` for remote storage plugins: typed getters that
reject unknown options with an error naming the key, and secret masking for logs and reprs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tierlog.errors import ConfigError

OPTIONS_PREFIX = "remote.storage.options."
#: Option names whose values must never reach a log line or a repr.
SECRET_OPTION_NAMES = frozenset({"key", "secret", "token", "password", "session_token",
                                 "aws_secret_access_key", "aws_session_token",
                                 "sse_customer_key"})
MASK = "***"


def mask_secrets(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``options`` with every secret-looking value replaced by ``***``."""
    return {k: (MASK if _is_secret(k) and v is not None else v) for k, v in options.items()}


def _is_secret(name: str) -> bool:
    lowered = name.lower()
    return lowered in SECRET_OPTION_NAMES or any(
        word in lowered for word in ("secret", "password", "token"))


class StorageOptions:
    """A plugin's view of its options (the ``remote.storage.options.`` prefix already removed).

    Construction fails on any option not in ``known``. Getters accept the typed value or its
    string form (configs often come from text). Immutable.
    """

    def __init__(self, backend: str, options: Mapping[str, Any], known: Iterable[str]) -> None:
        known_names = frozenset(known)
        for name in options:
            if name not in known_names:
                raise ConfigError(
                    OPTIONS_PREFIX + name,
                    f"unknown option for the {backend} remote storage; known options: "
                    f"{', '.join(sorted(known_names))}",
                )
        self._backend = backend
        self._options = dict(options)

    def __repr__(self) -> str:
        return f"StorageOptions({self._backend!r}, {mask_secrets(self._options)!r})"

    def get_str(self, name: str, default: str | None = None) -> str | None:
        value = self._options.get(name, default)
        if value is not None and not isinstance(value, str):
            raise ConfigError(OPTIONS_PREFIX + name, "must be a string")
        return value

    def get_int(self, name: str, default: int | None = None, *, minimum: int | None = None,
            maximum: int | None = None) -> int | None:
        raw = self._options.get(name)
        if raw is None:
            return default
        try:
            if isinstance(raw, bool) or not isinstance(raw, int | str):
                raise ValueError
            value = int(raw)
        except ValueError:
            raise ConfigError(OPTIONS_PREFIX + name, f"must be an integer, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise ConfigError(OPTIONS_PREFIX + name, f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise ConfigError(OPTIONS_PREFIX + name, f"must be at most {maximum}, got {value}")
        return value

    def get_bool(self, name: str, default: bool) -> bool:
        raw = self._options.get(name)
        if raw is None:
            return default
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            return raw.strip().lower() == "true"
        raise ConfigError(OPTIONS_PREFIX + name, f"must be true or false, got {raw!r}")
