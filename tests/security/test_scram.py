"""SCRAM-SHA-256/512 (tierlog.security.scram): RFC 7677's test vector byte for byte, whole
exchanges driven by kafka-python's own SCRAM client, and every refusal (wrong password, unknown
user, tampered nonce or proof, channel binding, tokenauth) one SaslAuthenticationError whose
message holds no secret."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from kafka.net.sasl.scram import ScramClient

from tierlog.errors import SaslAuthenticationError, UnsupportedSaslMechanismError
from tierlog.security.scram import (
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    ScramCredential,
    ScramServer,
    salted_password,
    scram_mechanism,
)

MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORD = "tr0ub4dor&3"

# RFC 7677, section 3.
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
RFC_CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def users(**passwords: str) -> dict[tuple[str, str], ScramCredential]:
    return {(user, mechanism): ScramCredential.from_password(mechanism, password)
            for user, password in passwords.items() for mechanism in MECHANISMS}


def server(mechanism: str, credentials: dict[tuple[str, str], ScramCredential]) -> ScramServer:
    return ScramServer(mechanism, lambda user, mech: credentials.get((user, mech)))


def test_rfc_7677_vector_byte_for_byte() -> None:
    credential = ScramCredential.from_password("SCRAM-SHA-256", "pencil", salt=RFC_SALT,
                                               iterations=4096)
    scram = ScramServer("SCRAM-SHA-256", lambda user, mech: credential if user == "user" else None,
                        nonce_factory=lambda: RFC_SERVER_NONCE)
    assert scram.first(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not scram.complete
    assert scram.final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert scram.complete and scram.principal == "user"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_pythons_client_authenticates(mechanism: str) -> None:
    scram = server(mechanism, users(alice=PASSWORD))
    client = ScramClient("alice", PASSWORD, mechanism)
    client.process_server_first_message(scram.evaluate(client.first_message()))
    # kafka-python raises on a server signature that is not the one its password gives.
    client.process_server_final_message(scram.evaluate(client.final_message()))
    assert scram.principal == "alice"


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_credential_from_the_admin_apis_salted_password_is_the_passwords(
        mechanism: str) -> None:
    salt = b"0123456789abcdef"
    salted = salted_password(mechanism, PASSWORD, salt, 8192)
    assert ScramCredential.from_salted_password(mechanism, salt, salted, 8192) == \
        ScramCredential.from_password(mechanism, PASSWORD, salt=salt, iterations=8192)


def failed_exchange(scram: ScramServer, client: ScramClient) -> SaslAuthenticationError:
    client.process_server_first_message(scram.first(client.first_message()))
    with pytest.raises(SaslAuthenticationError) as failed:
        scram.final(client.final_message())
    assert not scram.complete
    return failed.value


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_and_an_unknown_user_fail_alike(mechanism: str) -> None:
    credentials = users(alice=PASSWORD)
    wrong = failed_exchange(server(mechanism, credentials),
                            ScramClient("alice", "guess", mechanism))
    unknown = failed_exchange(server(mechanism, credentials),
                              ScramClient("mallory", PASSWORD, mechanism))
    assert str(wrong) == str(unknown) == (
        f"Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}")
    for secret in (PASSWORD, "guess"):
        assert secret not in str(wrong) and secret not in str(unknown)


def test_an_unknown_user_is_answered_like_a_known_one() -> None:
    # Same step, same shape, and the same salt on every try (a real user's never changes).
    credentials = users(alice=PASSWORD)
    answers = [dict(part.split("=", 1) for part in
                    server("SCRAM-SHA-256", credentials).first(b"n,,n=%s,r=abc" % name)
                    .decode().split(","))
               for name in (b"mallory", b"mallory", b"alice")]
    assert answers[0]["s"] == answers[1]["s"] != answers[2]["s"]
    assert len(base64.b64decode(answers[0]["s"])) == len(base64.b64decode(answers[2]["s"]))
    assert answers[0]["i"] == answers[2]["i"] == str(MIN_ITERATIONS)


def test_the_proof_is_checked_after_a_tampered_nonce_or_proof() -> None:
    credentials = users(alice=PASSWORD)
    def flip_a_proof_bit(message: bytes) -> bytes:
        head, _, proof = message.rpartition(b",p=")
        flipped = bytearray(base64.b64decode(proof))
        flipped[0] ^= 1
        return head + b",p=" + base64.b64encode(flipped)

    for tamper in (lambda m: m.replace(b",r=", b",r=x"), flip_a_proof_bit):
        scram = server("SCRAM-SHA-256", credentials)
        client = ScramClient("alice", PASSWORD, "SCRAM-SHA-256")
        client.process_server_first_message(scram.first(client.first_message()))
        final = client.final_message()
        with pytest.raises(SaslAuthenticationError) as failed:
            scram.final(tamper(final))
        assert final.rpartition(b"p=")[2].decode() not in str(failed.value)
        # A failed exchange is over: not even the genuine message is taken now.
        with pytest.raises(SaslAuthenticationError, match="out of order"):
            scram.final(final)


def test_a_tampered_nonce_is_named() -> None:
    scram = server("SCRAM-SHA-256", users(alice=PASSWORD))
    client = ScramClient("alice", PASSWORD, "SCRAM-SHA-256")
    client.process_server_first_message(scram.first(client.first_message()))
    head, _, proof = client.final_message().rpartition(b",p=")
    with pytest.raises(SaslAuthenticationError, match="Invalid client nonce"):
        scram.final(head + b"x,p=" + proof)  # no longer ends with the server-first nonce


def test_librdkafkas_builtin_scram_is_understood() -> None:
    """librdkafka's builtin SCRAM (kcat; librdkafka 2.0 and older) sends the client nonce twice
    in its final message (``r=<client nonce><client nonce><server nonce>``), its proof computed
    over that; Kafka's broker takes it (it asks only that the nonce end with the server-first
    one), and so does tierlog. The client side here is hashlib's, independent of tierlog."""
    scram = server("SCRAM-SHA-512", users(alice=PASSWORD))
    client_nonce = "fyko+d2lbbFgONRv9qkxdawL"
    bare = f"n=alice,r={client_nonce}"
    server_first = scram.first(f"n,,{bare}".encode()).decode()
    fields = dict(f.split("=", 1) for f in server_first.split(","))
    salted = hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), base64.b64decode(fields["s"]),
                                 int(fields["i"]))
    client_key = hmac.new(salted, b"Client Key", "sha512").digest()
    without_proof = f"c=biws,r={client_nonce}{fields['r']}"
    auth = f"{bare},{server_first},{without_proof}".encode()
    signature = hmac.new(hashlib.sha512(client_key).digest(), auth, "sha512").digest()
    proof = bytes(k ^ s for k, s in zip(client_key, signature, strict=True))
    answer = scram.final(f"{without_proof},p={base64.b64encode(proof).decode()}".encode())
    server_key = hmac.new(salted, b"Server Key", "sha512").digest()
    assert answer == b"v=" + base64.b64encode(hmac.new(server_key, auth, "sha512").digest())
    assert scram.complete and scram.principal == "alice"


@pytest.mark.parametrize(("client_first", "why"), [
    (b"p=tls-unique,,n=alice,r=abc", "channel binding is not supported"),
    (b"y,,n=alice,r=abc", "channel binding is not supported"),
    (b"n,,n=alice,r=abc,tokenauth=true", "delegation tokens"),
    (b"n,,m=ext,n=alice,r=abc", "mandatory extensions"),
    (b"n,a=bob,n=alice,r=abc", "authorization id that is different from username"),
    (b"n,,n=al=ice,r=abc", "=2C or =3D"),
    (b"n,,n=,r=abc", "user name is empty"),
    (b"n,,n=alice,r=", "client nonce"),
    (b"n,,n=alice", "n=<user>,r=<nonce>"),
    (b"alice", "gs2 header"),
    (b"n,,n=\xff,r=abc", "not UTF-8"),
])
def test_a_client_first_message_refused(client_first: bytes, why: str) -> None:
    scram = server("SCRAM-SHA-256", users(alice=PASSWORD))
    with pytest.raises(SaslAuthenticationError, match=why):
        scram.first(client_first)
    with pytest.raises(SaslAuthenticationError, match="out of order"):
        scram.first(b"n,,n=alice,r=abc")


def test_channel_binding_data_must_be_the_gs2_header() -> None:
    scram = server("SCRAM-SHA-256", users(alice=PASSWORD))
    client = ScramClient("alice", PASSWORD, "SCRAM-SHA-256")
    client.process_server_first_message(scram.first(client.first_message()))
    final = client.final_message().replace(b"c=biws", b"c=" + base64.b64encode(b"y,,"))
    with pytest.raises(SaslAuthenticationError, match="channel binding"):
        scram.final(final)


def client_final(header: bytes, bare: bytes, server_first: bytes, password: str) -> bytes:
    """RFC 5802's client-final message for SCRAM-SHA-256, computed here by hand (kafka-python's
    client writes neither an authzid nor escaped names)."""
    fields = dict(part.split(b"=", 1) for part in server_first.split(b","))
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(fields[b"s"]),
                                 int(fields[b"i"]))
    client_key = hmac.new(salted, b"Client Key", "sha256").digest()
    without_proof = b"c=" + base64.b64encode(header) + b",r=" + fields[b"r"]
    auth_message = bare + b"," + server_first + b"," + without_proof
    signature = hmac.new(hashlib.sha256(client_key).digest(), auth_message, "sha256").digest()
    proof = bytes(k ^ s for k, s in zip(client_key, signature, strict=True))
    return without_proof + b",p=" + base64.b64encode(proof)


def test_escaped_user_names_and_a_matching_authzid() -> None:
    name = "a,b=c"
    credentials = {(name, "SCRAM-SHA-256"): ScramCredential.from_password("SCRAM-SHA-256",
                                                                          PASSWORD)}
    scram = server("SCRAM-SHA-256", credentials)
    header, bare = b"n,a=a=2Cb=3Dc,", b"n=a=2Cb=3Dc,r=abc"
    server_first = scram.first(header + bare)
    scram.final(client_final(header, bare, server_first, PASSWORD))
    assert scram.principal == name


def test_a_credential_below_the_minimum_iterations_is_refused() -> None:
    weak = ScramCredential.from_password("SCRAM-SHA-256", PASSWORD, iterations=1024)
    scram = ScramServer("SCRAM-SHA-256", lambda user, mech: weak)
    with pytest.raises(SaslAuthenticationError, match="Iterations 1024 is less than the "
                                                      "minimum 4096"):
        scram.first(b"n,,n=alice,r=abc")


def test_the_principal_only_after_completion_and_no_secret_in_repr() -> None:
    scram = server("SCRAM-SHA-512", users(alice=PASSWORD))
    with pytest.raises(SaslAuthenticationError, match="not completed"):
        _ = scram.principal
    credential = ScramCredential.from_password("SCRAM-SHA-512", PASSWORD)
    assert repr(credential) == "ScramCredential(iterations=4096)"


def test_mechanisms_by_name_and_by_kafkas_admin_api_number() -> None:
    assert scram_mechanism("SCRAM-SHA-256") is scram_mechanism(1) is SCRAM_SHA_256
    assert scram_mechanism(2).name == "SCRAM-SHA-512"
    for unknown in ("SCRAM-SHA-1", 0, True):
        with pytest.raises(UnsupportedSaslMechanismError, match="SCRAM-SHA-256, SCRAM-SHA-512"):
            scram_mechanism(unknown)
