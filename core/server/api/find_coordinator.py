"""FindCoordinator: the node coordinating each key of a known key type (group or
transaction), as :class:`~tierlog.server.coordinator.coordinator_locator.CoordinatorLocator`
finds it (this node on a node that is a cluster of one; the leader of the key's internal
partition on a replicating node)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

import kio.schema.find_coordinator.v0
import kio.schema.find_coordinator.v4
from kio.schema.errors import ErrorCode

from tierlog.security.acl import AclOperation, ResourceType
from tierlog.server.authorization import DENIED, request_auth
from tierlog.server.context import RequestContext
from tierlog.server.coordinator.coordinator_locator import CoordinatorLocator
from tierlog.server.framing import make, nested
from tierlog.server.registry import Endpoint

if TYPE_CHECKING:
    from tierlog.server.api.messages import FindCoordinatorRequest, FindCoordinatorResponse

API_KEY = 10
MIN_VERSION, MAX_VERSION = 0, 4
#: The key types, and the resource each names.
_KEY_TYPES = {0: ResourceType.GROUP, 1: ResourceType.TRANSACTIONAL_ID}


def key_type_and_keys(request: FindCoordinatorRequest) -> tuple[int, list[str]]:
    """The version-dependent fields of a FindCoordinatorRequest, read in one place: v0 asks
    for one group, v1-3 for one key of a key type, v4 for a batch of keys (KIP-699)."""
    if isinstance(request, kio.schema.find_coordinator.v0.FindCoordinatorRequest):
        return 0, [request.key]
    if isinstance(request, kio.schema.find_coordinator.v4.FindCoordinatorRequest):
        return int(request.key_type), list(request.coordinator_keys)
    return int(request.key_type), [request.key]


async def find_coordinator(locator: CoordinatorLocator, ctx: RequestContext,
                           request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    """The coordinator of every key of a known key type (INVALID_REQUEST for another) that
    the principal may DESCRIBE (else GROUP_ or TRANSACTIONAL_ID_AUTHORIZATION_FAILED)."""
    services = locator.services
    cls: type[FindCoordinatorResponse] = ctx.response_type
    key_type, keys = key_type_and_keys(request)
    resource = _KEY_TYPES.get(key_type)
    described = (set(keys) if resource is None else
                 request_auth(services, ctx).names(AclOperation.DESCRIBE, resource, keys))
    answers = []
    for key in keys:
        if resource is None:
            error, message = ErrorCode.invalid_request, f"unknown key type {key_type}"
        elif key not in described:
            error, message = DENIED[resource], f"not authorized to describe {key}"
        else:
            error, message = ErrorCode.none, None
        node, host, port = -1, "", -1
        if error is ErrorCode.none:
            error, node, host, port = await locator.locate(key_type, key, ctx.listener)
            if error is not ErrorCode.none:
                message = f"the coordinator of {key} is not available yet"
        answers.append((key, error, message, node, host, port))
    if ctx.api_version < 4:
        _, error, message, node, host, port = answers[0]
        return make(cls, throttle_time=datetime.timedelta(0), error_code=error,
                    error_message=message, node_id=node, host=host, port=port)
    coordinator_t = nested(cls, "Coordinator")
    return make(cls, throttle_time=datetime.timedelta(0), coordinators=tuple(
        make(coordinator_t, key=key, node_id=node, host=host, port=port, error_code=error,
             error_message=message) for key, error, message, node, host, port in answers))


ENDPOINTS = (Endpoint(API_KEY, find_coordinator, MIN_VERSION, MAX_VERSION),)
