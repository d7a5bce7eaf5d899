"""What TLS and SASL cost ``tierlog serve``, same run, one server, loopback (issue 25).

One server with three listeners: PLAINTEXT, SSL and SASL_SSL (PLAIN). For each, a
confluent-kafka producer (acks=1, batch.size 64 KiB, no compression) writes the same records
into a topic of its own, then a consumer reads them back from the start. Over PLAINTEXT the
record data of a fetch leaves with sendfile; over TLS it must be read and encrypted (no
sendfile), which is the cost measured here. Reported: MB/s each way, and each protocol's
throughput as a fraction of PLAINTEXT's. ``TIERLOG_BENCH_SECURITY_RECORDS`` (default 100,000)
and ``TIERLOG_BENCH_SECURITY_VALUE`` (default 1,000 bytes) size it.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from _util import ROOT, report, scratch_dir

sys.path.insert(0, str(ROOT / "tests"))

from confluent_kafka import Consumer, Producer, TopicPartition
from support.certs import Pki, make_pki
from support.secure_server import PLAIN_JAAS, SecureServer, librdkafka_ssl, tls_server_config

RECORDS = int(os.environ.get("TIERLOG_BENCH_SECURITY_RECORDS", "100000"))
VALUE = b"v" * int(os.environ.get("TIERLOG_BENCH_SECURITY_VALUE", "1000"))
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def _client_settings(server: SecureServer, protocol: str, pki: Pki) -> dict[str, Any]:
    settings: dict[str, Any] = {"bootstrap.servers": server.bootstrap(protocol),
                                "security.protocol": protocol}
    if protocol != "PLAINTEXT":
        settings.update(librdkafka_ssl(pki))
    if protocol == "SASL_SSL":
        settings.update({"sasl.mechanism": "PLAIN", "sasl.username": "alice",
                         "sasl.password": "alice-secret"})
    return settings


def _produce(settings: dict[str, Any], topic: str) -> float:
    """Seconds to produce RECORDS records of VALUE and have them acknowledged."""
    producer = Producer({**settings, "acks": 1, "batch.size": 65536, "linger.ms": 5,
                         "compression.type": "none", "enable.idempotence": False,
                         "queue.buffering.max.messages": 2_000_000})
    producer.produce(topic, b"warm-up")  # metadata and connections before the clock starts
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(RECORDS):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.01)
    remaining = producer.flush(120)
    elapsed = time.perf_counter() - start
    if remaining:
        raise RuntimeError(f"{remaining} records were not acknowledged")
    return elapsed


def _consume(settings: dict[str, Any], topic: str) -> float:
    """Seconds to read the topic's RECORDS + 1 records from the start."""
    consumer = Consumer({**settings, "group.id": f"bench-{topic}", "enable.auto.commit": False,
                         "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760})
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 300
    try:
        while seen < RECORDS + 1 and time.perf_counter() < deadline:
            for message in consumer.consume(10_000, 1.0):
                if message.error() is None:
                    seen += 1
    finally:
        elapsed = time.perf_counter() - start
        consumer.close()
    if seen < RECORDS + 1:
        raise RuntimeError(f"read {seen} of {RECORDS + 1} records")
    return elapsed


def main() -> None:
    megabytes = RECORDS * len(VALUE) / 1e6
    with scratch_dir("bench-security") as tmp:
        pki_dir = tmp / "pki"
        pki_dir.mkdir()
        pki = make_pki(pki_dir)
        config = {"listeners": ",".join(f"{p}://127.0.0.1:0" for p in PROTOCOLS),
                  **tls_server_config(pki),
                  "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS}
        server = SecureServer(tmp, config).start()
        results: dict[str, tuple[float, float]] = {}
        try:
            for protocol in PROTOCOLS:
                settings = _client_settings(server, protocol, pki)
                topic = f"bench-{protocol.lower()}"
                produce_s = _produce(settings, topic)
                consume_s = _consume(settings, topic)
                results[protocol] = (megabytes / produce_s, megabytes / consume_s)
        finally:
            server.stop()
    base_produce, base_consume = results["PLAINTEXT"]
    rows = [(f"records: {RECORDS:,} x {len(VALUE)} B", f"{megabytes:,.0f} MB each way")]
    for protocol, (produce, consume) in results.items():
        rows.append((f"{protocol} produce / consume",
                     (f"{produce:,.1f} / {consume:,.1f} MB/s "
                      f"({produce / base_produce:.0%} / {consume / base_consume:.0%} of "
                      "PLAINTEXT)")))
    report("tierlog serve: PLAINTEXT vs SSL vs SASL_SSL (one server, loopback)", rows)


if __name__ == "__main__":
    main()
