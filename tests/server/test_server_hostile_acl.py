"""Issue 25's hostile client, again, against a real ``tierlog serve`` with an authorizer and no
ACL for it: what it did before (delete a user topic with its data, read
``__consumer_offsets``, create topics at will) is refused, by name and under a barrage of
random requests of every served API; an auditor (a host granted only DESCRIBE and READ) then
finds the topic, its record, the group and the ACLs as they were, and no topic created."""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import Iterator

import pytest
from kio.schema.delete_groups.v2 import request as delete_groups
from kio.schema.delete_records.v2 import request as delete_records
from kio.schema.delete_topics.v6 import request as delete_topics
from kio.schema.describe_acls.v3 import request as describe_acls
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_configs
from kio.schema.list_groups.v4 import request as list_groups
from kio.schema.offset_fetch.v8 import request as offset_fetch
from support.acl_wire import (
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
from support.hostile_frames import frame, served_versions, throw
from support.server_process import ServerProcess

from tierlog.security.acl import CLUSTER_NAME, WILDCARD, AclOperation, ResourceType

PRECIOUS, OWNERS = "precious", "owners"
OFFSETS, TXN_STATE = "__consumer_offsets", "__transaction_state"
#: The hostile client's host (no ACL names it) and the auditor's.
HOSTILE, AUDITOR = "127.0.0.1", "127.0.0.50"
_MS = datetime.timedelta(milliseconds=1)
_TOPIC_DENIED = ErrorCode.topic_authorization_failed


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A topic with a record, a group with a committed offset, and the auditor's ACLs, made
    by a super user; then the server restarted without one."""
    config = {**AUTHORIZER, "super.users": PRINCIPAL, "auto.create.topics.enable": "true"}
    with ServerProcess(tmp_path_factory.mktemp("hostile-acl"), config) as proc:
        proc.start()
        port = proc.port
        assert set(error_codes(send(port, HOSTILE, create_topic_request(PRECIOUS)))) == \
            {ErrorCode.none}
        assert set(error_codes(send(port, HOSTILE, produce_request(PRECIOUS)))) == \
            {ErrorCode.none}
        assert set(error_codes(send(port, HOSTILE, commit_request(OWNERS, PRECIOUS)))) == \
            {ErrorCode.none}
        answer = create_acls(port, HOSTILE, (
            acl(ResourceType.TOPIC, WILDCARD, AclOperation.DESCRIBE, AUDITOR),
            acl(ResourceType.TOPIC, PRECIOUS, AclOperation.READ, AUDITOR),
            acl(ResourceType.GROUP, WILDCARD, AclOperation.DESCRIBE, AUDITOR),
            acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.DESCRIBE, AUDITOR)))
        assert {r.error_code for r in answer.results} == {ErrorCode.none}
        proc.config.pop("super.users")
        proc.restart()
        yield proc


def _audit(port: int) -> None:
    """What the auditor finds: the setup's topics only, the record, the group and 4 ACLs."""
    topics = send(port, AUDITOR, metadata_request(None)).topics
    assert {t.name for t in topics} == {PRECIOUS, OFFSETS, TXN_STATE}
    records = send(port, AUDITOR, fetch_request(PRECIOUS)).responses[0].partitions[0]
    assert records.error_code == ErrorCode.none and records.log_start_offset == 0
    assert records.high_watermark == 1 and len(records.records or b"") > 0
    groups = send(port, AUDITOR, list_groups.ListGroupsRequest(states_filter=())).groups
    assert [g.group_id for g in groups] == [OWNERS]
    acls = send(port, AUDITOR, describe_acls.DescribeAclsRequest(
        resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
        principal_filter=None, host_filter=None, operation=1, permission_type=1))
    assert sum(len(r.acls) for r in acls.resources) == 4


def test_the_hostile_clients_attacks_are_refused_with_kafkas_errors(
        server: ServerProcess) -> None:
    port = server.port
    deleted = send(port, HOSTILE, delete_topics.DeleteTopicsRequest(
        topics=(delete_topics.DeleteTopicState(name=PRECIOUS, topic_id=None),),
        timeout=10_000 * _MS))
    assert [r.error_code for r in deleted.responses] == [_TOPIC_DENIED]
    emptied = send(port, HOSTILE, delete_records.DeleteRecordsRequest(
        topics=(delete_records.DeleteRecordsTopic(name=PRECIOUS, partitions=(
            delete_records.DeleteRecordsPartition(partition_index=0, offset=-1),)),),
        timeout=10_000 * _MS))
    assert set(error_codes(emptied)) == {_TOPIC_DENIED}
    read = send(port, HOSTILE, fetch_request(OFFSETS))  # the group's offsets are in it
    parts = read.responses[0].partitions
    assert len(parts) == 1 and {p.error_code for p in parts} == {_TOPIC_DENIED}
    assert all(not p.records for p in parts)
    offsets = send(port, HOSTILE, offset_fetch.OffsetFetchRequest(groups=(
        offset_fetch.OffsetFetchRequestGroup(group_id=OWNERS, topics=None),),
        require_stable=False))
    assert [(g.error_code, g.topics) for g in offsets.groups] == [
        (ErrorCode.group_authorization_failed, ())]
    assert send(port, HOSTILE, metadata_request(None)).topics == ()  # sees no topic at all
    created = send(port, HOSTILE, create_topic_request("evil"))
    assert [t.error_code for t in created.topics] == [_TOPIC_DENIED]
    auto = send(port, HOSTILE, metadata_request(("evil-auto",), auto_create=True))
    assert [t.error_code for t in auto.topics] == [_TOPIC_DENIED]
    altered = send(port, HOSTILE, alter_configs.IncrementalAlterConfigsRequest(
        resources=(alter_configs.AlterConfigsResource(
            resource_type=2, resource_name=PRECIOUS, configs=(alter_configs.AlterableConfig(
                name="retention.ms", config_operation=0, value="1"),)),), validate_only=False))
    assert set(error_codes(altered)) == {_TOPIC_DENIED}
    gone = send(port, HOSTILE, delete_groups.DeleteGroupsRequest(groups_names=(OWNERS,)))
    assert set(error_codes(gone)) == {ErrorCode.group_authorization_failed}
    granted = create_acls(port, HOSTILE, (
        acl(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.ALL, HOSTILE),))
    assert {r.error_code for r in granted.results} == {ErrorCode.cluster_authorization_failed}
    _audit(port)


def test_a_barrage_of_random_requests_of_every_api_changes_nothing(
        server: ServerProcess) -> None:
    versions = served_versions(HOSTILE, server.port)
    rng = random.Random(25)
    frames = [frame(key, version, rng, 0.05, correlation_id=i)
              for i, (key, version) in enumerate(versions * 4)]
    tally = asyncio.run(throw(HOSTILE, server.port, frames, concurrency=16, timeout=0.5))
    assert tally.frames == len(frames) and tally.answered > len(frames) // 4
    assert server.alive()
    assert "after an unexpected error" not in server.log_text()
    _audit(server.port)
