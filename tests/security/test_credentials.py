"""SCRAM credentials in the cluster store (tierlog.security.credentials), on a local directory
and on moto's S3 through the same tests: upsert, describe and delete as Kafka's
AlterUserScramCredentials/DescribeUserScramCredentials need them, Kafka's errors for what its
controller refuses, an exchange authenticated from the stored credential, concurrent changes
all kept, and nothing on disk that holds the password or the salted password."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import pytest
from kafka.net.sasl.scram import ScramClient

from tierlog.cluster.store import MetadataStore
from tierlog.errors import (
    CorruptRemoteMetadataError,
    CredentialNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tierlog.security.credentials import (
    MAX_USER_BYTES,
    ScramCredentialStore,
    credential_key,
)
from tierlog.security.scram import ScramCredential, ScramServer, salted_password

PASSWORD = "p4ss-w0rd-of-alice"
SALT = b"salt-of-alice-0123456789"


def upsert(credentials: ScramCredentialStore, user: str, mechanism: str,
           iterations: int = 4096, password: str = PASSWORD) -> None:
    """What confluent-kafka's alter_user_scram_credentials sends: the salted password."""
    credentials.upsert(user, mechanism, SALT,
                       salted_password(mechanism, password, SALT, iterations), iterations)


def test_upsert_describe_delete(store: MetadataStore) -> None:
    credentials = ScramCredentialStore(store)
    assert credentials.describe() == {}
    upsert(credentials, "alice", "SCRAM-SHA-512", 8192)
    upsert(credentials, "alice", "SCRAM-SHA-256")
    upsert(credentials, "bob", "SCRAM-SHA-256")
    assert credentials.describe() == {
        "alice": [("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)],
        "bob": [("SCRAM-SHA-256", 4096)]}
    # An unknown user is left out: the handler answers it RESOURCE_NOT_FOUND.
    assert credentials.describe(["bob", "carol", "bob", ""]) == {
        "bob": [("SCRAM-SHA-256", 4096)]}
    upsert(credentials, "alice", "SCRAM-SHA-512", 16384)  # a new password replaces the old
    credentials.delete("alice", "SCRAM-SHA-256")
    credentials.delete("bob", 1)  # Kafka's admin-API number of SCRAM-SHA-256
    assert credentials.describe() == {"alice": [("SCRAM-SHA-512", 16384)]}
    assert credentials.lookup("bob", "SCRAM-SHA-256") is None
    assert credentials.lookup("alice", "SCRAM-SHA-512") == ScramCredential.from_password(
        "SCRAM-SHA-512", PASSWORD, salt=SALT, iterations=16384)


def test_deleting_a_missing_credential_is_resource_not_found(store: MetadataStore) -> None:
    credentials = ScramCredentialStore(store)
    with pytest.raises(CredentialNotFoundError, match=r"does not exist.*'alice'.*SCRAM-SHA-256"):
        credentials.delete("alice", "SCRAM-SHA-256")
    upsert(credentials, "alice", "SCRAM-SHA-512")
    with pytest.raises(CredentialNotFoundError, match="SCRAM-SHA-256"):
        credentials.delete("alice", "SCRAM-SHA-256")
    assert credentials.describe() == {"alice": [("SCRAM-SHA-512", 4096)]}


@pytest.mark.parametrize(("user", "mechanism", "iterations", "error", "why"), [
    ("", "SCRAM-SHA-256", 4096, UnacceptableCredentialError, "Username must not be empty"),
    ("alice", "SCRAM-SHA-1", 4096, UnsupportedSaslMechanismError, "SCRAM-SHA-1"),
    ("alice", "SCRAM-SHA-256", 4095, UnacceptableCredentialError, "Too few iterations"),
    ("alice", "SCRAM-SHA-256", 16385, UnacceptableCredentialError, "Too many iterations"),
    ("é" * (MAX_USER_BYTES // 2 + 1), "SCRAM-SHA-256", 4096, UnacceptableCredentialError,
     "bytes of UTF-8"),
])
def test_what_kafkas_controller_refuses(tmp_path: Path, user: str, mechanism: str,
                                        iterations: int, error: type[Exception],
                                        why: str) -> None:
    credentials = ScramCredentialStore.in_directory(tmp_path / "cluster")
    with pytest.raises(error, match=why) as refused:
        credentials.upsert(user, mechanism, SALT, b"\1" * 32, iterations)
    assert PASSWORD not in str(refused.value)
    assert credentials.describe() == {}


def test_a_salt_and_salted_password_of_the_mechanism(tmp_path: Path) -> None:
    credentials = ScramCredentialStore.in_directory(tmp_path / "cluster")
    with pytest.raises(UnacceptableCredentialError, match="empty salt"):
        credentials.upsert("alice", "SCRAM-SHA-256", b"", b"\1" * 32, 4096)
    with pytest.raises(UnacceptableCredentialError, match="32 bytes, not the 64"):
        credentials.upsert("alice", "SCRAM-SHA-512", SALT, b"\1" * 32, 4096)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_an_exchange_authenticates_from_the_stored_credential(store: MetadataStore,
                                                              mechanism: str) -> None:
    credentials = ScramCredentialStore(store)
    upsert(credentials, "alice", mechanism)
    # A reader of the same store (another node) looks it up.
    scram = ScramServer(mechanism, ScramCredentialStore(store).lookup)
    client = ScramClient("alice", PASSWORD, mechanism)
    client.process_server_first_message(scram.evaluate(client.first_message()))
    client.process_server_final_message(scram.evaluate(client.final_message()))
    assert scram.principal == "alice"


def test_user_names_any_utf8_each_its_own_key(tmp_path: Path) -> None:
    credentials = ScramCredentialStore.in_directory(tmp_path / "cluster")
    names = ["a", "A", "a/b", "..", "用户", "a,b=c", "é" * (MAX_USER_BYTES // 2)]
    for name in names:
        upsert(credentials, name, "SCRAM-SHA-256")
    assert sorted(credentials.describe()) == sorted(names)
    assert len({credential_key(name) for name in names}) == len(names)


def test_concurrent_changes_of_one_user_are_all_kept(tmp_path: Path) -> None:
    credentials = ScramCredentialStore.in_directory(tmp_path / "cluster")
    mechanisms = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    barrier = threading.Barrier(len(mechanisms))

    def add(mechanism: str) -> None:
        barrier.wait(timeout=10)
        upsert(credentials, "alice", mechanism)

    threads = [threading.Thread(target=add, args=(m,)) for m in mechanisms]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert credentials.describe() == {"alice": [(m, 4096) for m in mechanisms]}


def test_no_file_holds_the_password_or_the_salted_password(tmp_path: Path) -> None:
    credentials = ScramCredentialStore.in_directory(tmp_path / "cluster")
    secrets = []
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        upsert(credentials, "alice", mechanism)
        salted = salted_password(mechanism, PASSWORD, SALT, 4096)
        secrets += [salted, base64.b64encode(salted), salted.hex().encode()]
    secrets += [PASSWORD.encode(), base64.b64encode(PASSWORD.encode())]
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert files
    for path in files:
        data = path.read_bytes()
        assert not [s for s in secrets if s in data], path
    assert PASSWORD not in repr(credentials.lookup("alice", "SCRAM-SHA-256"))


def test_a_damaged_object_is_named(store: MetadataStore) -> None:
    credentials = ScramCredentialStore(store)
    store.create(credential_key("alice"), {"user": "bob", "mechanisms": {}})
    with pytest.raises(CorruptRemoteMetadataError, match="scram-credentials/u_"):
        credentials.lookup("alice", "SCRAM-SHA-256")
    store.create(credential_key("carol"),
                 {"user": "carol", "mechanisms": {"SCRAM-SHA-256": "salt=**,iterations=x"}})
    with pytest.raises(CorruptRemoteMetadataError, match="holds fields"):
        credentials.lookup("carol", "SCRAM-SHA-256")
