"""kio's request and response classes of every version this server serves: one union
alias per API (``MetadataRequest`` is MetadataRequest v0 | ... | v12), the types the
handlers of :mod:`tierlog.server.api` are written against.

Each alias lists the versions of its handler's row in the module's ``ENDPOINTS`` table; a
test (tests/server/test_handlers_direct.py) checks that it holds exactly those classes, so a
table that serves a new version fails until its alias names that version too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

# Types only: importing the ~300 kio modules would cost a server start about a second.
if TYPE_CHECKING:
    import kio.schema.add_offsets_to_txn.v0
    import kio.schema.add_offsets_to_txn.v1
    import kio.schema.add_offsets_to_txn.v2
    import kio.schema.add_offsets_to_txn.v3
    import kio.schema.add_partitions_to_txn.v0
    import kio.schema.add_partitions_to_txn.v1
    import kio.schema.add_partitions_to_txn.v2
    import kio.schema.add_partitions_to_txn.v3
    import kio.schema.api_versions.v0
    import kio.schema.api_versions.v1
    import kio.schema.api_versions.v2
    import kio.schema.api_versions.v3
    import kio.schema.api_versions.v4
    import kio.schema.create_acls.v1
    import kio.schema.create_acls.v2
    import kio.schema.create_acls.v3
    import kio.schema.create_partitions.v0
    import kio.schema.create_partitions.v1
    import kio.schema.create_partitions.v2
    import kio.schema.create_partitions.v3
    import kio.schema.create_topics.v2
    import kio.schema.create_topics.v3
    import kio.schema.create_topics.v4
    import kio.schema.create_topics.v5
    import kio.schema.create_topics.v6
    import kio.schema.create_topics.v7
    import kio.schema.delete_acls.v1
    import kio.schema.delete_acls.v2
    import kio.schema.delete_acls.v3
    import kio.schema.delete_groups.v0
    import kio.schema.delete_groups.v1
    import kio.schema.delete_groups.v2
    import kio.schema.delete_records.v0
    import kio.schema.delete_records.v1
    import kio.schema.delete_records.v2
    import kio.schema.delete_topics.v1
    import kio.schema.delete_topics.v2
    import kio.schema.delete_topics.v3
    import kio.schema.delete_topics.v4
    import kio.schema.delete_topics.v5
    import kio.schema.delete_topics.v6
    import kio.schema.describe_acls.v1
    import kio.schema.describe_acls.v2
    import kio.schema.describe_acls.v3
    import kio.schema.describe_configs.v1
    import kio.schema.describe_configs.v2
    import kio.schema.describe_configs.v3
    import kio.schema.describe_configs.v4
    import kio.schema.describe_groups.v0
    import kio.schema.describe_groups.v1
    import kio.schema.describe_groups.v2
    import kio.schema.describe_groups.v3
    import kio.schema.describe_groups.v4
    import kio.schema.describe_groups.v5
    import kio.schema.end_txn.v0
    import kio.schema.end_txn.v1
    import kio.schema.end_txn.v2
    import kio.schema.end_txn.v3
    import kio.schema.fetch.v4
    import kio.schema.fetch.v5
    import kio.schema.fetch.v6
    import kio.schema.fetch.v7
    import kio.schema.fetch.v8
    import kio.schema.fetch.v9
    import kio.schema.fetch.v10
    import kio.schema.fetch.v11
    import kio.schema.fetch.v12
    import kio.schema.find_coordinator.v0
    import kio.schema.find_coordinator.v1
    import kio.schema.find_coordinator.v2
    import kio.schema.find_coordinator.v3
    import kio.schema.find_coordinator.v4
    import kio.schema.heartbeat.v0
    import kio.schema.heartbeat.v1
    import kio.schema.heartbeat.v2
    import kio.schema.heartbeat.v3
    import kio.schema.heartbeat.v4
    import kio.schema.incremental_alter_configs.v0
    import kio.schema.incremental_alter_configs.v1
    import kio.schema.init_producer_id.v0
    import kio.schema.init_producer_id.v1
    import kio.schema.init_producer_id.v2
    import kio.schema.init_producer_id.v3
    import kio.schema.init_producer_id.v4
    import kio.schema.join_group.v0
    import kio.schema.join_group.v1
    import kio.schema.join_group.v2
    import kio.schema.join_group.v3
    import kio.schema.join_group.v4
    import kio.schema.join_group.v5
    import kio.schema.join_group.v6
    import kio.schema.join_group.v7
    import kio.schema.join_group.v8
    import kio.schema.join_group.v9
    import kio.schema.leave_group.v0
    import kio.schema.leave_group.v1
    import kio.schema.leave_group.v2
    import kio.schema.leave_group.v3
    import kio.schema.leave_group.v4
    import kio.schema.leave_group.v5
    import kio.schema.list_groups.v0
    import kio.schema.list_groups.v1
    import kio.schema.list_groups.v2
    import kio.schema.list_groups.v3
    import kio.schema.list_groups.v4
    import kio.schema.list_offsets.v1
    import kio.schema.list_offsets.v2
    import kio.schema.list_offsets.v3
    import kio.schema.list_offsets.v4
    import kio.schema.list_offsets.v5
    import kio.schema.list_offsets.v6
    import kio.schema.list_offsets.v7
    import kio.schema.list_offsets.v8
    import kio.schema.list_offsets.v9
    import kio.schema.metadata.v0
    import kio.schema.metadata.v1
    import kio.schema.metadata.v2
    import kio.schema.metadata.v3
    import kio.schema.metadata.v4
    import kio.schema.metadata.v5
    import kio.schema.metadata.v6
    import kio.schema.metadata.v7
    import kio.schema.metadata.v8
    import kio.schema.metadata.v9
    import kio.schema.metadata.v10
    import kio.schema.metadata.v11
    import kio.schema.metadata.v12
    import kio.schema.offset_commit.v2
    import kio.schema.offset_commit.v3
    import kio.schema.offset_commit.v4
    import kio.schema.offset_commit.v5
    import kio.schema.offset_commit.v6
    import kio.schema.offset_commit.v7
    import kio.schema.offset_commit.v8
    import kio.schema.offset_delete.v0
    import kio.schema.offset_fetch.v1
    import kio.schema.offset_fetch.v2
    import kio.schema.offset_fetch.v3
    import kio.schema.offset_fetch.v4
    import kio.schema.offset_fetch.v5
    import kio.schema.offset_fetch.v6
    import kio.schema.offset_fetch.v7
    import kio.schema.offset_fetch.v8
    import kio.schema.offset_for_leader_epoch.v2
    import kio.schema.offset_for_leader_epoch.v3
    import kio.schema.offset_for_leader_epoch.v4
    import kio.schema.produce.v3
    import kio.schema.produce.v4
    import kio.schema.produce.v5
    import kio.schema.produce.v6
    import kio.schema.produce.v7
    import kio.schema.produce.v8
    import kio.schema.produce.v9
    import kio.schema.sync_group.v0
    import kio.schema.sync_group.v1
    import kio.schema.sync_group.v2
    import kio.schema.sync_group.v3
    import kio.schema.sync_group.v4
    import kio.schema.sync_group.v5
    import kio.schema.txn_offset_commit.v0
    import kio.schema.txn_offset_commit.v1
    import kio.schema.txn_offset_commit.v2
    import kio.schema.txn_offset_commit.v3
    import kio.schema.write_txn_markers.v1

    #: API key 0, versions 3-9.
    ProduceRequest: TypeAlias = (
        kio.schema.produce.v3.ProduceRequest
        | kio.schema.produce.v4.ProduceRequest
        | kio.schema.produce.v5.ProduceRequest
        | kio.schema.produce.v6.ProduceRequest
        | kio.schema.produce.v7.ProduceRequest
        | kio.schema.produce.v8.ProduceRequest
        | kio.schema.produce.v9.ProduceRequest
    )
    #: API key 0, versions 3-9.
    ProduceResponse: TypeAlias = (
        kio.schema.produce.v3.ProduceResponse
        | kio.schema.produce.v4.ProduceResponse
        | kio.schema.produce.v5.ProduceResponse
        | kio.schema.produce.v6.ProduceResponse
        | kio.schema.produce.v7.ProduceResponse
        | kio.schema.produce.v8.ProduceResponse
        | kio.schema.produce.v9.ProduceResponse
    )
    #: API key 1, versions 4-12.
    FetchRequest: TypeAlias = (
        kio.schema.fetch.v4.FetchRequest
        | kio.schema.fetch.v5.FetchRequest
        | kio.schema.fetch.v6.FetchRequest
        | kio.schema.fetch.v7.FetchRequest
        | kio.schema.fetch.v8.FetchRequest
        | kio.schema.fetch.v9.FetchRequest
        | kio.schema.fetch.v10.FetchRequest
        | kio.schema.fetch.v11.FetchRequest
        | kio.schema.fetch.v12.FetchRequest
    )
    #: API key 1, versions 4-12.
    FetchResponse: TypeAlias = (
        kio.schema.fetch.v4.FetchResponse
        | kio.schema.fetch.v5.FetchResponse
        | kio.schema.fetch.v6.FetchResponse
        | kio.schema.fetch.v7.FetchResponse
        | kio.schema.fetch.v8.FetchResponse
        | kio.schema.fetch.v9.FetchResponse
        | kio.schema.fetch.v10.FetchResponse
        | kio.schema.fetch.v11.FetchResponse
        | kio.schema.fetch.v12.FetchResponse
    )
    #: API key 2, versions 1-9.
    ListOffsetsRequest: TypeAlias = (
        kio.schema.list_offsets.v1.ListOffsetsRequest
        | kio.schema.list_offsets.v2.ListOffsetsRequest
        | kio.schema.list_offsets.v3.ListOffsetsRequest
        | kio.schema.list_offsets.v4.ListOffsetsRequest
        | kio.schema.list_offsets.v5.ListOffsetsRequest
        | kio.schema.list_offsets.v6.ListOffsetsRequest
        | kio.schema.list_offsets.v7.ListOffsetsRequest
        | kio.schema.list_offsets.v8.ListOffsetsRequest
        | kio.schema.list_offsets.v9.ListOffsetsRequest
    )
    #: API key 2, versions 1-9.
    ListOffsetsResponse: TypeAlias = (
        kio.schema.list_offsets.v1.ListOffsetsResponse
        | kio.schema.list_offsets.v2.ListOffsetsResponse
        | kio.schema.list_offsets.v3.ListOffsetsResponse
        | kio.schema.list_offsets.v4.ListOffsetsResponse
        | kio.schema.list_offsets.v5.ListOffsetsResponse
        | kio.schema.list_offsets.v6.ListOffsetsResponse
        | kio.schema.list_offsets.v7.ListOffsetsResponse
        | kio.schema.list_offsets.v8.ListOffsetsResponse
        | kio.schema.list_offsets.v9.ListOffsetsResponse
    )
    #: API key 3, versions 0-12.
    MetadataRequest: TypeAlias = (
        kio.schema.metadata.v0.MetadataRequest
        | kio.schema.metadata.v1.MetadataRequest
        | kio.schema.metadata.v2.MetadataRequest
        | kio.schema.metadata.v3.MetadataRequest
        | kio.schema.metadata.v4.MetadataRequest
        | kio.schema.metadata.v5.MetadataRequest
        | kio.schema.metadata.v6.MetadataRequest
        | kio.schema.metadata.v7.MetadataRequest
        | kio.schema.metadata.v8.MetadataRequest
        | kio.schema.metadata.v9.MetadataRequest
        | kio.schema.metadata.v10.MetadataRequest
        | kio.schema.metadata.v11.MetadataRequest
        | kio.schema.metadata.v12.MetadataRequest
    )
    #: API key 3, versions 0-12.
    MetadataResponse: TypeAlias = (
        kio.schema.metadata.v0.MetadataResponse
        | kio.schema.metadata.v1.MetadataResponse
        | kio.schema.metadata.v2.MetadataResponse
        | kio.schema.metadata.v3.MetadataResponse
        | kio.schema.metadata.v4.MetadataResponse
        | kio.schema.metadata.v5.MetadataResponse
        | kio.schema.metadata.v6.MetadataResponse
        | kio.schema.metadata.v7.MetadataResponse
        | kio.schema.metadata.v8.MetadataResponse
        | kio.schema.metadata.v9.MetadataResponse
        | kio.schema.metadata.v10.MetadataResponse
        | kio.schema.metadata.v11.MetadataResponse
        | kio.schema.metadata.v12.MetadataResponse
    )
    #: API key 8, versions 2-8.
    OffsetCommitRequest: TypeAlias = (
        kio.schema.offset_commit.v2.OffsetCommitRequest
        | kio.schema.offset_commit.v3.OffsetCommitRequest
        | kio.schema.offset_commit.v4.OffsetCommitRequest
        | kio.schema.offset_commit.v5.OffsetCommitRequest
        | kio.schema.offset_commit.v6.OffsetCommitRequest
        | kio.schema.offset_commit.v7.OffsetCommitRequest
        | kio.schema.offset_commit.v8.OffsetCommitRequest
    )
    #: API key 8, versions 2-8.
    OffsetCommitResponse: TypeAlias = (
        kio.schema.offset_commit.v2.OffsetCommitResponse
        | kio.schema.offset_commit.v3.OffsetCommitResponse
        | kio.schema.offset_commit.v4.OffsetCommitResponse
        | kio.schema.offset_commit.v5.OffsetCommitResponse
        | kio.schema.offset_commit.v6.OffsetCommitResponse
        | kio.schema.offset_commit.v7.OffsetCommitResponse
        | kio.schema.offset_commit.v8.OffsetCommitResponse
    )
    #: API key 9, versions 1-8.
    OffsetFetchRequest: TypeAlias = (
        kio.schema.offset_fetch.v1.OffsetFetchRequest
        | kio.schema.offset_fetch.v2.OffsetFetchRequest
        | kio.schema.offset_fetch.v3.OffsetFetchRequest
        | kio.schema.offset_fetch.v4.OffsetFetchRequest
        | kio.schema.offset_fetch.v5.OffsetFetchRequest
        | kio.schema.offset_fetch.v6.OffsetFetchRequest
        | kio.schema.offset_fetch.v7.OffsetFetchRequest
        | kio.schema.offset_fetch.v8.OffsetFetchRequest
    )
    #: API key 9, versions 1-8.
    OffsetFetchResponse: TypeAlias = (
        kio.schema.offset_fetch.v1.OffsetFetchResponse
        | kio.schema.offset_fetch.v2.OffsetFetchResponse
        | kio.schema.offset_fetch.v3.OffsetFetchResponse
        | kio.schema.offset_fetch.v4.OffsetFetchResponse
        | kio.schema.offset_fetch.v5.OffsetFetchResponse
        | kio.schema.offset_fetch.v6.OffsetFetchResponse
        | kio.schema.offset_fetch.v7.OffsetFetchResponse
        | kio.schema.offset_fetch.v8.OffsetFetchResponse
    )
    #: API key 10, versions 0-4.
    FindCoordinatorRequest: TypeAlias = (
        kio.schema.find_coordinator.v0.FindCoordinatorRequest
        | kio.schema.find_coordinator.v1.FindCoordinatorRequest
        | kio.schema.find_coordinator.v2.FindCoordinatorRequest
        | kio.schema.find_coordinator.v3.FindCoordinatorRequest
        | kio.schema.find_coordinator.v4.FindCoordinatorRequest
    )
    #: API key 10, versions 0-4.
    FindCoordinatorResponse: TypeAlias = (
        kio.schema.find_coordinator.v0.FindCoordinatorResponse
        | kio.schema.find_coordinator.v1.FindCoordinatorResponse
        | kio.schema.find_coordinator.v2.FindCoordinatorResponse
        | kio.schema.find_coordinator.v3.FindCoordinatorResponse
        | kio.schema.find_coordinator.v4.FindCoordinatorResponse
    )
    #: API key 11, versions 0-9.
    JoinGroupRequest: TypeAlias = (
        kio.schema.join_group.v0.JoinGroupRequest
        | kio.schema.join_group.v1.JoinGroupRequest
        | kio.schema.join_group.v2.JoinGroupRequest
        | kio.schema.join_group.v3.JoinGroupRequest
        | kio.schema.join_group.v4.JoinGroupRequest
        | kio.schema.join_group.v5.JoinGroupRequest
        | kio.schema.join_group.v6.JoinGroupRequest
        | kio.schema.join_group.v7.JoinGroupRequest
        | kio.schema.join_group.v8.JoinGroupRequest
        | kio.schema.join_group.v9.JoinGroupRequest
    )
    #: API key 11, versions 0-9.
    JoinGroupResponse: TypeAlias = (
        kio.schema.join_group.v0.JoinGroupResponse
        | kio.schema.join_group.v1.JoinGroupResponse
        | kio.schema.join_group.v2.JoinGroupResponse
        | kio.schema.join_group.v3.JoinGroupResponse
        | kio.schema.join_group.v4.JoinGroupResponse
        | kio.schema.join_group.v5.JoinGroupResponse
        | kio.schema.join_group.v6.JoinGroupResponse
        | kio.schema.join_group.v7.JoinGroupResponse
        | kio.schema.join_group.v8.JoinGroupResponse
        | kio.schema.join_group.v9.JoinGroupResponse
    )
    #: API key 12, versions 0-4.
    HeartbeatRequest: TypeAlias = (
        kio.schema.heartbeat.v0.HeartbeatRequest
        | kio.schema.heartbeat.v1.HeartbeatRequest
        | kio.schema.heartbeat.v2.HeartbeatRequest
        | kio.schema.heartbeat.v3.HeartbeatRequest
        | kio.schema.heartbeat.v4.HeartbeatRequest
    )
    #: API key 12, versions 0-4.
    HeartbeatResponse: TypeAlias = (
        kio.schema.heartbeat.v0.HeartbeatResponse
        | kio.schema.heartbeat.v1.HeartbeatResponse
        | kio.schema.heartbeat.v2.HeartbeatResponse
        | kio.schema.heartbeat.v3.HeartbeatResponse
        | kio.schema.heartbeat.v4.HeartbeatResponse
    )
    #: API key 13, versions 0-5.
    LeaveGroupRequest: TypeAlias = (
        kio.schema.leave_group.v0.LeaveGroupRequest
        | kio.schema.leave_group.v1.LeaveGroupRequest
        | kio.schema.leave_group.v2.LeaveGroupRequest
        | kio.schema.leave_group.v3.LeaveGroupRequest
        | kio.schema.leave_group.v4.LeaveGroupRequest
        | kio.schema.leave_group.v5.LeaveGroupRequest
    )
    #: API key 13, versions 0-5.
    LeaveGroupResponse: TypeAlias = (
        kio.schema.leave_group.v0.LeaveGroupResponse
        | kio.schema.leave_group.v1.LeaveGroupResponse
        | kio.schema.leave_group.v2.LeaveGroupResponse
        | kio.schema.leave_group.v3.LeaveGroupResponse
        | kio.schema.leave_group.v4.LeaveGroupResponse
        | kio.schema.leave_group.v5.LeaveGroupResponse
    )
    #: API key 14, versions 0-5.
    SyncGroupRequest: TypeAlias = (
        kio.schema.sync_group.v0.SyncGroupRequest
        | kio.schema.sync_group.v1.SyncGroupRequest
        | kio.schema.sync_group.v2.SyncGroupRequest
        | kio.schema.sync_group.v3.SyncGroupRequest
        | kio.schema.sync_group.v4.SyncGroupRequest
        | kio.schema.sync_group.v5.SyncGroupRequest
    )
    #: API key 14, versions 0-5.
    SyncGroupResponse: TypeAlias = (
        kio.schema.sync_group.v0.SyncGroupResponse
        | kio.schema.sync_group.v1.SyncGroupResponse
        | kio.schema.sync_group.v2.SyncGroupResponse
        | kio.schema.sync_group.v3.SyncGroupResponse
        | kio.schema.sync_group.v4.SyncGroupResponse
        | kio.schema.sync_group.v5.SyncGroupResponse
    )
    #: API key 15, versions 0-5.
    DescribeGroupsRequest: TypeAlias = (
        kio.schema.describe_groups.v0.DescribeGroupsRequest
        | kio.schema.describe_groups.v1.DescribeGroupsRequest
        | kio.schema.describe_groups.v2.DescribeGroupsRequest
        | kio.schema.describe_groups.v3.DescribeGroupsRequest
        | kio.schema.describe_groups.v4.DescribeGroupsRequest
        | kio.schema.describe_groups.v5.DescribeGroupsRequest
    )
    #: API key 15, versions 0-5.
    DescribeGroupsResponse: TypeAlias = (
        kio.schema.describe_groups.v0.DescribeGroupsResponse
        | kio.schema.describe_groups.v1.DescribeGroupsResponse
        | kio.schema.describe_groups.v2.DescribeGroupsResponse
        | kio.schema.describe_groups.v3.DescribeGroupsResponse
        | kio.schema.describe_groups.v4.DescribeGroupsResponse
        | kio.schema.describe_groups.v5.DescribeGroupsResponse
    )
    #: API key 16, versions 0-4.
    ListGroupsRequest: TypeAlias = (
        kio.schema.list_groups.v0.ListGroupsRequest
        | kio.schema.list_groups.v1.ListGroupsRequest
        | kio.schema.list_groups.v2.ListGroupsRequest
        | kio.schema.list_groups.v3.ListGroupsRequest
        | kio.schema.list_groups.v4.ListGroupsRequest
    )
    #: API key 16, versions 0-4.
    ListGroupsResponse: TypeAlias = (
        kio.schema.list_groups.v0.ListGroupsResponse
        | kio.schema.list_groups.v1.ListGroupsResponse
        | kio.schema.list_groups.v2.ListGroupsResponse
        | kio.schema.list_groups.v3.ListGroupsResponse
        | kio.schema.list_groups.v4.ListGroupsResponse
    )
    #: API key 18, versions 0-4.
    ApiVersionsRequest: TypeAlias = (
        kio.schema.api_versions.v0.ApiVersionsRequest
        | kio.schema.api_versions.v1.ApiVersionsRequest
        | kio.schema.api_versions.v2.ApiVersionsRequest
        | kio.schema.api_versions.v3.ApiVersionsRequest
        | kio.schema.api_versions.v4.ApiVersionsRequest
    )
    #: API key 18, versions 0-4.
    ApiVersionsResponse: TypeAlias = (
        kio.schema.api_versions.v0.ApiVersionsResponse
        | kio.schema.api_versions.v1.ApiVersionsResponse
        | kio.schema.api_versions.v2.ApiVersionsResponse
        | kio.schema.api_versions.v3.ApiVersionsResponse
        | kio.schema.api_versions.v4.ApiVersionsResponse
    )
    #: API key 19, versions 2-7.
    CreateTopicsRequest: TypeAlias = (
        kio.schema.create_topics.v2.CreateTopicsRequest
        | kio.schema.create_topics.v3.CreateTopicsRequest
        | kio.schema.create_topics.v4.CreateTopicsRequest
        | kio.schema.create_topics.v5.CreateTopicsRequest
        | kio.schema.create_topics.v6.CreateTopicsRequest
        | kio.schema.create_topics.v7.CreateTopicsRequest
    )
    #: API key 19, versions 2-7.
    CreateTopicsResponse: TypeAlias = (
        kio.schema.create_topics.v2.CreateTopicsResponse
        | kio.schema.create_topics.v3.CreateTopicsResponse
        | kio.schema.create_topics.v4.CreateTopicsResponse
        | kio.schema.create_topics.v5.CreateTopicsResponse
        | kio.schema.create_topics.v6.CreateTopicsResponse
        | kio.schema.create_topics.v7.CreateTopicsResponse
    )
    #: API key 20, versions 1-6.
    DeleteTopicsRequest: TypeAlias = (
        kio.schema.delete_topics.v1.DeleteTopicsRequest
        | kio.schema.delete_topics.v2.DeleteTopicsRequest
        | kio.schema.delete_topics.v3.DeleteTopicsRequest
        | kio.schema.delete_topics.v4.DeleteTopicsRequest
        | kio.schema.delete_topics.v5.DeleteTopicsRequest
        | kio.schema.delete_topics.v6.DeleteTopicsRequest
    )
    #: API key 20, versions 1-6.
    DeleteTopicsResponse: TypeAlias = (
        kio.schema.delete_topics.v1.DeleteTopicsResponse
        | kio.schema.delete_topics.v2.DeleteTopicsResponse
        | kio.schema.delete_topics.v3.DeleteTopicsResponse
        | kio.schema.delete_topics.v4.DeleteTopicsResponse
        | kio.schema.delete_topics.v5.DeleteTopicsResponse
        | kio.schema.delete_topics.v6.DeleteTopicsResponse
    )
    #: API key 21, versions 0-2.
    DeleteRecordsRequest: TypeAlias = (
        kio.schema.delete_records.v0.DeleteRecordsRequest
        | kio.schema.delete_records.v1.DeleteRecordsRequest
        | kio.schema.delete_records.v2.DeleteRecordsRequest
    )
    #: API key 21, versions 0-2.
    DeleteRecordsResponse: TypeAlias = (
        kio.schema.delete_records.v0.DeleteRecordsResponse
        | kio.schema.delete_records.v1.DeleteRecordsResponse
        | kio.schema.delete_records.v2.DeleteRecordsResponse
    )
    #: API key 22, versions 0-4.
    InitProducerIdRequest: TypeAlias = (
        kio.schema.init_producer_id.v0.InitProducerIdRequest
        | kio.schema.init_producer_id.v1.InitProducerIdRequest
        | kio.schema.init_producer_id.v2.InitProducerIdRequest
        | kio.schema.init_producer_id.v3.InitProducerIdRequest
        | kio.schema.init_producer_id.v4.InitProducerIdRequest
    )
    #: API key 22, versions 0-4.
    InitProducerIdResponse: TypeAlias = (
        kio.schema.init_producer_id.v0.InitProducerIdResponse
        | kio.schema.init_producer_id.v1.InitProducerIdResponse
        | kio.schema.init_producer_id.v2.InitProducerIdResponse
        | kio.schema.init_producer_id.v3.InitProducerIdResponse
        | kio.schema.init_producer_id.v4.InitProducerIdResponse
    )
    #: API key 23, versions 2-4.
    OffsetForLeaderEpochRequest: TypeAlias = (
        kio.schema.offset_for_leader_epoch.v2.OffsetForLeaderEpochRequest
        | kio.schema.offset_for_leader_epoch.v3.OffsetForLeaderEpochRequest
        | kio.schema.offset_for_leader_epoch.v4.OffsetForLeaderEpochRequest
    )
    #: API key 23, versions 2-4.
    OffsetForLeaderEpochResponse: TypeAlias = (
        kio.schema.offset_for_leader_epoch.v2.OffsetForLeaderEpochResponse
        | kio.schema.offset_for_leader_epoch.v3.OffsetForLeaderEpochResponse
        | kio.schema.offset_for_leader_epoch.v4.OffsetForLeaderEpochResponse
    )
    #: API key 24, versions 0-3.
    AddPartitionsToTxnRequest: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v1.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v2.AddPartitionsToTxnRequest
        | kio.schema.add_partitions_to_txn.v3.AddPartitionsToTxnRequest
    )
    #: API key 24, versions 0-3.
    AddPartitionsToTxnResponse: TypeAlias = (
        kio.schema.add_partitions_to_txn.v0.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v1.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v2.AddPartitionsToTxnResponse
        | kio.schema.add_partitions_to_txn.v3.AddPartitionsToTxnResponse
    )
    #: API key 25, versions 0-3.
    AddOffsetsToTxnRequest: TypeAlias = (
        kio.schema.add_offsets_to_txn.v0.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v1.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v2.AddOffsetsToTxnRequest
        | kio.schema.add_offsets_to_txn.v3.AddOffsetsToTxnRequest
    )
    #: API key 25, versions 0-3.
    AddOffsetsToTxnResponse: TypeAlias = (
        kio.schema.add_offsets_to_txn.v0.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v1.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v2.AddOffsetsToTxnResponse
        | kio.schema.add_offsets_to_txn.v3.AddOffsetsToTxnResponse
    )
    #: API key 26, versions 0-3.
    EndTxnRequest: TypeAlias = (
        kio.schema.end_txn.v0.EndTxnRequest
        | kio.schema.end_txn.v1.EndTxnRequest
        | kio.schema.end_txn.v2.EndTxnRequest
        | kio.schema.end_txn.v3.EndTxnRequest
    )
    #: API key 26, versions 0-3.
    EndTxnResponse: TypeAlias = (
        kio.schema.end_txn.v0.EndTxnResponse
        | kio.schema.end_txn.v1.EndTxnResponse
        | kio.schema.end_txn.v2.EndTxnResponse
        | kio.schema.end_txn.v3.EndTxnResponse
    )
    #: API key 28, versions 0-3.
    TxnOffsetCommitRequest: TypeAlias = (
        kio.schema.txn_offset_commit.v0.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v1.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v2.TxnOffsetCommitRequest
        | kio.schema.txn_offset_commit.v3.TxnOffsetCommitRequest
    )
    #: API key 28, versions 0-3.
    TxnOffsetCommitResponse: TypeAlias = (
        kio.schema.txn_offset_commit.v0.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v1.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v2.TxnOffsetCommitResponse
        | kio.schema.txn_offset_commit.v3.TxnOffsetCommitResponse
    )
    #: API key 32, versions 1-4.
    DescribeConfigsRequest: TypeAlias = (
        kio.schema.describe_configs.v1.DescribeConfigsRequest
        | kio.schema.describe_configs.v2.DescribeConfigsRequest
        | kio.schema.describe_configs.v3.DescribeConfigsRequest
        | kio.schema.describe_configs.v4.DescribeConfigsRequest
    )
    #: API key 32, versions 1-4.
    DescribeConfigsResponse: TypeAlias = (
        kio.schema.describe_configs.v1.DescribeConfigsResponse
        | kio.schema.describe_configs.v2.DescribeConfigsResponse
        | kio.schema.describe_configs.v3.DescribeConfigsResponse
        | kio.schema.describe_configs.v4.DescribeConfigsResponse
    )
    #: API key 37, versions 0-3.
    CreatePartitionsRequest: TypeAlias = (
        kio.schema.create_partitions.v0.CreatePartitionsRequest
        | kio.schema.create_partitions.v1.CreatePartitionsRequest
        | kio.schema.create_partitions.v2.CreatePartitionsRequest
        | kio.schema.create_partitions.v3.CreatePartitionsRequest
    )
    #: API key 37, versions 0-3.
    CreatePartitionsResponse: TypeAlias = (
        kio.schema.create_partitions.v0.CreatePartitionsResponse
        | kio.schema.create_partitions.v1.CreatePartitionsResponse
        | kio.schema.create_partitions.v2.CreatePartitionsResponse
        | kio.schema.create_partitions.v3.CreatePartitionsResponse
    )
    #: API key 42, versions 0-2.
    DeleteGroupsRequest: TypeAlias = (
        kio.schema.delete_groups.v0.DeleteGroupsRequest
        | kio.schema.delete_groups.v1.DeleteGroupsRequest
        | kio.schema.delete_groups.v2.DeleteGroupsRequest
    )
    #: API key 42, versions 0-2.
    DeleteGroupsResponse: TypeAlias = (
        kio.schema.delete_groups.v0.DeleteGroupsResponse
        | kio.schema.delete_groups.v1.DeleteGroupsResponse
        | kio.schema.delete_groups.v2.DeleteGroupsResponse
    )
    #: API key 44, versions 0-1.
    IncrementalAlterConfigsRequest: TypeAlias = (
        kio.schema.incremental_alter_configs.v0.IncrementalAlterConfigsRequest
        | kio.schema.incremental_alter_configs.v1.IncrementalAlterConfigsRequest
    )
    #: API key 44, versions 0-1.
    IncrementalAlterConfigsResponse: TypeAlias = (
        kio.schema.incremental_alter_configs.v0.IncrementalAlterConfigsResponse
        | kio.schema.incremental_alter_configs.v1.IncrementalAlterConfigsResponse
    )
    #: API key 47, version 0.
    OffsetDeleteRequest: TypeAlias = kio.schema.offset_delete.v0.OffsetDeleteRequest
    #: API key 47, version 0.
    OffsetDeleteResponse: TypeAlias = kio.schema.offset_delete.v0.OffsetDeleteResponse
    #: API key 29, versions 1-3.
    DescribeAclsRequest: TypeAlias = (
        kio.schema.describe_acls.v1.DescribeAclsRequest
        | kio.schema.describe_acls.v2.DescribeAclsRequest
        | kio.schema.describe_acls.v3.DescribeAclsRequest
    )
    #: API key 29, versions 1-3.
    DescribeAclsResponse: TypeAlias = (
        kio.schema.describe_acls.v1.DescribeAclsResponse
        | kio.schema.describe_acls.v2.DescribeAclsResponse
        | kio.schema.describe_acls.v3.DescribeAclsResponse
    )
    #: API key 30, versions 1-3.
    CreateAclsRequest: TypeAlias = (
        kio.schema.create_acls.v1.CreateAclsRequest
        | kio.schema.create_acls.v2.CreateAclsRequest
        | kio.schema.create_acls.v3.CreateAclsRequest
    )
    #: API key 30, versions 1-3.
    CreateAclsResponse: TypeAlias = (
        kio.schema.create_acls.v1.CreateAclsResponse
        | kio.schema.create_acls.v2.CreateAclsResponse
        | kio.schema.create_acls.v3.CreateAclsResponse
    )
    #: API key 31, versions 1-3.
    DeleteAclsRequest: TypeAlias = (
        kio.schema.delete_acls.v1.DeleteAclsRequest
        | kio.schema.delete_acls.v2.DeleteAclsRequest
        | kio.schema.delete_acls.v3.DeleteAclsRequest
    )
    #: API key 31, versions 1-3.
    DeleteAclsResponse: TypeAlias = (
        kio.schema.delete_acls.v1.DeleteAclsResponse
        | kio.schema.delete_acls.v2.DeleteAclsResponse
        | kio.schema.delete_acls.v3.DeleteAclsResponse
    )
    #: API key 27, version 1.
    WriteTxnMarkersRequest: TypeAlias = kio.schema.write_txn_markers.v1.WriteTxnMarkersRequest
    #: API key 27, version 1.
    WriteTxnMarkersResponse: TypeAlias = kio.schema.write_txn_markers.v1.WriteTxnMarkersResponse
