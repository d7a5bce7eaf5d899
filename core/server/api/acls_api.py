"""The ACL admin APIs on the wire: CreateAcls, DescribeAcls and DeleteAcls (v1-3; kio has no
v0), over the server's :class:`~tierlog.security.authorizer.Authorizer` (the ACLs are kept in
its store, durable). Changing ACLs needs ALTER on the cluster, reading them DESCRIBE
(CLUSTER_AUTHORIZATION_FAILED otherwise); a server without an authorizer answers
SECURITY_DISABLED, as Kafka's does. A binding or filter Kafka would refuse answers
INVALID_REQUEST with the reason (``AclBinding.validate``)."""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode

from tierlog.errors import InvalidAclError
from tierlog.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from tierlog.server.authorization import request_auth
from tierlog.server.context import HandlerRegistry, RequestContext
from tierlog.server.framing import make, nested
from tierlog.server.registry import Endpoint, register
from tierlog.server.services import Services

if TYPE_CHECKING:
    from tierlog.server.api.messages import (
        CreateAclsRequest,
        CreateAclsResponse,
        DeleteAclsRequest,
        DeleteAclsResponse,
        DescribeAclsRequest,
        DescribeAclsResponse,
    )

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
MIN_VERSION, MAX_VERSION = 1, 3
_NO_THROTTLE = datetime.timedelta(0)
_NO_AUTHORIZER = "no authorizer is configured on the broker (authorizer.class.name)"


class _Filter(Protocol):
    """The filter fields of DescribeAcls and of a DeleteAclsFilter (every version served)."""

    @property
    def resource_type_filter(self) -> int: ...
    @property
    def resource_name_filter(self) -> str | None: ...
    @property
    def pattern_type_filter(self) -> int: ...
    @property
    def principal_filter(self) -> str | None: ...
    @property
    def host_filter(self) -> str | None: ...
    @property
    def operation(self) -> int: ...
    @property
    def permission_type(self) -> int: ...


def acl_filter(asked: _Filter) -> AclBindingFilter:
    """The filter a request carries (an unknown code reads as UNKNOWN, which
    ``AclBindingFilter.validate`` refuses)."""
    return AclBindingFilter(ResourceType(asked.resource_type_filter), asked.resource_name_filter,
                            PatternType(asked.pattern_type_filter), asked.principal_filter,
                            asked.host_filter, AclOperation(asked.operation),
                            AclPermissionType(asked.permission_type))


def _refusal(services: Services, ctx: RequestContext,
             operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """Why the request may not read or change ACLs (no authorizer; not allowed
    ``operation`` on the cluster), or None."""
    auth = request_auth(services, ctx)
    if not auth.enabled:
        return ErrorCode.security_disabled, _NO_AUTHORIZER
    if not auth.may_cluster(operation):
        return (ErrorCode.cluster_authorization_failed,
                f"not authorized to {operation.name} the cluster's ACLs")
    return None


async def create_acls(services: Services, ctx: RequestContext,
                      request: CreateAclsRequest) -> CreateAclsResponse:
    """Store each valid binding (already stored: no error); one result per creation."""
    cls: type[CreateAclsResponse] = ctx.response_type
    result_t = nested(cls, "AclCreationResult")
    refused = _refusal(services, ctx, AclOperation.ALTER)
    authorizer = services.authorizer
    if refused is not None or authorizer is None:
        code, message = refused or (ErrorCode.security_disabled, _NO_AUTHORIZER)
        return make(cls, throttle_time=_NO_THROTTLE, results=tuple(
            make(result_t, error_code=code, error_message=message) for _ in request.creations))
    bindings = [AclBinding(ResourceType(c.resource_type), c.resource_name,
                           PatternType(c.resource_pattern_type), c.principal, c.host,
                           AclOperation(c.operation), AclPermissionType(c.permission_type))
                for c in request.creations]
    results = await services.run_blocking(lambda: authorizer.create_acls(bindings))
    return make(cls, throttle_time=_NO_THROTTLE, results=tuple(
        make(result_t, error_code=ErrorCode.none if r.error is None
             else ErrorCode.invalid_request,
             error_message=None if r.error is None else str(r.error))
        for r in results))


async def describe_acls(services: Services, ctx: RequestContext,
                        request: DescribeAclsRequest) -> DescribeAclsResponse:
    """The stored bindings the filter matches, grouped by resource pattern."""
    cls: type[DescribeAclsResponse] = ctx.response_type
    resource_t, acl_t = nested(cls, "DescribeAclsResource"), nested(cls, "AclDescription")
    refused = _refusal(services, ctx, AclOperation.DESCRIBE)
    authorizer = services.authorizer
    if refused is not None or authorizer is None:
        code, message = refused or (ErrorCode.security_disabled, _NO_AUTHORIZER)
        return make(cls, throttle_time=_NO_THROTTLE, error_code=code, error_message=message,
                    resources=())
    try:
        wanted = acl_filter(request).validate()
    except InvalidAclError as exc:
        return make(cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.invalid_request,
                    error_message=str(exc), resources=())
    found = await services.run_blocking(lambda: authorizer.describe_acls(wanted))
    by_pattern: dict[tuple[int, str, int], list[AclBinding]] = defaultdict(list)
    for binding in sorted(found):
        by_pattern[(binding.resource_type, binding.name, binding.pattern_type)].append(binding)
    return make(cls, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                resources=tuple(
                    make(resource_t, resource_type=kind, resource_name=name, pattern_type=pattern,
                         acls=tuple(make(acl_t, principal=b.principal, host=b.host,
                                         operation=int(b.operation),
                                         permission_type=int(b.permission))
                                    for b in bindings))
                    for (kind, name, pattern), bindings in by_pattern.items()))


async def delete_acls(services: Services, ctx: RequestContext,
                      request: DeleteAclsRequest) -> DeleteAclsResponse:
    """Delete the bindings each filter matches; each filter's result lists them."""
    cls: type[DeleteAclsResponse] = ctx.response_type
    result_t, match_t = (nested(cls, "DeleteAclsFilterResult"),
                         nested(cls, "DeleteAclsMatchingAcl"))
    refused = _refusal(services, ctx, AclOperation.ALTER)
    authorizer = services.authorizer
    if refused is not None or authorizer is None:
        code, message = refused or (ErrorCode.security_disabled, _NO_AUTHORIZER)
        return make(cls, throttle_time=_NO_THROTTLE, filter_results=tuple(
            make(result_t, error_code=code, error_message=message, matching_acls=())
            for _ in request.filters))
    filters = [acl_filter(f) for f in request.filters]
    results = await services.run_blocking(lambda: authorizer.delete_acls(filters))
    return make(cls, throttle_time=_NO_THROTTLE, filter_results=tuple(
        make(result_t, error_code=ErrorCode.none if r.error is None
             else ErrorCode.invalid_request,
             error_message=None if r.error is None else str(r.error),
             matching_acls=tuple(
                 make(match_t, error_code=ErrorCode.none, error_message=None,
                      resource_type=int(b.resource_type), resource_name=b.name,
                      pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                      operation=int(b.operation), permission_type=int(b.permission))
                 for b in r.deleted))
        for r in results))


ENDPOINTS = (
    Endpoint(DESCRIBE_ACLS, describe_acls, MIN_VERSION, MAX_VERSION),
    Endpoint(CREATE_ACLS, create_acls, MIN_VERSION, MAX_VERSION),
    Endpoint(DELETE_ACLS, delete_acls, MIN_VERSION, MAX_VERSION),
)


def install(registry: HandlerRegistry, services: Services) -> None:
    register(registry, services, ENDPOINTS)
