"""The coordinators' internal topics through the protocol: Metadata marks
``__consumer_offsets`` and ``__transaction_state`` internal, and DeleteTopics,
CreatePartitions and DeleteRecords on them are refused (with Kafka's codes) without touching
their data, while the same requests on an ordinary topic go ahead."""

from __future__ import annotations

from pathlib import Path

import pytest

kafka = pytest.importorskip("kafka")

from datetime import timedelta

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import InvalidTopicError
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta
from support.server_process import ServerProcess

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch
from tierlog.server.api.produce import append_all
from tierlog.server.coordinator.internal_topics import (
    CONSUMER_OFFSETS,
    INTERNAL_TOPICS,
    TRANSACTION_STATE,
    AdminChange,
    is_internal,
    refusal,
)

SERVER_CONFIG = {"offsets.topic.num.partitions": 2, "transaction.state.log.num.partitions": 2}
SERVER_PER_TEST = True  # each test restarts its server or reads its data
INVALID_REQUEST = 42


@pytest.mark.parametrize("topic", [CONSUMER_OFFSETS, TRANSACTION_STATE, "orders",
                                   "__consumer_offsets2", "_transaction_state", "", None])
@pytest.mark.parametrize("change", list(AdminChange))
def test_refusal_names_only_internal_topics(topic: str | None, change: AdminChange) -> None:
    refused = refusal(topic, change)
    assert is_internal(topic) is (topic in INTERNAL_TOPICS)
    if topic in (CONSUMER_OFFSETS, TRANSACTION_STATE):
        assert refused is not None and topic in refused[1] and change.value in refused[1]
        assert int(refused[0]) == (
            17 if change in (AdminChange.DELETE_RECORDS, AdminChange.PRODUCE)
            else INVALID_REQUEST)
    else:
        assert refused is None


def test_internal_topics_are_marked_and_protected(server: ServerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=server.bootstrap)
    try:
        admin.create_topics([NewTopic("plain", 1, 1)])
        described = {t["name"]: t for t in admin.describe_topics()}
        assert described[CONSUMER_OFFSETS]["is_internal"] is True
        assert described[TRANSACTION_STATE]["is_internal"] is True
        assert described["plain"]["is_internal"] is False
        # A group commits, so __consumer_offsets holds data worth protecting.
        consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="keep",
                                 enable_auto_commit=False)
        try:
            consumer.assign([TopicPartition("plain", 0)])
            consumer.commit({TopicPartition("plain", 0): kafka.OffsetAndMetadata(0, "", -1)})
        finally:
            consumer.close()

        deleted = admin.delete_topics([CONSUMER_OFFSETS, TRANSACTION_STATE, "plain"],
                                      raise_errors=False)
        codes = {t["name"]: t["error_code"] for t in deleted["topics"]}
        assert codes == {CONSUMER_OFFSETS: INVALID_REQUEST, TRANSACTION_STATE: INVALID_REQUEST,
                         "plain": 0}
        grown = admin.create_partitions({CONSUMER_OFFSETS: 5}, raise_errors=False)
        assert [r.error_code for r in grown.results] == [INVALID_REQUEST]
        partition = next(p["partition_index"] for p in described[CONSUMER_OFFSETS]["partitions"])
        with pytest.raises(InvalidTopicError):
            admin.delete_records({TopicPartition(CONSUMER_OFFSETS, partition): 1})
        after = {t["name"]: t for t in admin.describe_topics()}
        assert len(after[CONSUMER_OFFSETS]["partitions"]) == 2 and "plain" not in after
        assert TRANSACTION_STATE in after
    finally:
        admin.close()
    # The committed offset is still there: nothing was deleted.
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="keep",
                             enable_auto_commit=False)
    try:
        assert consumer.committed(TopicPartition("plain", 0)) == 0
    finally:
        consumer.close()


def test_a_client_cannot_append_to_an_internal_topic(tmp_path: Path) -> None:
    """Coordinator records come only from the coordinators: a Produce to an internal topic is
    refused per partition (Kafka: "Cannot append to internal topic"), and nothing is written,
    while the same request's other topics are appended."""
    batch = build_batch([Record(key=b"forged", value=b"x")])
    request = ProduceRequest(acks=i16(1), timeout=i32Timedelta.parse(timedelta(seconds=30)),
                             topic_data=tuple(
        TopicProduceData(name=TopicName(name), partition_data=(
            PartitionProduceData(index=i32(0), records=batch),))
        for name in (CONSUMER_OFFSETS, "orders")))
    with LogManager.open(tmp_path / "data", {}, start_scheduler=False) as manager:
        manager.create_topic(CONSUMER_OFFSETS, 1, {"cleanup.policy": "compact"})
        manager.create_topic("orders", 1)
        outcomes = append_all(manager, request)
        assert [(name, code) for name, _, code, _ in outcomes[:1]] == [
            (CONSUMER_OFFSETS, ErrorCode.invalid_topic_exception)]
        assert outcomes[1][2] is not None and outcomes[1][3] is None  # appended
        assert manager.log(CONSUMER_OFFSETS, 0).log_end_offset == 0
        assert manager.log("orders", 0).log_end_offset == 1
