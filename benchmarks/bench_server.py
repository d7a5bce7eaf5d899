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
from tierlog.manager import LogManager
from tierlog.records import build_batch

PRODUCE_RECORDS = int(os.environ.get("TIERLOG_BENCH_SERVER_RECORDS", "1000000"))
CONSUME_BYTES = int(os.environ.get("TIERLOG_BENCH_SERVER_BYTES", str(1 << 30)))
VALUE = b"v" * int(os.environ.get("TIERLOG_BENCH_SERVER_VALUE", "1000"))


def bench_produce(tmp: Path) -> list[tuple[str, str]]:
    with start(tmp / "p") as server:
        producer = Producer({"bootstrap.servers": server.bootstrap, "acks": 1,
                             "batch.size": 16384, "linger.ms": 5,
                             "compression.type": "none", "enable.idempotence": False,
                             "queue.buffering.max.messages": 2_000_000})
        producer.produce("warm", value=VALUE)
        producer.flush(30)
        started = time.perf_counter()
        for i in range(PRODUCE_RECORDS):
            while True:
                try:
                    producer.produce("bench", value=VALUE)
                    break
                except BufferError:
                    producer.poll(0.01)
        assert producer.flush(120) == 0
        served = time.perf_counter() - started
        server.terminate()
        with Log.open(server.data_dir / "bench-0", LogConfig({})) as log:
            raw = [bytes(b.view()) for b in log.read(0, 1 << 31 - 1).batches()]
    with Log.open(tmp / "direct" / "bench-0", LogConfig({})) as log:
        started = time.perf_counter()
        for data in raw:
            log.append(data)
        direct = time.perf_counter() - started
    size = sum(len(b) for b in raw)
    return [
        ("records / batches", f"{PRODUCE_RECORDS:,} / {len(raw):,} ({size / len(raw):,.0f} B)"),
        ("server (confluent-kafka, acks=1)", (f"{PRODUCE_RECORDS / served:,.0f} rec/s  "
                                            f"{size / served / 1e6:,.1f} MB/s")),
        ("engine Log.append, same batches", (f"{PRODUCE_RECORDS / direct:,.0f} rec/s  "
                                            f"{size / direct / 1e6:,.1f} MB/s")),
        ("server / engine", f"{direct / served:.0%}"),
    ]


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
        consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "bench",
                             "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                             "max.partition.fetch.bytes": 8 << 20})
        consumer.assign([TopicPartition("big", 0, 0)])
        started = time.perf_counter()
        seen = 0
        while seen < records:
            for message in consumer.consume(10000, 1.0):
                assert message.error() is None, message.error()
                seen += 1
        served = time.perf_counter() - started
        consumer.close()
    return [
        ("local data", f"{size / 2**20:,.0f} MiB, {records:,} records"),
        ("server (confluent-kafka consumer)", f"{size / served / 1e6:,.0f} MB/s"),
        ("raw os.sendfile over loopback", f"{size / raw / 1e6:,.0f} MB/s"),
        ("server / raw", f"{raw / served:.0%}"),
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
