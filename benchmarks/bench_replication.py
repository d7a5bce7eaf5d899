"""Replication's cost (issue 24), same run: ``acks=all`` to a topic with three replicas on
three ``tierlog serve`` nodes against ``acks=1`` to one node (no cluster), in throughput and
per-record latency (p50/p99, librdkafka's delivery callbacks); and a follower's catch-up rate
against the leader's append rate (a follower killed, the leader written to, the follower
restarted and timed until it is back in the in-sync set).

``--records N`` (default 100,000 records of ``--size`` bytes, default 200).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from _util import scratch_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support.cluster_procs import Cluster, wait_until
from support.jepsen_checks import latency_percentiles
from support.server_process import ServerProcess

#: The paced runs: records, and records a second.
PACED, PACED_RATE = 2000, 500.0


def produce(bootstrap: str, topic: str, records: int, size: int, acks: str,
            rate: float | None = None) -> tuple[float, float, float]:
    """(records/s, p50 ms, p99 ms) of ``records`` values sent with ``acks``, as fast as the
    producer goes, or ``rate`` records a second (latency without the queueing)."""
    latencies: list[float] = []
    value = b"x" * size

    def delivered(err: object, msg: object, sent: float) -> None:
        if err is None:
            latencies.append((time.perf_counter() - sent) * 1000)

    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5,
                         "enable.idempotence": acks == "all", "batch.size": 262144})
    # Warm up first: the producer's start (metadata, connections, an idempotent producer's
    # InitProducerId) is not the records' latency; unwarmed, the first ~0.5 s of a paced run
    # waited for it and made the whole p99.
    producer.produce(topic, value, partition=0)
    if producer.flush(60) != 0:
        raise AssertionError("the warm-up record was not acknowledged")
    began = time.perf_counter()
    for _ in range(records):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, value, partition=0,
                                 on_delivery=lambda e, m, s=sent: delivered(e, m, s))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
        if rate is not None:
            time.sleep(1 / rate)  # the paced run's own pace
    producer.flush(300)
    elapsed = time.perf_counter() - began
    if len(latencies) != records:
        raise AssertionError(f"{records - len(latencies)} records not acknowledged")
    p50, p99 = latency_percentiles(latencies)
    return records / elapsed, p50, p99


def create(bootstrap: str, topic: str, replicas: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, replicas)]).values():
        future.result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=200)
    args = parser.parse_args()
    with scratch_dir("replication") as scratch:
        with ServerProcess(scratch / "single").start() as single:
            create(single.bootstrap, "one", 1)
            produce(single.bootstrap, "one", 2000, args.size, "1")  # warm up
            base = produce(single.bootstrap, "one", args.records, args.size, "1")
            base_paced = produce(single.bootstrap, "one", PACED, args.size, "1", PACED_RATE)
        with Cluster(scratch / "cluster", 3) as cluster:
            cluster.create_topic("three", replication_factor=3)
            produce(cluster.bootstrap, "three", 2000, args.size, "all")
            replicated = produce(cluster.bootstrap, "three", args.records, args.size, "all")
            paced = produce(cluster.bootstrap, "three", PACED, args.size, "all", PACED_RATE)

            leader = cluster.leader("three")
            follower = next(n for n in cluster.nodes if n != leader)
            cluster.nodes[follower].kill()
            wait_until(lambda: follower not in cluster.isr("three"), "the follower out of sync")
            began = time.perf_counter()
            produce(cluster.live_bootstrap(), "three", args.records, args.size, "1")
            append_rate = args.records / (time.perf_counter() - began)
            cluster.nodes[follower].start()
            began = time.perf_counter()  # from the node's listener bound
            wait_until(lambda: follower in cluster.isr("three"), "the follower back in sync",
                       timeout_s=600)
            catch_up = time.perf_counter() - began
    mb = args.size / 1e6
    print(f"records                 {args.records} x {args.size} B")
    print(f"acks=1, one node        {base[0]:,.0f} records/s ({base[0] * mb:.1f} MB/s), "
          f"p50 {base[1]:.1f} ms, p99 {base[2]:.1f} ms")
    print(f"acks=all, 3 replicas    {replicated[0]:,.0f} records/s "
          f"({replicated[0] * mb:.1f} MB/s), p50 {replicated[1]:.1f} ms, "
          f"p99 {replicated[2]:.1f} ms")
    print(f"throughput ratio        {replicated[0] / base[0]:.2f}x of acks=1 on one node")
    print(f"paced, {PACED_RATE:.0f} records/s   acks=1 one node p50 {base_paced[1]:.1f} ms, p99 "
          f"{base_paced[2]:.1f} ms; acks=all 3 replicas p50 {paced[1]:.1f} ms, p99 "
          f"{paced[2]:.1f} ms")
    print(f"leader append rate      {append_rate:,.0f} records/s (acks=1, one follower down)")
    print(f"follower catch-up       {args.records / catch_up:,.0f} records/s "
          f"({args.records} records behind, back in sync {catch_up:.1f} s after its listener "
          f"bound; {args.records / catch_up / append_rate:.2f}x the append rate)")


if __name__ == "__main__":
    main()
