"""kcat (librdkafka's command-line client, the operator's tool) against a real ``tierlog
serve``: it produces and consumes over SSL with mutual TLS, and over SASL_SSL with PLAIN and
SCRAM-SHA-512 (the SCRAM user created through confluent-kafka's AlterUserScramCredentials), and
is refused, with the error kcat prints, for a wrong password, a missing client certificate, a
server it does not trust and a mechanism the listener does not enable.

kcat comes from the system's packages (Debian's ``kcat``; ``.ci/run`` installs it when it can):
a machine without it skips this module and says so.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from support.certs import Pki, make_pki
from support.secure_server import PLAIN_JAAS, SecureServer, librdkafka_ssl, tls_server_config

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
pytestmark = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (apt-get install "
                                                     "kcat)")

SCRAM_USER, SCRAM_PASSWORD = "kcat-user", "kcat-user-secret"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureServer]:
    config = {
        "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        **tls_server_config(pki),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "inter.broker.listener.name": "SSL",
    }
    running = SecureServer(tmp_path_factory.mktemp("kcat-server"), config).start()
    try:
        yield running
    finally:
        running.stop()


def tls(pki: Pki, *, cert: bool = True, ca: Path | None = None) -> list[str]:
    options = ["-X", f"ssl.ca.location={ca or pki.ca}"]
    if cert:
        options += ["-X", f"ssl.certificate.location={pki.client.cert}",
                    "-X", f"ssl.key.location={pki.client.key}"]
    return options


def sasl(pki: Pki, mechanism: str, user: str, password: str) -> list[str]:
    return ["-X", "security.protocol=sasl_ssl", *tls(pki, cert=False),
            "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}",
            "-X", f"sasl.password={password}"]


def kcat(bootstrap: str, options: Sequence[str], *args: str,
         stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    assert KCAT is not None
    return subprocess.run([KCAT, "-b", bootstrap, *options, *args], input=stdin,
                          capture_output=True, text=True, timeout=60, check=False)


def round_trip(bootstrap: str, topic: str, options: Sequence[str]) -> list[str]:
    """Three records produced with kcat, then consumed back with kcat."""
    produced = kcat(bootstrap, options, "-P", "-t", topic, stdin="one\ntwo\nthree\n")
    assert produced.returncode == 0, produced.stderr
    consumed = kcat(bootstrap, options, "-C", "-t", topic, "-o", "beginning", "-e", "-q")
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.split()


def test_kcat_over_mutual_tls(server: SecureServer, pki: Pki) -> None:
    options = ["-X", "security.protocol=ssl", *tls(pki)]
    assert round_trip(server.bootstrap("SSL"), "kcat-tls", options) == ["one", "two", "three"]


def test_kcat_without_a_client_certificate_is_refused(server: SecureServer, pki: Pki) -> None:
    found = kcat(server.bootstrap("SSL"), ["-X", "security.protocol=ssl", *tls(pki, cert=False)],
                 "-L", "-m", "5")
    assert found.returncode != 0
    assert "SSL" in found.stderr or "ssl" in found.stderr, found.stderr


def test_kcat_refuses_a_server_it_does_not_trust(server: SecureServer, pki: Pki) -> None:
    found = kcat(server.bootstrap("SSL"),
                 ["-X", "security.protocol=ssl", *tls(pki, cert=False, ca=pki.untrusted.cert)], "-L", "-m", "5")
    assert found.returncode != 0
    assert "certificate verify failed" in found.stderr, found.stderr


def test_kcat_over_sasl_ssl_plain(server: SecureServer, pki: Pki) -> None:
    options = sasl(pki, "PLAIN", "alice", "alice-secret")
    assert round_trip(server.bootstrap("SASL_SSL"), "kcat-plain", options) == \
        ["one", "two", "three"]


def test_kcat_over_sasl_ssl_scram_sha_512(server: SecureServer, pki: Pki) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap("SASL_SSL"),
                         "security.protocol": "SASL_SSL", **librdkafka_ssl(pki),
                         "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                         "sasl.password": "admin-secret"})
    upsert = UserScramCredentialUpsertion(
        SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        SCRAM_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    options = sasl(pki, "SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD)
    assert round_trip(server.bootstrap("SASL_SSL"), "kcat-scram", options) == \
        ["one", "two", "three"]


def test_kcat_with_a_wrong_password_is_refused(server: SecureServer, pki: Pki) -> None:
    found = kcat(server.bootstrap("SASL_SSL"), sasl(pki, "PLAIN", "alice", "wrong"),
                 "-L", "-m", "5")
    assert found.returncode != 0
    assert "Authentication failed" in found.stderr, found.stderr


def test_kcat_with_a_mechanism_not_enabled_is_refused(server: SecureServer, pki: Pki) -> None:
    found = kcat(server.bootstrap("SASL_SSL"), sasl(pki, "SCRAM-SHA-256", "alice", "x"),
                 "-L", "-m", "5")
    assert found.returncode != 0
    assert ("SCRAM-SHA-256" in found.stderr and "not supported" in found.stderr.lower()) or \
        "Unsupported SASL mechanism" in found.stderr, found.stderr
