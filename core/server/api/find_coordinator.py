"""FindCoordinator: this node coordinates every consumer group and transactional id, so it
names itself for every key of a known key type (group or transaction)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import kio.schema.find_coordinator.v0
import kio.schema.find_coordinator.v4
from kio.schema.errors import ErrorCode

from tierlog.server.context import BrokerServices, RequestContext
from tierlog.server.framing import make, nested
from tierlog.server.registry import Endpoint

if TYPE_CHECKING:
    from tierlog.server.api.messages import FindCoordinatorRequest, FindCoordinatorResponse

API_KEY = 10
MIN_VERSION, MAX_VERSION = 0, 4
_KEY_TYPES = (0, 1)  # group, transaction


def key_type_and_keys(request: FindCoordinatorRequest) -> tuple[int, list[str]]:
    """The version-dependent fields of a FindCoordinatorRequest, read in one place: v0 asks
    for one group, v1-3 for one key of a key type, v4 for a batch of keys (KIP-699)."""
    if isinstance(request, kio.schema.find_coordinator.v0.FindCoordinatorRequest):
        return 0, [request.key]
    if isinstance(request, kio.schema.find_coordinator.v4.FindCoordinatorRequest):
        return int(request.key_type), list(request.coordinator_keys)
    return int(request.key_type), [request.key]


async def find_coordinator(services: BrokerServices, ctx: RequestContext,
                           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    """This node, for every key of a known key type (INVALID_REQUEST for another)."""
    cls: type[FindCoordinatorResponse] = ctx.response_type
    key_type, keys = key_type_and_keys(request)
    error = ErrorCode.none if key_type in _KEY_TYPES else ErrorCode.invalid_request
    message = None if error is ErrorCode.none else f"unknown key type {key_type}"
    node, host, port = ((services.node_id, services.host, services.port)
                        if error is ErrorCode.none else (-1, "", -1))
    if ctx.api_version < 4:
        return make(cls, throttle_time=datetime.timedelta(0), error_code=error,
                    error_message=message, node_id=node, host=host, port=port)
    coordinator_t = nested(cls, "Coordinator")
    return make(cls, throttle_time=datetime.timedelta(0), coordinators=tuple(
        make(coordinator_t, key=key, node_id=node, host=host, port=port, error_code=error,
             error_message=message) for key in keys))


ENDPOINTS = (Endpoint(API_KEY, find_coordinator, MIN_VERSION, MAX_VERSION),)
