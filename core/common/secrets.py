"""Which option and config names may hold a credential: the one rule every front door masks by
(the tier's storage options, a topic's ``remote.log.table.catalog.*`` properties), kept at the
bottom so the topic config can apply it too; and the mask over botocore's DEBUG lines, which
carry the credentials of every request they sign.
"""

from __future__ import annotations

import logging
import re

#: Option names whose values must never reach a log line, a repr or an error message
#: (``ssecustomerkey`` is botocore's SSECustomerKey, lowered as the rule lowers names).
SECRET_OPTION_NAMES = frozenset({"key", "secret", "token", "password", "session_token",
                                 "aws_access_key_id", "aws_secret_access_key",
                                 "aws_session_token", "sse_customer_key", "ssecustomerkey"})
#: Words that make any name holding them secret (``s3.secret-access-key``, ``adls.sas-token``,
#: a REST catalog's ``credential``, ``adls.account-key``).
SECRET_WORDS = ("secret", "password", "token", "credential", "account-key", "account_key")
#: What a secret value is shown as.
MASK = "***"


def is_secret(name: str) -> bool:
    """Whether an option (or a text naming one) may hold a credential."""
    lowered = name.lower()
    return lowered.rsplit(".", 1)[-1] in SECRET_OPTION_NAMES or any(
        word in lowered for word in SECRET_WORDS)


# -- botocore's DEBUG lines -----------------------------------------------------------------

#: The loggers that write a request's credentials at DEBUG: botocore's signer (the canonical
#: request, with ``x-amz-security-token``), its endpoint (the signed headers: the session
#: token, the access key id in ``Authorization``), and s3fs (each call's arguments, an SSE-C
#: key among them).
CREDENTIAL_LOGGERS = ("botocore.auth", "botocore.endpoint", "s3fs")
#: A credential in those lines: the value after a header or argument name that holds one
#: (``x-amz-security-token:T``, ``'X-Amz-Security-Token': b'T'``, ``X-Amz-Security-Token=T``,
#: ``'SSECustomerKey': 'K'``), and the access key id after ``Credential=``.
_CREDENTIAL_VALUE = re.compile(
    r"""((?:x-amz-security-token|x-amz-server-side-encryption-customer-key|sse_?customer_?key)
         ['"]?\s*[:=]\s*b?['"]?)[^'"\s,&}]+
       |((?:X-Amz-)?Credential=)[A-Za-z0-9]+""",
    re.IGNORECASE | re.VERBOSE)


def mask_credentials(text: str) -> str:
    """``text`` with every credential botocore or s3fs writes into a log line masked."""
    return _CREDENTIAL_VALUE.sub(lambda m: (m.group(1) or m.group(2)) + MASK, text)


class CredentialMask(logging.Filter):
    """Masks the credentials in a record of :data:`CREDENTIAL_LOGGERS` (the formatted message
    replaces ``msg`` and ``args`` only when it held one). Runs only for records a logger emits
    (DEBUG lines cost nothing while DEBUG is off). Stateless, so thread-safe."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        masked = mask_credentials(message)
        if masked != message:
            record.msg, record.args = masked, None
        return True


def mask_credential_logs() -> None:
    """Put a :class:`CredentialMask` on each of :data:`CREDENTIAL_LOGGERS` (once: calling it
    again changes nothing). Every front door that builds an S3 filesystem calls it, so turning
    on DEBUG logging never writes a credential, whoever's handler receives the lines."""
    for name in CREDENTIAL_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, CredentialMask) for f in logger.filters):
            logger.addFilter(CredentialMask())
