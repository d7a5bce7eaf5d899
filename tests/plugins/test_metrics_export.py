"""The metrics' homes on their own: the counter path (tierlog.common.stats: counters and
histograms), the HTTP endpoint and the CLI front doors (``tierlog metrics``,
``--metrics-port``/``--metrics-host``). The names are tests/test_metrics_names.py's."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli_runner import tierlog

from tierlog import Record
from tierlog.common.stats import Histogram, LogStats, percentiles
from tierlog.errors import MetricsBindError
from tierlog.manager.log_manager import LogManager
from tierlog.plugins.metrics import serve_metrics

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


class FakeClock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


MS = 1_000_000
WINDOW = 60_000 * MS


def test_histogram_percentiles_are_within_an_eighth_of_the_true_value():
    clock = FakeClock()
    times = Histogram(WINDOW, clock)
    for ms in range(1, 1001):  # 1 ms .. 1 s
        times.record(ms * MS)
    p50, p75, p95, p98, p99, p999 = times.percentiles()
    for got, true in ((p50, 500), (p75, 750), (p95, 950), (p99, 990), (p999, 999)):
        assert abs(got - true) <= true / 8, (got, true)
    assert p50 < p75 < p95 <= p98 <= p99 <= p999
    assert (times.count, times.total_ns) == (1000, sum(range(1, 1001)) * MS)


def test_histogram_percentiles_follow_the_recent_past_and_the_count_does_not():
    clock = FakeClock()
    times = Histogram(WINDOW, clock)
    for _ in range(100):
        times.record(100 * MS)
    clock.ns = WINDOW + 1  # a window later: still in the previous window
    times.record(1 * MS)
    assert times.percentiles([0.5])[0] == pytest.approx(100, rel=1 / 8)
    clock.ns = 2 * WINDOW + 2  # the 100 ms events are two windows old: gone
    times.record(1 * MS)
    assert times.percentiles([0.5])[0] == pytest.approx(1, rel=1 / 8)
    clock.ns = 10 * WINDOW  # nothing recent at all
    assert times.percentiles([0.5, 0.99]) == [0.0, 0.0]
    assert times.count == 102


def test_histograms_merge_and_extremes_are_kept():
    clock = FakeClock()
    fast, slow = Histogram(WINDOW, clock), Histogram(WINDOW, clock)
    for _ in range(99):
        fast.record(0)  # under a microsecond
    slow.record(3_600_000 * MS)  # an hour
    assert percentiles([fast, slow], [0.5, 0.999]) == [0.0, pytest.approx(3_600_000, rel=1 / 8)]
    slow.record(-5)  # a clock step back counts as zero, never fails
    slow.record(10**20)  # beyond the largest bucket: counted in it
    assert slow.count == 3


def test_log_stats_snapshot_shows_timers_as_count_and_total():
    stats = LogStats()
    stats.record_flush(5 * MS)
    stats.record_general_append(2 * MS)
    snap = stats.snapshot()
    assert (snap["flush_time_count"], snap["flush_time_ns"]) == (1, 5 * MS)
    assert (snap["general_append_time_count"], snap["general_append_time_ns"]) == (1, 2 * MS)
    assert snap["cleanup_time_count"] == 0


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
    samples = {tuple(s.labels.items()): s.value
               for s in families["kafka_server_brokertopicmetrics_messagesin"].samples}
    assert samples == {(("topic", "t"),): 5, (): 5}


def test_a_taken_port_is_refused_naming_the_host_and_port(tmp_path):
    with LogManager.open(tmp_path / "data", start_scheduler=False) as mgr:
        served = serve_metrics(mgr, 0, "127.0.0.1")
        try:
            with pytest.raises(MetricsBindError, match=rf"127\.0\.0\.1:{served.port}\b"):
                serve_metrics(mgr, served.port, "127.0.0.1")
        finally:
            served.close()
        with pytest.raises(OSError, match=r"no-such-host\.invalid:0"):
            serve_metrics(mgr, 0, "no-such-host.invalid")


def test_metrics_host_picks_the_address_listened_on(tmp_path):
    data = tmp_path / "data"
    tierlog("topics", "--create", "--topic", "t", "--data-dir", data)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tierlog.cli", "produce", "--topic", "t", "--metrics-port", "0",
         "--metrics-host", "127.0.0.2", "--data-dir", str(data)],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stderr is not None and proc.stdin is not None
        line = proc.stderr.readline().decode()
        url = re.search(r"http://127\.0\.0\.2:(\d+)/metrics", line)
        assert url, line
        with urllib.request.urlopen(url.group(0), timeout=10) as response:
            assert "kafka_log_log_size" in response.read().decode()
        with pytest.raises(OSError):  # not on the loopback address the default would be
            urllib.request.urlopen(f"http://127.0.0.1:{url.group(1)}/metrics", timeout=10)
        proc.stdin.close()
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_taken_metrics_port_fails_the_command_naming_it(tmp_path):
    import socket

    data = tmp_path / "data"
    tierlog("topics", "--create", "--topic", "t", "--data-dir", data)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = tierlog("produce", "--topic", "t", "--metrics-port", str(port), "--data-dir",
                       data, stdin="a\n", check=False)
    assert done.returncode != 0
    assert f"127.0.0.1:{port}" in done.stderr and "in use" in done.stderr


def test_tierlog_metrics_prints_a_snapshot(tmp_path):
    data = tmp_path / "data"
    tierlog("topics", "--create", "--topic", "t", "--partitions", "2", "--data-dir", data)
    tierlog("produce", "--topic", "t", "--partition", "1", "--data-dir", data,
            stdin="a\nb\nc\n")
    out = tierlog("metrics", "--data-dir", data).stdout
    end = [ln for ln in out.splitlines()
           if ln.startswith("kafka_log_log_logendoffset{topic=t,partition=1}")]
    assert len(end) == 1 and end[0].split()[-1] == "3"
    text = tierlog("metrics", "--format", "prometheus", "--data-dir", data).stdout
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"kafka_log_log_size", "kafka_log_log_numlogsegments"} <= names


def test_tierlog_metrics_shows_idle_internal_partitions_only_when_asked(tmp_path):
    from tierlog.plugins.metrics.export import catalog_table

    data = tmp_path / "data"
    tierlog("topics", "--create", "--topic", "__transaction_state", "--partitions", "3",
            "--data-dir", data)
    name = "kafka_log_log_size{topic=__transaction_state,partition=2}"
    assert name not in tierlog("metrics", "--data-dir", data).stdout
    assert name in tierlog("metrics", "--idle-internal", "--data-dir", data).stdout
    assert tierlog("metrics", "--catalog").stdout == catalog_table()


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
