"""SASL listeners on a real ``tierlog serve``: kafka-python and librdkafka produce and consume
over SASL_SSL with PLAIN and with SCRAM-SHA-512 (the SCRAM user created through
confluent-kafka's AlterUserScramCredentials over a PLAIN admin), and are refused, with the error
each reports, for a wrong password or a mechanism the listener does not enable. The wire rules
are checked with bare requests: nothing but ApiVersions, SaslHandshake and SaslAuthenticate
before authentication; SaslHandshake v0's bare tokens; the session lifetime (KIP-368).

kcat's turn is ``test_server_kcat.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.errors import SaslAuthenticationFailedError, UnsupportedSaslMechanismError
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v9.request import MetadataRequest
from kio.schema.metadata.v9.response import MetadataResponse
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v0.request import SaslHandshakeRequest as HandshakeV0
from kio.schema.sasl_handshake.v0.response import SaslHandshakeResponse as HandshakeV0Response
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from support.certs import Pki, make_pki
from support.cluster_procs import Cluster, wait_until
from support.secure_server import (
    PLAIN_JAAS,
    SecureServer,
    kafka_python_refusal,
    kafka_python_round_trip,
    kafka_python_ssl,
    librdkafka_refusal,
    librdkafka_round_trip,
    librdkafka_ssl,
    read_frame,
    send_request,
    tls_server_config,
)

from tierlog.errors import BrokerConnectionError, ConfigError
from tierlog.security.listeners import Listener
from tierlog.server.config import ServerConfig
from tierlog.server.replication.sasl_client import BrokerSecurity
from tierlog.server.replication.wire_client import BrokerConnection
from tierlog.server.sasl_session import SaslListenerSettings, SaslSession

#: connections.max.reauth.ms of the module's server.
REAUTH_MS = 60_000
SCRAM_USER, SCRAM_PASSWORD = "scram-user", "scram-user-secret"
EXPECTED = [b"record-0", b"record-1", b"record-2"]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureServer]:
    config = {
        "listeners": "SASL_SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                     "PLAINTEXT://127.0.0.1:0",
        **tls_server_config(pki),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "connections.max.reauth.ms": str(REAUTH_MS),
    }
    server = SecureServer(tmp_path_factory.mktemp("sasl-server"), config).start()
    try:
        yield server
    finally:
        server.stop()


def kp_sasl(pki: Pki, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"security_protocol": "SASL_SSL", **kafka_python_ssl(pki), "sasl_mechanism": mechanism,
            "sasl_plain_username": user, "sasl_plain_password": password}


def ck_sasl(pki: Pki, mechanism: str, user: str, password: str) -> dict[str, Any]:
    return {"security.protocol": "SASL_SSL", **librdkafka_ssl(pki), "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def test_both_clients_produce_and_consume_over_sasl_ssl_plain(sasl_server: SecureServer,
                                                             pki: Pki) -> None:
    bootstrap = sasl_server.bootstrap("SASL_SSL")
    assert kafka_python_round_trip(bootstrap, "plain-kp", kp_sasl(
        pki, "PLAIN", "alice", "alice-secret")) == EXPECTED
    assert librdkafka_round_trip(bootstrap, "plain-ck", ck_sasl(
        pki, "PLAIN", "alice", "alice-secret")) == EXPECTED


@pytest.fixture(scope="module")
def scram_user(sasl_server: SecureServer, pki: Pki) -> str:
    """A SCRAM-SHA-512 user created through AlterUserScramCredentials by the PLAIN admin."""
    admin = AdminClient({"bootstrap.servers": sasl_server.bootstrap("SASL_SSL"),
                         **ck_sasl(pki, "PLAIN", "admin", "admin-secret")})
    upsert = UserScramCredentialUpsertion(
        SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
        SCRAM_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=15)
    return SCRAM_USER


def test_both_clients_produce_and_consume_over_sasl_ssl_scram_sha_512(
        sasl_server: SecureServer, pki: Pki, scram_user: str) -> None:
    bootstrap = sasl_server.bootstrap("SASL_SSL")
    assert kafka_python_round_trip(bootstrap, "scram-kp", kp_sasl(
        pki, "SCRAM-SHA-512", scram_user, SCRAM_PASSWORD)) == EXPECTED
    assert librdkafka_round_trip(bootstrap, "scram-ck", ck_sasl(
        pki, "SCRAM-SHA-512", scram_user, SCRAM_PASSWORD)) == EXPECTED


@pytest.mark.parametrize(("mechanism", "message"), [
    ("PLAIN", "Authentication failed: Invalid username or password"),
    ("SCRAM-SHA-512", ("Authentication failed during authentication due to invalid "
                       "credentials with SASL mechanism SCRAM-SHA-512")),
])
def test_a_wrong_password_is_refused_with_kafkas_error(
        sasl_server: SecureServer, pki: Pki, scram_user: str, caplog: pytest.LogCaptureFixture,
        mechanism: str, message: str) -> None:
    bootstrap = sasl_server.bootstrap("SASL_SSL")
    user = "alice" if mechanism == "PLAIN" else scram_user
    error = librdkafka_refusal({"bootstrap.servers": bootstrap,
                                **ck_sasl(pki, mechanism, user, "wrong")})
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert message in error.str()
    failure = kafka_python_refusal(caplog, bootstrap_servers=bootstrap,
                                   **kp_sasl(pki, mechanism, user, "wrong"))
    assert any(isinstance(f, SaslAuthenticationFailedError) and message in str(f)
               for f in failure), failure
    assert "wrong" not in sasl_server.process.log_text()


def test_an_unknown_user_is_refused_like_a_wrong_password(sasl_server: SecureServer,
                                                          pki: Pki) -> None:
    error = librdkafka_refusal({"bootstrap.servers": sasl_server.bootstrap("SASL_SSL"),
                                **ck_sasl(pki, "SCRAM-SHA-512", "nobody", "nothing")})
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in error.str()


def test_a_mechanism_the_listener_does_not_enable_is_refused(
        sasl_server: SecureServer, pki: Pki, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = sasl_server.bootstrap("SASL_SSL")
    error = librdkafka_refusal({"bootstrap.servers": bootstrap,
                                **ck_sasl(pki, "SCRAM-SHA-256", "alice", "alice-secret")})
    assert error.code() == KafkaError._AUTHENTICATION, error
    assert "Unsupported SASL mechanism" in error.str()
    assert "PLAIN,SCRAM-SHA-512" in error.str()  # the enabled mechanisms, as answered
    failure = kafka_python_refusal(caplog, bootstrap_servers=bootstrap,
                                   **kp_sasl(pki, "SCRAM-SHA-256", "alice", "alice-secret"))
    assert any(isinstance(f, UnsupportedSaslMechanismError) for f in failure), failure


# --- the wire rules, with bare requests on the SASL_PLAINTEXT listener --------------------

def connect(server: SecureServer, listener: str = "SASL_PLAINTEXT") -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.bound[listener]["port"]), timeout=10)


def authenticate(sock: socket.socket, token: bytes = b"\0alice\0alice-secret"
                 ) -> SaslAuthenticateResponse:
    handshake = send_request(sock, SaslHandshakeRequest(mechanism="PLAIN"),
                             SaslHandshakeResponse)
    assert handshake.error_code == ErrorCode.none
    assert handshake.mechanisms == ("PLAIN", "SCRAM-SHA-512")
    answer: SaslAuthenticateResponse = send_request(
        sock, SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse, 2)
    return answer


def metadata(sock: socket.socket, correlation: int = 3) -> MetadataResponse:
    answer: MetadataResponse = send_request(sock, MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False), MetadataResponse, correlation)
    return answer


def test_only_api_versions_and_sasl_are_served_before_authentication(
        sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        versions = send_request(sock, ApiVersionsRequest(
            client_software_name="t", client_software_version="1"), ApiVersionsResponse)
        served = {key.api_key: key.max_version for key in versions.api_keys}
        assert served[17] == 1 and served[36] == 2
        with pytest.raises(ConnectionError):  # closed, unanswered, as Kafka does
            metadata(sock, 2)


def test_an_authenticated_connection_is_served_with_the_session_lifetime(
        sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        answer = authenticate(sock)
        assert answer.error_code == ErrorCode.none
        lifetime_ms = answer.session_lifetime.total_seconds() * 1000
        assert 0 < lifetime_ms <= REAUTH_MS  # KIP-368
        assert metadata(sock).brokers[0].port == sasl_server.bound["SASL_PLAINTEXT"]["port"]


def test_a_failed_authentication_is_answered_then_the_connection_closed(
        sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        answer = authenticate(sock, b"\0alice\0wrong")
        assert answer.error_code == ErrorCode.sasl_authentication_failed
        assert answer.error_message == "Authentication failed: Invalid username or password"
        with pytest.raises(ConnectionError):
            metadata(sock)


def test_a_handshake_for_a_mechanism_not_enabled_answers_the_enabled_ones(
        sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        answer = send_request(sock, SaslHandshakeRequest(mechanism="GSSAPI"),
                              SaslHandshakeResponse)
        assert answer.error_code == ErrorCode.unsupported_sasl_mechanism
        assert answer.mechanisms == ("PLAIN", "SCRAM-SHA-512")
        with pytest.raises(ConnectionError):
            metadata(sock)


def test_sasl_requests_on_a_listener_without_sasl_are_illegal(sasl_server: SecureServer) -> None:
    with connect(sasl_server, "PLAINTEXT") as sock:
        handshake = send_request(sock, SaslHandshakeRequest(mechanism="PLAIN"),
                                 SaslHandshakeResponse)
        assert handshake.error_code == ErrorCode.illegal_sasl_state
        token = send_request(sock, SaslAuthenticateRequest(auth_bytes=b"\0a\0b"),
                             SaslAuthenticateResponse, 2)
        assert token.error_code == ErrorCode.illegal_sasl_state
        assert metadata(sock).brokers  # the connection is still served


def test_after_a_v0_handshake_the_tokens_go_bare(sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        handshake = send_request(sock, HandshakeV0(mechanism="PLAIN"), HandshakeV0Response)
        assert handshake.error_code == ErrorCode.none
        token = b"\0alice\0alice-secret"
        sock.sendall(struct.pack(">i", len(token)) + token)
        assert read_frame(sock) == b""  # PLAIN's empty answer, bare
        assert metadata(sock, 2).brokers


def test_a_bare_token_with_a_wrong_password_closes_the_connection(
        sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        send_request(sock, HandshakeV0(mechanism="PLAIN"), HandshakeV0Response)
        token = b"\0alice\0wrong"
        sock.sendall(struct.pack(">i", len(token)) + token)
        with pytest.raises(ConnectionError):
            read_frame(sock)


def test_a_session_re_authenticates_as_the_same_principal_only(sasl_server: SecureServer) -> None:
    with connect(sasl_server) as sock:
        assert authenticate(sock).error_code == ErrorCode.none
        again = authenticate(sock)  # KIP-368: the same mechanism and user, on one connection
        assert again.error_code == ErrorCode.none
        assert metadata(sock).brokers
    with connect(sasl_server) as sock:
        assert authenticate(sock).error_code == ErrorCode.none
        other = authenticate(sock, b"\0admin\0admin-secret")
        assert other.error_code == ErrorCode.sasl_authentication_failed
        assert "Cannot change principals during re-authentication" in str(other.error_message)
        with pytest.raises(ConnectionError):
            metadata(sock)


def test_a_session_past_its_lifetime_serves_nothing_but_re_authentication() -> None:
    now = [1_000]
    settings = SaslListenerSettings("SASL_PLAINTEXT", ("PLAIN",),
                                    MappingProxyType({"alice": "alice-secret"}))
    session = SaslSession(settings, lambda user, mechanism: None, reauth_ms=500,
                          time_ms=lambda: now[0])
    assert not session.allows(3)  # Metadata, before authentication
    assert session.handshake("PLAIN", 1)
    session.evaluate(b"\0alice\0alice-secret")
    assert session.principal == "User:alice"
    assert session.session_lifetime_ms() == 500
    assert session.allows(3)
    now[0] += 500
    assert session.expired() and not session.allows(3)
    assert session.allows(17) and session.allows(36)  # a re-authentication may still come
    assert session.handshake("PLAIN", 1)
    session.evaluate(b"\0alice\0alice-secret")
    assert session.allows(3) and session.session_lifetime_ms() == 500


def test_the_sasl_settings_refuse_what_tierlog_does_not_offer() -> None:
    listener = Listener("SASL_SSL", "127.0.0.1", 0, "SASL_SSL")
    with pytest.raises(ConfigError, match="GSSAPI"):
        SaslListenerSettings.from_config({"sasl.enabled.mechanisms": "GSSAPI"}, listener)
    with pytest.raises(ConfigError, match=r"listener\.name\.sasl_ssl\.plain\.sasl\.jaas\.config"):
        SaslListenerSettings.from_config({}, listener)  # PLAIN (the default) without users
    settings = SaslListenerSettings.from_config(
        {"listener.name.sasl_ssl.sasl.enabled.mechanisms": "scram-sha-256"}, listener)
    assert settings.mechanisms == ("SCRAM-SHA-256",)
    plain = SaslListenerSettings.from_config({"sasl.jaas.config": PLAIN_JAAS}, listener)
    assert "admin-secret" not in repr(plain) and plain.plain_users["alice"] == "alice-secret"


# --- the node's own client (replication over the inter-broker listener) ---------------------

def inter_broker_fetch_metadata(server: SecureServer, security: BrokerSecurity | None) -> Any:
    async def run() -> Any:
        connection = BrokerConnection("127.0.0.1", server.bound["SASL_SSL"]["port"],
                                      client_id="tierlog-replica-2", timeout_s=10,
                                      security=security)
        try:
            return await connection.send(MetadataRequest(
                topics=(), allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False), MetadataResponse)
        finally:
            await connection.close()
    return asyncio.run(run())


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_the_inter_broker_client_speaks_tls_and_sasl(sasl_server: SecureServer, pki: Pki,
                                                     scram_user: str, mechanism: str) -> None:
    listener = Listener("SASL_SSL", "127.0.0.1", sasl_server.bound["SASL_SSL"]["port"],
                        "SASL_SSL")
    user, password = (("admin", "admin-secret") if mechanism == "PLAIN"
                      else (scram_user, SCRAM_PASSWORD))
    module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mechanism == "PLAIN"
              else "org.apache.kafka.common.security.scram.ScramLoginModule")
    config = {"ssl.truststore.location": str(pki.ca),
              "sasl.mechanism.inter.broker.protocol": mechanism,
              f"listener.name.sasl_ssl.{mechanism.lower()}.sasl.jaas.config":
                  f'{module} required username="{user}" password="{password}";'}
    security = BrokerSecurity.for_listener(config, listener)
    assert security is not None and password not in repr(security)
    answer = inter_broker_fetch_metadata(sasl_server, security)
    assert answer.brokers[0].port == listener.port
    wrong = dataclasses.replace(security, password="wrong")
    with pytest.raises(BrokerConnectionError, match="sasl_authentication_failed: Authentication failed"):
        inter_broker_fetch_metadata(sasl_server, wrong)
    with pytest.raises(BrokerConnectionError):  # no TLS, no SASL: refused
        inter_broker_fetch_metadata(sasl_server, None)


def test_the_inter_broker_security_needs_the_nodes_own_credentials(pki: Pki) -> None:
    listener = Listener("SASL_SSL", "127.0.0.1", 9093, "SASL_SSL")
    with pytest.raises(ConfigError, match="username and password"):
        BrokerSecurity.for_listener({"ssl.truststore.location": str(pki.ca),
                                     "sasl.jaas.config": PLAIN_JAAS.replace(
                                         'username="admin" password="admin-secret" ', "")},
                                    listener)
    with pytest.raises(ConfigError, match="GSSAPI"):
        BrokerSecurity.for_listener({"sasl.mechanism.inter.broker.protocol": "GSSAPI"},
                                    listener)
    plaintext = Listener("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT")
    assert BrokerSecurity.for_listener({}, plaintext) is None


class SecureCluster(Cluster):
    """A test cluster whose nodes are reached over SASL_SSL, their inter-broker listener."""

    def __init__(self, root: Path, n: int, config: dict[str, Any],
                 client: dict[str, Any]) -> None:
        super().__init__(root, n, config)
        self.client = client

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.live_bootstrap(), **self.client})

    def leads(self, node_id: int, topic: str, partition: int = 0) -> bool:
        """The nodes speak only SASL_SSL, which the bare role check does not: the store's word
        is taken (the test's acks=all produce has gone through the leader already)."""
        return True


def test_replication_between_nodes_goes_over_the_sasl_ssl_inter_broker_listener(
        tmp_path: Path, pki: Pki) -> None:
    config = {"listeners": "SASL_SSL://127.0.0.1:0", "inter.broker.listener.name": "SASL_SSL",
              **tls_server_config(pki), "sasl.enabled.mechanisms": "PLAIN",
              "sasl.mechanism.inter.broker.protocol": "PLAIN",
              "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS}
    client = ck_sasl(pki, "PLAIN", "alice", "alice-secret")
    with SecureCluster(tmp_path, 2, config, client) as cluster:
        # in sync only once the follower fetched from the leader over TLS, as admin (SASL)
        cluster.create_topic("replicated", replication_factor=2)
        producer = Producer({"bootstrap.servers": cluster.bootstrap, **client, "acks": "all"})
        for i in range(3):
            producer.produce("replicated", f"record-{i}".encode())
        assert producer.flush(30) == 0
        leader = cluster.leader("replicated")
        follower = 3 - leader
        segment = "replicated-0/00000000000000000000.log"

        def copied() -> bool:  # the follower's copy is the leader's, byte for byte
            theirs = (cluster.data_dir(follower) / segment).read_bytes()
            return theirs == (cluster.data_dir(leader) / segment).read_bytes() and b"record-2" \
                in theirs

        wait_until(copied, "the follower's copy of the records", timeout_s=20)
        assert "retrying" not in cluster.nodes[follower].log_text()  # no failed fetch


def test_librdkafka_re_authenticates_before_its_session_ends(tmp_path: Path) -> None:
    lifetime_ms = 1000
    config = {"listeners": "SASL_PLAINTEXT://127.0.0.1:0",
              "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
              "connections.max.reauth.ms": str(lifetime_ms)}
    server = SecureServer(tmp_path, config).start()
    try:
        producer = Producer({"bootstrap.servers": server.bootstrap("SASL_PLAINTEXT"),
                             "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                             "sasl.username": "alice", "sasl.password": "alice-secret"})
        delivered: list[bytes] = []
        deadline = time.monotonic() + 3.5 * lifetime_ms / 1000
        i = 0
        while time.monotonic() < deadline:  # records across several session lifetimes
            producer.produce("reauth", str(i).encode(),
                             on_delivery=lambda err, msg: delivered.append(msg.value())
                             if err is None else None)
            i += 1
            producer.flush(10)
        assert len(delivered) == i
        log = server.process.log_text()
        # KIP-368: the client re-authenticated in time; no connection outlived its session
        assert "SASL session expired" not in log
    finally:
        server.stop()


def test_the_server_config_shows_no_secret() -> None:
    config = ServerConfig.from_properties({
        "listeners": "SASL_SSL://127.0.0.1:0", "ssl.key.password": "key-secret",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS})
    shown = repr(config)
    assert "SASL_SSL://127.0.0.1:0" in shown and "ssl.key.password" in shown
    assert "key-secret" not in shown and "alice-secret" not in shown


def test_only_a_node_that_replicates_needs_an_inter_broker_listener() -> None:
    alone = ServerConfig.from_properties({"listeners": "SSL://127.0.0.1:0"})
    assert alone.inter_broker.name == "SSL"  # a cluster of one: its first listener stands in
    with pytest.raises(ConfigError, match="inter-broker listener 'PLAINTEXT'"):
        ServerConfig.from_properties({"listeners": "SSL://127.0.0.1:0",
                                      "cluster.metadata.url": "/nonexistent/store"})
    with pytest.raises(ConfigError, match="inter-broker listener 'PLAINTEXT'"):
        ServerConfig.from_properties({"listeners": "SSL://127.0.0.1:0",
                                      "security.inter.broker.protocol": "PLAINTEXT"})
