"""tierlog serve against the engine underneath it, same run (issue 16's goals: >= 50% each).

1. Produce: a confluent-kafka producer (acks=1, batch.size 16 KiB, no compression) into the
   server, against the engine's direct ``Log.append`` of the same batches.
2. Consume: a confluent-kafka consumer reading the local data of a topic (1 GiB by default;
   ``TIERLOG_BENCH_SERVER_BYTES`` sets the size) against raw ``os.sendfile`` of the same
   segment files over loopback.
3. Latency: produce-to-consume p50/p99 at 1,000 records/s.
"""

from __future__ import annotations

import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

from _util import ROOT, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))

from confluent_kafka import Consumer, Producer, TopicPartition
from server_process import start

from tierlog import Log, Record
from tierlog.config import LogConfig
from tierlog.manager.log_manager import LogManager
from tierlog.records import build_batch

PRODUCE_RECORDS = int(os.environ.get("TIERLOG_BENCH_SERVER_RECORDS", "1000000"))
CONSUME_BYTES = int(os.environ.get("TIERLOG_BENCH_SERVER_BYTES", str(1 << 30)))
VALUE = b"v" * int(os.environ.get("TIERLOG_BENCH_SERVER_VALUE", "1000"))
PRODUCE_PARTITIONS = int(os.environ.get("TIERLOG_BENCH_SERVER_PARTITIONS", "8"))


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_pid(server: object) -> int:
    proc = getattr(server, "proc", None)
    assert proc is not None
    return int(proc.pid)


def _produce_run(tmp: Path, partitions: int) -> list[tuple[str, str]]:
    """PRODUCE_RECORDS records round-robin over ``partitions`` partitions of one topic
    (librdkafka sends one request per broker carrying a batch per partition), against the
    engine appending the same batches to as many partitions."""
    with start(tmp / f"p{partitions}", {"num.partitions": partitions}) as server:
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": 1,
                             "batch.size": 16384, "linger.ms": 5,
                             "compression.type": "none", "enable.idempotence": False,
                             "queue.buffering.max.messages": 2_000_000})
        producer.produce("warm", value=VALUE)
        producer.flush(30)
        producer.produce("bench", value=VALUE, partition=0)  # creates the topic
        producer.flush(30)
        cpu_before = _cpu_s(_server_pid(server))
        started = time.perf_counter()
        for i in range(PRODUCE_RECORDS):
            while True:
                try:
                    producer.produce("bench", VALUE, partition=i % partitions)
                    break
                except BufferError:
                    producer.poll(0.01)
        looped = time.perf_counter() - started
        assert producer.flush(120) == 0
        served = time.perf_counter() - started
        server_cpu = _cpu_s(_server_pid(server)) - cpu_before
        server.terminate()
        raw: list[list[bytes]] = []
        for p in range(partitions):
            with Log.open(server.data_dir / f"bench-{p}", LogConfig({})) as log:
                raw.append([bytes(b.view()) for b in log.read(0, (1 << 31) - 1).batches()])
        raw[0] = raw[0][1:]  # the topic-creating record is not part of the run
    logs = [Log.open(tmp / f"direct{partitions}" / f"bench-{p}", LogConfig({}))
            for p in range(partitions)]
    # Interleaved over the partitions, as the requests carried them.
    batches = [(logs[p], raw[p][i]) for i in range(max(len(r) for r in raw))
               for p in range(partitions) if i < len(raw[p])]
    started = time.perf_counter()
    for log, data in batches:
        log.append(data)
    direct = time.perf_counter() - started
    for log in logs:
        log.close()
    size = sum(len(b) for _, b in batches)
    label = f"{partitions} partition{'s' if partitions > 1 else ''}"
    return [
        (f"{label}: records / batches",
         f"{PRODUCE_RECORDS:,} / {len(batches):,} ({size / len(batches):,.0f} B)"),
        (f"{label}: server (confluent-kafka, acks=1)",
         f"{PRODUCE_RECORDS / served:,.0f} rec/s  {size / served / 1e6:,.1f} MB/s"),
        (f"{label}: engine Log.append, same batches",
         f"{PRODUCE_RECORDS / direct:,.0f} rec/s  {size / direct / 1e6:,.1f} MB/s"),
        (f"{label}: server / engine", f"{direct / served:.0%}"),
        (f"{label}: where the time goes",
         (f"client produce() loop {looped:.2f} s of {served:.2f} s; "
          f"server CPU {server_cpu:.2f} s")),
    ]


def bench_produce(tmp: Path) -> list[tuple[str, str]]:
    return _produce_run(tmp, 1) + _produce_run(tmp, PRODUCE_PARTITIONS)


def _drain(sock: socket.socket, total: int) -> None:
    got = 0
    while got < total:
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)


def bench_consume(tmp: Path) -> list[tuple[str, str]]:
    data = tmp / "c"
    with LogManager.open(data, {"segment.bytes": 256 << 20}, start_scheduler=False) as mgr:
        log = mgr.create_topic("big", 1)[0]
        batch = build_batch([Record(value=b"x" * 1000) for _ in range(1000)])
        while log.size_in_bytes < CONSUME_BYTES:
            log.append(batch)
        size = log.size_in_bytes
        records = log.log_end_offset
    files = sorted((data / "big-0").glob("*.log"))
    # Raw os.sendfile of the same files over loopback.
    server_sock = socket.create_server(("127.0.0.1", 0))
    sender = socket.create_connection(server_sock.getsockname())
    receiver, _ = server_sock.accept()
    reader = threading.Thread(target=_drain, args=(receiver, size))
    started = time.perf_counter()
    reader.start()
    for path in files:
        with open(path, "rb") as f:
            offset, remaining = 0, os.fstat(f.fileno()).st_size
            while remaining:
                sent = os.sendfile(sender.fileno(), f.fileno(), offset, remaining)
                offset += sent
                remaining -= sent
    reader.join()
    raw = time.perf_counter() - started
    for s in (sender, receiver, server_sock):
        s.close()
    with start(tmp, data_dir=data) as server:
        # A throughput consumer's settings: 50 MiB responses (Kafka's default fetch.max.bytes)
        # of up to 8 MiB per partition, and no pause when librdkafka's prefetch queue
        # passes queued.min.messages (fetch.queue.backoff.ms defaults to 1 s).
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "bench",
                             "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                             "max.partition.fetch.bytes": 8 << 20,
                             "fetch.queue.backoff.ms": 0})
        consumer.assign([TopicPartition("big", 0, 0)])
        cpu_before = _cpu_s(_server_pid(server))
        client_before = sum(os.times()[:2])
        started = time.perf_counter()
        seen = 0
        while seen < records:
            # Never ask for more than is left: consume() waits its whole timeout for a count
            # it cannot reach, which timed the benchmark's own wait, not the server.
            for message in consumer.consume(min(10000, records - seen), 1.0):
                assert message.error() is None, message.error()
                seen += 1
        served = time.perf_counter() - started
        server_cpu = _cpu_s(_server_pid(server)) - cpu_before
        client_cpu = sum(os.times()[:2]) - client_before
        consumer.close()
    return [
        ("local data", f"{size / 2**20:,.0f} MiB, {records:,} records"),
        ("server (confluent-kafka consumer)", f"{size / served / 1e6:,.0f} MB/s"),
        ("raw os.sendfile over loopback", f"{size / raw / 1e6:,.0f} MB/s"),
        ("server / raw", f"{raw / served:.0%}"),
        ("where the time goes", (f"{served:.2f} s: server CPU {server_cpu:.2f} s, "
                                 f"client (librdkafka + consume()) CPU {client_cpu:.2f} s")),
    ]


def bench_latency(tmp: Path, seconds: float = 5.0, rate: int = 1000) -> list[tuple[str, str]]:
    with start(tmp / "l") as server:
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": 1,
                             "linger.ms": 0, "enable.idempotence": False})
        producer.produce("lat", value=b"warm")
        producer.flush(30)
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "lat",
                             "fetch.wait.max.ms": 500, "fetch.min.bytes": 1})
        consumer.assign([TopicPartition("lat", 0, 1)])
        latencies: list[float] = []
        done = threading.Event()

        def consume() -> None:
            while not done.is_set() or len(latencies) < int(seconds * rate):
                msg = consumer.poll(0.1)
                if msg is not None and msg.error() is None and msg.value():
                    latencies.append(time.perf_counter() - float(msg.value()))
                if done.is_set() and len(latencies) >= int(seconds * rate):
                    break

        thread = threading.Thread(target=consume)
        thread.start()
        time.sleep(1.0)  # let the consumer's first fetch arrive (a benchmark, not a test)
        start_t = time.perf_counter()
        for i in range(int(seconds * rate)):
            target = start_t + i / rate
            while time.perf_counter() < target:
                producer.poll(0)
            producer.produce("lat", value=repr(time.perf_counter()).encode())
        producer.flush(30)
        done.set()
        thread.join(30)
        consumer.close()
    ms = sorted(x * 1000 for x in latencies)
    return [
        ("records", f"{len(ms):,} at {rate:,}/s"),
        ("p50", f"{statistics.median(ms):.2f} ms"),
        ("p99", f"{ms[int(len(ms) * 0.99) - 1]:.2f} ms"),
    ]


def main() -> None:
    with scratch_dir("bench-server") as tmp:
        report("produce: confluent-kafka into tierlog serve vs Log.append", bench_produce(tmp))
    with scratch_dir("bench-server") as tmp:
        report("consume: confluent-kafka from tierlog serve vs raw os.sendfile",
               bench_consume(tmp))
    with scratch_dir("bench-server") as tmp:
        report("latency: produce -> consume at 1,000 records/s", bench_latency(tmp))


if __name__ == "__main__":
    main()
