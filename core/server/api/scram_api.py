"""AlterUserScramCredentials and DescribeUserScramCredentials (KIP-554): SCRAM users managed
through Kafka's own admin APIs, kept by :class:`~tierlog.security.credentials.
ScramCredentialStore` in the node's security store (the cluster store when nodes share one).

Kafka's semantics: one result per user named, in the order first named; a (user, mechanism)
altered twice in one request is DUPLICATE_RESOURCE for that user, and a user named twice in a
describe is DUPLICATE_RESOURCE; describing a named user without credentials is
RESOURCE_NOT_FOUND; the store's checks answer UNACCEPTABLE_CREDENTIAL,
UNSUPPORTED_SASL_MECHANISM or RESOURCE_NOT_FOUND. A user's alterations are applied in order
(deletions, then upsertions) and stop at its first error. With an authorizer, altering needs
CLUSTER ALTER and describing CLUSTER DESCRIBE (or a super user), else
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tierlog.errors import TierlogError
from tierlog.security.acl import AclOperation, ResourceType
from tierlog.security.credentials import ScramCredentialStore
from tierlog.security.scram import scram_mechanism
from tierlog.server.context import RequestContext
from tierlog.server.error_codes import error_code_for, error_message
from tierlog.server.framing import make, nested
from tierlog.server.registry import Endpoint
from tierlog.server.services import Services

if TYPE_CHECKING:
    import kio.schema.alter_user_scram_credentials.v0
    import kio.schema.describe_user_scram_credentials.v0

    AlterUserScramCredentialsRequest = (
        kio.schema.alter_user_scram_credentials.v0.AlterUserScramCredentialsRequest)
    AlterUserScramCredentialsResponse = (
        kio.schema.alter_user_scram_credentials.v0.AlterUserScramCredentialsResponse)
    DescribeUserScramCredentialsRequest = (
        kio.schema.describe_user_scram_credentials.v0.DescribeUserScramCredentialsRequest)
    DescribeUserScramCredentialsResponse = (
        kio.schema.describe_user_scram_credentials.v0.DescribeUserScramCredentialsResponse)

DESCRIBE_KEY, ALTER_KEY = 50, 51
#: Kafka's cluster resource name.
CLUSTER_NAME = "kafka-cluster"
_NO_THROTTLE = datetime.timedelta(0)


@dataclass(frozen=True, slots=True)
class ScramAdmin:
    """What the two handlers serve from: the broker's services (authorizer, worker pool) and
    the credential store."""

    services: Services
    credentials: ScramCredentialStore


async def _allowed(admin: ScramAdmin, ctx: RequestContext, operation: AclOperation) -> bool:
    authorizer = admin.services.authorizer
    if authorizer is None:
        return True
    return await admin.services.run_blocking(lambda: authorizer.authorize(
        ctx.principal, ctx.client_host, operation, ResourceType.CLUSTER, CLUSTER_NAME))


def _first_seen(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))


async def alter_user_scram_credentials(
        admin: ScramAdmin, ctx: RequestContext,
        request: AlterUserScramCredentialsRequest) -> AlterUserScramCredentialsResponse:
    """Delete, then upsert, each user's credentials; one result per user."""
    response: type[AlterUserScramCredentialsResponse] = ctx.response_type
    result_t = nested(response, "AlterUserScramCredentialsResult")
    users = _first_seen([d.name for d in request.deletions] +
                        [u.name for u in request.upsertions])
    if not await _allowed(admin, ctx, AclOperation.ALTER):
        return make(response, throttle_time=_NO_THROTTLE, results=tuple(
            make(result_t, user=user, error_code=ErrorCode.cluster_authorization_failed,
                 error_message="Cluster authorization failed.") for user in users))
    pairs = [(d.name, int(d.mechanism)) for d in request.deletions] + \
            [(u.name, int(u.mechanism)) for u in request.upsertions]
    twice = {user for user, mechanism in pairs if pairs.count((user, mechanism)) > 1}
    store = admin.credentials

    def apply(user: str) -> tuple[ErrorCode, str | None]:
        if user in twice:
            return (ErrorCode.duplicate_resource,
                    "A user credential cannot be altered twice in the same request")
        try:
            for deletion in (d for d in request.deletions if d.name == user):
                store.delete(user, int(deletion.mechanism))
            for upsertion in (u for u in request.upsertions if u.name == user):
                store.upsert(user, int(upsertion.mechanism), bytes(upsertion.salt),
                             bytes(upsertion.salted_password), int(upsertion.iterations))
        except TierlogError as exc:
            return error_code_for(exc), error_message(exc)
        return ErrorCode.none, None

    outcomes = await admin.services.run_blocking(lambda: [apply(user) for user in users])
    return make(response, throttle_time=_NO_THROTTLE, results=tuple(
        make(result_t, user=user, error_code=code, error_message=message)
        for user, (code, message) in zip(users, outcomes, strict=True)))


async def describe_user_scram_credentials(
        admin: ScramAdmin, ctx: RequestContext,
        request: DescribeUserScramCredentialsRequest) -> DescribeUserScramCredentialsResponse:
    """Each user's mechanisms and iterations (every user when none is named)."""
    response: type[DescribeUserScramCredentialsResponse] = ctx.response_type
    result_t = nested(response, "DescribeUserScramCredentialsResult")
    info_t = nested(response, "CredentialInfo")
    named = [u.name for u in request.users] if request.users else None
    if not await _allowed(admin, ctx, AclOperation.DESCRIBE):
        # Each user named gets the error (as Kafka's getErrorResponse gives it), and the top
        # level only when none is named: librdkafka 2.16 crashes on a top-level error with
        # per-user results.
        denied = "Cluster authorization failed."
        top = ErrorCode.none if named else ErrorCode.cluster_authorization_failed
        return make(response, throttle_time=_NO_THROTTLE, error_code=top,
                    error_message=None if named else denied,
                    results=tuple(make(result_t, user=user,
                                       error_code=ErrorCode.cluster_authorization_failed,
                                       error_message=denied, credential_infos=())
                                  for user in named or ()))
    described = await admin.services.run_blocking(lambda: admin.credentials.describe(named))

    def result(user: str) -> object:
        if named is not None and named.count(user) > 1:
            return make(result_t, user=user, error_code=ErrorCode.duplicate_resource,
                        error_message="Cannot describe SCRAM credentials for the same user "
                                      "twice in a single request", credential_infos=())
        infos = described.get(user)
        if infos is None:
            return make(result_t, user=user, error_code=ErrorCode.resource_not_found,
                        error_message="Attempt to describe a user credential that does not "
                                      f"exist: {user}", credential_infos=())
        return make(result_t, user=user, error_code=ErrorCode.none, error_message=None,
                    credential_infos=tuple(
                        make(info_t, mechanism=_type_id(mechanism), iterations=iterations)
                        for mechanism, iterations in infos))

    users = _first_seen(named) if named is not None else sorted(described)
    return make(response, throttle_time=_NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, results=tuple(result(user) for user in users))


def _type_id(mechanism: str) -> int:
    return scram_mechanism(mechanism).type_id


ENDPOINTS = (Endpoint(DESCRIBE_KEY, describe_user_scram_credentials, 0, 0),
             Endpoint(ALTER_KEY, alter_user_scram_credentials, 0, 0))
