"""ClusterNode: a ``tierlog serve`` node's part in a cluster whose metadata lives in the
store at ``cluster.metadata.url`` (issue 24).

It registers the node (its address and incarnation) and heartbeats, runs its part of the
controller role (:class:`~tierlog.cluster.controller.Controller`: claim, fencing, elections),
and polls the store every ``cluster.metadata.poll.ms``: the live brokers, the controller, the
topics and each partition's state. From each poll it creates the local logs of topics this node
replicates and hands the partition states to the
:class:`~tierlog.server.replication.replica_manager.ReplicaManager`, which takes up this node's
role in each; the handlers answer Metadata from the same view. ``acks=all`` produces wait in
its :class:`~tierlog.server.replication.delayed_produce.DelayedProduces`.

A clean stop resigns the registration (the controller moves this node's leaderships at once);
a killed node is fenced by the controller after ``broker.session.timeout.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.checkpoint.partition_metadata import new_topic_id
from tierlog.cluster.controller import (
    Controller,
    create_topic,
    partition_states,
    read_topics,
)
from tierlog.cluster.keys import (
    CONTROLLER,
    BrokerRecord,
    ControllerRecord,
    PartitionRecord,
    TopicRecord,
)
from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.registry import (
    BrokerRegistration,
    LivenessTracker,
    live_brokers,
    read_brokers,
)
from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.common.atomic import atomic_write_text
from tierlog.common.clock import system_time_ms
from tierlog.errors import (
    BrokerFencedError,
    InvalidReplicationFactorError,
    TopicExistsError,
)
from tierlog.server.replication import tier_roles
from tierlog.server.replication.delayed_produce import DelayedProduces
from tierlog.server.replication.replica_manager import ReplicaManager
from tierlog.server.replication.sasl_client import BrokerSecurity
from tierlog.server.replication.settings import ClusterSettings

if TYPE_CHECKING:
    from tierlog.server.services import Services

__all__ = ["ClusterNode", "ClusterView", "dirs_id"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: The file in a node's first log dir naming its directories (Kafka's ``directory.id``): a
#: node restarted on the same dirs takes its registration back at once.
DIRS_ID_FILE = "tierlog-node.id"


def dirs_id(log_dir: Path) -> str:
    """The id of a node's log dirs, made (atomically) on first use."""
    path = Path(log_dir) / DIRS_ID_FILE
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        made = uuid.uuid4().hex
        atomic_write_text(path, made)
        return made


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass
class ClusterView:
    """The cluster as the last poll read it."""

    brokers: dict[int, BrokerRecord] = field(default_factory=dict)
    """Every registered node."""
    live: frozenset[int] = frozenset()
    """The nodes alive by this node's observation (unfenced, heartbeating)."""
    controller_id: int = -1
    topics: dict[str, TopicRecord] = field(default_factory=dict)
    partitions: dict[TopicPartition, tuple[PartitionRecord, Versioned]] = field(
        default_factory=dict)

    def partition(self, topic: str, partition: int) -> PartitionRecord | None:
        found = self.partitions.get((topic, partition))
        return None if found is None else found[0]


@dataclass
class _Read:
    brokers: dict[int, tuple[BrokerRecord, Versioned]]
    controller: Versioned | None
    topics: dict[str, TopicRecord]
    partitions: dict[TopicPartition, tuple[PartitionRecord, Versioned]]


def _read_cluster(store: MetadataStore) -> _Read:
    """One poll of the store (blocking)."""
    brokers = read_brokers(store)
    controller = store.read(CONTROLLER)
    topics = read_topics(store)
    partitions = {(t, p): (state, version)
                  for t, p, state, version in partition_states(store, topics)
                  if version is not None}
    return _Read(brokers, controller, topics, partitions)


class ClusterNode:
    """This node's cluster duties (see the module docstring). Lives on the server's event
    loop; ``start`` once the listener is bound (the address it registers), ``stop`` before
    the services close."""

    def __init__(self, services: Services, settings: ClusterSettings, *,
                 store: MetadataStore | None = None) -> None:
        self.services = services
        self.settings = settings
        self.node_id = services.node_id
        manager = services.manager
        self.store = store if store is not None else open_metadata_store(
            settings.url, dict(manager.config.remote_storage_options))
        self.view = ClusterView()
        self._tracker = LivenessTracker(settings.session_timeout_ms, _monotonic_ms)
        self.controller = Controller(self.store, self.node_id,
                                     session_timeout_ms=settings.session_timeout_ms,
                                     time_ms=_monotonic_ms)
        run_blocking: Callable[[Callable[[], object]], Awaitable[object]] = services.run_blocking
        config = services.config
        self.replicas = ReplicaManager(self.node_id, manager, self.store, settings,
                                       run_blocking=run_blocking, time_ms=services.time_ms,
                                       hw_moved=self._hw_moved,
                                       security=BrokerSecurity.for_listener(
                                           config.properties, config.inter_broker))
        self.delayed = DelayedProduces(self.replicas.acks_state)
        tier_roles.install(self)
        self._registration: BrokerRegistration | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._refresh_lock = asyncio.Lock()

    def _hw_moved(self, tp: TopicPartition) -> None:
        self.delayed.poke(tp)
        self.services.appended()

    # -- life --------------------------------------------------------------------------

    async def start(self) -> None:
        """Register (at the advertised address), read the cluster once, then run the
        heartbeat, controller and poll tasks."""
        manager = self.services.manager
        # Other nodes reach this one on its inter-broker listener (inter.broker.listener.name)
        host, port = self.services.advertised(self.services.config.inter_broker.name)
        registration = BrokerRegistration(
            self.store, self.node_id, host=host, port=port,
            dirs_id=dirs_id(manager.dirs[0]),
            session_timeout_ms=self.settings.session_timeout_ms,
            time_ms=_monotonic_ms, wall_ms=system_time_ms,
            endpoints=self.services.endpoints)
        await self.services.run_blocking(registration.register)
        self._registration = registration
        await self.refresh()
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._every(self.settings.heartbeat_interval_ms,
                                                    self._heartbeat, "heartbeat")),
                       loop.create_task(self._every(self.settings.poll_ms, self._control,
                                                    "controller")),
                       loop.create_task(self._every(self.settings.poll_ms, self.refresh,
                                                    "metadata poll"))]

    async def stop(self) -> None:
        """Stop the tasks and the fetchers, and resign the registration."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await self.replicas.close()
        registration, self._registration = self._registration, None
        if registration is not None:
            try:
                await self.services.run_blocking(registration.resign)
            except Exception as exc:  # noqa: BLE001 - a stop goes on: the session expires
                log.warning("node %d could not resign its registration: %s", self.node_id, exc)

    async def _every(self, interval_ms: int, step: Callable[[], Awaitable[None]],
                     name: str) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("node %d: %s failed; trying again in %d ms", self.node_id, name,
                              interval_ms)

    async def _heartbeat(self) -> None:
        registration = self._registration
        if registration is None:
            return
        try:
            await self.services.run_blocking(registration.heartbeat)
        except BrokerFencedError as exc:
            log.warning("%s", exc)
            await self.services.run_blocking(registration.register)

    async def _control(self) -> None:
        step = await self.services.run_blocking(self.controller.step)
        if step.changed or step.fenced:
            await self.refresh()

    # -- the view ----------------------------------------------------------------------

    async def refresh(self) -> None:
        """Read the cluster, create the local logs this node replicates, and take up its
        roles."""
        async with self._refresh_lock:
            read = await self.services.run_blocking(lambda: _read_cluster(self.store))
            live = frozenset(live_brokers(read.brokers, self._tracker))
            controller_id = -1
            if read.controller is not None:
                self._tracker.observe(read.controller, CONTROLLER)
                if self._tracker.alive(CONTROLLER):
                    controller_id = ControllerRecord.from_value(
                        CONTROLLER, read.controller.value).node_id
            self.view = ClusterView({n: r for n, (r, _) in read.brokers.items()}, live,
                                    controller_id, read.topics, read.partitions)
            await self._create_local_logs(read.topics)
            await self.replicas.apply(read.partitions, self.view.brokers, live)
            self.replicas.shrink_isr()

    async def _create_local_logs(self, topics: Mapping[str, TopicRecord]) -> None:
        manager = self.services.manager
        for topic, record in topics.items():
            if manager.partitions(topic) or not any(self.node_id in r for r in
                                                   record.assignment):
                continue

            def create(topic: str = topic, record: TopicRecord = record) -> None:
                manager.create_topic(topic, len(record.assignment), dict(record.configs))

            try:
                await self.services.run_blocking(create)
            except TopicExistsError:
                continue
            except Exception:
                log.exception("node %d could not create its replicas of %s", self.node_id,
                              topic)
                continue
            log.info("node %d created its replicas of %s (%d partitions)", self.node_id, topic,
                     len(record.assignment))

    def coordinator(self) -> BrokerRecord | None:
        """The node that coordinates every consumer group (the live node of the lowest id,
        None when none is known): each node keeps its own group coordinator, so every client
        must be sent to one. When it dies the next takes over, without the groups' committed
        offsets (they are not replicated yet)."""
        live = sorted(self.view.live)
        return self.view.brokers.get(live[0]) if live else None

    # -- topics ------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> None:
        """Assign and write a new topic (``replication_factor`` -1: the broker's
        ``default.replication.factor``), then read the cluster again so this node answers with
        it. TopicExistsError, InvalidReplicationFactorError; ConfigError for a tiered topic
        (leader-only tiering is not built yet)."""
        tier_roles.check_topic(self, name, configs)
        factor = (self.settings.default_replication_factor if replication_factor == -1
                  else replication_factor)
        live = set(self.view.live)
        if not 1 <= factor <= len(live):
            raise InvalidReplicationFactorError(
                f"replication factor {factor} for {name!r}: {len(live)} live broker(s) "
                f"{sorted(live)}")
        await self.services.run_blocking(lambda: create_topic(
            self.store, name, new_topic_id(), partitions, factor, live, configs=configs))
        await self.refresh()
