"""TLS listeners on a real ``tierlog serve`` with real clients (kafka-python, librdkafka):
server authentication, mutual TLS (``ssl.client.auth=required``), and the refusals each client
reports for a missing, untrusted or expired certificate. One server serves every case, one
listener each (per-listener ``ssl.*`` overrides); certificates are made in the test.

kcat is not installed here (no network beyond package registries), so it is not tested.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaError
from kafka import KafkaProducer
from kafka.errors import KafkaConnectionError
from support.certs import Pki, make_pki
from support.secure_server import (
    SecureServer,
    kafka_python_refusal,
    kafka_python_round_trip,
    kafka_python_ssl,
    librdkafka_refusal,
    librdkafka_round_trip,
    librdkafka_ssl,
    tls_server_config,
)

from tierlog.server.context import tls_principal

LISTENERS = ("SSL", "MTLS", "EXPIRED", "UNTRUSTED", "PLAINTEXT")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureServer]:
    config = {
        "listeners": ",".join(f"{name}://127.0.0.1:0" for name in LISTENERS),
        "listener.security.protocol.map": "SSL:SSL,MTLS:SSL,EXPIRED:SSL,UNTRUSTED:SSL,"
                                          "PLAINTEXT:PLAINTEXT",
        **tls_server_config(pki),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.expired.ssl.keystore.location": str(pki.expired.keystore),
        "listener.name.untrusted.ssl.keystore.location": str(pki.untrusted.keystore),
    }
    server = SecureServer(tmp_path_factory.mktemp("tls-server"), config).start()
    try:
        yield server
    finally:
        server.stop()


EXPECTED = [b"record-0", b"record-1", b"record-2"]


def test_every_listener_is_bound_and_named_in_the_listeners_file(
        tls_server: SecureServer) -> None:
    assert set(tls_server.bound) == set(LISTENERS)
    assert tls_server.bound["MTLS"]["security_protocol"] == "SSL"
    ports = {entry["port"] for entry in tls_server.bound.values()}
    assert len(ports) == len(LISTENERS)
    # --port-file still holds the first listener's address
    assert tls_server.process.port == tls_server.bound["SSL"]["port"]


def test_metadata_answers_the_listener_the_request_came_through(
        tls_server: SecureServer, pki: Pki) -> None:
    # Kafka's rule: a client bootstrapped on one listener is sent to that listener's port
    plain = KafkaProducer(bootstrap_servers=tls_server.bootstrap("PLAINTEXT"))
    secure = KafkaProducer(bootstrap_servers=tls_server.bootstrap("SSL"),
                           security_protocol="SSL", **kafka_python_ssl(pki))
    try:
        for producer, listener in ((plain, "PLAINTEXT"), (secure, "SSL")):
            producer.send("by-listener", b"x").get(timeout=15)
            brokers = producer._metadata.brokers()  # what Metadata answered
            assert {b.port for b in brokers} == {tls_server.bound[listener]["port"]}
    finally:
        plain.close()
        secure.close()


def test_kafka_python_produces_and_consumes_over_ssl(tls_server: SecureServer,
                                                     pki: Pki) -> None:
    assert kafka_python_round_trip(tls_server.bootstrap("SSL"), "tls-kp",
                                   {"security_protocol": "SSL",
                                    **kafka_python_ssl(pki)}) == EXPECTED


def test_librdkafka_produces_and_consumes_over_ssl(tls_server: SecureServer,
                                                   pki: Pki) -> None:
    # Fetch over TLS: the record data goes through the TLS transport (no sendfile)
    assert librdkafka_round_trip(tls_server.bootstrap("SSL"), "tls-ck",
                                 {"security.protocol": "SSL", **librdkafka_ssl(pki)}) == EXPECTED


def test_both_clients_with_a_certificate_pass_mutual_tls(tls_server: SecureServer,
                                                         pki: Pki) -> None:
    bootstrap = tls_server.bootstrap("MTLS")
    assert kafka_python_round_trip(bootstrap, "mtls-kp", {
        "security_protocol": "SSL", **kafka_python_ssl(pki, cert=True)}) == EXPECTED
    assert librdkafka_round_trip(bootstrap, "mtls-ck", {
        "security.protocol": "SSL", **librdkafka_ssl(pki, cert=True)}) == EXPECTED


def test_a_client_without_a_certificate_is_refused_by_mutual_tls(
        tls_server: SecureServer, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = tls_server.bootstrap("MTLS")
    error = librdkafka_refusal({"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                                **librdkafka_ssl(pki)})
    # TLS 1.3: the server refuses the certificate-less client after the client's handshake
    # finished, so librdkafka sees the connection closed rather than a handshake error
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                            KafkaError._ALL_BROKERS_DOWN), error
    failure = kafka_python_refusal(caplog, bootstrap_servers=bootstrap,
                                   security_protocol="SSL", **kafka_python_ssl(pki))
    assert all(isinstance(f, KafkaConnectionError) for f in failure), failure


@pytest.mark.parametrize(("listener", "why"), [("UNTRUSTED", "self-signed certificate in certificate chain"),
                                               ("EXPIRED", "certificate has expired")])
def test_an_untrusted_or_expired_server_certificate_is_refused(
        tls_server: SecureServer, pki: Pki, caplog: pytest.LogCaptureFixture, listener: str,
        why: str) -> None:
    bootstrap = tls_server.bootstrap(listener)
    error = librdkafka_refusal({"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                                **librdkafka_ssl(pki)})
    # librdkafka: _SSL (its first report) or _TRANSPORT (a retry's), in state SSL_HANDSHAKE,
    # with OpenSSL's "certificate verify failed" (0A000086; the text may be cut short)
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT), error
    assert "SSL_HANDSHAKE" in error.str() and "0A000086" in error.str(), error
    failure = kafka_python_refusal(caplog, bootstrap_servers=bootstrap,
                                   security_protocol="SSL", **kafka_python_ssl(pki))
    # kafka-python: its connection error carrying Python's ssl verification failure
    assert any(isinstance(f, KafkaConnectionError) and "CERTIFICATE_VERIFY_FAILED" in str(f)
               and why in str(f) for f in failure), failure


def test_an_expired_client_certificate_is_refused_by_mutual_tls(
        tls_server: SecureServer, pki: Pki) -> None:
    error = librdkafka_refusal({
        "bootstrap.servers": tls_server.bootstrap("MTLS"), "security.protocol": "SSL",
        **librdkafka_ssl(pki), "ssl.certificate.location": str(pki.expired.cert),
        "ssl.key.location": str(pki.expired.key)})
    assert error.code() in (KafkaError._SSL, KafkaError._TRANSPORT,
                            KafkaError._ALL_BROKERS_DOWN), error


def test_the_principal_of_a_client_certificate_is_its_rfc2253_subject(pki: Pki) -> None:
    # What SSLObject.getpeercert() gives the server for the test's client certificate
    decoded = ssl._ssl._test_decode_cert(str(pki.client.cert))  # type: ignore[attr-defined]
    assert tls_principal(decoded) == "User:CN=client"
    assert tls_principal({}) == "User:ANONYMOUS"
    assert tls_principal(None) == "User:ANONYMOUS"
    # Java's X500Principal.getName(): most specific RDN first, specials escaped
    subject = ((("countryName", "FR"),), (("organizationName", "Acme, Inc."),),
               (("commonName", "svc+1"),))
    assert tls_principal({"subject": subject}) == "User:CN=svc\\+1,O=Acme\\, Inc.,C=FR"


def test_the_tls_log_names_no_secret(tls_server: SecureServer) -> None:
    # the server logged each TLS context without a key password or key text
    text = tls_server.process.log_text()
    assert "TLS server context" in text
    assert "PRIVATE KEY" not in text
