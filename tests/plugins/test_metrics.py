"""The storage metrics: each one moves when its event happens, on real logs, a real tier (the
fault-injecting filesystem over a local directory) and prometheus_client's own parser.

Samples are read through the exported registry (``registry.get_sample_value``), so a test
also proves the name mapping and the labels.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.fault_fs import fault_storage

from tierlog import Record
from tierlog.manager.log_manager import LogManager
from tierlog.plugins.metrics import prometheus_text, registry_for, table
from tierlog.plugins.metrics.catalog import METRICS, SCOPE_TAGS
from tierlog.plugins.metrics.collector import attributes, sample_name

BT = "kafka_server_brokertopicmetrics_"


def _records(i: int, n: int = 10) -> list[Record]:
    return [Record(key=b"k%d" % j, value=b"value-%d-" % i + b"x" * 40) for j in range(n)]


def _fill(log: Any, start: int, count: int) -> None:
    for i in range(start, start + count):
        log.append_records(_records(i))


def value(registry: Any, name: str, topic: str | None = "t", partition: int | None = 0,
          **labels: str) -> float:
    """A sample's value (0 when absent would hide a missing metric: absent fails); tagged
    ``topic`` and ``partition`` unless None."""
    if partition is not None:
        labels = {"partition": str(partition), **labels}
    if topic is not None:
        labels = {"topic": topic, **labels}
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return float(found)


MANAGER_CONFIG = {"segment.bytes": 4096}


# -- the local log --------------------------------------------------------------------------

GENERAL = "tierlog_log_logappendstats_generalappendrateandtimems"
FLUSH = "kafka_log_logflushstats_logflushrateandtimems"
CLEANUP = "tierlog_log_logcleaner_cleanuprateandtimems"


def test_appends_count_records_and_bytes_on_both_paths_per_topic_and_in_all(manager):
    log = manager.create_topic("t", 2)[0]
    registry = registry_for(manager)
    assert value(registry, BT + "messagesin_total", partition=None) == 0
    first = log.append_records(_records(0))  # general path (arms the hot path)
    second = log.append_records(_records(1))  # the plain hot path
    manager.log("t", 1).append_records(_records(2))
    assert value(registry, BT + "messagesin_total", partition=None) == 30
    assert value(registry, BT + "messagesin_total", topic=None, partition=None) == 30
    assert value(registry, BT + "bytesin_total", partition=None) > \
        first.valid_bytes + second.valid_bytes
    assert value(registry, GENERAL + "_count", partition=None) == 2  # a first on each
    assert value(registry, GENERAL, partition=None, quantile="0.99") > 0
    log.append_records(_records(3), compression="gzip")  # compressed: the general path
    assert value(registry, BT + "messagesin_total", partition=None) == 40
    assert value(registry, GENERAL + "_count", partition=None) == 3


def test_flush_counts_only_a_flush_that_moves_the_recovery_point(manager):
    log = manager.create_topic("t", 1)[0]
    registry = registry_for(manager)
    before = value(registry, FLUSH + "_count", topic=None, partition=None)
    log.append_records(_records(0))
    log.flush()
    assert value(registry, FLUSH + "_count", topic=None, partition=None) == before + 1
    assert value(registry, FLUSH, topic=None, partition=None, quantile="0.50") > 0
    log.flush()  # nothing new: not a flush
    assert value(registry, FLUSH + "_count", topic=None, partition=None) == before + 1


def test_rolls_segments_size_and_offsets(manager):
    log = manager.create_topic("t", 2)[0]
    registry = registry_for(manager)
    assert value(registry, "kafka_log_log_numlogsegments") == 1
    _fill(log, 0, 30)  # 4 KiB segments: several rolls
    rolls = value(registry, "tierlog_log_log_rolls_total")
    assert rolls >= 2
    assert value(registry, "kafka_log_log_numlogsegments") == rolls + 1
    assert value(registry, "kafka_log_log_size") == log.size_in_bytes > 0
    assert value(registry, "kafka_log_log_logendoffset") == 300
    assert value(registry, "kafka_log_log_logstartoffset") == 0
    assert value(registry, "kafka_log_log_size", partition=1) == 0  # every partition


def test_counters_survive_a_topic_config_change(manager):
    """Altering a topic's config reopens its logs; their counters must not start again at
    zero (a counter reset reads as a spike or a gap on every dashboard)."""
    log = manager.create_topic("t", 1, config={"retention.bytes": 5000,
                                                "file.delete.delay.ms": 0})[0]
    registry = registry_for(manager)
    _fill(log, 0, 30)
    log.flush()
    manager.cleanup_logs()
    before = {name: value(registry, name, partition=part) for name, part in (
        (BT + "messagesin_total", None), (BT + "bytesin_total", None),
        ("tierlog_log_log_rolls_total", 0), (CLEANUP + "_count", None),
        ("tierlog_log_logcleaner_deletedsegments_total", 0))}
    flushes = value(registry, FLUSH + "_count", topic=None, partition=None)
    assert all(v > 0 for v in before.values()), before
    manager.alter_topic_config("t", {"retention.ms": 3_600_000})
    assert manager.log("t", 0) is not log  # reopened
    after = {name: value(registry, name, partition=part) for name, part in (
        (BT + "messagesin_total", None), (BT + "bytesin_total", None),
        ("tierlog_log_log_rolls_total", 0), (CLEANUP + "_count", None),
        ("tierlog_log_logcleaner_deletedsegments_total", 0))}
    assert after == before
    assert value(registry, FLUSH + "_count", topic=None, partition=None) >= flushes
    manager.log("t", 0).append_records(_records(99))
    assert value(registry, BT + "messagesin_total", partition=None) == \
        before[BT + "messagesin_total"] + 10


def test_all_topics_counters_keep_a_deleted_topics_counts(manager):
    """The all-topics samples never go down when a topic is deleted (a drop would read as a
    counter reset: a spike in every rate() over it); the topic's own samples go with it."""
    registry = registry_for(manager)
    manager.create_topic("kept", 1)[0].append_records(_records(0))
    gone = manager.create_topic("gone", 2)[0]
    gone.append_records(_records(1))
    gone.flush()
    every = (BT + "messagesin_total", FLUSH + "_count")
    before = [value(registry, name, topic=None, partition=None) for name in every]
    assert before[0] == 20
    manager.delete_topic("gone")
    assert [value(registry, name, topic=None, partition=None) for name in every] == before
    assert registry.get_sample_value(BT + "messagesin_total", {"topic": "gone"}) is None
    manager.log("kept", 0).append_records(_records(2))
    assert value(registry, BT + "messagesin_total", topic=None, partition=None) == 30


def test_idle_internal_partitions_are_left_out_unless_asked_for(manager):
    offsets = manager.create_topic("__consumer_offsets", 50,
                                   config={"cleanup.policy": "compact"})
    manager.create_topic("quiet", 3)
    offsets[7].append_records(_records(0))
    shown = {s.labels["partition"] for f in registry_for(manager).collect() for s in f.samples
             if s.name == "kafka_log_log_size" and s.labels["topic"] == "__consumer_offsets"}
    assert shown == {"7"}  # the one that holds records
    registry = registry_for(manager)
    assert value(registry, "kafka_log_log_size", topic="quiet", partition=2) == 0  # not internal
    assert value(registry, "kafka_server_replicamanager_partitioncount", topic=None,
                 partition=None) == 53  # counted all the same
    every = registry_for(manager, idle_internal=True)
    assert value(every, "kafka_log_log_size", topic="__consumer_offsets", partition=49) == 0


def test_deletions_are_counted_for_their_own_manager_and_topic_incarnation(
        manager, tmp_path, clock):
    """Events are process-wide: another manager's topic of the same name, or an earlier
    topic of the name deleted since, must not show in this manager's counts."""
    config = {"retention.bytes": 5000, "file.delete.delay.ms": 0}
    with LogManager.open(tmp_path / "other", {"segment.bytes": 4096}, time_ms=clock,
                         start_scheduler=False) as other:
        _fill(other.create_topic("t", 1, config=config)[0], 0, 40)
        other.cleanup_logs()
        assert value(registry_for(other), "tierlog_log_log_segmentsdeleted_total",
                     partition=None, reason="retention.bytes breached") > 0
    _fill(manager.create_topic("t", 1, config=config)[0], 0, 3)
    manager.cleanup_logs()
    assert registry_for(manager).get_sample_value(
        "tierlog_log_log_segmentsdeleted_total",
        {"topic": "t", "reason": "retention.bytes breached"}) is None


def test_a_cleanup_run_counts_its_time_and_what_retention_deleted(manager, clock):
    log = manager.create_topic("t", 1, config={"retention.bytes": 5000,
                                                "file.delete.delay.ms": 0})[0]
    registry = registry_for(manager)
    _fill(log, 0, 40)
    segments_before = len(log.segments)
    manager.cleanup_logs()
    assert value(registry, CLEANUP + "_count", partition=None) == 1
    deleted = value(registry, "tierlog_log_logcleaner_deletedsegments_total")
    assert deleted == segments_before - len(log.segments) > 0
    assert value(registry, "tierlog_log_logcleaner_deletedbytes_total") > 0
    # ... and the plugin's event hook saw the same deletions, by reason.
    assert value(registry, "tierlog_log_log_segmentsdeleted_total", partition=None,
                 reason="retention.bytes breached") == deleted


def test_compaction_counts_the_bytes_it_rewrote(manager):
    log = manager.create_topic("t", 1, config={"cleanup.policy": "compact",
                                                "min.cleanable.dirty.ratio": 0.01})[0]
    registry = registry_for(manager)
    for i in range(40):  # the same ten keys over and over
        log.append_records(_records(i))
    log.roll()
    manager.cleanup_logs({"compact"})
    assert value(registry, CLEANUP + "_count", partition=None) == 1
    read = value(registry, "tierlog_log_logcleaner_compactedbytesread_total")
    written = value(registry, "tierlog_log_logcleaner_compactedbyteswritten_total")
    assert read > written > 0


# -- the remote tier -------------------------------------------------------------------------


@pytest.fixture
def tiered(tmp_path, clock):
    """A LogManager on the faulty tier, one tiered topic "t" with 20 batches appended."""
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty",
              "remote.storage.url": f"faulty://{tmp_path}/tier", "local.retention.bytes": 0,
              "file.delete.delay.ms": 0}
    with fault_storage() as fs:
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("t", 1)[0]
            _fill(log, 0, 20)
            yield mgr, log, fs
        finally:
            mgr.close()


def rv(registry: Any, name: str, topic: str | None = "t", **labels: str) -> float:
    """A per-topic (BrokerTopicMetrics) sample's value."""
    return value(registry, BT + name, topic=topic, partition=None, **labels)


def mv(registry: Any, name: str, **labels: str) -> float:
    """A sample of the whole manager (no topic or partition)."""
    return value(registry, name, topic=None, partition=None, **labels)


def test_copies_fetches_and_the_index_cache_move_their_metrics(tiered):
    mgr, log, _ = tiered
    registry = registry_for(mgr)
    lag_segments = rv(registry, "remotecopylagsegments")
    lag_bytes = rv(registry, "remotecopylagbytes")
    assert lag_segments >= 2 and lag_bytes > 0
    assert rv(registry, "remotecopylagbytes", topic=None) == lag_bytes  # all topics
    mgr.tier_now()
    copied = rv(registry, "remotecopyrequests_total")
    assert copied == lag_segments
    assert rv(registry, "remotecopybytes_total") == lag_bytes
    assert rv(registry, "remotecopyerrors_total") == 0
    assert rv(registry, "remotecopylagsegments") == 0
    assert rv(registry, "remotelogsizebytes") == lag_bytes
    assert rv(registry, "remotelogmetadatacount") == copied
    assert log.local_log_start_offset > 0  # offset 0 is read from the tier now
    cache = "tierlog_remote_remoteindexcache_"
    misses = mv(registry, cache + "misses_total")
    info = log.read(0)
    assert info.from_remote
    assert rv(registry, "remotefetchrequests_total") == 1
    assert rv(registry, "remotefetchbytes_total") >= info.data.size_in_bytes() > 0
    assert mv(registry, cache + "misses_total") == misses + 1
    hits = mv(registry, cache + "hits_total")
    log.read(0)
    assert mv(registry, cache + "hits_total") == hits + 1
    assert mv(registry, cache + "misses_total") == misses + 1
    assert mv(registry, "tierlog_remote_remotestoragethreadpool_"
                        "remotelogreadertaskqueuesize") == 0


def test_a_failing_tier_counts_errors_and_the_copy_lag_grows(tiered):
    mgr, log, fs = tiered
    registry = registry_for(mgr)
    fs.fail("put_file", nth=1)
    mgr.tier_now()
    assert rv(registry, "remotecopyerrors_total") == 1
    assert rv(registry, "remotecopyrequests_total") == 1
    assert rv(registry, "remotecopybytes_total") == 0
    lag = rv(registry, "remotecopylagbytes")
    _fill(log, 20, 20)  # the remote is still failing: local disk grows
    fs.fail("put_file", nth=1)
    mgr.tier_now()
    assert rv(registry, "remotecopylagbytes") > lag
    assert rv(registry, "remotecopyerrors_total") == 2


def test_a_failing_remote_fetch_counts_an_error(tiered):
    mgr, log, fs = tiered
    registry = registry_for(mgr)
    mgr.tier_now()
    fs.fail("cat_file", nth=1)
    with pytest.raises(Exception):  # noqa: B017 - whichever storage error the tier raises
        log.read(0)
    assert rv(registry, "remotefetcherrors_total") == 1
    assert rv(registry, "remotefetchrequests_total") == 1


def test_remote_deletes_are_counted(tiered):
    mgr, log, _ = tiered
    registry = registry_for(mgr)
    mgr.tier_now()
    copied = rv(registry, "remotecopyrequests_total")
    log.delete_records_before(log.high_watermark)  # everything copied is below the start
    mgr.tier_now()
    assert rv(registry, "remotedeleterequests_total") == copied
    assert rv(registry, "remotedeleteerrors_total") == 0
    assert rv(registry, "remotedeletelagsegments") == 0


def test_index_cache_evictions_are_counted(tmp_path, clock):
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty",
              "remote.storage.url": f"faulty://{tmp_path}/tier", "local.retention.bytes": 0,
              "remote.log.index.file.cache.total.size.bytes": 1, "index.interval.bytes": 128}
    with fault_storage():
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("t", 1)[0]
            _fill(log, 0, 20)
            mgr.tier_now()
            registry = registry_for(mgr)
            log.read(0)
            log.read(log.local_log_start_offset - 1)  # another remote segment
            assert mv(registry, "tierlog_remote_remoteindexcache_evictions_total") >= 1
        finally:
            mgr.close()


# -- the export ----------------------------------------------------------------------------


def _family_names(metric: Any) -> set[str]:
    """The family names a storage metric is exported under (as the text parser names them)."""
    keys = SCOPE_TAGS[metric.scope]
    named = [sample_name(metric, keys, tuple("x" for _ in keys), a) for a in attributes(metric)]
    return {found[0].removesuffix("_total").removesuffix("_count")
            for found in named if found is not None}


def test_the_registry_text_parses_and_names_every_metric(tiered):
    mgr, _, _ = tiered
    mgr.tier_now()
    families = {f.name: f for f in text_string_to_metric_families(
        prometheus_text(registry_for(mgr)))}
    for metric in METRICS:
        if metric.scope in ("broker", "broker_topic", "request", "listener"):
            continue  # the server's: tests/test_metrics_broker.py
        for base in _family_names(metric):
            assert base in families, metric.mbean
            assert families[base].documentation == metric.help
    assert families[BT + "remotecopybytes"].type == "counter"
    assert families[FLUSH].type == "summary"
    assert families["kafka_log_log_size"].type == "gauge"


def test_a_failing_metric_or_collector_leaves_the_others_and_the_engine(manager, caplog):
    from prometheus_client.core import GaugeMetricFamily

    from tierlog.plugins.metrics import catalog
    from tierlog.plugins.metrics.collector import StorageCollector

    log = manager.create_topic("t", 1)[0]

    def broken(scrape: Any, log_: Any) -> float:
        raise RuntimeError("reader exploded")

    class Exploding:
        def collect(self) -> Any:
            raise RuntimeError("collector exploded")

    class Fine:
        def collect(self) -> Any:
            yield GaugeMetricFamily("fine_gauge", "still here", value=7)

    bad = catalog.Metric("tierlog.test:type=Test,name=Broken", "gauge", "partition",
                         "always fails", broken)
    good = catalog.Metric("tierlog.test:type=Test,name=Good", "gauge", "partition",
                          "always 1", lambda scrape, log_: 1)
    registry = registry_for(manager, StorageCollector(manager, (bad, good)),
                            Exploding(), Fine())
    log.append_records(_records(0))
    text = prometheus_text(registry)
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"kafka_log_log_size", "fine_gauge", "tierlog_test_test_good",
            BT + "messagesin"} <= names
    assert "reader exploded" in caplog.text and "collector exploded" in caplog.text
    assert log.append_records(_records(1)).last_offset == 19  # the engine goes on


def test_table_shows_one_line_per_sample(manager):
    manager.create_topic("t", 1)[0].append_records(_records(0))
    text = table(registry_for(manager))
    assert "kafka_log_log_logendoffset{topic=t,partition=0}" in text
    line = next(ln for ln in text.splitlines()
                if ln.startswith(BT + "messagesin_total{topic=t}"))
    assert line.split()[-1] == "10"


def test_every_metric_has_a_distinct_name_from_the_rules():
    names = [frozenset(_family_names(m)) for m in METRICS
             if m.scope != "listener"]  # its name carries the listener: tested with a server
    assert len(set(names)) == len(names)
    assert all(names)
