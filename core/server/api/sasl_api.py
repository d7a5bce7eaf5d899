"""SaslHandshake (v0-1) and SaslAuthenticate (v0-2): a client choosing a SASL mechanism and
relaying its tokens, answered from the connection's :class:`~tierlog.server.sasl_session.
SaslSession`.

Kafka's answers: a mechanism the listener does not enable is UNSUPPORTED_SASL_MECHANISM with
the enabled list; a failed exchange is SASL_AUTHENTICATION_FAILED with the mechanism's message
(the server then closes the connection); either request where none is expected (a listener
without SASL, a second handshake mid-exchange, a token after authentication) is
ILLEGAL_SASL_STATE. SaslAuthenticate v1+ carries the session's lifetime (KIP-368).
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tierlog.errors import SaslAuthenticationError
from tierlog.server.context import RequestContext
from tierlog.server.framing import make
from tierlog.server.registry import Endpoint
from tierlog.server.sasl_session import SASL_AUTHENTICATE_KEY, SASL_HANDSHAKE_KEY, SaslSessions

if TYPE_CHECKING:
    import kio.schema.sasl_authenticate.v0
    import kio.schema.sasl_authenticate.v1
    import kio.schema.sasl_authenticate.v2
    import kio.schema.sasl_handshake.v0
    import kio.schema.sasl_handshake.v1

    SaslHandshakeRequest = (kio.schema.sasl_handshake.v0.SaslHandshakeRequest
                            | kio.schema.sasl_handshake.v1.SaslHandshakeRequest)
    SaslHandshakeResponse = (kio.schema.sasl_handshake.v0.SaslHandshakeResponse
                             | kio.schema.sasl_handshake.v1.SaslHandshakeResponse)
    SaslAuthenticateRequest = (kio.schema.sasl_authenticate.v0.SaslAuthenticateRequest
                               | kio.schema.sasl_authenticate.v1.SaslAuthenticateRequest
                               | kio.schema.sasl_authenticate.v2.SaslAuthenticateRequest)
    SaslAuthenticateResponse = (kio.schema.sasl_authenticate.v0.SaslAuthenticateResponse
                                | kio.schema.sasl_authenticate.v1.SaslAuthenticateResponse
                                | kio.schema.sasl_authenticate.v2.SaslAuthenticateResponse)

#: What a listener without SASL answers (Kafka's wording).
_NOT_SASL = "SASL is not enabled on listener {}"


async def sasl_handshake(sessions: SaslSessions, ctx: RequestContext,
                         request: SaslHandshakeRequest) -> SaslHandshakeResponse:
    """Choose the connection's mechanism; answer the enabled ones."""
    response: type[SaslHandshakeResponse] = ctx.response_type
    session = sessions.get(ctx.connection_id)
    if session is None:
        return make(response, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    enabled = session.settings.mechanisms
    try:
        chosen = session.handshake(str(request.mechanism), ctx.api_version)
    except SaslAuthenticationError:
        return make(response, error_code=ErrorCode.illegal_sasl_state, mechanisms=enabled)
    code = ErrorCode.none if chosen else ErrorCode.unsupported_sasl_mechanism
    return make(response, error_code=code, mechanisms=enabled)


async def sasl_authenticate(sessions: SaslSessions, ctx: RequestContext,
                            request: SaslAuthenticateRequest) -> SaslAuthenticateResponse:
    """Relay one token of the exchange; its answer, or SASL_AUTHENTICATION_FAILED."""
    response: type[SaslAuthenticateResponse] = ctx.response_type
    session = sessions.get(ctx.connection_id)
    no_lifetime = datetime.timedelta(0)
    if session is None or not session.expects_token:
        message = (_NOT_SASL.format(ctx.listener) if session is None else
                   "Unexpected SaslAuthenticate request: no SaslHandshake chose a mechanism")
        return make(response, error_code=ErrorCode.illegal_sasl_state, error_message=message,
                    auth_bytes=b"", session_lifetime=no_lifetime)
    token = bytes(request.auth_bytes)
    try:
        answer = await sessions.run_blocking(lambda: session.evaluate(token))
    except SaslAuthenticationError as exc:
        return make(response, error_code=ErrorCode.sasl_authentication_failed,
                    error_message=str(exc), auth_bytes=b"", session_lifetime=no_lifetime)
    lifetime = datetime.timedelta(milliseconds=session.session_lifetime_ms()) \
        if session.state == "complete" else no_lifetime
    return make(response, error_code=ErrorCode.none, error_message=None, auth_bytes=answer,
                session_lifetime=lifetime)


ENDPOINTS = (Endpoint(SASL_HANDSHAKE_KEY, sasl_handshake, 0, 1),
             Endpoint(SASL_AUTHENTICATE_KEY, sasl_authenticate, 0, 2))
