"""Which option and config names may hold a credential: the one rule every front door masks by
(the tier's storage options, a topic's ``remote.log.table.catalog.*`` properties), kept at the
bottom so the topic config can apply it too.
"""

from __future__ import annotations

#: Option names whose values must never reach a log line, a repr or an error message.
SECRET_OPTION_NAMES = frozenset({"key", "secret", "token", "password", "session_token",
                                 "aws_access_key_id", "aws_secret_access_key",
                                 "aws_session_token", "sse_customer_key"})
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
