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
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from tierlog.checkpoint.partition_metadata import new_topic_id
from tierlog.cluster import topic_changes
from tierlog.cluster.controller import (
    Controller,
    create_topic,
    partition_states,
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
from tierlog.cluster.topic_changes import read_topic_records
from tierlog.common.atomic import atomic_write_text
from tierlog.common.clock import system_time_ms
from tierlog.config import LogConfig
from tierlog.errors import (
    BrokerFencedError,
    ConfigError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from tierlog.server.replication import tier_roles
from tierlog.server.replication.delayed_produce import DelayedProduces
from tierlog.server.replication.replica_manager import ReplicaManager
from tierlog.server.replication.sasl_client import BrokerSecurity
from tierlog.server.replication.settings import ClusterSettings

if TYPE_CHECKING:
    from tierlog.manager.log_manager import LogManager
    from tierlog.server.services import Services

__all__ = ["ClusterNode", "ClusterView", "LocalChanges", "dirs_id", "local_changes"]

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
    records: dict[str, TopicRecord]
    """Every topic record, tombstones included."""
    topics: dict[str, TopicRecord]
    """The live topics."""
    partitions: dict[TopicPartition, tuple[PartitionRecord, Versioned]]


def _read_cluster(store: MetadataStore) -> _Read:
    """One poll of the store (blocking)."""
    brokers = read_brokers(store)
    controller = store.read(CONTROLLER)
    records = {t: r for t, (r, _) in read_topic_records(store).items()}
    topics = {t: r for t, r in records.items() if not r.deleted}
    partitions = {(t, p): (state, version)
                  for t, p, state, version in partition_states(store, topics)
                  if version is not None}
    return _Read(brokers, controller, records, topics, partitions)


@dataclass
class LocalChanges:
    """What a poll found this node's logs to need before it creates and follows the cluster's
    topics."""

    doomed: list[str] = field(default_factory=list)
    """Topics whose local logs go: deleted in the cluster, or of an id the name had before."""
    reconfigured: dict[str, Mapping[str, str]] = field(default_factory=dict)
    """Topics whose overrides differ from their record's: the record's to apply."""
    foreign: list[str] = field(default_factory=list)
    """Topics whose local logs carry an id the store never named for them (kept)."""

    @property
    def affected(self) -> set[str]:
        return {*self.doomed, *self.reconfigured}


def local_changes(manager: LogManager, records: Mapping[str, TopicRecord],
                   applied: Mapping[str, TopicRecord]) -> LocalChanges:
    """Compare each local topic with its record (blocking: reads the overrides on disk of a
    topic whose record is not the one ``applied`` last)."""
    changes = LocalChanges()
    for topic in manager.topics():
        record = records.get(topic)
        partitions = manager.partitions(topic)
        if record is None or not partitions:
            continue  # a LIST may miss a record: only a tombstone or an id deletes
        try:
            local_id = manager.log(topic, partitions[0]).topic_id
            local_overrides = (manager.topic_overrides(topic) if applied.get(topic) != record
                               else None)
        except UnknownTopicOrPartitionError:
            continue  # gone meanwhile
        if record.deleted or (local_id != record.topic_id
                              and local_id in record.previous_ids):
            changes.doomed.append(topic)
            continue
        if local_id != record.topic_id:
            changes.foreign.append(topic)
        if local_overrides is not None and _differ(record.configs, local_overrides):
            changes.reconfigured[topic] = record.configs
    return changes


def _differ(configs: Mapping[str, str], local_overrides: Mapping[str, object]) -> bool:
    """Whether a record's overrides are not the local ones (True for overrides this node
    cannot parse: applying them fails, and says why, rather than wedge the poll)."""
    try:
        return LogConfig(dict(configs)).overrides != local_overrides
    except ConfigError:
        return True


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
        #: What a poll warned of once (foreign topic ids, configs a node could not apply).
        self._warned: set[object] = set()
        #: The record of each local topic whose overrides the logs had at the last poll.
        self._applied: dict[str, TopicRecord] = {}

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
            await self._apply_topic_changes(read, live)
            await self._create_local_logs(read.topics)
            await self.replicas.apply(read.partitions, self.view.brokers, live)
            self.replicas.shrink_isr()

    async def _apply_topic_changes(self, read: _Read, live: frozenset[int]) -> None:
        """Delete this node's logs of topics deleted in the cluster (or of an id the name had
        before it was created again) and apply changed overrides, each after giving up the
        node's roles in the topic's partitions: its leader and fetcher hold the logs, which a
        deletion closes and a config change reopens. The roles are taken up again by the
        poll's ``apply``."""
        manager = self.services.manager
        changes = await self.services.run_blocking(
            lambda: local_changes(manager, read.records, self._applied))
        self._applied = {t: r for t, r in read.topics.items()
                         if t not in changes.affected and manager.partitions(t)}
        for topic in changes.foreign:
            if topic not in self._warned:
                self._warned.add(topic)
                log.warning("node %d: its logs of %s carry a topic id the cluster store never "
                            "named for the topic (made before replicas shared ids?): kept",
                            self.node_id, topic)
        affected = changes.affected
        if not affected:
            return
        await self.replicas.apply({tp: s for tp, s in read.partitions.items()
                                   if tp[0] not in affected}, self.view.brokers, live)
        for topic in changes.doomed:
            try:
                await self.services.run_blocking(partial(manager.delete_topic, topic))
            except Exception:
                log.exception("node %d could not delete its replicas of %s", self.node_id,
                              topic)
                continue
            log.info("node %d deleted its replicas of %s (deleted in the cluster)",
                     self.node_id, topic)
        for topic, configs in changes.reconfigured.items():
            current = await self.services.run_blocking(partial(manager.topic_overrides, topic))

            def alter(topic: str = topic, configs: Mapping[str, str] = configs,
                      current: Mapping[str, object] = current) -> None:
                manager.alter_topic_config(topic, dict(configs),
                                           [k for k in current if k not in configs])

            try:
                await self.services.run_blocking(alter)
            except Exception as exc:  # noqa: BLE001 - logged; tried again when the record changes
                log.warning("node %d could not apply %s's configs %s (keeping its own until "
                            "the topic's record changes): %s", self.node_id, topic,
                            dict(configs), exc)
                failed = read.topics.get(topic)
                if failed is not None:  # not again each poll: its roles would flap
                    self._applied[topic] = failed
                continue
            log.info("node %d applied %s's configs from the cluster: %s", self.node_id, topic,
                     dict(configs))

    async def _create_local_logs(self, topics: Mapping[str, TopicRecord]) -> None:
        """Create the logs of the topics (and the partitions of grown topics) this node
        replicates, with the topic's id and overrides."""
        manager = self.services.manager
        for topic, record in topics.items():
            have = manager.partitions(topic)
            count = len(record.assignment)
            if len(have) >= count or not any(self.node_id in r for r in record.assignment):
                continue

            def create(topic: str = topic, record: TopicRecord = record, grow: bool = bool(have),
                       count: int = count) -> None:
                if grow:
                    manager.create_partitions(topic, count)
                else:
                    manager.create_topic(topic, count, dict(record.configs),
                                         topic_id=record.topic_id)

            try:
                await self.services.run_blocking(create)
            except TopicExistsError:
                continue
            except Exception:
                log.exception("node %d could not create its replicas of %s", self.node_id,
                              topic)
                continue
            log.info("node %d created its replicas of %s (%d partitions)", self.node_id, topic,
                     count)

    # -- topics ------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str]) -> None:
        """Assign and write a new topic (``replication_factor`` -1: the broker's
        ``default.replication.factor``), then read the cluster again so this node answers with
        it. TopicExistsError, InvalidReplicationFactorError."""
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

    async def delete_topic(self, name: str) -> None:
        """Delete ``name`` from the cluster (its tombstone, then its partitions marked), then
        read the cluster again: this node gives up its roles in it and deletes its logs of it
        at once, every other node at its next poll. UnknownTopicOrPartitionError when the
        cluster has no such topic."""
        await self.services.run_blocking(partial(topic_changes.delete_topic, self.store, name))
        await self.refresh()

    async def create_partitions(self, name: str, count: int,
                                assignments: Sequence[Sequence[int]] | None,
                                validate_only: bool) -> None:
        """Grow ``name`` to ``count`` partitions in the cluster (the new replicas as
        ``assignments`` name them, else assigned over the live nodes), then read the cluster
        again; with ``validate_only`` only check it against this node's view.
        UnknownTopicOrPartitionError, InvalidPartitionsError, InvalidReplicaAssignmentError,
        InvalidReplicationFactorError."""
        live = set(self.view.live)
        if validate_only:
            record = self.view.topics.get(name)
            if record is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name} (in the cluster)")
            topic_changes.grown(record, name, count, live, assignments)
            return
        await self.services.run_blocking(partial(
            topic_changes.create_partitions, self.store, name, count, live, assignments))
        await self.refresh()

    async def alter_topic_configs(self, name: str,
                                  change: Callable[[Mapping[str, str]], Mapping[str, str]],
                                  validate_only: bool) -> None:
        """Replace ``name``'s overrides in its cluster record with ``change(current)`` (which
        checks them, raising to refuse), then read the cluster again (this node applies them
        at once, the others at their next poll); with ``validate_only`` only check them
        against this node's view. UnknownTopicOrPartitionError; ConfigError."""
        if validate_only:
            record = self.view.topics.get(name)
            if record is None:
                raise UnknownTopicOrPartitionError(f"unknown topic {name} (in the cluster)")
            await self.services.run_blocking(lambda: change(record.configs))
            return
        await self.services.run_blocking(partial(
            topic_changes.alter_topic_configs, self.store, name, change))
        await self.refresh()
