"""TLS contexts from Kafka's ``ssl.*`` settings (tierlog.security.tls), proven by real TLS
handshakes over loopback sockets: the contexts built here against Python's own ssl client and
server, with certificates made in the test (support.certs)."""

from __future__ import annotations

import logging
import os
import socket
import ssl
import stat
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.certs import KEY_PASSWORD, KeyPair, Pki, make_pki

from tierlog.errors import ConfigError
from tierlog.security.cipher_suites import iana_name, known_suites, suites_by_name
from tierlog.security.tls import client_context, private_pem_path, server_context

#: Bound on every socket operation of a handshake, so a refused one fails instead of hanging.
TIMEOUT_S = 10.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@dataclass
class Outcome:
    """What each side of one handshake and one byte each way saw."""

    server_error: BaseException | None = None
    client_error: BaseException | None = None
    #: The client certificate the server saw (empty: none).
    peer_cert: dict[str, object] | None = None
    cipher: str | None = None
    version: str | None = None

    @property
    def ok(self) -> bool:
        return self.server_error is None and self.client_error is None


def exchange(server: ssl.SSLContext, client: ssl.SSLContext,
             server_hostname: str = "localhost") -> Outcome:
    """One TLS connection over loopback: handshake, a byte from the client, one back."""
    outcome = Outcome()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(TIMEOUT_S)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            conn.settimeout(TIMEOUT_S)
            with server.wrap_socket(conn, server_side=True) as tls:
                outcome.peer_cert = tls.getpeercert() or {}
                assert tls.recv(1) == b"p"
                tls.sendall(b"k")
        except BaseException as e:  # noqa: BLE001 - the outcome reports whatever it was
            outcome.server_error = e

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        with socket.create_connection(listener.getsockname(), timeout=TIMEOUT_S) as raw, \
                client.wrap_socket(raw, server_hostname=server_hostname) as tls:
            outcome.cipher, outcome.version = tls.cipher()[0], tls.version()
            tls.sendall(b"p")
            if tls.recv(1) != b"k":
                raise ConnectionError("the server closed the connection")
    except (OSError, ConnectionError) as e:
        outcome.client_error = e
    finally:
        thread.join(TIMEOUT_S)
        listener.close()
    assert not thread.is_alive()
    return outcome


def python_client(pki: Pki, pair: KeyPair | None = None, *, ca: Path | None = None,
                  maximum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    """Python's own client context: trusts ``ca`` (the test CA), presents ``pair`` if given."""
    context = ssl.create_default_context(cafile=str(ca or pki.ca))
    if pair is not None:
        context.load_cert_chain(pair.cert, pair.key, password=pair.password)
    if maximum is not None:
        context.maximum_version = maximum
    return context


def python_server(pair: KeyPair) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key, password=pair.password)
    return context


def tls_server(pki: Pki, **extra: str) -> dict[str, str]:
    """A listener's ``ssl.*`` settings: the server key store, the test CA trusted."""
    return {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server.keystore),
            "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca), **extra}


def server_of(config: Mapping[str, str]) -> ssl.SSLContext:
    return server_context(config)


# --- the server side ---------------------------------------------------------------------


def test_server_only_tls_serves_a_client_that_trusts_the_ca(pki: Pki) -> None:
    outcome = exchange(server_of(tls_server(pki)), python_client(pki))
    assert outcome.ok, outcome
    assert outcome.version == "TLSv1.3"
    assert outcome.peer_cert == {}


def test_a_client_that_does_not_trust_the_servers_ca_refuses_it(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.keystore.location":
                                          str(pki.untrusted.keystore)}))
    outcome = exchange(server, python_client(pki))
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert "self-signed certificate in certificate chain" in str(outcome.client_error)


def test_mutual_tls_required_refuses_a_client_without_a_certificate(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.client.auth": "required"}))
    refused = exchange(server, python_client(pki))
    assert isinstance(refused.server_error, ssl.SSLError)
    assert "peer did not return a certificate" in str(refused.server_error)
    assert refused.client_error is not None  # TLS 1.3: the alert arrives at the first read
    served = exchange(server, python_client(pki, pki.client))
    assert served.ok, served
    assert served.peer_cert and dict(x[0] for x in served.peer_cert["subject"])[  # type: ignore[attr-defined]
        "commonName"] == "client"


def test_mutual_tls_refuses_a_client_certificate_from_an_untrusted_ca(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.client.auth": "required"}))
    outcome = exchange(server, python_client(pki, pki.untrusted))
    assert isinstance(outcome.server_error, ssl.SSLCertVerificationError)


def test_requested_client_auth_serves_clients_with_and_without_a_certificate(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.client.auth": "requested"}))
    without = exchange(server, python_client(pki))
    assert without.ok, without
    assert without.peer_cert == {}
    with_cert = exchange(server, python_client(pki, pki.client))
    assert with_cert.ok, with_cert
    assert with_cert.peer_cert


def test_a_tls13_only_listener_refuses_a_tls12_only_client(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.enabled.protocols": "TLSv1.3"}))
    refused = exchange(server, python_client(pki, maximum=ssl.TLSVersion.TLSv1_2))
    assert isinstance(refused.server_error, ssl.SSLError)
    assert "unsupported protocol" in str(refused.server_error)
    default = exchange(server_of(tls_server(pki)), python_client(
        pki, maximum=ssl.TLSVersion.TLSv1_2))
    assert default.ok and default.version == "TLSv1.2"  # Kafka's default enables both


def test_ssl_protocol_tlsv12_caps_the_enabled_protocols(pki: Pki) -> None:
    outcome = exchange(server_of(tls_server(pki, **{"ssl.protocol": "TLSv1.2"})),
                       python_client(pki))
    assert outcome.ok and outcome.version == "TLSv1.2"


def test_inline_pem_key_chain_and_trusted_certificates(pki: Pki, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    server = server_of({"ssl.keystore.type": "PEM", "ssl.keystore.key": pki.server.key_pem,
                        "ssl.keystore.certificate.chain": pki.server.chain_pem,
                        "ssl.client.auth": "required",
                        "ssl.truststore.certificates": pki.ca_pem})
    client = client_context({"ssl.keystore.key": pki.client.key_pem,
                             "ssl.keystore.certificate.chain": pki.client.chain_pem,
                             "ssl.truststore.certificates": pki.ca_pem})
    outcome = exchange(server, client)
    assert outcome.ok, outcome
    assert outcome.peer_cert
    assert list(tmp_path.iterdir()) == []  # no key material left in a temporary file


@pytest.mark.parametrize("memfd", [True, False], ids=["memfd", "temp-file"])
def test_inline_pem_reaches_openssl_readable_by_this_user_only_and_then_gone(
        memfd: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    if not memfd:
        monkeypatch.delattr(os, "memfd_create", raising=False)
    elif not hasattr(os, "memfd_create"):
        pytest.skip("no memfd_create on this system")
    with private_pem_path("-----BEGIN PRIVATE KEY-----\n") as path:
        assert Path(path).read_text() == "-----BEGIN PRIVATE KEY-----\n"
        assert stat.S_IMODE(os.stat(path).st_mode) & 0o077 == 0
        assert list(tmp_path.iterdir()) == ([] if memfd else [Path(path)])
    assert list(tmp_path.iterdir()) == []


def test_an_encrypted_key_loads_with_ssl_key_password(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.keystore.location": str(pki.encrypted.keystore),
                                          "ssl.key.password": KEY_PASSWORD}))
    assert exchange(server, python_client(pki)).ok


@pytest.mark.parametrize("password", [None, "not-the-password"])
def test_an_encrypted_key_without_its_password_is_a_config_error_never_a_prompt(
        pki: Pki, password: str | None) -> None:
    config = tls_server(pki, **{"ssl.keystore.location": str(pki.encrypted.keystore)})
    if password is not None:
        config["ssl.key.password"] = password
    with pytest.raises(ConfigError) as e:
        server_context(config)
    assert e.value.key == "ssl.key.password"
    assert "not-the-password" not in str(e.value)


def test_an_inline_key_that_is_not_pem_is_refused_without_showing_it(pki: Pki) -> None:
    secret = "-----BEGIN PRIVATE KEY-----\nAAAAnot-a-keyAAAA\n-----END PRIVATE KEY-----\n"
    with pytest.raises(ConfigError) as e:
        server_context({"ssl.keystore.key": secret,
                        "ssl.keystore.certificate.chain": pki.server.chain_pem})
    assert e.value.key == "ssl.keystore.key"
    assert "not-a-key" not in str(e.value)


def test_no_secret_reaches_the_log(pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    server_context({"ssl.keystore.key": pki.encrypted.key_pem, "ssl.key.password": KEY_PASSWORD,
                    "ssl.keystore.certificate.chain": pki.encrypted.chain_pem,
                    "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
    assert caplog.records  # something was logged, and none of it secret
    assert KEY_PASSWORD not in caplog.text
    assert pki.encrypted.key_pem.splitlines()[1] not in caplog.text


def test_iana_cipher_names_choose_the_suite(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{
        "ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}))
    outcome = exchange(server, python_client(pki))
    assert outcome.ok, outcome
    # Java serves only the protocols a named suite belongs to: no TLS 1.3 suite, no TLS 1.3
    assert (outcome.version, outcome.cipher) == ("TLSv1.2", "ECDHE-RSA-AES128-GCM-SHA256")
    by_openssl = exchange(server_of(tls_server(pki, **{
        "ssl.cipher.suites": "ECDHE-RSA-AES256-GCM-SHA384"})), python_client(pki))
    assert by_openssl.cipher == "ECDHE-RSA-AES256-GCM-SHA384"


def test_only_tls13_suites_named_serves_tls13_only(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.cipher.suites": "TLS_AES_256_GCM_SHA384"}))
    assert exchange(server, python_client(pki, maximum=ssl.TLSVersion.TLSv1_2)).server_error
    assert exchange(server, python_client(pki)).version == "TLSv1.3"


@pytest.mark.parametrize(("iana", "openssl"), [
    ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
    ("TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384", "ECDHE-ECDSA-AES256-GCM-SHA384"),
    ("TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-RSA-CHACHA20-POLY1305"),
    ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA384", "ECDHE-RSA-AES256-SHA384"),
    ("TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA", "ECDHE-RSA-AES128-SHA"),
    ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "DHE-RSA-AES256-GCM-SHA384"),
    ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
    ("TLS_RSA_WITH_AES_256_CBC_SHA", "AES256-SHA"),
    ("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", "ECDHE-ECDSA-AES128-CCM8"),
    ("TLS_DH_anon_WITH_AES_128_GCM_SHA256", "ADH-AES128-GCM-SHA256"),
    ("TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),
])
def test_iana_names_map_to_openssls(iana: str, openssl: str) -> None:
    # pairs from IANA's registry and OpenSSL's own `openssl ciphers -stdname`
    assert suites_by_name()[iana.upper()].openssl_name == openssl


def test_every_default_suite_has_an_iana_name_and_no_two_suites_share_one() -> None:
    offered = {str(c["name"]) for c in ssl.create_default_context().get_ciphers()}
    by_openssl = {suite.openssl_name: suite.iana_name for suite in known_suites()}
    assert offered <= by_openssl.keys()
    assert all(by_openssl[name] for name in offered)
    names = [name for name in by_openssl.values() if name is not None]
    assert len(names) == len(set(names))
    assert iana_name({"name": "X", "protocol": "TLSv1.2", "kea": "kx-gost", "auth": "auth-rsa",
                      "symmetric": None, "digest": None}) is None


# --- the client side ---------------------------------------------------------------------


def test_client_context_trusts_the_store_and_checks_the_host_name(pki: Pki) -> None:
    client = client_context({"ssl.truststore.location": str(pki.ca)})
    assert exchange(python_server(pki.server), client, "127.0.0.1").ok
    wrong_host = exchange(python_server(pki.server), client, "kafka.example.com")
    assert isinstance(wrong_host.client_error, ssl.SSLCertVerificationError)
    assert "Hostname mismatch" in str(wrong_host.client_error)
    unchecked = client_context({"ssl.truststore.location": str(pki.ca),
                                "ssl.endpoint.identification.algorithm": ""})
    assert exchange(python_server(pki.server), unchecked, "kafka.example.com").ok


@pytest.mark.parametrize(("pair", "reason"), [
    ("expired", "certificate has expired"),
    ("untrusted", "self-signed certificate in certificate chain"),
])
def test_client_context_refuses_an_expired_or_untrusted_server(pki: Pki, pair: str,
                                                               reason: str) -> None:
    client = client_context({"ssl.truststore.location": str(pki.ca)})
    outcome = exchange(python_server(getattr(pki, pair)), client)
    assert isinstance(outcome.client_error, ssl.SSLCertVerificationError)
    assert reason in str(outcome.client_error)


def test_client_and_server_contexts_do_mutual_tls(pki: Pki) -> None:
    server = server_of(tls_server(pki, **{"ssl.client.auth": "required"}))
    client = client_context({"ssl.keystore.location": str(pki.client.keystore),
                             "ssl.truststore.location": str(pki.ca)})
    outcome = exchange(server, client)
    assert outcome.ok, outcome
    assert outcome.peer_cert


# --- settings refused --------------------------------------------------------------------


@pytest.mark.parametrize(("extra", "key", "words"), [
    ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type", "only PEM"),
    ({"ssl.truststore.type": "PKCS12"}, "ssl.truststore.type", "only PEM"),
    ({"ssl.keystore.password": "pw"}, "ssl.keystore.password", "ssl.key.password"),
    ({"ssl.truststore.password": "pw"}, "ssl.truststore.password", "PEM"),
    ({"ssl.keystore.key": "k"}, "ssl.keystore.key", "both set"),
    ({"ssl.keystore.certificate.chain": "c"}, "ssl.keystore.key", "must be set"),
    ({"ssl.client.auth": "always"}, "ssl.client.auth", "'always'"),
    ({"ssl.enabled.protocols": "TLSv1.4"}, "ssl.enabled.protocols", "'TLSv1.4'"),
    ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols", "enables no version"),
    ({"ssl.enabled.protocols": "TLSv1.3", "ssl.protocol": "TLSv1.2"},
     "ssl.enabled.protocols", "enables no version"),
    ({"ssl.protocol": "TLSv1.1"}, "ssl.protocol", "'TLSv1.1'"),
    ({"ssl.cipher.suites": "TLS_ECDHE_RSA_WITH_ROT13_SHA"}, "ssl.cipher.suites",
     "'TLS_ECDHE_RSA_WITH_ROT13_SHA'"),
    ({"ssl.cipher.suites": "TLS_AES_128_GCM_SHA256", "ssl.enabled.protocols": "TLSv1.2"},
     "ssl.cipher.suites", "no suite"),
    ({"ssl.keystore.location": "/nonexistent/server.pem"}, "ssl.keystore.location",
     "/nonexistent/server.pem"),
    ({"ssl.truststore.location": "/nonexistent/ca.pem"}, "ssl.truststore.location",
     "/nonexistent/ca.pem"),
])
def test_bad_settings_are_config_errors_naming_the_key(pki: Pki, extra: dict[str, str],
                                                        key: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        server_context(tls_server(pki, **extra))
    assert e.value.key == key
    assert words in str(e.value)


def test_a_server_needs_a_key_store_and_a_client_checks_the_algorithm(pki: Pki) -> None:
    with pytest.raises(ConfigError, match="needs a key store") as e:
        server_context({})
    assert e.value.key == "ssl.keystore.location"
    with pytest.raises(ConfigError) as e:
        client_context({"ssl.truststore.location": str(pki.ca),
                        "ssl.endpoint.identification.algorithm": "ldaps"})
    assert e.value.key == "ssl.endpoint.identification.algorithm"


def test_a_cert_file_as_truststore_must_hold_a_certificate(pki: Pki) -> None:
    with pytest.raises(ConfigError) as e:
        client_context({"ssl.truststore.certificates": "not a certificate"})
    assert e.value.key == "ssl.truststore.certificates"
    with pytest.raises(ConfigError) as e:
        client_context({"ssl.truststore.location": str(pki.server.key)})
    assert e.value.key == "ssl.truststore.location"
