"""AlterUserScramCredentials and DescribeUserScramCredentials on a real ``tierlog serve`` with
an authorizer, through confluent-kafka's admin client: Kafka's answers (UNACCEPTABLE_CREDENTIAL,
DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND), only a super user or CLUSTER ALTER/DESCRIBE may call
them (CLUSTER_AUTHORIZATION_FAILED otherwise; a client certificate's DN is a principal too), and
what is stored is salted, never the password."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.describe_user_scram_credentials.v0.response import (
    DescribeUserScramCredentialsResponse,
)
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from support.certs import Pki, make_pki
from support.secure_server import (
    PLAIN_JAAS,
    SecureServer,
    librdkafka_ssl,
    send_request,
    tls_server_config,
)

from tierlog.security.credentials import ScramCredentialStore


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def admin_server(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureServer]:
    config = {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        **tls_server_config(pki, **{"ssl.client.auth": "required"}),
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:CN=client",
    }
    server = SecureServer(tmp_path_factory.mktemp("scram-admin"), config).start()
    try:
        yield server
    finally:
        server.stop()


def admin_as(server: SecureServer, user: str | None, pki: Pki | None = None) -> AdminClient:
    """An admin client: a PLAIN user, ANONYMOUS on PLAINTEXT (None), or the client
    certificate's principal over SSL (``pki``)."""
    if pki is not None:
        settings: dict[str, Any] = {"bootstrap.servers": server.bootstrap("SSL"),
                                    "security.protocol": "SSL",
                                    **librdkafka_ssl(pki, cert=True)}
    elif user is None:
        settings = {"bootstrap.servers": server.bootstrap("PLAINTEXT")}
    else:
        settings = {"bootstrap.servers": server.bootstrap("SASL_PLAINTEXT"),
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                    "sasl.username": user, "sasl.password": f"{user}-secret"}
    return AdminClient(settings)


def upsert(user: str, iterations: int = 8192, password: bytes = b"pw-secret",
           mechanism: ScramMechanism = ScramMechanism.SCRAM_SHA_512
           ) -> UserScramCredentialUpsertion:
    return UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, iterations),
                                        password)


def alter(admin: AdminClient, alterations: list[Any]) -> dict[str, int]:
    """Each user's result: its error code (0 when done)."""
    codes = {}
    for user, future in admin.alter_user_scram_credentials(alterations).items():
        try:
            future.result(timeout=15)
            codes[user] = 0
        except KafkaException as exc:
            codes[user] = exc.args[0].code()
    return codes


def describe(admin: AdminClient, users: list[str] | None) -> Any:
    return admin.describe_user_scram_credentials(users)


def test_a_super_user_adds_describes_and_deletes_a_scram_user(admin_server: SecureServer) -> None:
    admin = admin_as(admin_server, "admin")
    assert alter(admin, [upsert("carol"), upsert("carol", 4096,
                                                 mechanism=ScramMechanism.SCRAM_SHA_256)]) \
        == {"carol": 0}
    described = describe(admin, ["carol"])["carol"].result(timeout=15)
    infos = sorted((info.mechanism, info.iterations) for info in
                   described.scram_credential_infos)
    assert infos == [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)]
    every = describe(admin, None).result(timeout=15)
    assert "carol" in every
    assert alter(admin, [UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256),
                         UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_512)]) \
        == {"carol": 0}
    with pytest.raises(KafkaException) as refused:
        describe(admin, ["carol"])["carol"].result(timeout=15)
    assert refused.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_kafkas_answers_for_bad_alterations(admin_server: SecureServer) -> None:
    admin = admin_as(admin_server, "admin")
    assert alter(admin, [upsert("few", iterations=100)]) == {
        "few": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert alter(admin, [upsert("many", iterations=20_000)]) == {
        "many": KafkaError.UNACCEPTABLE_CREDENTIAL}
    assert alter(admin, [UserScramCredentialDeletion("ghost", ScramMechanism.SCRAM_SHA_512)]) \
        == {"ghost": KafkaError.RESOURCE_NOT_FOUND}
    # one (user, mechanism) altered twice in a request: that user's result only
    assert alter(admin, [upsert("twice"), upsert("twice", 4096), upsert("once")]) == {
        "twice": KafkaError.DUPLICATE_RESOURCE, "once": 0}
    assert "twice" not in describe(admin, None).result(timeout=15)


def wire_describe(server: SecureServer, names: tuple[str, ...] | None, *,
                  user: str | None) -> DescribeUserScramCredentialsResponse:
    """DescribeUserScramCredentials sent bare: as ``user`` (PLAIN, on SASL_PLAINTEXT) or as
    ANONYMOUS on PLAINTEXT (None)."""
    listener = "PLAINTEXT" if user is None else "SASL_PLAINTEXT"
    with socket.create_connection(("127.0.0.1", server.bound[listener]["port"]),
                                  timeout=10) as sock:
        if user is not None:
            send_request(sock, SaslHandshakeRequest(mechanism="PLAIN"), SaslHandshakeResponse)
            token = f"\0{user}\0{user}-secret".encode()
            assert send_request(sock, SaslAuthenticateRequest(auth_bytes=token),
                                SaslAuthenticateResponse, 2).error_code == ErrorCode.none
        request = DescribeUserScramCredentialsRequest(
            users=None if names is None else tuple(UserName(name=n) for n in names))
        answer: DescribeUserScramCredentialsResponse = send_request(
            sock, request, DescribeUserScramCredentialsResponse, 3)
        return answer


def test_describing_one_user_twice_is_a_duplicate(admin_server: SecureServer) -> None:
    # The admin client would not send a name twice: the request goes bare
    answer = wire_describe(admin_server, ("x", "x", "y"), user="admin")
    assert answer.error_code == ErrorCode.none
    assert [(r.user, r.error_code) for r in answer.results] == [
        ("x", ErrorCode.duplicate_resource), ("y", ErrorCode.resource_not_found)]


@pytest.mark.parametrize("user", [None, "alice"])
def test_without_cluster_alter_or_describe_a_principal_is_refused(
        admin_server: SecureServer, user: str | None) -> None:
    admin = admin_as(admin_server, user)
    assert alter(admin, [upsert("mallory")]) == {
        "mallory": KafkaError.CLUSTER_AUTHORIZATION_FAILED}
    with pytest.raises(KafkaException) as refused:
        describe(admin, ["mallory"])["mallory"].result(timeout=15)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # Describing every user: the error at the top (bare: librdkafka 2.16 crashes on a
    # top-level error in this answer)
    every = wire_describe(admin_server, None, user=user)
    assert every.error_code == ErrorCode.cluster_authorization_failed
    assert every.results == ()


def test_a_client_certificates_dn_is_the_principal_the_authorizer_sees(
        admin_server: SecureServer, pki: Pki) -> None:
    admin = admin_as(admin_server, None, pki)  # User:CN=client is a super user
    assert alter(admin, [upsert("dave")]) == {"dave": 0}
    assert "dave" in describe(admin, None).result(timeout=15)


def test_only_salted_credentials_are_stored(admin_server: SecureServer) -> None:
    admin = admin_as(admin_server, "admin")
    assert alter(admin, [upsert("erin", password=b"erin-clear-text")]) == {"erin": 0}
    store_dir = Path(admin_server.process.data_dir) / "__security"
    stored = ScramCredentialStore.in_directory(store_dir)
    assert stored.describe(["erin"]) == {"erin": [("SCRAM-SHA-512", 8192)]}
    for path in store_dir.rglob("*"):
        if path.is_file():
            assert b"erin-clear-text" not in path.read_bytes(), path
