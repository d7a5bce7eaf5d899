"""The Jepsen-style run of issue 24: three ``tierlog serve`` nodes on 127.0.0.1, an idempotent
``acks=all`` producer (librdkafka), a transactional producer (committing and aborting
transactions over two partitions, through coordinators that move with their partitions'
leadership) and a consumer, faults drawn by
:mod:`support.fault_schedule` (SIGKILL and restart, SIGSTOP/SIGCONT, clean restarts, a node's
links cut by its :class:`~support.link_proxy.LinkProxy`), bounded in time; then every fault
healed, the cluster left to converge, and the verdicts of :mod:`support.jepsen_checks`.

Each node has two listeners, one for clients (CLIENT) and one for the other nodes
(REPLICATION, its ``inter.broker.listener.name``), each behind its own proxy, and advertises
the proxies' addresses: clients and the other nodes reach it only through them. A cut of
scope ``node`` isolates the node from both; one of scope ``peers`` only from the other nodes,
so a leader cut off from its followers still takes its clients' writes (the metadata store
stays reachable either way: a node cut off from its peers keeps its registration, as a Kafka
broker partitioned from its peers but not from the controller).

:func:`run_jepsen` is run briefly by ``tests/server/test_jepsen_replication.py`` and at length
by ``benchmarks/bench_jepsen.py``.
"""

from __future__ import annotations

import logging
import random
import signal
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from support.cluster_procs import Cluster, wait_until
from support.fault_schedule import (
    KINDS,
    CutMode,
    CutScope,
    FaultActions,
    Role,
    RunReport,
    make_schedule,
)
from support.fault_schedule import run as run_faults
from support.jepsen_checks import (
    Txn,
    check_acknowledged_present,
    check_no_lost_reads,
    check_order,
    check_replicas_identical,
    check_transactions_atomic,
    latency_percentiles,
    replica_batches,
)
from support.link_proxy import LinkProxy
from tierlog.cluster.keys import CONTROLLER, ControllerRecord, PartitionRecord, partition_key
from tierlog.cluster.open_store import open_metadata_store

log = logging.getLogger(__name__)

TOPIC = "jepsen"
#: The transactional producer's topic (two partitions: each transaction spans both).
TXN_TOPIC = "jepsen-txn"
TXN_PARTITIONS = 2
#: What the cluster runs with: few internal partitions (each node loads its share quickly
#: after a fault), and abandoned transactions aborted within seconds.
CLUSTER_CONFIG = {"min.insync.replicas": 2, "offsets.topic.num.partitions": 4,
                  "transaction.state.log.num.partitions": 4,
                  "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000}
#: The transactional producer's transaction timeout: a transaction its producer abandoned
#: is aborted by the coordinator after this.
TXN_TIMEOUT_MS = 10_000
#: How long one producer instance produces before a fresh one (a new producer id) follows.
GENERATION_S = 4.0


@dataclass
class JepsenReport:
    """What a run did and found."""

    seconds: float
    seed: int
    faults: dict[str, int]
    acknowledged: int
    produce_errors: int
    consumed: int
    leader_changes: int
    failover_ms: list[float]
    violations: list[str] = field(default_factory=list)
    transactions: dict[str, int] = field(default_factory=dict)
    """How many transactions ended committed, aborted, or unknown (the client was not told)."""

    def summary(self) -> str:
        p50, p99 = latency_percentiles(self.failover_ms) if self.failover_ms else (0.0, 0.0)
        return (f"{self.seconds:.0f} s, seed {self.seed}: faults {dict(self.faults)}, "
                f"{self.acknowledged} records acknowledged ({self.produce_errors} not), "
                f"{self.consumed} read live, transactions {dict(self.transactions)}, "
                f"{self.leader_changes} leader changes, time to a "
                f"new leader p50 {p50:.0f} ms / p99 {p99:.0f} ms over {len(self.failover_ms)} "
                f"leader faults; {len(self.violations)} violations")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Workload:
    """The producer and the consumer threads, and what they saw."""

    def __init__(self, bootstrap: str, partitions: int, rate: int) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.rate = rate
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked: list[tuple[str, int, bytes]] = []
        self.sent: dict[tuple[str, str, int], list[bytes]] = defaultdict(list)
        self.failed = 0
        self.observed: list[tuple[str, int, int, bytes]] = []
        #: The producer's failures: every record is to be acknowledged in the end (its
        #: message.timeout.ms outlasts every fault), so each is a violation.
        self.errors: list[str] = []
        self.txns: list[Txn] = []
        self.threads = [threading.Thread(target=self._produce, daemon=True),
                        threading.Thread(target=self._consume, daemon=True),
                        threading.Thread(target=self._transact, daemon=True)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)

    def _produce(self) -> None:
        """Produce at ``rate`` until stopped, with a fresh producer (a new producer id, its
        bootstrap list rotated so another node answers first) every few seconds: producers on
        several nodes must never share an id."""
        generation = 0
        try:
            while not self.stop.is_set():
                self._produce_as(f"p{generation}", generation)
                generation += 1
        except Exception as exc:  # noqa: BLE001 - a verdict: the producer must not fail
            self.errors.append(f"producer p{generation} failed: {exc!r}")

    def _produce_as(self, name: str, generation: int) -> None:
        nodes = self.bootstrap.split(",")
        rotated = nodes[generation % len(nodes):] + nodes[:generation % len(nodes)]
        producer = Producer({"bootstrap.servers": ",".join(rotated),
                             "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                             "message.timeout.ms": 120_000, "retry.backoff.ms": 50,
                             "reconnect.backoff.max.ms": 500,
                             "topic.metadata.refresh.interval.ms": 1000})

        def delivered(err: KafkaError | None, msg: object) -> None:
            with self.lock:
                if err is None:
                    self.acked.append((TOPIC, msg.partition(),  # type: ignore[attr-defined]
                                       msg.value()))  # type: ignore[attr-defined]
                else:
                    self.failed += 1
                    if len(self.errors) < 20:
                        self.errors.append(f"{name}: a record was not acknowledged: {err}")

        gap = 1.0 / self.rate
        until = time.monotonic() + GENERATION_S
        sequence = 0
        while not self.stop.is_set() and time.monotonic() < until:
            partition = sequence % self.partitions
            value = b"%s-%08d" % (name.encode(), sequence)
            self.sent[(name, TOPIC, partition)].append(value)
            while True:
                try:
                    producer.produce(TOPIC, value, partition=partition, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.1)
            sequence += 1
            producer.poll(0)
            time.sleep(gap)  # the workload's own pace, not a wait for background work
        producer.flush(150)

    def _transact(self) -> None:
        """Transactions of a few records over both partitions of TXN_TOPIC, every third
        aborted, until stopped; each one's outcome as the client learned it. A producer that
        is fenced or fails fatally is replaced (its successor's InitProducerId fences it)."""
        number = 0
        producer: Producer | None = None
        while not self.stop.is_set():
            try:
                if producer is None:
                    producer = Producer({"bootstrap.servers": self.bootstrap,
                                         "transactional.id": "jepsen-txn",
                                         "transaction.timeout.ms": TXN_TIMEOUT_MS,
                                         "message.timeout.ms": TXN_TIMEOUT_MS,
                                         "topic.metadata.refresh.interval.ms": 1000})
                    producer.init_transactions(30)
            except KafkaException:
                producer = None
                self.stop.wait(0.5)  # a client's backoff before it tries again
                continue
            number += 1
            commit = number % 3 != 0
            records = tuple((TXN_TOPIC, p, b"t%06d-%d-%d" % (number, p, i))
                            for p in range(TXN_PARTITIONS) for i in range(2))
            outcome = "unknown"
            try:
                producer.begin_transaction()
                for _, partition, value in records:
                    producer.produce(TXN_TOPIC, value, partition=partition)
                if commit:
                    producer.commit_transaction(30)
                    outcome = "committed"
                else:
                    producer.abort_transaction(30)
                    outcome = "aborted"
            except KafkaException as exc:
                error = exc.args[0]
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(30)
                        outcome = "aborted"
                    except KafkaException:
                        producer = None
                elif not error.retriable():
                    producer = None
                else:  # a commit or abort that timed out: its outcome is not known
                    producer = None
            with self.lock:
                self.txns.append(Txn(outcome, records, f"transaction {number}"))

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "jepsen-live",
                             "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                             "topic.metadata.refresh.interval.ms": 1000})
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(self.partitions)])
        while not self.stop.is_set():
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                with self.lock:
                    self.observed.append((TOPIC, msg.partition(), msg.offset(), msg.value()))
        consumer.close()


def _final_read(bootstrap: str, partitions: int) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Every partition read from its start to its high watermark, by a fresh consumer."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-final",
                         "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1]
            for p in range(partitions)}
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    read: dict[tuple[str, int], list[tuple[int, bytes]]] = {(TOPIC, p): []
                                                            for p in range(partitions)}
    deadline = time.monotonic() + 120
    while any(len(read[(TOPIC, p)]) < ends[p] and (not read[(TOPIC, p)] or
              read[(TOPIC, p)][-1][0] + 1 < ends[p]) for p in range(partitions)):
        if time.monotonic() > deadline:
            raise AssertionError(f"the final read did not reach the high watermarks {ends}")
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            read[(TOPIC, msg.partition())].append((msg.offset(), msg.value()))
    consumer.close()
    return read


def _committed_read(bootstrap: str) -> dict[tuple[str, int], list[tuple[int, bytes]]]:
    """Every record of TXN_TOPIC a read_committed consumer gets, reading each partition until
    its position reaches the high watermark (the last stable offset does once every
    transaction is complete)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-committed",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    partitions = [TopicPartition(TXN_TOPIC, p, 0) for p in range(TXN_PARTITIONS)]
    ends = {p.partition: consumer.get_watermark_offsets(p, timeout=30)[1] for p in partitions}
    consumer.assign(partitions)
    read: dict[tuple[str, int], list[tuple[int, bytes]]] = {(TXN_TOPIC, p): []
                                                            for p in range(TXN_PARTITIONS)}
    deadline = time.monotonic() + 120
    while any(tp.offset < ends[tp.partition] for tp in consumer.position(partitions)):
        if time.monotonic() > deadline:
            raise AssertionError(f"the read_committed read did not reach {ends}")
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            read[(TXN_TOPIC, msg.partition())].append((msg.offset(), msg.value()))
    consumer.close()
    return read


class _LeaderWatch:
    """Polls the store for each partition's leader; the times it changed."""

    def __init__(self, store_url: str, partitions: int) -> None:
        self.store = open_metadata_store(store_url)
        self.partitions = partitions
        self.changes: list[tuple[float, int, int, int]] = []  # (time, partition, old, new)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def leader(self, partition: int) -> int:
        found = self.store.read(partition_key(TOPIC, partition))
        if found is None:
            return -1
        return PartitionRecord.from_value("p", found.value).leader

    def state(self, partition: int) -> PartitionRecord | None:
        found = self.store.read(partition_key(TOPIC, partition))
        return None if found is None else PartitionRecord.from_value("p", found.value)

    def fully_in_sync(self, partition: int) -> bool:
        state = self.state(partition)
        return state is not None and state.leader > 0 and len(state.isr) == len(state.replicas)

    def controller(self) -> int:
        found = self.store.read(CONTROLLER)
        return -1 if found is None else ControllerRecord.from_value(CONTROLLER,
                                                                   found.value).node_id

    def _run(self) -> None:
        last = {p: self.leader(p) for p in range(self.partitions)}
        while not self.stop.wait(0.02):
            for p in range(self.partitions):
                now = self.leader(p)
                if now != last[p]:
                    self.changes.append((time.monotonic(), p, last[p], now))
                    last[p] = now


class _Faults:
    """The fault schedule's actions on a cluster whose nodes sit behind ``proxies``; notes
    each fault that hit a partition's leader (for the time to a new leader)."""

    def __init__(self, cluster: Cluster, proxies: dict[int, LinkProxy],
                 peer_proxies: dict[int, LinkProxy], watch: _LeaderWatch,
                 rng: random.Random) -> None:
        self.cluster, self.proxies, self.watch, self.rng = cluster, proxies, watch, rng
        self.peer_proxies = peer_proxies
        self.paused: set[int] = set()
        self.leader_faults: list[tuple[float, int, int]] = []  # (time, partition, node)
        #: When each node last came back (SIGCONT, start): a leadership it kept until then
        #: was not taken away by the fault.
        self.back: dict[int, list[float]] = defaultdict(list)

    def actions(self) -> FaultActions:
        return FaultActions(
            resolve=self.resolve, kill=self.kill, start=self.start, stop=self.stop,
            cont=self.cont, restart=self.restart, cut=self.cut, heal=self.heal)

    def kill(self, n: int) -> None:
        self._took_leader(n)
        self.cluster.nodes[n].kill()

    def start(self, n: int) -> None:
        self.cluster.nodes[n].start()
        self._came_back(n)

    def restart(self, n: int) -> None:
        self._took_leader(n)
        self.cluster.nodes[n].restart()
        self._came_back(n)

    def resolve(self, role: Role, exclude: frozenset[int]) -> int | None:
        free = [n for n, node in self.cluster.nodes.items()
                if n not in exclude and node.alive() and n not in self.paused]
        partitions = self.watch.partitions
        if role == "leader":
            found = self.watch.leader(self.rng.randrange(partitions))
        elif role == "controller":
            found = self.watch.controller()
        elif role == "follower":
            lead = self.watch.leader(self.rng.randrange(partitions))
            found = next((n for n in free if n != lead), -1)
        else:
            found = self.rng.choice(free) if free else -1
        if found not in free:
            return None
        return found

    def _took_leader(self, n: int) -> None:
        """Note the partitions node ``n`` leads as a fault takes it away (a kill, a pause,
        a restart; a cut leaves it leading: it still reaches the store)."""
        now = time.monotonic()
        self.leader_faults += [(now, p, n) for p in range(self.watch.partitions)
                               if self.watch.leader(p) == n]

    def _came_back(self, n: int) -> None:
        self.back[n].append(time.monotonic())

    def stop(self, n: int) -> None:
        self._took_leader(n)
        self.paused.add(n)
        self._signal(n, signal.SIGSTOP)

    def cont(self, n: int) -> None:
        self._signal(n, signal.SIGCONT)
        self.paused.discard(n)
        self._came_back(n)

    def cut(self, a: int, b: int, mode: CutMode, scope: CutScope) -> None:
        """Cut b's links: its inter-broker listener (scope ``peers``: a and the other node
        lose it, its clients do not), and with scope ``node`` its client listener too."""
        self.peer_proxies[b].cut(mode)
        if scope == "node":
            self.proxies[b].cut(mode)

    def heal(self, a: int, b: int) -> None:
        self.peer_proxies[b].heal()
        if self.proxies[b].mode is not None:
            self.proxies[b].heal()

    def _signal(self, n: int, signum: int) -> None:
        proc = self.cluster.nodes[n].proc
        if proc is not None:
            proc.send_signal(signum)

    def failover_ms(self) -> list[float]:
        """For each kill, pause or restart of a leader whose partition another node came to
        lead before the node was back (a pause shorter than the session keeps its leadership,
        as it should): how long that took."""
        found = []
        for at, p, node in self.leader_faults:
            until = min((t for t in self.back[node] if t >= at), default=float("inf"))
            later = [t for t, q, old, new in self.watch.changes
                     if q == p and at <= t <= until and old == node and new not in (node, -1)]
            if later:
                found.append((later[0] - at) * 1000)
        return found


def _verdicts(cluster: Cluster, workload: _Workload, bootstrap: str,
              partitions: int) -> tuple[list[str], int]:
    """The checks once healed (the cluster is stopped on the way); the violations, and how many
    records the final read found."""
    final = _final_read(bootstrap, partitions)
    committed = _committed_read(bootstrap)
    violations = (list(workload.errors)
                  + check_acknowledged_present(workload.acked, final)
                  + check_order(workload.sent, final)
                  + check_no_lost_reads(workload.observed, final)
                  + check_transactions_atomic(workload.txns, committed))
    ends = {(TOPIC, p): (final[(TOPIC, p)][-1][0] + 1 if final[(TOPIC, p)] else 0)
            for p in range(partitions)}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "jepsen-ends"})
    for p in range(TXN_PARTITIONS):
        ends[(TXN_TOPIC, p)] = consumer.get_watermark_offsets(TopicPartition(TXN_TOPIC, p),
                                                              timeout=30)[1]
    consumer.close()
    cluster.stop()
    for (topic, p), end in ends.items():
        dumps = {n: replica_batches(cluster.data_dir(n), topic, p) for n in cluster.nodes}
        violations += check_replicas_identical(dumps, end, partition=f"{topic}-{p}")
    return violations, sum(len(r) for r in final.values())


def run_jepsen(root: Path, *, seconds: float, seed: int, partitions: int = 2, rate: int = 200,
               mean_gap_ms: int = 2500) -> JepsenReport:
    """One run (see the module docstring); the report, with every violation found."""
    client_ports = {i: _free_port() for i in (1, 2, 3)}
    peer_ports = {i: _free_port() for i in (1, 2, 3)}
    proxies = {i: LinkProxy("127.0.0.1", client_ports[i], name=f"node-{i}") for i in (1, 2, 3)}
    peer_proxies = {i: LinkProxy("127.0.0.1", peer_ports[i], name=f"node-{i}-peers")
                    for i in (1, 2, 3)}
    cluster = Cluster(root, 3, CLUSTER_CONFIG)
    for i, node in cluster.nodes.items():
        node.config.update({
            "listeners": f"CLIENT://127.0.0.1:{client_ports[i]},"
                         f"REPLICATION://127.0.0.1:{peer_ports[i]}",
            "advertised.listeners": f"CLIENT://127.0.0.1:{proxies[i].port},"
                                    f"REPLICATION://127.0.0.1:{peer_proxies[i].port}",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,REPLICATION:PLAINTEXT",
            "inter.broker.listener.name": "REPLICATION"})
    bootstrap = ",".join(f"127.0.0.1:{p.port}" for p in proxies.values())
    watch = _LeaderWatch(cluster.store_url, partitions)
    faults = _Faults(cluster, proxies, peer_proxies, watch, random.Random(seed))
    workload: _Workload | None = None
    try:
        cluster.start()
        cluster.create_topic(TOPIC, partitions, 3)
        cluster.create_topic(TXN_TOPIC, TXN_PARTITIONS, 3)
        watch.thread.start()
        workload = _Workload(bootstrap, partitions, rate)
        workload.start()
        schedule = make_schedule(seed, 3, int(seconds * 1000), mean_gap_ms=mean_gap_ms,
                                 min_fault_ms=500, max_fault_ms=5000, kinds=KINDS)
        started = time.monotonic()
        applied: RunReport = run_faults(schedule, faults.actions())
        for p in range(partitions):  # healed: every partition fully in sync again
            wait_until(lambda p=p: watch.fully_in_sync(p),
                       f"{TOPIC}-{p} fully in sync after the heal", timeout_s=120)
        workload.finish()
        elapsed = time.monotonic() - started
        watch.stop.set()
        violations, _ = _verdicts(cluster, workload, bootstrap, partitions)
        outcomes: dict[str, int] = defaultdict(int)
        for txn in workload.txns:
            outcomes[txn.outcome] += 1
        if not outcomes.get("committed"):
            violations.append("no transaction was committed: the transactional workload did "
                              "not run")
        return JepsenReport(elapsed, seed, dict(applied.faults), len(workload.acked),
                            workload.failed, len(workload.observed), len(watch.changes),
                            faults.failover_ms(), violations, dict(outcomes))
    finally:
        if workload is not None:
            workload.stop.set()  # a failed run leaves no client polling the stopped nodes
        for n in list(faults.paused):
            faults.cont(n)
        watch.stop.set()
        cluster.stop()
        for proxy in (*proxies.values(), *peer_proxies.values()):
            proxy.close()


__all__ = ["JepsenReport", "run_jepsen"]
