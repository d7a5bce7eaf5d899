"""The coordinators of a node: consumer groups and transactions.

:func:`install` registers their request handlers (FindCoordinator of
:mod:`tierlog.server.api.find_coordinator`, the group APIs of
:mod:`tierlog.server.api.groups_api`, the transaction APIs of :mod:`tierlog.server.api.txn_api`,
WriteTxnMarkers of :mod:`tierlog.server.api.txn_markers_api`) with the server's registry and
returns a :class:`Coordinators`; the server awaits ``start()`` and ``close()`` at shutdown.
A group id or transactional id is coordinated by the node that leads its partition of
``__consumer_offsets`` or ``__transaction_state``; until that partition is loaded its
requests are answered COORDINATOR_LOAD_IN_PROGRESS, and on another node NOT_COORDINATOR
(clients retry, or ask FindCoordinator again).

- A node that is a cluster of one leads every partition: ``start()`` creates and loads both
  topics, and FindCoordinator names the node for every key.
- On a replicating node (``cluster.metadata.url``) the internal topics are replicated topics
  of the cluster, created on the first FindCoordinator as Kafka creates them
  (:class:`~tierlog.server.coordinator.coordinator_locator.CoordinatorLocator`); each
  partition is loaded when this node becomes its leader and unloaded when it stops leading it
  (a role listener of the ReplicaManager), and every coordinator write waits for the
  partition's in-sync replicas (:class:`~tierlog.server.coordinator.internal_log.InternalLog`).

Settings, in Kafka's names (``tierlog serve --set``): ``offsets.topic.num.partitions``,
``transaction.state.log.num.partitions`` (both 50), ``offsets.topic.replication.factor``,
``transaction.state.log.replication.factor`` (both 3), ``transaction.state.log.min.isr`` (2),
``offsets.commit.timeout.ms`` (5000), ``group.min.session.timeout.ms``,
``group.max.session.timeout.ms``, ``group.initial.rebalance.delay.ms``,
``offset.metadata.max.bytes``, ``transaction.max.timeout.ms`` and
``transaction.abort.timed.out.transaction.cleanup.interval.ms``.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from tierlog.cluster.producer_ids import reserve_producer_ids
from tierlog.errors import ConfigError
from tierlog.manager.log_manager import LogManager
from tierlog.server.api import find_coordinator, groups_api, txn_api, txn_markers_api
from tierlog.server.context import BrokerServices, HandlerRegistry
from tierlog.server.coordinator.coordinator_config import COORDINATOR_KEYS, setting_int
from tierlog.server.coordinator.coordinator_locator import CoordinatorLocator
from tierlog.server.coordinator.coordinator_timers import Timers
from tierlog.server.coordinator.group.group_model import GroupSettings
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.coordinator.group.offsets_topic import DEFAULT_PARTITIONS as OFFSETS_PARTITIONS
from tierlog.server.coordinator.group.offsets_topic import OffsetsTopic
from tierlog.server.coordinator.internal_log import DEFAULT_WRITE_TIMEOUT_MS, InternalLog
from tierlog.server.coordinator.internal_topics import CONSUMER_OFFSETS, INTERNAL_TOPICS
from tierlog.server.coordinator.txn.txn import TxnCoordinator, TxnSettings
from tierlog.server.coordinator.txn.txn_markers import TxnMarkers
from tierlog.server.coordinator.txn.txn_producer_ids import (
    BLOCK_FILE,
    BlockReserver,
    ProducerIdBlocks,
)
from tierlog.server.coordinator.txn.txn_state_topic import DEFAULT_PARTITIONS as TXN_PARTITIONS
from tierlog.server.coordinator.txn.txn_state_topic import TxnStateTopic
from tierlog.server.registry import register

log = logging.getLogger(__name__)


class Coordinators:
    """The group and transaction coordinators of one server."""

    def __init__(self, services: BrokerServices, settings: Mapping[str, object],
                 timers: Timers | None = None) -> None:
        self.services = services
        manager = services.manager
        unknown = set(settings) - COORDINATOR_KEYS
        if unknown:
            raise ConfigError(min(unknown), "not a coordinator setting")
        internal = InternalLog(services, setting_int(settings, "offsets.commit.timeout.ms",
                                                     DEFAULT_WRITE_TIMEOUT_MS, 1))
        self.groups = GroupCoordinator(
            services, OffsetsTopic(manager, internal, setting_int(
                settings, "offsets.topic.num.partitions", OFFSETS_PARTITIONS, 1)),
            GroupSettings.from_properties(settings), timers)
        self.txns = TxnCoordinator(
            services, TxnStateTopic(manager, internal, setting_int(
                settings, "transaction.state.log.num.partitions", TXN_PARTITIONS, 1)),
            ProducerIdBlocks(manager.dirs[0] / BLOCK_FILE, _highest_producer_id(manager) + 1,
                             reserve=_cluster_blocks(services)),
            TxnMarkers(services, internal), self.groups.complete_txn,
            TxnSettings.from_properties(settings))
        #: Where each internal topic's coordinator is found on a replicating node.
        self.locator = CoordinatorLocator(services, self.groups.store, self.txns.store,
                                          settings)
        self._loads: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Load the coordinators' state. A node that is a cluster of one loads every
        partition, groups first (a transaction completed on load settles its pending offsets
        in them); a replicating node loads the partitions it leads, and from then on each
        partition it comes to lead, and unloads each it stops leading."""
        cluster = self.services.cluster
        if cluster is None:
            await self.groups.load()
            await self.txns.load()
            return
        cluster.replicas.role_listeners.append(self._role_changed)
        for tp, role in list(cluster.replicas.leaders.items()):
            await self._role_changed(tp, role.leader.leader_epoch)
        self.txns.start_expiry()

    async def _role_changed(self, tp: tuple[str, int], leader_epoch: int | None) -> None:
        """A leadership of this node began or ended: load or unload the partition's
        coordinator state (loads run as tasks: the replica roles do not wait for them)."""
        topic, partition = tp
        if topic not in INTERNAL_TOPICS:
            return
        self.locator.learn_partitions()
        # A new leader epoch of a partition this node already led reloads it from its log:
        # what it held in memory is dropped first (members waiting on it are told).
        if topic == CONSUMER_OFFSETS:
            self.groups.unload_partition(partition)
        else:
            self.txns.unload_partition(partition)
        if leader_epoch is None:
            return
        load = (self.groups.load_partition(partition) if topic == CONSUMER_OFFSETS
                else self.txns.load_partition(partition, leader_epoch))
        task = asyncio.get_running_loop().create_task(load)
        self._loads.add(task)
        task.add_done_callback(self._loaded)

    def _loaded(self, task: asyncio.Task[None]) -> None:
        self._loads.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("loading a coordinator partition failed", exc_info=task.exception())

    async def close(self) -> None:
        """Stop the coordinators' timers and loads."""
        for task in list(self._loads):
            task.cancel()
        self.groups.close()
        await self.txns.close()


def _cluster_blocks(services: BrokerServices) -> BlockReserver | None:
    """On a replicating node, producer id blocks reserved in the cluster store (no two nodes
    may hand out one id); None on a node that is a cluster of one (its own file)."""
    cluster = services.cluster
    if cluster is None:
        return None
    store = cluster.store
    return lambda at_least, size: reserve_producer_ids(store, at_least, size)


def _highest_producer_id(manager: LogManager) -> int:
    """The highest producer id any log knows (ids below it may be in use)."""
    highest = -1
    for log_ in manager.logs().values():
        producers = log_.producer_state.active_producers
        if producers:
            highest = max(highest, max(producers))
    return highest


def settings_of(services: BrokerServices) -> Mapping[str, object]:
    """The coordinator settings the server was given (none: Kafka's defaults)."""
    config = getattr(services, "config", None)
    return dict(getattr(config, "coordinator", None) or {})


def install(registry: HandlerRegistry, services: BrokerServices,
            settings: Mapping[str, object] | None = None) -> Coordinators:
    """Register the coordinators' handlers; the caller awaits ``start()`` before serving."""
    coordinators = Coordinators(services, settings_of(services) if settings is None
                                else settings)
    register(registry, coordinators.locator, find_coordinator.ENDPOINTS)
    groups_api.install(registry, coordinators.groups)
    txn_api.install(registry, coordinators.txns, coordinators.groups)
    txn_markers_api.install(registry, coordinators.txns.markers, coordinators.groups)
    return coordinators
