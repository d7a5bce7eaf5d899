"""``tierlog acls`` (kafka-acls.sh) against a real ``tierlog serve`` with an authorizer, the
client a super user: ``--add`` with kafka-acls' options (principals, hosts, operations,
resources, pattern types, the --producer/--consumer shortcuts), ``--list`` as kafka-acls
prints it, ``--remove``; a client without ALTER/DESCRIBE on the cluster and a server without an
authorizer are refused in one line; bad options are named."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("confluent_kafka")

from support.acl_wire import AUTHORIZER, PRINCIPAL
from support.server_process import ServerProcess

from tierlog.cli import main

#: The module's server: a super user's (every CLI client is User:ANONYMOUS).
SERVER_CONFIG = {**AUTHORIZER, "super.users": PRINCIPAL}


def acls(capsys: pytest.CaptureFixture[str], server: ServerProcess,
         *args: str) -> tuple[int, str, str]:
    code = main(["acls", "--bootstrap-server", server.bootstrap, *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def _listed(out: str) -> dict[str, set[str]]:
    """kafka-acls' --list output: resource pattern -> its entries."""
    found: dict[str, set[str]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("Current ACLs for resource `"):
            current = line.split("`")[1]
            found[current] = set()
        elif line.strip().startswith("(principal=") and current:
            found[current].add(line.strip())
    return found


ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"


def _entry(principal: str, operation: str, permission: str = "ALLOW", host: str = "*") -> str:
    return (f"(principal={principal}, host={host}, operation={operation}, "
            f"permissionType={permission})")


def test_add_list_and_remove_with_kafka_acls_options(
        capsys: pytest.CaptureFixture[str], server: ServerProcess) -> None:
    code, out, err = acls(capsys, server, "--add", "--allow-principal", "User:alice",
                          "--operation", "Read", "--operation", "Describe", "--topic", "orders")
    assert code == 0, err
    assert "Adding ACLs for resource `" + ORDERS in out
    assert _listed(out)[ORDERS] == {_entry("User:alice", "READ"),
                                    _entry("User:alice", "DESCRIBE")}
    code, out, err = acls(capsys, server, "--add", "--deny-principal", "User:mallory",
                          "--deny-host", "10.0.0.7", "--operation", "All", "--topic", "ord",
                          "--resource-pattern-type", "prefixed")
    assert code == 0, err
    code, out, err = acls(capsys, server, "--add", "--consumer", "--allow-principal", "User:bob",
                          "--topic", "orders", "--group", "billing")
    assert code == 0, err
    code, out, err = acls(capsys, server, "--list")
    assert code == 0, err
    assert _listed(out) == {
        ORDERS: {_entry("User:alice", "READ"), _entry("User:alice", "DESCRIBE"),
                 _entry("User:bob", "READ"), _entry("User:bob", "DESCRIBE")},
        "ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)": {
            _entry("User:mallory", "ALL", "DENY", "10.0.0.7")},
        "ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)": {
            _entry("User:bob", "READ")}}
    # MATCH: every ACL that applies to the topic orders, the prefixed DENY included
    code, out, _ = acls(capsys, server, "--list", "--topic", "orders",
                        "--resource-pattern-type", "match", "--principal", "User:mallory")
    assert list(_listed(out)) == [
        "ResourcePattern(resourceType=TOPIC, name=ord, patternType=PREFIXED)"]
    code, out, err = acls(capsys, server, "--remove", "--allow-principal", "User:alice",
                          "--operation", "Read", "--topic", "orders")
    assert (code, out.strip()) == (0, "Removed 1 ACL(s)."), err
    code, out, err = acls(capsys, server, "--remove", "--topic", "orders", "--force")
    assert (code, out.strip()) == (0, "Removed 3 ACL(s)."), err
    code, out, err = acls(capsys, server, "--list", "--topic", "orders")
    assert (code, _listed(out)) == (0, {}) and err.startswith("No ACLs found.")


def test_cluster_acls_are_added_with_cluster(capsys: pytest.CaptureFixture[str],
                                             server: ServerProcess) -> None:
    code, _, err = acls(capsys, server, "--add", "--allow-principal", "User:ops",
                        "--operation", "ClusterAction", "--operation", "IdempotentWrite",
                        "--cluster")
    assert code == 0, err
    code, out, _ = acls(capsys, server, "--list", "--cluster")
    cluster = "ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)"
    assert _listed(out) == {cluster: {_entry("User:ops", "CLUSTER_ACTION"),
                                      _entry("User:ops", "IDEMPOTENT_WRITE")}}


@pytest.mark.parametrize(("args", "expected"), [
    (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"],
     "--operation 'Fly' is not one of Kafka's operations"),
    (["--add", "--allow-principal", "User:a", "--operation", "IdempotentWrite",
      "--topic", "t"], "--operation IdempotentWrite: a TOPIC has only"),
    (["--add", "--allow-principal", "alice", "--topic", "t"],
     "principal 'alice' is not of the form Type:name"),
    (["--add", "--allow-principal", "User:a"], "--add needs a resource"),
    (["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
      "match"], "--resource-pattern-type 'match': expected one of LITERAL, PREFIXED"),
    (["--add", "--consumer", "--allow-principal", "User:a", "--topic", "t"],
     "--consumer needs --topic and --group"),
])
def test_bad_options_are_named(capsys: pytest.CaptureFixture[str], server: ServerProcess,
                               args: list[str], expected: str) -> None:
    code, out, err = acls(capsys, server, *args)
    assert (code, out) == (1, "")
    assert err.startswith("tierlog: error: ") and expected in err, err


@pytest.fixture
def no_super_user(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with ServerProcess(tmp_path_factory.mktemp("acls-denied"), AUTHORIZER) as proc:
        yield proc.start()


def test_a_client_without_alter_on_the_cluster_is_refused_in_one_line(
        capsys: pytest.CaptureFixture[str], no_super_user: ServerProcess) -> None:
    code, out, err = acls(capsys, no_super_user, "--add", "--allow-principal", "User:a",
                          "--topic", "t")
    assert (code, out) == (1, "")
    assert err.startswith("tierlog: error: adding (principal=User:a, host=*, operation=ALL, "
                          "permissionType=ALLOW) on ResourcePattern(resourceType=TOPIC, name=t, "
                          "patternType=LITERAL): ") and err.count("\n") == 1, err
    assert "CLUSTER_AUTHORIZATION_FAILED" in err
    code, _, err = acls(capsys, no_super_user, "--remove", "--topic", "t")
    assert code == 1 and "CLUSTER_AUTHORIZATION_FAILED" in err, err
    # librdkafka drops a DescribeAcls' error code (the server answers it: the ACL matrix test):
    # the listing is empty, and says what that may mean
    code, out, err = acls(capsys, no_super_user, "--list")
    assert (code, out) == (0, "") and "may not DESCRIBE the cluster" in err


def test_a_server_without_an_authorizer_says_so(capsys: pytest.CaptureFixture[str],
                                                tmp_path_factory: pytest.TempPathFactory
                                                ) -> None:
    with ServerProcess(tmp_path_factory.mktemp("acls-none")) as proc:
        code, _, err = acls(capsys, proc.start(), "--add", "--allow-principal", "User:a",
                            "--topic", "t")
    assert code == 1 and "SECURITY_DISABLED" in err, err
