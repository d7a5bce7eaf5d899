"""The names: Kafka's MBeans through the jmx_exporter rules (tierlog.plugins.metrics.names).

The expected names below were worked out by hand from the rules of the Prometheus
jmx_exporter's examples/kafka-kraft-3_0_0.yml (github.com/prometheus/jmx_exporter), as a
dashboard built on that configuration sees them; then every sample a registry exports (storage
and broker metrics) is checked to be exactly what those rules make of its MBean.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from tierlog import Record
from tierlog.common.stats import perf_ns
from tierlog.manager.log_manager import LogManager
from tierlog.plugins.metrics import registry_for
from tierlog.plugins.metrics.catalog import METRICS, SCOPE_TAGS, Scrape
from tierlog.plugins.metrics.collector import StorageCollector, attributes
from tierlog.plugins.metrics.names import export, parse_mbean, safe_name, template, with_tags
from tierlog.server.api.fetch import PartitionRead
from tierlog.server.config import ServerConfig
from tierlog.server.server import Server


@pytest.mark.parametrize(("mbean", "attribute", "name", "labels"), [
    ("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=clicks", "Count",
     "kafka_server_brokertopicmetrics_bytesin_total", {"topic": "clicks"}),
    ("kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec", "Count",
     "kafka_server_brokertopicmetrics_bytesout_total", {}),
    ("kafka.server:type=BrokerTopicMetrics,name=FailedProduceRequestsPerSec,topic=a.b-c",
     "Count", "kafka_server_brokertopicmetrics_failedproducerequests_total", {"topic": "a.b-c"}),
    ("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyLagBytes,topic=t", "Value",
     "kafka_server_brokertopicmetrics_remotecopylagbytes", {"topic": "t"}),
    ("kafka.log:type=Log,name=LogEndOffset,topic=t,partition=3", "Value",
     "kafka_log_log_logendoffset", {"topic": "t", "partition": "3"}),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce", "Count",
     "kafka_network_requestmetrics_totaltimems_count", {"request": "Produce"}),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=FetchConsumer",
     "99thPercentile", "kafka_network_requestmetrics_totaltimems",
     {"request": "FetchConsumer", "quantile": "0.99"}),
    ("kafka.network:type=RequestMetrics,name=TotalTimeMs,request=Produce", "999thPercentile",
     "kafka_network_requestmetrics_totaltimems", {"request": "Produce", "quantile": "0.999"}),
    ("kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "50thPercentile",
     "kafka_log_logflushstats_logflushrateandtimems", {"quantile": "0.50"}),
    ("kafka.server:type=ReplicaManager,name=UnderReplicatedPartitions", "Value",
     "kafka_server_replicamanager_underreplicatedpartitions", {}),
    ("kafka.controller:type=KafkaController,name=ActiveControllerCount", "Value",
     "kafka_controller_kafkacontroller_activecontrollercount", {}),
    # The KRaft configuration's rule for attribute-named kafka.server metrics matches
    # `type=(.+)` across the listener tags, so they become part of the name.
    ("kafka.server:type=socket-server-metrics,listener=PLAINTEXT,networkProcessor=0",
     "connection-count",
     "kafka_server_socket_server_metrics_listener_plaintext_networkprocessor_0_connection_count",
     {}),
    # tierlog's own: the same rules with tierlog for kafka.
    ("tierlog.log:type=Log,name=RollsPerSec,topic=t,partition=0", "Count",
     "tierlog_log_log_rolls_total", {"topic": "t", "partition": "0"}),
])
def test_kafka_mbeans_get_the_jmx_exporter_names(mbean, attribute, name, labels):
    exported = export(mbean, attribute)
    assert exported is not None
    assert (exported.name, dict(exported.labels)) == (name, labels)


def test_what_no_rule_matches_is_not_exported():
    # Kafka's remote-storage thread pool lives outside kafka.*: the configuration drops it
    # (tierlog exports its own under tierlog.remote).
    assert export("org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,"
                  "name=RemoteLogReaderTaskQueueSize", "Value") is None
    assert export("kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec", "MeanRate") is None


def test_safe_names_and_bad_mbeans():
    assert safe_name("a--b__c.d") == "a_b_c_d"
    assert safe_name("9lives") == "_9lives"
    for bad in ("kafka.log", "kafka.log:type", "kafka.log:=x", "no domain:type=x"):
        with pytest.raises(ValueError, match="not an MBean name") as info:
            parse_mbean(bad)
        assert repr(bad) in str(info.value)


_TAG_VALUE = st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True)


@given(values=st.lists(_TAG_VALUE, min_size=2, max_size=2),
       metric=st.sampled_from([m for m in METRICS if m.scope != "listener"]))
def test_a_template_names_every_tag_value_as_the_rules_do(values, metric):
    keys = SCOPE_TAGS[metric.scope]
    tags = dict(zip(keys, values, strict=False))
    for attribute in attributes(metric):
        found = template(metric.mbean, keys, attribute)
        exported = export(with_tags(metric.mbean, tags), attribute)
        assert found is not None and exported is not None
        assert found.name == exported.name
        assert found.labels_for(values[:len(keys)]) == dict(exported.labels)


# -- every exported sample, storage and broker ----------------------------------------------


@pytest.fixture
def served(tmp_path, clock):
    """A manager with a topic that was produced to and fetched from, and a (not started)
    server over it whose request counters saw a Produce, a Fetch and a Metadata."""
    mgr = LogManager.open(tmp_path / "data", time_ms=clock, start_scheduler=False)
    server = Server(ServerConfig.from_properties({"log.dirs": str(tmp_path / "data"),
                                                  "listeners": "PLAINTEXT://127.0.0.1:0"}),
                    mgr)
    try:
        log = mgr.create_topic("clicks", 2)[0]
        info = log.append_records([Record(value=b"x" * 50)] * 5)
        log.flush()
        stats = server.services.request_stats
        for key in (0, 1, 3):
            stats.request_done(key.to_bytes(2, "big") + b"\x00\x07", perf_ns() - 2_000_000)
        stats.produced([("clicks", 0, info, None),
                        ("clicks", 1, ErrorCode.unknown_server_error, "boom"),
                        ("clicks", 1, ErrorCode.corrupt_message, "the client's own")])
        stats.fetched([PartitionRead(("clicks", 0), ErrorCode.none),
                       PartitionRead(("clicks", 1), ErrorCode.offset_out_of_range)])
        yield mgr, server
    finally:
        server.services.close()
        mgr.close()


def _expected(mgr: Any, server: Any) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample the catalog's metrics should export, named by applying the rules to
    each sample's MBean and attribute."""
    scrape = Scrape(mgr, server)
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for metric in METRICS:
        for keys, values, subject in scrape.samples(metric.scope):
            bean = with_tags(metric.mbean, dict(zip(keys, values, strict=True)))
            for attribute in attributes(metric):
                exported = export(bean, attribute)
                assert exported is not None, f"no rule exports {bean} {attribute}"
                value = metric.read(scrape, subject)
                if attribute == "Count" and isinstance(value, list):
                    value = float(sum(h.count for h in value))
                out[(exported.name, frozenset(exported.labels))] = \
                    value if not isinstance(value, list) else -1.0
    return out


def test_every_exported_sample_is_its_mbean_named_by_the_rules(served):
    mgr, server = served
    expected = _expected(mgr, server)
    got = {(s.name, frozenset(s.labels.items())): s.value
           for family in StorageCollector(mgr, server=server).collect()
           for s in family.samples}
    assert set(got) == set(expected)
    for key, value in expected.items():
        if value != -1.0:  # percentiles: their values are tested with the histograms
            assert got[key] == value, key


def test_the_server_counts_name_the_broker_metrics(served):
    mgr, server = served
    registry = registry_for(mgr, server=server)
    bt = "kafka_server_brokertopicmetrics_"

    def sample(name: str, **labels: str) -> float:
        found = registry.get_sample_value(name, labels)
        assert found is not None, (name, labels)
        return float(found)

    assert sample(bt + "totalproducerequests_total", topic="clicks") == 3
    assert sample(bt + "failedproducerequests_total", topic="clicks") == 1  # not the client's
    assert sample(bt + "totalfetchrequests_total", topic="clicks") == 2
    assert sample(bt + "failedfetchrequests_total") == 0  # out of range: the client's own
    assert sample(bt + "messagesin_total", topic="clicks") == 5
    for request in ("Produce", "FetchConsumer", "Metadata"):
        assert sample("kafka_network_requestmetrics_totaltimems_count", request=request) == 1
        assert sample("kafka_network_requestmetrics_totaltimems", request=request,
                      quantile="0.99") == pytest.approx(2, rel=0.2)
    assert sample("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert sample("kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert sample("kafka_server_socket_server_metrics_listener_plaintext_networkprocessor_0_"
                  "connection_count") == 0
    # Without the server, the broker's metrics are not there at all.
    storage_only = registry_for(mgr)
    assert storage_only.get_sample_value(
        "kafka_controller_kafkacontroller_activecontrollercount", {}) is None
    assert storage_only.get_sample_value(bt + "messagesin_total", {"topic": "clicks"}) == 5


def test_the_docs_table_is_the_catalogs():
    """docs/metrics.md lists every metric as the catalog and the rules name it."""
    from pathlib import Path

    from tierlog.plugins.metrics.export import catalog_table

    docs = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    assert catalog_table() in docs
