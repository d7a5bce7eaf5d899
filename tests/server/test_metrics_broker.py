"""The broker's metrics end to end: a real ``tierlog serve --metrics-port 0`` subprocess,
kafka-python producing and consuming in a group, and the endpoint scraped over HTTP and read
with prometheus_client's parser."""

from __future__ import annotations

import re
import urllib.request

import pytest

kafka = pytest.importorskip("kafka")

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from prometheus_client.parser import text_string_to_metric_families
from support.server_process import ServerProcess, start

BT = "kafka_server_brokertopicmetrics_"
CONNECTIONS = ("kafka_server_socket_server_metrics_listener_plaintext_networkprocessor_0_"
               "connection_count")


SERVER_ARGS = ["--metrics-port", "0"]


def scrape(server: ServerProcess) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the server's metrics endpoint (its URL is in the server's log)."""
    url = re.search(r"tierlog metrics on (http://\S+/metrics)", server.log_text())
    assert url, server.log_text()
    with urllib.request.urlopen(url.group(1), timeout=10) as response:
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
           **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    assert key in samples, f"no sample {name}{labels}"
    return samples[key]


def test_produce_fetch_and_a_group_show_as_kafka_dashboards_read_them(server):
    producer = KafkaProducer(bootstrap_servers=server.bootstrap, acks="all", linger_ms=5)
    for i in range(10):
        producer.send("clicks", value=b"click-%d" % i, partition=0)
    producer.flush()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=server.bootstrap, group_id="dashboards",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    try:
        consumer.assign([TopicPartition("clicks", 0)])
        got = [m for _, m in zip(range(10), consumer, strict=False)]
        assert len(got) == 10
        consumer.commit({TopicPartition("clicks", 0): OffsetAndMetadata(4, "", -1)})
        samples = scrape(server)  # the consumer is still connected
        assert sample(samples, CONNECTIONS) >= 1
    finally:
        consumer.close()

    assert sample(samples, BT + "messagesin_total", topic="clicks") == 10
    assert sample(samples, BT + "bytesin_total", topic="clicks") > 10 * len(b"click-0")
    assert sample(samples, BT + "bytesout_total", topic="clicks") > 10 * len(b"click-0")
    assert sample(samples, BT + "bytesout_total") >= sample(samples, BT + "bytesout_total",
                                                           topic="clicks")
    assert sample(samples, BT + "totalproducerequests_total", topic="clicks") >= 1
    assert sample(samples, BT + "failedproducerequests_total", topic="clicks") == 0
    assert sample(samples, BT + "totalfetchrequests_total", topic="clicks") >= 1
    assert sample(samples, BT + "failedfetchrequests_total", topic="clicks") == 0
    for request in ("Produce", "FetchConsumer", "Metadata", "OffsetCommit", "ApiVersions"):
        assert sample(samples, "kafka_network_requestmetrics_totaltimems_count",
                      request=request) >= 1
    assert sample(samples, "kafka_network_requestmetrics_totaltimems", request="Produce",
                  quantile="0.99") > 0
    assert sample(samples, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample(samples, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    # Consumer-group lag as kafka-exporter names it: the high watermark (10) minus the
    # committed offset (4).
    group = {"consumergroup": "dashboards", "topic": "clicks", "partition": "0"}
    assert sample(samples, "kafka_consumergroup_current_offset", **group) == 4
    assert sample(samples, "kafka_consumergroup_lag", **group) == 6
    assert sample(samples, "kafka_consumergroup_lag_sum", consumergroup="dashboards",
                  topic="clicks") == 6
    # 50 __consumer_offsets partitions, one of which holds the group's records: only it shows.
    offsets = [labels for name, labels in samples
               if name == "kafka_log_log_size" and ("topic", "__consumer_offsets") in labels]
    assert len(offsets) == 1
    assert sample(samples, "kafka_server_replicamanager_partitioncount") >= 51


def test_a_taken_metrics_port_stops_serve_naming_host_and_port(server, tmp_path):
    taken = re.search(r"tierlog metrics on http://([\d.]+):(\d+)/", server.log_text())
    assert taken
    with pytest.raises(RuntimeError) as info:
        start(tmp_path, args=["--metrics-port", taken.group(2)])
    assert f"{taken.group(1)}:{taken.group(2)}" in str(info.value)
    assert "in use" in str(info.value)
