"""The ACL matrix (issue 25): for every API a real ``tierlog serve`` with an authorizer serves
(read from its ApiVersions, so an API added without a row here fails the test), a client
without the ACL it needs is refused with Kafka's error and one with exactly that ACL is served.

Until the listeners authenticate, every client is ``User:ANONYMOUS``; the two clients of a
row are told apart by their host (each connects from its own loopback address, and the ACLs
of the row name the granted one). The ACLs are created over the wire (CreateAcls) while
``super.users=User:ANONYMOUS``, then the server restarts without it: they are durable."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.add_offsets_to_txn.v3 import request as add_offsets
from kio.schema.add_partitions_to_txn.v3 import request as add_partitions
from kio.schema.alter_user_scram_credentials.v0 import request as alter_scram
from kio.schema.api_versions.v3 import request as api_versions
from kio.schema.create_acls.v3 import request as create_acls_v3
from kio.schema.create_partitions.v3 import request as create_partitions
from kio.schema.delete_acls.v3 import request as delete_acls
from kio.schema.delete_groups.v2 import request as delete_groups
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.describe_configs.v4 import request as describe_configs
from kio.schema.describe_groups.v5 import request as describe_groups
from kio.schema.describe_user_scram_credentials.v0 import request as describe_scram
from kio.schema.end_txn.v3 import request as end_txn
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4 import request as find_coordinator
from kio.schema.heartbeat.v4 import request as heartbeat
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.init_producer_id.v4 import request as init_producer_id
from kio.schema.join_group.v5 import request as join_group
from kio.schema.leave_group.v4 import request as leave_group
from kio.schema.list_groups.v4 import request as list_groups
from kio.schema.list_offsets.v7 import request as list_offsets
from kio.schema.metadata.v10 import request as metadata_v10
from kio.schema.offset_delete.v0 import request as offset_delete
from kio.schema.offset_fetch.v8 import request as offset_fetch
from kio.schema.offset_for_leader_epoch.v4 import request as leader_epoch
from kio.schema.sasl_authenticate.v2 import request as sasl_authenticate
from kio.schema.sasl_handshake.v1 import request as sasl_handshake
from kio.schema.sync_group.v5 import request as sync_group
from kio.schema.txn_offset_commit.v3 import request as txn_offset_commit
from kio.schema.write_txn_markers.v1 import request as write_txn_markers
from support.acl_wire import (
    AUTH_FAILURES,
    AUTHORIZER,
    PRINCIPAL,
    acl,
    commit_request,
    create_acls,
    create_topic_request,
    error_codes,
    fetch_request,
    metadata_request,
    produce_request,
    send,
)
from support.hostile_frames import served_versions
from support.secure_server import SecureServer
from support.server_process import ServerProcess

from tierlog.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from tierlog.server.authorization import REQUIRED

TOPIC, GROUP, TXN = "orders", "readers", "tx-1"
#: Resources one row changes for good (so the other rows keep theirs).
DOOMED, GROWING, FRESH, OLD_GROUP, JOINERS = "doomed", "growing", "fresh", "old-group", "joiners"
#: The host that sets the server up (a super user's, before the restart).
SETUP = "127.0.0.1"
#: Two hosts with CREATE on the cluster: one may DESCRIBE the topic too.
BLIND, SEEING = "127.0.3.1", "127.0.3.2"
_T, _G, _C, _X = (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                  ResourceType.TRANSACTIONAL_ID)
_Op = AclOperation
_MS = datetime.timedelta(milliseconds=1)
_TOPIC_DENIED, _GROUP_DENIED = ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed
_CLUSTER_DENIED = ErrorCode.cluster_authorization_failed
_TXN_DENIED = ErrorCode.transactional_id_authorization_failed
#: What a row's client gets: ACLs as (resource type, name, operation).
Grants = tuple[tuple[ResourceType, str, AclOperation], ...]


def _init_producer_id(transactional_id: str | None) -> init_producer_id.InitProducerIdRequest:
    return init_producer_id.InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout=60_000 * _MS, producer_id=-1,
        producer_epoch=-1)


def _acl_filter(host: str) -> delete_acls.DeleteAclsFilter:
    return delete_acls.DeleteAclsFilter(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=host, operation=1, permission_type=1)


def _listed(answer: Any) -> set[str]:
    return {g.group_id for g in answer.groups}


@dataclass(frozen=True)
class Case:
    """One row: an API's request; the ACLs its granted client gets (``grants``) and those
    both clients get (``base``); the error the other answers (None: the API needs no ACL)
    and the codes the granted one may answer besides NONE (errors of the request's content,
    not of authorization). ``check`` replaces the code checks for an API that filters."""

    name: str
    request: Callable[[], object]
    grants: Grants
    denied: ErrorCode | None
    ok: frozenset[ErrorCode] = frozenset()
    base: Grants = ()
    check: Callable[[Any, Any], None] | None = None

    @property
    def api_key(self) -> int:
        return int(type(self.request()).__api_key__)  # type: ignore[attr-defined]


def _check_list_groups(without: Any, granted: Any) -> None:
    assert without.error_code == ErrorCode.none and GROUP not in _listed(without)
    assert _listed(granted) == {GROUP}  # only the group it may describe


def _check_describe_groups(without: Any, granted: Any) -> None:
    assert [(g.group_id, g.error_code) for g in without.groups] == [(GROUP, _GROUP_DENIED)]
    assert [(g.error_code, g.authorized_operations) for g in granted.groups] == [
        (ErrorCode.none, 1 << _Op.DESCRIBE)]  # what it may do on the group: DESCRIBE only


CASES = (
    Case("produce", lambda: produce_request(TOPIC), ((_T, TOPIC, _Op.WRITE),), _TOPIC_DENIED),
    Case("transactional produce", lambda: produce_request(TOPIC, TXN), ((_X, TXN, _Op.WRITE),), _TXN_DENIED,
         ok=frozenset({ErrorCode.unknown_producer_id, ErrorCode.invalid_producer_epoch,
                       ErrorCode.invalid_txn_state, ErrorCode.out_of_order_sequence_number}),
         base=((_T, TOPIC, _Op.WRITE),)),
    Case("consumer fetch", lambda: fetch_request(TOPIC), ((_T, TOPIC, _Op.READ),), _TOPIC_DENIED),
    Case("follower fetch", lambda: fetch_request(TOPIC, replica_id=1),
         ((_C, CLUSTER_NAME, _Op.CLUSTER_ACTION),), _TOPIC_DENIED, base=((_T, TOPIC, _Op.READ),)),
    Case("list offsets", lambda: list_offsets.ListOffsetsRequest(
        replica_id=-1, isolation_level=0, topics=(list_offsets.ListOffsetsTopic(
            name=TOPIC, partitions=(list_offsets.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1),)),)),
         ((_T, TOPIC, _Op.DESCRIBE),), _TOPIC_DENIED),
    Case("metadata of a named topic", lambda: metadata_request((TOPIC,)),
         ((_T, TOPIC, _Op.DESCRIBE),), _TOPIC_DENIED),
    Case("offset commit", lambda: commit_request(GROUP, TOPIC), ((_G, GROUP, _Op.READ), (_T, TOPIC, _Op.READ)),
         _GROUP_DENIED),
    Case("offset commit of a topic it may not read", lambda: commit_request(GROUP, TOPIC), ((_T, TOPIC, _Op.READ),),
         _TOPIC_DENIED, base=((_G, GROUP, _Op.READ),)),
    Case("offset fetch", lambda: offset_fetch.OffsetFetchRequest(groups=(
        offset_fetch.OffsetFetchRequestGroup(group_id=GROUP, topics=(
            offset_fetch.OffsetFetchRequestTopics(name=TOPIC, partition_indexes=(0,)),)),),
        require_stable=False),
         ((_G, GROUP, _Op.DESCRIBE), (_T, TOPIC, _Op.DESCRIBE)), _GROUP_DENIED),
    Case("find a group's coordinator", lambda: find_coordinator.FindCoordinatorRequest(
        key_type=0, coordinator_keys=(GROUP,)), ((_G, GROUP, _Op.DESCRIBE),), _GROUP_DENIED),
    Case("find a transaction's coordinator", lambda: find_coordinator.FindCoordinatorRequest(
        key_type=1, coordinator_keys=(TXN,)), ((_X, TXN, _Op.DESCRIBE),), _TXN_DENIED),
    Case("join group", lambda: join_group.JoinGroupRequest(
        group_id=JOINERS, session_timeout=10_000 * _MS, rebalance_timeout=10_000 * _MS,
        member_id="", group_instance_id=None, protocol_type="consumer",
        protocols=(join_group.JoinGroupRequestProtocol(name="range", metadata=b""),)),
         ((_G, JOINERS, _Op.READ),), _GROUP_DENIED,
         ok=frozenset({ErrorCode.member_id_required})),
    Case("heartbeat", lambda: heartbeat.HeartbeatRequest(
        group_id=GROUP, generation_id=0, member_id="m", group_instance_id=None),
         ((_G, GROUP, _Op.READ),), _GROUP_DENIED,
         ok=frozenset({ErrorCode.unknown_member_id, ErrorCode.illegal_generation})),
    Case("leave group", lambda: leave_group.LeaveGroupRequest(
        group_id=GROUP, members=(leave_group.MemberIdentity(member_id="m",
                                                            group_instance_id=None),)),
         ((_G, GROUP, _Op.READ),), _GROUP_DENIED, ok=frozenset({ErrorCode.unknown_member_id})),
    Case("sync group", lambda: sync_group.SyncGroupRequest(
        group_id=GROUP, generation_id=0, member_id="m", group_instance_id=None,
        protocol_type="consumer", protocol_name="range", assignments=()),
         ((_G, GROUP, _Op.READ),), _GROUP_DENIED,
         ok=frozenset({ErrorCode.unknown_member_id, ErrorCode.illegal_generation})),
    Case("describe groups", lambda: describe_groups.DescribeGroupsRequest(
        groups=(GROUP,), include_authorized_operations=True),
         ((_G, GROUP, _Op.DESCRIBE),), _GROUP_DENIED, check=_check_describe_groups),
    Case("list groups", lambda: list_groups.ListGroupsRequest(states_filter=()),
         ((_G, GROUP, _Op.DESCRIBE),), None, check=_check_list_groups),
    # A PLAINTEXT listener has no SASL exchange to take part in, whoever asks.
    Case("sasl handshake", lambda: sasl_handshake.SaslHandshakeRequest(mechanism="PLAIN"), (),
         None, ok=frozenset({ErrorCode.illegal_sasl_state})),
    Case("sasl authenticate", lambda: sasl_authenticate.SaslAuthenticateRequest(auth_bytes=b""),
         (), None, ok=frozenset({ErrorCode.illegal_sasl_state})),
    Case("api versions", lambda: api_versions.ApiVersionsRequest(
        client_software_name="acl-test", client_software_version="1"), (), None),
    Case("create topics", lambda: create_topic_request(FRESH), ((_T, FRESH, _Op.CREATE),),
         _TOPIC_DENIED),
    Case("delete topics", lambda: delete_topics.DeleteTopicsRequest(
        topics=(delete_topics.DeleteTopicState(name=DOOMED, topic_id=None),),
        timeout=10_000 * _MS), ((_T, DOOMED, _Op.DELETE),), _TOPIC_DENIED),
    Case("delete records", lambda: delete_records.DeleteRecordsRequest(
        topics=(delete_records.DeleteRecordsTopic(name=TOPIC, partitions=(
            delete_records.DeleteRecordsPartition(partition_index=0, offset=0),)),),
        timeout=10_000 * _MS), ((_T, TOPIC, _Op.DELETE),), _TOPIC_DENIED),
    Case("transactional init producer id", lambda: _init_producer_id(TXN),
         ((_X, TXN, _Op.WRITE),), _TXN_DENIED),
    Case("idempotent init producer id (WRITE on a topic)", lambda: _init_producer_id(None),
         ((_T, TOPIC, _Op.WRITE),), _CLUSTER_DENIED),
    Case("idempotent init producer id (IDEMPOTENT_WRITE)", lambda: _init_producer_id(None),
         ((_C, CLUSTER_NAME, _Op.IDEMPOTENT_WRITE),), _CLUSTER_DENIED),
    Case("offsets for leader epoch", lambda: leader_epoch.OffsetForLeaderEpochRequest(
        replica_id=-2, topics=(leader_epoch.OffsetForLeaderTopic(topic=TOPIC, partitions=(
            leader_epoch.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                  leader_epoch=0),)),)),
         ((_T, TOPIC, _Op.DESCRIBE),), _TOPIC_DENIED),
    Case("write txn markers (another broker's)", lambda: write_txn_markers.WriteTxnMarkersRequest(
        markers=(write_txn_markers.WritableTxnMarker(
            producer_id=424242, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=(write_txn_markers.WritableTxnMarkerTopic(name=TOPIC,
                                                             partition_indexes=(0,)),)),)),
         ((_C, CLUSTER_NAME, _Op.CLUSTER_ACTION),), _CLUSTER_DENIED),
    Case("add partitions to txn", lambda: add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=99,
        v3_and_below_producer_epoch=0, v3_and_below_topics=(
            add_partitions.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)),
         ((_X, TXN, _Op.WRITE), (_T, TOPIC, _Op.WRITE)), _TXN_DENIED,
         ok=frozenset({ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.invalid_producer_epoch})),
    Case("add a topic it may not write to a txn", lambda: add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=TXN, v3_and_below_producer_id=99,
        v3_and_below_producer_epoch=0, v3_and_below_topics=(
            add_partitions.AddPartitionsToTxnTopic(name=TOPIC, partitions=(0,)),)),
         ((_T, TOPIC, _Op.WRITE),), _TOPIC_DENIED, base=((_X, TXN, _Op.WRITE),),
         ok=frozenset({ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.invalid_producer_epoch})),
    Case("add offsets to txn", lambda: add_offsets.AddOffsetsToTxnRequest(
        transactional_id=TXN, producer_id=99, producer_epoch=0, group_id=GROUP),
         ((_G, GROUP, _Op.READ),), _GROUP_DENIED, base=((_X, TXN, _Op.WRITE),),
         ok=frozenset({ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.invalid_producer_epoch})),
    Case("end txn", lambda: end_txn.EndTxnRequest(
        transactional_id=TXN, producer_id=99, producer_epoch=0, committed=False),
         ((_X, TXN, _Op.WRITE),), _TXN_DENIED,
         ok=frozenset({ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.invalid_producer_epoch, ErrorCode.invalid_txn_state})),
    Case("txn offset commit", lambda: txn_offset_commit.TxnOffsetCommitRequest(
        transactional_id=TXN, group_id=GROUP, producer_id=99, producer_epoch=0,
        generation_id=-1, member_id="", group_instance_id=None, topics=(
            txn_offset_commit.TxnOffsetCommitRequestTopic(name=TOPIC, partitions=(
                txn_offset_commit.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata=""),)),)),
         ((_X, TXN, _Op.WRITE), (_G, GROUP, _Op.READ), (_T, TOPIC, _Op.READ)), _TXN_DENIED,
         ok=frozenset({ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                       ErrorCode.invalid_producer_epoch})),
    Case("describe acls", lambda: describe_acls.DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1),
         ((_C, CLUSTER_NAME, _Op.DESCRIBE),), _CLUSTER_DENIED),
    Case("create acls", lambda: create_acls_v3.CreateAclsRequest(creations=(
        acl(_T, "elsewhere", _Op.READ, "10.0.0.1"),)),
         ((_C, CLUSTER_NAME, _Op.ALTER),), _CLUSTER_DENIED),
    Case("delete acls", lambda: delete_acls.DeleteAclsRequest(filters=(_acl_filter("10.0.0.2"),)),
         ((_C, CLUSTER_NAME, _Op.ALTER),), _CLUSTER_DENIED),
    Case("describe a topic's configs", lambda: describe_configs.DescribeConfigsRequest(
        resources=(describe_configs.DescribeConfigsResource(
            resource_type=2, resource_name=TOPIC, configuration_keys=None),),
        include_synonyms=False, include_documentation=False),
         ((_T, TOPIC, _Op.DESCRIBE_CONFIGS),), _TOPIC_DENIED),
    Case("describe the broker's configs", lambda: describe_configs.DescribeConfigsRequest(
        resources=(describe_configs.DescribeConfigsResource(
            resource_type=4, resource_name="0", configuration_keys=None),),
        include_synonyms=False, include_documentation=False),
         ((_C, CLUSTER_NAME, _Op.DESCRIBE_CONFIGS),), _CLUSTER_DENIED),
    Case("create partitions", lambda: create_partitions.CreatePartitionsRequest(
        topics=(create_partitions.CreatePartitionsTopic(name=GROWING, count=2,
                                                        assignments=None),),
        timeout=10_000 * _MS, validate_only=False), ((_T, GROWING, _Op.ALTER),), _TOPIC_DENIED),
    Case("delete groups", lambda: delete_groups.DeleteGroupsRequest(groups_names=(OLD_GROUP,)),
         ((_G, OLD_GROUP, _Op.DELETE),), _GROUP_DENIED),
    Case("alter a topic's configs", lambda: alter_configs.IncrementalAlterConfigsRequest(
        resources=(alter_configs.AlterConfigsResource(resource_type=2, resource_name=TOPIC,
                                                      configs=(alter_configs.AlterableConfig(
                                                          name="retention.ms",
                                                          config_operation=0,
                                                          value="86400000"),)),),
        validate_only=False), ((_T, TOPIC, _Op.ALTER_CONFIGS),), _TOPIC_DENIED),
    Case("offset delete", lambda: offset_delete.OffsetDeleteRequest(
        group_id=GROUP, topics=(offset_delete.OffsetDeleteRequestTopic(name=TOPIC, partitions=(
            offset_delete.OffsetDeleteRequestPartition(partition_index=0),)),)),
         ((_G, GROUP, _Op.DELETE), (_T, TOPIC, _Op.READ)), _GROUP_DENIED),
    Case("describe scram credentials", lambda: describe_scram.DescribeUserScramCredentialsRequest(
        users=None), ((_C, CLUSTER_NAME, _Op.DESCRIBE),), _CLUSTER_DENIED,
         ok=frozenset({ErrorCode.resource_not_found})),
    Case("alter scram credentials", lambda: alter_scram.AlterUserScramCredentialsRequest(
        deletions=(), upsertions=(alter_scram.ScramCredentialUpsertion(
            name="alice", mechanism=2, iterations=8192, salt=b"salt" * 4,
            salted_password=b"p" * 64),)), ((_C, CLUSTER_NAME, _Op.ALTER),), _CLUSTER_DENIED),
)


def _hosts(index: int) -> tuple[str, str]:
    """(the granted client's host, the other's) of row ``index``."""
    return f"127.0.1.{index + 1}", f"127.0.2.{index + 1}"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with an authorizer, the resources every row uses, and each row's ACLs (made
    while ``User:ANONYMOUS`` is a super user; then restarted without)."""
    config = {**AUTHORIZER, "super.users": PRINCIPAL, "auto.create.topics.enable": "true"}
    with ServerProcess(tmp_path_factory.mktemp("acls"), config) as proc:
        proc.start()
        for name in (TOPIC, DOOMED, GROWING):
            answer = send(proc.port, SETUP, create_topic_request(name))
            assert [t.error_code for t in answer.topics] == [ErrorCode.none]
        assert set(error_codes(send(proc.port, SETUP, produce_request(TOPIC)))) == {ErrorCode.none}
        for group in (GROUP, OLD_GROUP):
            assert set(error_codes(send(proc.port, SETUP, commit_request(group, TOPIC)))) == {ErrorCode.none}
        creations = [acl(kind, name, operation, host)
                     for i, case in enumerate(CASES) for host, grants in zip(
                         _hosts(i), (case.grants + case.base, case.base), strict=True)
                     for kind, name, operation in grants]
        creations += [acl(_C, CLUSTER_NAME, _Op.CREATE, BLIND),
                      acl(_C, CLUSTER_NAME, _Op.CREATE, SEEING), acl(_T, TOPIC, _Op.DESCRIBE, SEEING)]
        answer = create_acls(proc.port, SETUP, creations)
        assert {r.error_code for r in answer.results} == {ErrorCode.none}
        proc.config.pop("super.users")
        proc.restart()
        yield proc


def test_every_served_api_has_a_row_and_a_documented_rule(server: ServerProcess) -> None:
    served = {key for key, _ in served_versions("127.0.0.1", server.port)}
    assert served == {case.api_key for case in CASES}
    assert served <= set(REQUIRED)


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c.name for c in CASES])
def test_without_the_acl_refused_with_kafkas_error_with_it_served(
        server: ServerProcess, index: int) -> None:
    case = CASES[index]
    granted_host, other_host = _hosts(index)
    without = send(server.port, other_host, case.request())
    granted = send(server.port, granted_host, case.request())
    if case.check is not None:
        case.check(without, granted)
        return
    if case.denied is None:
        assert not set(error_codes(without)) & AUTH_FAILURES
    else:
        assert set(error_codes(without)) - {ErrorCode.none} == {case.denied}
    codes = set(error_codes(granted))
    assert codes <= case.ok | {ErrorCode.none}, codes


def test_metadata_of_every_topic_lists_only_those_it_may_describe(server: ServerProcess) -> None:
    index = next(i for i, c in enumerate(CASES) if c.name == "metadata of a named topic")
    granted_host, other_host = _hosts(index)
    assert send(server.port, other_host, metadata_request(None)).topics == ()
    topics = send(server.port, granted_host, metadata_request(None)).topics
    assert [(t.name, t.error_code) for t in topics] == [(TOPIC, ErrorCode.none)]
    assert topics[0].topic_authorized_operations == 1 << _Op.DESCRIBE


def test_a_topic_it_may_not_create_is_not_auto_created(server: ServerProcess) -> None:
    index = next(i for i, c in enumerate(CASES) if c.name == "metadata of a named topic")
    granted_host, _ = _hosts(index)
    answer = send(server.port, granted_host, metadata_request(("never-made",), auto_create=True))
    assert [t.error_code for t in answer.topics] == [_TOPIC_DENIED]
    setup = send(server.port, SETUP, metadata_request(("never-made",)))  # no ACLs: no answer either
    assert [t.error_code for t in setup.topics] == [_TOPIC_DENIED]


def test_creating_an_existing_topic_it_may_not_describe_is_refused_not_told_it_exists(
        server: ServerProcess) -> None:
    assert [t.error_code for t in send(server.port, BLIND, create_topic_request(TOPIC)).topics] == \
        [_TOPIC_DENIED]
    assert [t.error_code for t in send(server.port, SEEING, create_topic_request(TOPIC)).topics] == \
        [ErrorCode.topic_already_exists]


# -- principals that authenticated (SASL PLAIN), with real clients ---------------------------

SASL_USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
SASL_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
             + " ".join(f'user_{n}="{p}"' for n, p in SASL_USERS.items()) + ";")
LEDGER = "ledger"


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureServer]:
    """A SASL_PLAINTEXT (PLAIN) listener beside a PLAINTEXT one; User:admin is the super
    user."""
    server = SecureServer(tmp_path_factory.mktemp("acls-sasl"), {
        **AUTHORIZER, "super.users": "User:admin",
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": SASL_JAAS}).start()
    try:
        yield server
    finally:
        server.stop()


def _as(user: str) -> dict[str, str]:
    return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": SASL_USERS[user]}


def _produce_error(bootstrap: str, settings: dict[str, str], topic: str) -> int:
    """The error code librdkafka reports for one record sent to ``topic`` (0: delivered)."""
    ck = pytest.importorskip("confluent_kafka")
    codes: list[int] = []
    producer = ck.Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10_000,
                            **settings})
    producer.produce(topic, b"entry", on_delivery=lambda err, _msg: codes.append(
        0 if err is None else err.code()))
    producer.flush(15)
    assert len(codes) == 1
    return codes[0]


def test_the_acls_of_an_authenticated_principal_are_its_own(
        sasl_server: SecureServer, tmp_path: Path) -> None:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    from tierlog.cli import main

    sasl = sasl_server.bootstrap("SASL_PLAINTEXT")
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text("".join(f"{k}={v}\n" for k, v in _as("admin").items()))
    admin = AdminClient({"bootstrap.servers": sasl, **_as("admin")})
    admin.create_topics([NewTopic(LEDGER, 1, 1)])[LEDGER].result(15)
    assert main(["acls", "--bootstrap-server", sasl, "--command-config", str(admin_config),
                 "--add", "--allow-principal", "User:alice", "--producer",
                 "--topic", LEDGER]) == 0
    assert _produce_error(sasl, _as("alice"), LEDGER) == 0
    denied = ck.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _produce_error(sasl, _as("bob"), LEDGER) == denied
    assert _produce_error(sasl_server.bootstrap("PLAINTEXT"), {}, LEDGER) == denied
    # alice may not manage ACLs: CreateAcls refused for her principal
    alice_config = tmp_path / "alice.properties"
    alice_config.write_text("".join(f"{k}={v}\n" for k, v in _as("alice").items()))
    assert main(["acls", "--bootstrap-server", sasl, "--command-config", str(alice_config),
                 "--add", "--allow-principal", "User:bob", "--producer",
                 "--topic", LEDGER]) == 1
    assert _produce_error(sasl, _as("bob"), LEDGER) == denied


def test_metadata_v10_tells_what_the_principal_may_do_on_the_cluster(
        server: ServerProcess) -> None:
    index = next(i for i, c in enumerate(CASES) if c.name == "describe acls")
    granted_host, other_host = _hosts(index)

    def cluster_operations(host: str) -> int:
        answer = send(server.port, host, metadata_v10.MetadataRequest(
            topics=(), allow_auto_topic_creation=False,
            include_cluster_authorized_operations=True,
            include_topic_authorized_operations=False))
        return int(answer.cluster_authorized_operations)

    assert cluster_operations(granted_host) == 1 << _Op.DESCRIBE
    assert cluster_operations(other_host) == 0
