"""The metrics' homes on their own: the Kafka -> Prometheus name mapping, the counter path
(tierlog.stats), the HTTP endpoint and the two CLI front doors (``tierlog metrics``,
``--metrics-port``)."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import urllib.request

import pytest
from cli_runner import tierlog
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tierlog import Record
from tierlog.manager import LogManager
from tierlog.plugins.metrics import serve_metrics
from tierlog.plugins.metrics.names import parse_mbean, prometheus_name, snake
from tierlog.stats import LogStats

PROMETHEUS_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


# -- names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("mbean", "kind", "expected"), [
    ("kafka.server:type=BrokerTopicMetrics,name=RemoteCopyBytesPerSec", "counter",
     "kafka_server_broker_topic_metrics_remote_copy_bytes_total"),
    ("kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "timer",
     "kafka_log_log_flush_stats_log_flush_seconds"),
    ("kafka.log:type=Log,name=NumLogSegments", "gauge", "kafka_log_log_num_log_segments"),
    ("kafka.log:type=LogCleaner,name=max-clean-time-secs", "gauge",
     "kafka_log_log_cleaner_max_clean_time_secs"),
    (("org.apache.kafka.storage.internals.log:type=RemoteStorageThreadPool,"
     "name=RemoteLogReaderTaskQueueSize"),
     "gauge",
     ("org_apache_kafka_storage_internals_log_remote_storage_thread_pool_"
      "remote_log_reader_task_queue_size")),
    ("tierlog.log.remote:type=RemoteLogManager,name=CopyThrottleTimeMs", "counter",
     "tierlog_log_remote_remote_log_manager_copy_throttle_time_seconds_total"),
])
def test_kafka_names_map_to_prometheus_names(mbean, kind, expected):
    assert prometheus_name(mbean, kind) == expected


def test_bad_names_are_refused_with_the_name():
    with pytest.raises(ValueError, match="Size"):
        parse_mbean("kafka.log:name=Size")
    with pytest.raises(ValueError, match="RateAndTimeMs"):
        prometheus_name("kafka.log:type=Log,name=Size", "timer")


_WORD = st.from_regex(r"[A-Z][a-z]{1,6}", fullmatch=True)
_CAMEL = st.lists(_WORD, min_size=1, max_size=4).map("".join)


@given(group=st.lists(st.from_regex(r"[a-z]{1,6}", fullmatch=True), min_size=1,
                      max_size=3).map(".".join),
       type_=_CAMEL, name=_CAMEL, kind=st.sampled_from(["counter", "gauge"]))
def test_every_mapped_name_is_a_valid_snake_case_prometheus_name(group, type_, name, kind):
    mapped = prometheus_name(f"{group}:type={type_},name={name}", kind)
    assert PROMETHEUS_NAME.match(mapped)
    assert mapped == mapped.lower() and "__" not in mapped
    assert mapped.startswith(group.replace(".", "_") + "_" + snake(type_))
    assert mapped.endswith("_total") == (kind == "counter")


@given(_CAMEL)
def test_snake_is_idempotent_and_keeps_the_words(text):
    once = snake(text)
    assert snake(once) == once
    assert once.replace("_", "") == text.lower()


# -- the counter path -------------------------------------------------------------------------


def test_remote_counters_count_requests_bytes_and_errors():
    stats = LogStats()
    with stats.remote_copy(100):
        pass
    with pytest.raises(OSError), stats.remote_copy(50):
        raise OSError("tier down")
    with stats.remote_fetch():
        stats.remote_fetched(30)
    with pytest.raises(TimeoutError), stats.remote_fetch():
        raise TimeoutError
    with pytest.raises(OSError), stats.remote_delete():
        raise OSError
    snap = stats.snapshot()
    assert (snap["remote_copy_requests"], snap["remote_copy_bytes"],
            snap["remote_copy_errors"]) == (2, 100, 1)
    assert (snap["remote_fetch_requests"], snap["remote_fetch_bytes"],
            snap["remote_fetch_errors"]) == (2, 30, 1)
    assert (snap["remote_delete_requests"], snap["remote_delete_errors"]) == (1, 1)


def test_remote_counters_lose_nothing_across_threads():
    stats = LogStats()

    def fetch() -> None:
        for _ in range(2000):
            with stats.remote_fetch():
                stats.remote_fetched(1)

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert stats.remote_fetch_requests == stats.remote_fetch_bytes == 8000


# -- the endpoint and the CLI ---------------------------------------------------------------


def _records(n: int) -> list[Record]:
    return [Record(key=b"k%d" % i, value=b"v" * 50) for i in range(n)]


def test_serve_metrics_serves_the_registry_on_an_ephemeral_loopback_port(tmp_path):
    mgr = LogManager.open(tmp_path / "data", start_scheduler=False)
    try:
        mgr.create_topic("t", 1)[0].append_records(_records(5))
        served = serve_metrics(mgr, 0)
        try:
            assert served.host == "127.0.0.1" and served.port > 0
            with urllib.request.urlopen(served.url, timeout=10) as response:
                text = response.read().decode()
        finally:
            served.close()
    finally:
        mgr.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    [sample] = [s for s in families["kafka_server_broker_topic_metrics_messages_in"].samples
                if s.name.endswith("_total")]
    assert sample.labels == {"topic": "t", "partition": "0"} and sample.value == 5


def test_tierlog_metrics_prints_a_snapshot(tmp_path):
    data = tmp_path / "data"
    tierlog("topics", "--create", "--topic", "t", "--partitions", "2", "--data-dir", data)
    tierlog("produce", "--topic", "t", "--partition", "1", "--data-dir", data,
            stdin="a\nb\nc\n")
    out = tierlog("metrics", "--data-dir", data).stdout
    end = [ln for ln in out.splitlines()
           if ln.startswith("kafka_log_log_log_end_offset{topic=t,partition=1}")]
    assert len(end) == 1 and end[0].split()[-1] == "3"
    text = tierlog("metrics", "--format", "prometheus", "--data-dir", data).stdout
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"kafka_log_log_size", "kafka_log_log_num_log_segments"} <= names


def test_metrics_port_serves_while_produce_runs(tmp_path):
    data = tmp_path / "data"
    tierlog("topics", "--create", "--topic", "t", "--data-dir", data)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tierlog.cli", "produce", "--topic", "t", "--batch-size", "1",
         "--metrics-port", "0", "--data-dir", str(data)],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stderr is not None and proc.stdin is not None
        line = proc.stderr.readline().decode()  # "... tierlog metrics on http://...:PORT/..."
        url = re.search(r"http://127\.0\.0\.1:\d+/metrics", line)
        assert url, line
        proc.stdin.write(b"one\ntwo\n")
        proc.stdin.flush()
        with urllib.request.urlopen(url.group(0), timeout=10) as response:
            text = response.read().decode()
        assert "kafka_log_log_size" in text
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
