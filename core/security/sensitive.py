"""Which config names hold a secret: the one rule every front door of the security room masks
by (errors, logs, ``repr``, DescribeConfigs answers, which Kafka gives as null).

A name is sensitive when Kafka types it PASSWORD (``ssl.key.password``, the inline PEM keys,
``sasl.jaas.config`` under any listener or mechanism prefix, ...), or when it names one of the
tier's credentials (storage options such as ``key``, ``secret``, ``token``: the rule of
:mod:`tierlog.common.secrets`, which this module calls rather than repeats).
"""

from __future__ import annotations

from collections.abc import Mapping

from tierlog.common.secrets import MASK, is_secret
from tierlog.security.listeners import unprefixed

#: Kafka's configs of type PASSWORD (SslConfigs, SaslConfigs, the broker's own), by their plain
#: names; a ``listener.name.<listener>.`` prefix does not change what they are. The inline PEM
#: chain and trust certificates are PASSWORD in Kafka too (KIP-651), so they are masked alike.
KAFKA_PASSWORD_CONFIGS = frozenset({
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.password",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
    "sasl.jaas.config",
    "sasl.oauthbearer.client.credentials.client.secret",
    "delegation.token.secret.key",
    "delegation.token.master.key",
    "password.encoder.secret",
    "password.encoder.old.secret",
})
#: ``listener.name.<l>.<mechanism>.sasl.jaas.config`` and any other prefix of it.
JAAS_SUFFIX = ".sasl.jaas.config"

__all__ = ["JAAS_SUFFIX", "KAFKA_PASSWORD_CONFIGS", "MASK", "is_sensitive", "redact"]


def is_sensitive(name: str) -> bool:
    """Whether the config ``name`` holds a secret whose value must never be shown."""
    plain = unprefixed(name.strip().lower())
    return (plain in KAFKA_PASSWORD_CONFIGS or plain.endswith(JAAS_SUFFIX)
            or is_secret(plain))


def redact(config: Mapping[str, object]) -> dict[str, object]:
    """A copy of ``config`` with each sensitive value replaced by the mask (``***``)."""
    return {name: MASK if is_sensitive(name) else value for name, value in config.items()}
