"""The server's HandlerRegistry: which handler serves which API key and versions.

ApiVersions advertises exactly what is registered, so a client never negotiates a version no
handler serves. Registration checks that kio has the message types of every version claimed.

Each API module declares its handlers in a table of :class:`Endpoint` (API key, module-level
handler, versions) and :func:`register` binds them to the object they serve from.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kio.index import load_request_schema, load_response_schema

from tierlog.server.context import Handler, HandlerRegistry, HandlerResult, RequestContext

#: What a table's handlers serve from (the Services, a coordinator).
_Owner = TypeVar("_Owner")


@dataclass(frozen=True, slots=True)
class Registration:
    api_key: int
    handler: Handler
    min_version: int
    max_version: int

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


@dataclass(frozen=True, slots=True)
class Endpoint(Generic[_Owner]):
    """One row of an API module's table: ``handler(owner, ctx, request)`` serves ``api_key``
    versions [min_version, max_version]. The request is Any in the row only: each handler
    declares the union of the kio request classes of the versions it serves."""

    api_key: int
    handler: Callable[[_Owner, RequestContext, Any], Awaitable[HandlerResult]]
    min_version: int
    max_version: int


def register(registry: HandlerRegistry, owner: _Owner,
             endpoints: Iterable[Endpoint[_Owner]]) -> None:
    """Register each endpoint's handler bound to ``owner``."""
    for endpoint in endpoints:
        registry.add(endpoint.api_key, functools.partial(endpoint.handler, owner),
                     min_version=endpoint.min_version, max_version=endpoint.max_version)


class Registry:
    """API key -> Registration (a HandlerRegistry)."""

    def __init__(self) -> None:
        self._entries: dict[int, Registration] = {}

    def add(self, api_key: int, handler: Handler, *, min_version: int,
            max_version: int) -> None:
        """Register ``handler`` for ``api_key`` versions [min_version, max_version];
        ValueError for a key registered twice or a version kio has no message type of."""
        if api_key in self._entries:
            raise ValueError(f"API key {api_key} is already registered")
        if not 0 <= min_version <= max_version:
            raise ValueError(f"API key {api_key}: bad version range "
                             f"[{min_version}, {max_version}]")
        for version in range(min_version, max_version + 1):
            try:
                load_request_schema(api_key, version)
                load_response_schema(api_key, version)
            except Exception as exc:  # noqa: BLE001 - kio's loader
                raise ValueError(f"API key {api_key} version {version} has no message "
                                 f"types: {exc}") from None
        self._entries[api_key] = Registration(api_key, handler, min_version, max_version)

    def get(self, api_key: int) -> Registration | None:
        return self._entries.get(api_key)

    def registrations(self) -> list[Registration]:
        """Every registration, by API key."""
        return [self._entries[k] for k in sorted(self._entries)]
