"""One writing process per data dir (``<dir>/.lock``), and read-only commands that never write.

Beside a live ``tierlog serve``, every command that would write (a second serve, produce,
topics --create, restore) is refused with one line naming the server's pid, and the commands
that only read (topics --describe, consume, dump-log) answer: in both cases every file under
the data dir keeps its bytes, size and mtime, and no file appears or goes. A read after an
unclean stop reports a damaged batch (and changes nothing) instead of cutting it.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
from kafka import KafkaProducer
from support import server_process

from tierlog.cli import main
from tierlog.common.data_dir_lock import LOCK_FILE, DataDirLock, live_owner
from tierlog.errors import DataDirLockedError
from tierlog.log.log import Log
from tierlog.manager.log_manager import LogManager
from tierlog.records.file_records import FileRecords

#: Every background task of the server runs rarely: the files change only when asked to.
QUIET_SERVER = {
    "replica.high.watermark.checkpoint.interval.ms": 3_600_000,
    "log.flush.offset.checkpoint.interval.ms": 3_600_000,
    "log.flush.start.offset.checkpoint.interval.ms": 3_600_000,
    "log.retention.check.interval.ms": 3_600_000,
    "log.cleaner.enable": "false",
    # Small enough that hashing every file before and after each command takes no time.
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "log.index.size.max.bytes": 65536,
}

FileState = dict[str, tuple[str, int, int]]


def file_state(root: Path) -> FileState:
    """Every file under ``root``: its sha256, size and mtime (ns)."""
    state: FileState = {}
    for path in sorted(root.rglob("*")):
        if path.is_file():
            st = path.stat()
            state[str(path.relative_to(root))] = (
                hashlib.sha256(path.read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return state


def assert_unchanged(root: Path, before: FileState, what: str) -> None:
    after = file_state(root)
    assert after.keys() == before.keys(), (
        f"{what}: files appeared {sorted(after.keys() - before.keys())} or went "
        f"{sorted(before.keys() - after.keys())}")
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"{what} changed {changed}"


# -- the lock itself ------------------------------------------------------------------------


def test_a_second_open_in_the_same_process_is_refused_naming_the_pid(tmp_path: Path) -> None:
    with LogManager.open(tmp_path, start_scheduler=False) as mgr:
        mgr.create_topic("t", 1)
        before = file_state(tmp_path)
        with pytest.raises(DataDirLockedError) as refused:
            LogManager.open(tmp_path, start_scheduler=False)
        assert refused.value.pid == os.getpid()
        message = str(refused.value)
        assert f"process {os.getpid()}" in message and str(tmp_path) in message
        assert "\n" not in message
        assert_unchanged(tmp_path, before, "the refused open")
        assert live_owner(tmp_path) == os.getpid()


def test_close_releases_the_lock(tmp_path: Path) -> None:
    LogManager.open(tmp_path, start_scheduler=False).close()
    assert live_owner(tmp_path) is None
    with LogManager.open(tmp_path, start_scheduler=False) as mgr:
        assert mgr.topics() == []


def test_a_failed_open_releases_the_lock(tmp_path: Path) -> None:
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "topic-config.properties").write_text("cleanup.policy=nope\n")
    with pytest.raises(Exception, match="nope"):
        LogManager.open(tmp_path, start_scheduler=False)
    assert live_owner(tmp_path) is None


#: Holds a data dir's lock until killed.
LOCK_HOLDER = """
import sys, time
from tierlog.common.data_dir_lock import DataDirLock
DataDirLock.acquire(sys.argv[1])
print("locked", flush=True)
time.sleep(600)
"""


def test_the_lock_goes_with_a_killed_holder(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        assert live_owner(tmp_path) == holder.pid
        with pytest.raises(DataDirLockedError, match=f"process {holder.pid}"):
            DataDirLock.acquire(tmp_path)
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
        assert live_owner(tmp_path) is None
        lock = DataDirLock.acquire(tmp_path)  # no stale lock: the kernel dropped it
        assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
        lock.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_live_owner_creates_nothing(tmp_path: Path) -> None:
    assert live_owner(tmp_path) is None
    assert list(tmp_path.iterdir()) == []


# -- beside a live server ---------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: str | Path,
        stdin: str = "") -> tuple[int, str, list[str]]:
    """``tierlog ARGS`` in this process (the server is another one, so the lock is as real):
    the exit status, stdout, and the ``tierlog: error:`` lines of stderr."""
    capsys.readouterr()
    with patch("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode()))):
        code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, [line for line in err.splitlines() if line.startswith("tierlog: error:")]


def test_writers_are_refused_and_readers_write_nothing_beside_a_live_server(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with server_process.start(tmp_path, QUIET_SERVER, data_dir=data) as server:
        assert server.proc is not None
        pid = server.proc.pid
        producer = KafkaProducer(bootstrap_servers=server.bootstrap, linger_ms=0)
        for i in range(5):  # the server's own writes: an active segment it has mapped
            producer.send("orders", value=f"live-{i}".encode(), partition=0).get(timeout=30)
        producer.close()
        before = file_state(data)
        assert LOCK_FILE in before and ".kafka_cleanshutdown" not in before

        refusals: dict[str, list[str | Path]] = {
            "a second serve": ["serve", "--data-dir", data, "--set",
                               "listeners=PLAINTEXT://127.0.0.1:0"],
            "produce": ["--data-dir", data, "produce", "--topic", "orders"],
            "topics --create": ["--data-dir", data, "topics", "--create", "--topic", "more"],
            "restore": ["--data-dir", data, "restore", (tmp_path / "tier").as_uri(),
                        "--topic", "orders", "--quiet"],
        }
        for what, args in refusals.items():
            code, _, errors = run(capsys, *args, stdin="x\n")
            assert code == 1 and len(errors) == 1, (what, errors)
            assert f"in use by process {pid}" in errors[0], (what, errors)
            assert_unchanged(data, before, what)
        with pytest.raises(DataDirLockedError, match=f"in use by process {pid}"):
            Log.open(data / "orders-0")  # a partition of the dir, opened for writing
        assert_unchanged(data, before, "Log.open")

        code, out, _ = run(capsys, "--data-dir", data, "topics", "--describe", "--topic", "orders")
        assert code == 0 and "LogEndOffset: 5" in out, out
        assert_unchanged(data, before, "topics --describe")
        code, out, _ = run(capsys, "--data-dir", data, "topics", "--list")
        assert code == 0 and "orders" in out.split()
        assert_unchanged(data, before, "topics --list")

        code, out, _ = run(capsys, "--data-dir", data, "consume", "--topic", "orders",
                           "--partition", "0")
        assert code == 0 and out.split() == [f"live-{i}" for i in range(5)]
        assert_unchanged(data, before, "consume")

        code, out, _ = run(capsys, "dump-log", data / "orders-0", "--print-data-log")
        assert code == 0 and "payload: live-4" in out
        assert_unchanged(data, before, "dump-log")

        code, out, _ = run(capsys, "--data-dir", data, "metrics")
        assert code == 0 and "kafka_log_log_logendoffset{topic=orders,partition=0}" in out
        assert_unchanged(data, before, "metrics")
        assert server.alive()


# -- a read after an unclean stop ---------------------------------------------------------------

#: Appends 20 one-record batches to clicks-0 and dies (SIGKILL): no clean shutdown, no flush,
#: no checkpoint.
CRASHING_WRITER = """
import os, signal, sys
from tierlog.manager.log_manager import LogManager
from tierlog.records import Record, build_batch
mgr = LogManager.open(sys.argv[1], start_scheduler=False)
log = mgr.create_topic("clicks", 1)[0]
for i in range(20):
    log.append(build_batch([Record(value=b"click-%02d" % i)]))
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_consume_after_an_unclean_stop_reports_a_flipped_byte_and_cuts_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    writer = subprocess.run([sys.executable, "-c", CRASHING_WRITER, str(data)], check=False,
                            timeout=120)
    assert writer.returncode == -signal.SIGKILL
    segment = data / "clicks-0" / "00000000000000000000.log"
    records = FileRecords.open(segment, mutable=False)
    batches = list(records.headers_from(0))
    records.close()
    assert len(batches) == 20
    position, header = batches[10]
    raw = bytearray(segment.read_bytes())
    raw[position + header.size_in_bytes - 3] ^= 0x01  # inside the record's value
    segment.write_bytes(raw)
    before = file_state(data)

    code, out, errors = run(capsys, "--data-dir", data, "consume", "--topic", "clicks")
    assert code == 1
    assert out.split() == [f"click-{i:02d}" for i in range(10)]
    assert len(errors) == 1, errors
    line = errors[0]
    assert "clicks-0" in line and str(segment) in line
    assert f"position {position}" in line and f"offset {header.base_offset}" in line
    assert "crc" in line and "dump-log --verify" in line and "scrub --deep" in line
    assert_unchanged(data, before, "consume of a damaged log")
