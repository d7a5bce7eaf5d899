"""The coordinators of a single-node broker: consumer groups and transactions.

:func:`install` registers their request handlers (FindCoordinator of
:mod:`tierlog.server.api.find_coordinator`, the group APIs of
:mod:`tierlog.server.api.groups_api`, the transaction APIs of :mod:`tierlog.server.api.txn_api`)
with the server's registry and returns a :class:`Coordinators`; the server awaits ``start()``,
which creates and loads ``__consumer_offsets`` and ``__transaction_state``, and ``close()`` at
shutdown. Until the load is done, group and transaction requests are answered
COORDINATOR_LOAD_IN_PROGRESS (clients retry). This node coordinates every group and
transactional id, so FindCoordinator names it for every key.

Settings, in Kafka's names (``tierlog serve --set``): ``offsets.topic.num.partitions``,
``transaction.state.log.num.partitions`` (both 50), ``group.min.session.timeout.ms``,
``group.max.session.timeout.ms``, ``group.initial.rebalance.delay.ms``,
``offset.metadata.max.bytes``, ``transaction.max.timeout.ms`` and
``transaction.abort.timed.out.transaction.cleanup.interval.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from tierlog.cluster.producer_ids import reserve_producer_ids
from tierlog.errors import ConfigError
from tierlog.manager.log_manager import LogManager
from tierlog.server.api import find_coordinator, groups_api, txn_api
from tierlog.server.context import BrokerServices, HandlerRegistry
from tierlog.server.coordinator.coordinator_config import COORDINATOR_KEYS, setting_int
from tierlog.server.coordinator.coordinator_timers import Timers
from tierlog.server.coordinator.group.group_model import GroupSettings
from tierlog.server.coordinator.group.groups import GroupCoordinator
from tierlog.server.coordinator.group.offsets_topic import DEFAULT_PARTITIONS as OFFSETS_PARTITIONS
from tierlog.server.coordinator.group.offsets_topic import OffsetsTopic
from tierlog.server.coordinator.txn.txn import TxnCoordinator, TxnSettings
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
        self.groups = GroupCoordinator(
            services, OffsetsTopic(manager, setting_int(
                settings, "offsets.topic.num.partitions", OFFSETS_PARTITIONS, 1)),
            GroupSettings.from_properties(settings), timers)
        self.txns = TxnCoordinator(
            services, TxnStateTopic(manager, setting_int(
                settings, "transaction.state.log.num.partitions", TXN_PARTITIONS, 1)),
            ProducerIdBlocks(manager.dirs[0] / BLOCK_FILE, _highest_producer_id(manager) + 1,
                             reserve=_cluster_blocks(services)),
            self.groups.complete_txn, TxnSettings.from_properties(settings))

    async def start(self) -> None:
        """Load the coordinators' state: groups first (a transaction completed on load
        settles its pending offsets in them)."""
        await self.groups.load()
        await self.txns.load()

    async def close(self) -> None:
        """Stop the coordinators' timers."""
        self.groups.close()
        await self.txns.close()


def _cluster_blocks(services: BrokerServices) -> BlockReserver | None:
    """On a replicating node, producer id blocks reserved in the cluster store (no two nodes
    may hand out one id); None on a node that is a cluster of one (its own file)."""
    cluster = getattr(services, "cluster", None)
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
    register(registry, services, find_coordinator.ENDPOINTS)
    groups_api.install(registry, coordinators.groups)
    txn_api.install(registry, coordinators.txns, coordinators.groups)
    return coordinators
