"""Test helper for the ACL tests against a real ``tierlog serve`` with an authorizer: kio
requests sent from a chosen loopback address (the server sees each client's host, so one
principal, ``User:ANONYMOUS`` until a listener authenticates, can be granted ACLs from one
host and none from another), ACLs created over the wire, and every error code of an answer."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from kio.schema.create_acls.v3 import request as create_acls_request
from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.errors import ErrorCode

from tierlog.security.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from tierlog.server.framing import response_class
from tierlog.server.replication.wire_client import BrokerConnection

#: authorizer.class.name, as a Kafka broker's server.properties names it.
AUTHORIZER = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}
PRINCIPAL = "User:ANONYMOUS"
#: The errors an authorizer answers.
AUTH_FAILURES = frozenset({ErrorCode.topic_authorization_failed,
                           ErrorCode.group_authorization_failed,
                           ErrorCode.cluster_authorization_failed,
                           ErrorCode.transactional_id_authorization_failed})


class BoundConnection(BrokerConnection):
    """A BrokerConnection whose socket is bound to ``source`` (a loopback address)."""

    def __init__(self, source: str, port: int) -> None:
        super().__init__("127.0.0.1", port, client_id=f"acl-test-{source}", timeout_s=30.0)
        self.source = source

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._streams is None:
            self._streams = await asyncio.open_connection(self.host, self.port,
                                                          local_addr=(self.source, 0))
        return self._streams


def send(port: int, source: str, request: object) -> Any:
    """``request`` sent from ``source`` on a new connection, and its answer."""
    async def run() -> Any:
        connection = BoundConnection(source, port)
        try:
            kind: Any = type(request)
            return await connection.send(request, response_class(int(kind.__api_key__),
                                                                 int(kind.__version__)))
        finally:
            await connection.close()
    return asyncio.run(run())


def acl(resource_type: ResourceType, name: str, operation: AclOperation, host: str, *,
        pattern: PatternType = PatternType.LITERAL,
        permission: AclPermissionType = AclPermissionType.ALLOW,
        principal: str = PRINCIPAL) -> create_acls_request.AclCreation:
    """One AclCreation of a CreateAcls v3."""
    return create_acls_request.AclCreation(
        resource_type=int(resource_type), resource_name=name, resource_pattern_type=int(pattern),
        principal=principal, host=host, operation=int(operation),
        permission_type=int(permission))


def create_acls(port: int, source: str,
                creations: Iterable[create_acls_request.AclCreation]) -> CreateAclsResponse:
    """A CreateAcls v3 of ``creations`` sent from ``source``."""
    answer: CreateAclsResponse = send(port, source, create_acls_request.CreateAclsRequest(
        creations=tuple(creations)))
    return answer


def error_codes(entity: object) -> Iterator[ErrorCode]:
    """Every error code in an answer, at any depth (``error_code``, ``partition_error_code``)."""
    if isinstance(entity, tuple):
        for item in entity:
            yield from error_codes(item)
        return
    if not dataclasses.is_dataclass(entity):
        return
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name.endswith("error_code"):
            yield ErrorCode(value)
        else:
            yield from error_codes(value)
