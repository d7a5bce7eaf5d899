"""Which config names hold secrets (tierlog.security.sensitive): Kafka's PASSWORD configs under
any listener or mechanism prefix, and the tier's credentials; ``redact`` masks exactly those."""

from __future__ import annotations

import pytest

from tierlog.security.sensitive import MASK, is_sensitive, redact


@pytest.mark.parametrize("name", [
    "ssl.key.password", "ssl.keystore.key", "ssl.keystore.password", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.truststore.certificates", "sasl.jaas.config",
    "listener.name.sasl_ssl.ssl.key.password",
    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
    "listener.name.internal.plain.sasl.jaas.config", "plain.sasl.jaas.config",
    "SSL.Key.Password",
    # the tier's credentials, by tierlog.common.secrets' rule
    "remote.storage.options.key", "remote.storage.options.secret",
    "remote.storage.options.token", "rsm.config.aws_secret_access_key",
    "remote.storage.options.aws_session_token", "key", "secret",
])
def test_secret_names_are_sensitive(name: str) -> None:
    assert is_sensitive(name)


@pytest.mark.parametrize("name", [
    "ssl.keystore.location", "ssl.keystore.type", "ssl.truststore.location", "ssl.client.auth",
    "ssl.cipher.suites", "ssl.endpoint.identification.algorithm", "sasl.enabled.mechanisms",
    "listeners", "listener.name.sasl_ssl.ssl.keystore.location", "super.users",
    "remote.storage.options.sse_kms_key_id", "remote.storage.options.endpoint_url",
    "log.retention.ms",
])
def test_other_names_are_not(name: str) -> None:
    assert not is_sensitive(name)


def test_redact_masks_only_the_sensitive_values() -> None:
    config = {"ssl.keystore.location": "/k.pem", "ssl.key.password": "hunter2",
              "listener.name.sasl_ssl.plain.sasl.jaas.config": 'password="p"',
              "remote.storage.options.sse_kms_key_id": "alias/tier", "node.id": 1}
    assert redact(config) == {"ssl.keystore.location": "/k.pem", "ssl.key.password": MASK,
                              "listener.name.sasl_ssl.plain.sasl.jaas.config": MASK,
                              "remote.storage.options.sse_kms_key_id": "alias/tier",
                              "node.id": 1}
    assert config["ssl.key.password"] == "hunter2"  # a copy: the original is untouched
