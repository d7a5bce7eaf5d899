"""The transaction coordinator of one node (Kafka's TransactionCoordinator): producer ids and
epochs, the partitions of each ongoing transaction, and its commit or abort.

Each transactional id's state is written to ``__transaction_state`` before a response says
it changed. EndTxn writes PrepareCommit (or PrepareAbort), has the engine append the COMMIT
(or ABORT) marker to every partition of the transaction with ``Log.append_marker`` (the
``__consumer_offsets`` partition of a group whose offsets were sent included, whose pending
offsets then count or are dropped), then writes CompleteCommit (CompleteAbort). On load, a
transaction found in a Prepare state is completed as Kafka does; one left Ongoing stays open
until its ``transaction.timeout.ms`` expires, when it is aborted with the producer's epoch
bumped (fencing the producer), as are transactions that simply time out while served.
InitProducerId on a transactional id with an ongoing transaction aborts it the same way.

One asyncio lock serialises every state change (the coordinator lives on the event loop; its
blocking writes run through ``services.run_blocking``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from tierlog.errors import MarkersAbandonedError, TierlogError
from tierlog.server.context import BrokerServices
from tierlog.server.coordinator.coordinator_config import setting_int
from tierlog.server.coordinator.internal_log import coordinator_error
from tierlog.server.coordinator.internal_topics import TRANSACTION_STATE
from tierlog.server.coordinator.owned_partitions import OwnedPartitions
from tierlog.server.coordinator.txn.txn_log_records import TxnStatus, TxnValue
from tierlog.server.coordinator.txn.txn_markers import TxnMarkers
from tierlog.server.coordinator.txn.txn_producer_ids import ProducerIdBlocks
from tierlog.server.coordinator.txn.txn_state_topic import TxnStateTopic

log = logging.getLogger(__name__)

#: The last usable epoch: at it, a new producer id is allocated instead of a bump.
MAX_EPOCH = 32766
#: The states in which a transaction's outcome is decided and stored, its markers not all
#: written yet.
PREPARE_STATES = frozenset({TxnStatus.PREPARE_COMMIT, TxnStatus.PREPARE_ABORT,
                            TxnStatus.PREPARE_EPOCH_FENCE})
#: Between two attempts at completing a decided transaction whose completion failed.
RETRY_COMPLETION_S = 0.5

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class TxnSettings:
    """The transaction coordinator's settings, in Kafka's names and defaults."""

    max_timeout_ms: int = 900_000
    abort_check_interval_ms: int = 10_000

    @classmethod
    def from_properties(cls, values: Mapping[str, Any]) -> TxnSettings:
        d = cls()
        return cls(setting_int(values, "transaction.max.timeout.ms", d.max_timeout_ms, 1),
                   setting_int(values,
                               "transaction.abort.timed.out.transaction.cleanup.interval.ms",
                               d.abort_check_interval_ms, 1))


@dataclass(slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnStatus = TxnStatus.EMPTY
    partitions: set[TopicPartitionKey] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1

    def value(self) -> TxnValue:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(partition)
        return TxnValue(self.producer_id, self.producer_epoch, self.timeout_ms, self.state,
                        tuple((t, tuple(ps)) for t, ps in by_topic.items()),
                        self.last_update_ms, self.start_ms)


#: Called with (producer id, __consumer_offsets partitions, commit) once markers are written.
OffsetsCompletion = Callable[[int, Iterable[int], bool], None]


class TxnCoordinator:
    """Every transactional id of this node; also allocates idempotent producers' ids."""

    def __init__(self, services: BrokerServices, store: TxnStateTopic,
                 producer_ids: ProducerIdBlocks, markers: TxnMarkers,
                 on_offsets: OffsetsCompletion, settings: TxnSettings | None = None) -> None:
        self.services = services
        self.store = store
        self.producer_ids = producer_ids
        self.on_offsets = on_offsets
        self.settings = settings or TxnSettings()
        self.markers = markers
        self.txns: dict[str, TxnMetadata] = {}
        #: The partitions of ``__transaction_state`` whose transactional ids this node
        #: coordinates.
        self.owned = OwnedPartitions()
        #: One state change at a time per transactional id (a transaction waiting on a
        #: partition's leader holds up no other).
        self._locks: dict[str, asyncio.Lock] = {}
        #: Transactional ids whose stored decision is being completed in the background.
        self._finishing: dict[str, asyncio.Task[None]] = {}
        self._expiry: asyncio.Task[None] | None = None

    # -- load, expiry, close -----------------------------------------------------------

    async def load(self) -> None:
        """A node that is a cluster of one: create ``__transaction_state`` if missing and load
        every partition of it (completing what the last run left decided); then start the
        timeout checks."""
        await self.services.run_blocking(self.store.ensure)
        for partition in range(self.store.partitions):
            await self.load_partition(partition)
        await asyncio.gather(*self._finishing.values(), return_exceptions=True)
        self.start_expiry()

    def start_expiry(self) -> None:
        """Start aborting the transactions that outlive their timeouts."""
        if self._expiry is None:
            self._expiry = asyncio.get_running_loop().create_task(self._expire_forever())

    async def load_partition(self, partition: int, leader_epoch: int = 0) -> None:
        """Load the transactional ids of ``partition`` (this node now leads it, at
        ``leader_epoch``: its markers carry it as their coordinator epoch) and complete in the
        background what the last coordinator left decided (a Prepare state); their requests
        are answered COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        ticket = self.owned.begin_load(partition, leader_epoch)
        states = await self.services.run_blocking(lambda: self.store.load_partition(partition))
        if not self.owned.current(partition, ticket):
            return
        highest = -1
        decided = []
        for tid, v in states.items():
            highest = max(highest, v.producer_id)
            meta = TxnMetadata(
                tid, v.producer_id, v.producer_epoch, v.timeout_ms, v.status,
                {(t, p) for t, ps in v.partitions for p in ps}, v.start_ms, v.last_update_ms)
            self.txns[tid] = meta
            if meta.state in PREPARE_STATES:
                decided.append(tid)
        self.producer_ids.raise_floor(highest + 1)
        if not self.owned.finish_load(partition, ticket):
            return
        log.info("loaded %d transactional ids from %s-%d", len(states), TRANSACTION_STATE,
                 partition)
        for tid in decided:
            log.info("completing the %s of transactional id %s left by the last coordinator",
                     self.txns[tid].state.name, tid)
            self._finish_later(tid, at_once=True)

    def unload_partition(self, partition: int) -> None:
        """This node no longer leads ``partition``: forget its transactional ids (their
        producers find the new coordinator)."""
        if not self.owned.unload(partition):
            return
        gone = [t for t in self.txns if self.store.partition_of(t) == partition]
        for tid in gone:
            del self.txns[tid]
            self._locks.pop(tid, None)
        log.info("unloaded %d transactional ids of %s-%d: this node no longer leads it",
                 len(gone), TRANSACTION_STATE, partition)

    def _coordinates(self, transactional_id: str) -> bool:
        """Whether this node coordinates ``transactional_id`` (its partition loaded here)."""
        return self.owned.owns(self.store.partition_of(transactional_id))

    def _holds(self, transactional_id: str) -> bool:
        """Whether the partition of ``transactional_id`` is loaded or loading here: its
        decided transactions are this node's to complete."""
        return self.owned.held(self.store.partition_of(transactional_id))

    def _lock_for(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    async def _expire_forever(self) -> None:
        interval = self.settings.abort_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.abort_timed_out()
            except Exception:
                log.exception("aborting timed-out transactions failed")

    async def abort_timed_out(self) -> list[str]:
        """Abort every Ongoing transaction older than its timeout, bumping its producer's
        epoch (so the producer is fenced); returns their transactional ids."""
        now = self.services.time_ms()
        aborted = []
        for meta in list(self.txns.values()):
            tid = meta.transactional_id
            if not (meta.state is TxnStatus.ONGOING and meta.start_ms + meta.timeout_ms <= now
                    and self._coordinates(tid)):
                continue
            async with self._lock_for(tid):
                if self.txns.get(tid) is not meta or meta.state is not TxnStatus.ONGOING:
                    continue  # changed while this waited
                log.info("aborting the transaction of %s: older than its timeout of %d ms",
                         tid, meta.timeout_ms)
                try:
                    await self._fence_and_abort(meta)
                except MarkersAbandonedError as exc:
                    log.info("%s", exc)
                    continue
                except (TierlogError, OSError) as exc:  # undecided: tried again next round
                    log.warning("the transaction of %s is not aborted yet: %s", tid, exc)
                    continue
                aborted.append(tid)
        return aborted

    async def close(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        for task in list(self._finishing.values()):
            task.cancel()
        await asyncio.gather(*self._finishing.values(), return_exceptions=True)
        await self.markers.close()

    # -- writes ----------------------------------------------------------------------

    async def _store(self, meta: TxnMetadata) -> None:
        """Write the transactional id's state (raises what the append raised)."""
        meta.last_update_ms = now = self.services.time_ms()
        await self.store.write(meta.transactional_id, meta.value(), now)

    async def _complete(self, meta: TxnMetadata, commit: bool, *,
                        new_identity: tuple[int, int] | None = None) -> None:
        """Write Prepare* (with the producer id and epoch ``new_identity`` when given), the
        markers, then Complete* (the partitions are cleared). Raises what writing the state
        raised, leaving an Ongoing transaction as it was (the client retries); or
        MarkersAbandonedError (the next coordinator completes it)."""
        before = (meta.state, meta.producer_id, meta.producer_epoch)
        if new_identity is not None:
            meta.producer_id, meta.producer_epoch = new_identity
        meta.state = TxnStatus.PREPARE_COMMIT if commit else TxnStatus.PREPARE_ABORT
        try:
            await self._store(meta)
        except BaseException:
            if before[0] not in PREPARE_STATES:  # nothing was decided: as it was
                meta.state, meta.producer_id, meta.producer_epoch = before
            raise
        pid, epoch, partitions = meta.producer_id, meta.producer_epoch, sorted(meta.partitions)
        tid = meta.transactional_id
        offsets_partitions = await self.markers.write(
            pid, epoch, partitions, commit,
            coordinator_epoch=self.owned.epoch(self.store.partition_of(tid)),
            coordinating=lambda: self._holds(tid))
        self.services.appended()
        if offsets_partitions:
            self.on_offsets(pid, offsets_partitions, commit)
        meta.state = TxnStatus.COMPLETE_COMMIT if commit else TxnStatus.COMPLETE_ABORT
        meta.partitions = set()
        try:
            await self._store(meta)
        except (TierlogError, OSError) as exc:  # the markers are written: a reload redoes it
            log.warning("transactional id %s: its %s is done but not recorded yet: %s", tid,
                        meta.state.name, exc)

    async def _fence_and_abort(self, meta: TxnMetadata) -> None:
        """Abort the ongoing transaction with the epoch bumped, fencing its producer."""
        if meta.producer_epoch >= MAX_EPOCH:
            bumped = (await self.services.run_blocking(self.producer_ids.allocate), 0)
        else:
            bumped = (meta.producer_id, meta.producer_epoch + 1)
        await self._complete(meta, False, new_identity=bumped)

    def _finish_later(self, transactional_id: str, *, at_once: bool = False) -> None:
        """Complete a transaction whose decision is stored (a Prepare state) in the
        background, retrying until it is done or this node gives its partition up (Kafka's
        coordinator retries its markers the same way)."""
        if transactional_id in self._finishing:
            return
        task = asyncio.get_running_loop().create_task(
            self._finish(transactional_id, at_once))
        self._finishing[transactional_id] = task
        task.add_done_callback(lambda _: self._finishing.pop(transactional_id, None))

    async def _finish(self, transactional_id: str, at_once: bool) -> None:
        if at_once and await self.complete_decided(transactional_id):
            return
        while self._holds(transactional_id):
            await asyncio.sleep(RETRY_COMPLETION_S)
            if await self.complete_decided(transactional_id):
                return

    async def complete_decided(self, transactional_id: str) -> bool:
        """Complete the transaction of ``transactional_id`` if its outcome is decided (a
        Prepare state) and this node coordinates it; returns whether nothing is left to do
        (completed now, not decided, or not coordinated here)."""
        async with self._lock_for(transactional_id):
            meta = self.txns.get(transactional_id)
            if (meta is None or meta.state not in PREPARE_STATES
                    or not self._coordinates(transactional_id)):
                return True
            decided = meta.state
            try:
                await self._complete(meta, decided is TxnStatus.PREPARE_COMMIT)
            except MarkersAbandonedError:
                return True
            except (TierlogError, OSError) as exc:
                log.info("the %s of transactional id %s is not completed yet: %s",
                         decided.name, transactional_id, exc)
                return False
            log.info("completed the %s of transactional id %s", decided.name, transactional_id)
            return True

    # -- InitProducerId --------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str | None, timeout_ms: int,
                               producer_id: int = -1, producer_epoch: int = -1
                               ) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for an idempotent (no transactional id) or
        transactional producer."""
        if not transactional_id:
            pid = await self.services.run_blocking(self.producer_ids.allocate)
            return ErrorCode.none, pid, 0
        if (owned := self.owned.check(self.store.partition_of(transactional_id))) \
                is not ErrorCode.none:
            return owned, -1, -1
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        async with self._lock_for(transactional_id):
            try:
                return await self._init_producer_id(transactional_id, timeout_ms, producer_id,
                                                    producer_epoch)
            except MarkersAbandonedError as exc:  # it lost the partition while aborting
                log.info("%s", exc)
                return ErrorCode.not_coordinator, -1, -1
            except (TierlogError, OSError) as exc:
                log.warning("InitProducerId of %s not done: %s", transactional_id, exc)
                return coordinator_error(exc), -1, -1

    async def _init_producer_id(self, transactional_id: str, timeout_ms: int,
                                producer_id: int, producer_epoch: int
                                ) -> tuple[ErrorCode, int, int]:
        if not self._coordinates(transactional_id):  # unloaded while this waited
            return ErrorCode.not_coordinator, -1, -1
        meta = self.txns.get(transactional_id)
        if meta is None:
            pid = await self.services.run_blocking(self.producer_ids.allocate)
            meta = TxnMetadata(transactional_id, pid, 0, timeout_ms)
            await self._store(meta)
            self.txns[transactional_id] = meta
            return ErrorCode.none, pid, 0
        if producer_id >= 0 and (producer_id, producer_epoch) != (meta.producer_id,
                                                                   meta.producer_epoch):
            return ErrorCode.producer_fenced, -1, -1
        if meta.state in PREPARE_STATES:  # being completed: the client retries
            self._finish_later(transactional_id)
            return ErrorCode.concurrent_transactions, -1, -1
        if meta.state is TxnStatus.ONGOING:
            await self._fence_and_abort(meta)
        if meta.producer_epoch >= MAX_EPOCH:
            meta.producer_id = await self.services.run_blocking(self.producer_ids.allocate)
            meta.producer_epoch = 0
        else:
            meta.producer_epoch += 1
        meta.timeout_ms = timeout_ms
        meta.state = TxnStatus.EMPTY
        meta.partitions = set()
        meta.start_ms = -1
        await self._store(meta)
        return ErrorCode.none, meta.producer_id, meta.producer_epoch

    # -- AddPartitionsToTxn, AddOffsetsToTxn -----------------------------------------

    def _check(self, transactional_id: str, producer_id: int, producer_epoch: int
               ) -> tuple[ErrorCode, TxnMetadata | None]:
        if (owned := self.owned.check(self.store.partition_of(transactional_id))) \
                is not ErrorCode.none:
            return owned, None
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if meta.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, None
        if meta.state in PREPARE_STATES:
            return ErrorCode.concurrent_transactions, None
        return ErrorCode.none, meta

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[TopicPartitionKey]
                             ) -> dict[TopicPartitionKey, ErrorCode]:
        wanted = list(partitions)
        async with self._lock_for(transactional_id):
            error, meta = self._check(transactional_id, producer_id, producer_epoch)
            if meta is None:
                return dict.fromkeys(wanted, error)
            unknown = {tp for tp in wanted if not self._exists(*tp)}
            if unknown:
                return {tp: ErrorCode.unknown_topic_or_partition if tp in unknown
                        else ErrorCode.operation_not_attempted for tp in wanted}
            if meta.state is not TxnStatus.ONGOING or not set(wanted) <= meta.partitions:
                if meta.state is not TxnStatus.ONGOING:
                    meta.start_ms = self.services.time_ms()
                    meta.state = TxnStatus.ONGOING
                meta.partitions.update(wanted)
                try:
                    await self._store(meta)
                except (TierlogError, OSError) as exc:
                    log.warning("storing the transaction of %s failed: %s", transactional_id,
                                exc)
                    return dict.fromkeys(wanted, coordinator_error(exc))
            return dict.fromkeys(wanted, ErrorCode.none)

    def _exists(self, topic: str, partition: int) -> bool:
        """Whether the partition exists: in the cluster on a replicating node (this node
        need not hold a replica of it), else in this node's engine."""
        cluster = self.services.cluster
        if cluster is None:
            return partition in self.services.manager.partitions(topic)
        return cluster.view.partition(topic, partition) is not None

    # -- EndTxn ----------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> ErrorCode:
        async with self._lock_for(transactional_id):
            error, meta = self._check(transactional_id, producer_id, producer_epoch)
            if meta is None:
                return error
            if meta.state is TxnStatus.ONGOING:
                try:
                    await self._complete(meta, commit)
                except MarkersAbandonedError as exc:
                    log.info("%s", exc)
                    return ErrorCode.not_coordinator
                except (TierlogError, OSError) as exc:
                    log.warning("EndTxn of %s not done: %s", transactional_id, exc)
                    return coordinator_error(exc)
                return ErrorCode.none
            if (meta.state is TxnStatus.COMPLETE_COMMIT and commit) or (
                    meta.state is TxnStatus.COMPLETE_ABORT and not commit):
                return ErrorCode.none  # a retry of the EndTxn that completed it
            if meta.state is TxnStatus.EMPTY and not commit:
                return ErrorCode.none  # nothing to abort
            return ErrorCode.invalid_txn_state

    def check_producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                       ) -> ErrorCode:
        """TxnOffsetCommit's check that the producer owns an ongoing transaction, when this
        node coordinates the transactional id (TxnOffsetCommit goes to the group's
        coordinator, on a replicating node often another node: there, as in Kafka, the
        producer's epoch is checked by the append to the group's partition)."""
        if self.owned.check(self.store.partition_of(transactional_id)) is ErrorCode.not_coordinator:
            return ErrorCode.none
        error, meta = self._check(transactional_id, producer_id, producer_epoch)
        if meta is not None and meta.state is not TxnStatus.ONGOING:
            return ErrorCode.invalid_txn_state
        return error
