"""ApiVersions: what this server serves, straight from its registry."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tierlog.server.context import RequestContext
from tierlog.server.framing import make, nested, response_class
from tierlog.server.registry import Endpoint, Registry, register

if TYPE_CHECKING:
    from tierlog.server.api.messages import ApiVersionsRequest, ApiVersionsResponse

API_KEY = 18
MIN_VERSION, MAX_VERSION = 0, 4


def response(registry: Registry, version: int,
             error: ErrorCode = ErrorCode.none) -> ApiVersionsResponse:
    """The ApiVersionsResponse of ``version`` listing every registration (Kafka answers an
    unsupported version with v0 and UNSUPPORTED_VERSION, so the client can pick again)."""
    cls: type[ApiVersionsResponse] = response_class(API_KEY, version)
    api_version = nested(cls, "ApiVersion")
    keys = tuple(make(api_version, api_key=r.api_key, min_version=r.min_version,
                      max_version=r.max_version) for r in registry.registrations())
    return make(cls, error_code=error, api_keys=keys, throttle_time=datetime.timedelta(0))


async def api_versions(registry: Registry, ctx: RequestContext,
                       request: ApiVersionsRequest) -> ApiVersionsResponse:
    """Every API key this server serves, with its versions."""
    return response(registry, ctx.api_version)


ENDPOINTS = (Endpoint(API_KEY, api_versions, MIN_VERSION, MAX_VERSION),)


def bind(registry: Registry) -> None:
    """Register ApiVersions on ``registry``, advertising what the registry holds."""
    register(registry, registry, ENDPOINTS)
