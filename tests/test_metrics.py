"""The storage metrics: each one moves when its event happens, on real logs, a real tier (the
fault-injecting filesystem over a local directory) and prometheus_client's own parser.

Samples are read through the exported registry (``registry.get_sample_value``), so a test
also proves the name mapping and the labels.
"""

from __future__ import annotations

from typing import Any

import pytest
from faulty_fs import faulty_storage
from prometheus_client.parser import text_string_to_metric_families

from tierlog import Record
from tierlog.manager import LogManager
from tierlog.plugins.metrics import prometheus_text, registry_for, table
from tierlog.plugins.metrics.catalog import METRICS
from tierlog.plugins.metrics.names import prometheus_name

BT = "kafka_server_broker_topic_metrics_"


def _records(i: int, n: int = 10) -> list[Record]:
    return [Record(key=b"k%d" % j, value=b"value-%d-" % i + b"x" * 40) for j in range(n)]


def _fill(log: Any, start: int, count: int) -> None:
    for i in range(start, start + count):
        log.append_records(_records(i))


def value(registry: Any, name: str, topic: str | None = "t", partition: int = 0,
          **labels: str) -> float:
    """A sample's value (0 when absent would hide a missing metric: absent fails)."""
    if topic is not None:
        labels = {"topic": topic, "partition": str(partition), **labels}
    found = registry.get_sample_value(name, labels)
    assert found is not None, f"no sample {name}{labels}"
    return float(found)


@pytest.fixture
def manager(tmp_path, clock):
    mgr = LogManager.open(tmp_path / "data", {"segment.bytes": 4096}, time_ms=clock,
                          start_scheduler=False)
    yield mgr
    mgr.close()


# -- the local log --------------------------------------------------------------------------


def test_appends_count_records_and_bytes_on_both_paths(manager):
    log = manager.create_topic("t", 1)[0]
    registry = registry_for(manager)
    assert value(registry, BT + "messages_in_total") == 0
    first = log.append_records(_records(0))  # general path (arms the hot path)
    second = log.append_records(_records(1))  # the plain hot path
    assert value(registry, BT + "messages_in_total") == 20
    assert value(registry, BT + "bytes_in_total") == first.valid_bytes + second.valid_bytes
    assert value(registry, "tierlog_log_log_append_stats_general_append_seconds_count") == 1
    assert value(registry, "tierlog_log_log_append_stats_general_append_seconds_sum") > 0
    log.append_records(_records(2), compression="gzip")  # compressed: the general path
    assert value(registry, BT + "messages_in_total") == 30
    assert value(registry, "tierlog_log_log_append_stats_general_append_seconds_count") == 2


def test_flush_counts_only_a_flush_that_moves_the_recovery_point(manager):
    log = manager.create_topic("t", 1)[0]
    registry = registry_for(manager)
    name = "kafka_log_log_flush_stats_log_flush_seconds_count"
    before = value(registry, name)
    log.append_records(_records(0))
    log.flush()
    assert value(registry, name) == before + 1
    assert value(registry, "kafka_log_log_flush_stats_log_flush_seconds_sum") > 0
    log.flush()  # nothing new: not a flush
    assert value(registry, name) == before + 1


def test_rolls_segments_size_and_offsets(manager):
    log = manager.create_topic("t", 2)[0]
    registry = registry_for(manager)
    assert value(registry, "kafka_log_log_num_log_segments") == 1
    _fill(log, 0, 30)  # 4 KiB segments: several rolls
    rolls = value(registry, "tierlog_log_log_rolls_total")
    assert rolls >= 2
    assert value(registry, "kafka_log_log_num_log_segments") == rolls + 1
    assert value(registry, "kafka_log_log_size") == log.size_in_bytes > 0
    assert value(registry, "kafka_log_log_log_end_offset") == 300
    assert value(registry, "kafka_log_log_log_start_offset") == 0
    assert value(registry, "kafka_log_log_size", partition=1) == 0  # every partition


def test_deletions_are_counted_for_their_own_manager_and_topic_incarnation(
        manager, tmp_path, clock):
    """Events are process-wide: another manager's topic of the same name, or an earlier
    topic of the name deleted since, must not show in this manager's counts."""
    config = {"retention.bytes": 5000, "file.delete.delay.ms": 0}
    with LogManager.open(tmp_path / "other", {"segment.bytes": 4096}, time_ms=clock,
                         start_scheduler=False) as other:
        _fill(other.create_topic("t", 1, config=config)[0], 0, 40)
        other.cleanup_logs()
        assert value(registry_for(other), "tierlog_log_log_segments_deleted_total",
                     reason="retention.bytes breached") > 0
    _fill(manager.create_topic("t", 1, config=config)[0], 0, 3)
    manager.cleanup_logs()
    assert registry_for(manager).get_sample_value(
        "tierlog_log_log_segments_deleted_total",
        {"topic": "t", "partition": "0", "reason": "retention.bytes breached"}) is None


def test_a_cleanup_run_counts_its_time_and_what_retention_deleted(manager, clock):
    log = manager.create_topic("t", 1, config={"retention.bytes": 5000,
                                                "file.delete.delay.ms": 0})[0]
    registry = registry_for(manager)
    _fill(log, 0, 40)
    segments_before = len(log.segments)
    manager.cleanup_logs()
    assert value(registry, "tierlog_log_log_cleaner_cleanup_seconds_count") == 1
    deleted = value(registry, "tierlog_log_log_cleaner_deleted_segments_total")
    assert deleted == segments_before - len(log.segments) > 0
    assert value(registry, "tierlog_log_log_cleaner_deleted_bytes_total") > 0
    # ... and the plugin's event hook saw the same deletions, by reason.
    assert value(registry, "tierlog_log_log_segments_deleted_total",
                 reason="retention.bytes breached") == deleted


def test_compaction_counts_the_bytes_it_rewrote(manager):
    log = manager.create_topic("t", 1, config={"cleanup.policy": "compact",
                                                "min.cleanable.dirty.ratio": 0.01})[0]
    registry = registry_for(manager)
    for i in range(40):  # the same ten keys over and over
        log.append_records(_records(i))
    log.roll()
    manager.cleanup_logs({"compact"})
    assert value(registry, "tierlog_log_log_cleaner_cleanup_seconds_count") == 1
    read = value(registry, "tierlog_log_log_cleaner_compacted_bytes_read_total")
    written = value(registry, "tierlog_log_log_cleaner_compacted_bytes_written_total")
    assert read > written > 0


# -- the remote tier -------------------------------------------------------------------------


@pytest.fixture
def tiered(tmp_path, clock):
    """A LogManager on the faulty tier, one tiered topic "t" with 20 batches appended."""
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty",
              "remote.storage.url": f"faulty://{tmp_path}/tier", "local.retention.bytes": 0,
              "file.delete.delay.ms": 0}
    with faulty_storage() as fs:
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("t", 1)[0]
            _fill(log, 0, 20)
            yield mgr, log, fs
        finally:
            mgr.close()


def test_copies_fetches_and_the_index_cache_move_their_metrics(tiered):
    mgr, log, _ = tiered
    registry = registry_for(mgr)
    lag_segments = value(registry, BT + "remote_copy_lag_segments")
    lag_bytes = value(registry, BT + "remote_copy_lag_bytes")
    assert lag_segments >= 2 and lag_bytes > 0
    mgr.tier_now()
    copied = value(registry, BT + "remote_copy_requests_total")
    assert copied == lag_segments
    assert value(registry, BT + "remote_copy_bytes_total") == lag_bytes
    assert value(registry, BT + "remote_copy_errors_total") == 0
    assert value(registry, BT + "remote_copy_lag_segments") == 0
    assert value(registry, BT + "remote_log_size_bytes") == lag_bytes
    assert value(registry, BT + "remote_log_metadata_count") == copied
    assert log.local_log_start_offset > 0  # offset 0 is read from the tier now
    cache = "tierlog_log_remote_remote_index_cache_"
    misses = value(registry, cache + "misses_total", topic=None)
    info = log.read(0)
    assert info.from_remote
    assert value(registry, BT + "remote_fetch_requests_total") == 1
    assert value(registry, BT + "remote_fetch_bytes_total") >= info.data.size_in_bytes() > 0
    assert value(registry, cache + "misses_total", topic=None) == misses + 1
    hits = value(registry, cache + "hits_total", topic=None)
    log.read(0)
    assert value(registry, cache + "hits_total", topic=None) == hits + 1
    assert value(registry, cache + "misses_total", topic=None) == misses + 1
    assert value(registry, "org_apache_kafka_storage_internals_log_remote_storage_thread_pool_"
                           "remote_log_reader_task_queue_size", topic=None) == 0


def test_a_failing_tier_counts_errors_and_the_copy_lag_grows(tiered):
    mgr, log, fs = tiered
    registry = registry_for(mgr)
    fs.fail("put_file")
    mgr.tier_now()
    assert value(registry, BT + "remote_copy_errors_total") == 1
    assert value(registry, BT + "remote_copy_requests_total") == 1
    assert value(registry, BT + "remote_copy_bytes_total") == 0
    lag = value(registry, BT + "remote_copy_lag_bytes")
    _fill(log, 20, 20)  # the remote is still failing: local disk grows
    fs.fail("put_file")
    mgr.tier_now()
    assert value(registry, BT + "remote_copy_lag_bytes") > lag
    assert value(registry, BT + "remote_copy_errors_total") == 2


def test_a_failing_remote_fetch_counts_an_error(tiered):
    mgr, log, fs = tiered
    registry = registry_for(mgr)
    mgr.tier_now()
    fs.fail("cat_file")
    with pytest.raises(Exception):  # noqa: B017 - whichever storage error the tier raises
        log.read(0)
    assert value(registry, BT + "remote_fetch_errors_total") == 1
    assert value(registry, BT + "remote_fetch_requests_total") == 1


def test_remote_deletes_are_counted(tiered):
    mgr, log, _ = tiered
    registry = registry_for(mgr)
    mgr.tier_now()
    copied = value(registry, BT + "remote_copy_requests_total")
    log.delete_records_before(log.high_watermark)  # everything copied is below the start
    mgr.tier_now()
    assert value(registry, BT + "remote_delete_requests_total") == copied
    assert value(registry, BT + "remote_delete_errors_total") == 0
    assert value(registry, BT + "remote_delete_lag_segments") == 0


def test_index_cache_evictions_are_counted(tmp_path, clock):
    config = {"segment.bytes": 2048, "remote.storage.enable": True,
              "remote.storage.manager": "faulty",
              "remote.storage.url": f"faulty://{tmp_path}/tier", "local.retention.bytes": 0,
              "remote.log.index.file.cache.total.size.bytes": 1, "index.interval.bytes": 128}
    with faulty_storage():
        mgr = LogManager.open(tmp_path / "data", config, time_ms=clock, start_scheduler=False)
        try:
            log = mgr.create_topic("t", 1)[0]
            _fill(log, 0, 20)
            mgr.tier_now()
            registry = registry_for(mgr)
            log.read(0)
            log.read(log.local_log_start_offset - 1)  # another remote segment
            name = "tierlog_log_remote_remote_index_cache_evictions_total"
            assert value(registry, name, topic=None) >= 1
        finally:
            mgr.close()


# -- the export ----------------------------------------------------------------------------


def test_the_registry_text_parses_and_names_every_metric(tiered):
    mgr, _, _ = tiered
    mgr.tier_now()
    families = {f.name: f for f in text_string_to_metric_families(
        prometheus_text(registry_for(mgr)))}
    for metric in METRICS:
        base = metric.prometheus.removesuffix("_total")
        assert base in families, metric.mbean
        assert families[base].documentation == metric.help
    assert families[BT + "remote_copy_bytes"].type == "counter"
    assert families["kafka_log_log_flush_stats_log_flush_seconds"].type == "summary"
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
            BT + "messages_in"} <= names
    assert "reader exploded" in caplog.text and "collector exploded" in caplog.text
    assert log.append_records(_records(1)).last_offset == 19  # the engine goes on


def test_table_shows_one_line_per_sample(manager):
    manager.create_topic("t", 1)[0].append_records(_records(0))
    text = table(registry_for(manager))
    assert "kafka_log_log_log_end_offset{topic=t,partition=0}" in text
    line = next(ln for ln in text.splitlines() if ln.startswith(BT + "messages_in_total"))
    assert line.split()[-1] == "10"


def test_every_metric_has_a_distinct_valid_name():
    names = [m.prometheus for m in METRICS]
    assert len(set(names)) == len(names)
    for metric in METRICS:
        assert metric.prometheus == prometheus_name(metric.mbean, metric.kind)
