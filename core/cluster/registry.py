"""A node's registration in the cluster store (``brokers/<nodeId>``) and how the others judge it
alive.

**Registering.** A node creates its record, or takes over an existing one: at once when the
record is its own previous life's (the same ``dirs_id``: this node holds its data directories'
lock, so that life is over) or was fenced by the controller; otherwise only once the record has
not changed for ``broker.session.timeout.ms`` as this node observes it (the holder stopped
heartbeating), and until then NodeIdInUseError. Each registration takes the next
``broker_epoch`` and a new ``incarnation``. Every write is a compare-and-swap, so of two nodes
racing for one id exactly one wins.

**Heartbeating** replaces the record at the version this node last wrote. A conflict means
someone else wrote it: the controller fencing it, or a newer incarnation of the id (both
BrokerFencedError: stop serving as a replica, register again), or this node's own earlier
write whose answer was lost (adopted, and the heartbeat goes on).

**Liveness** is judged by each observer's own monotonic clock, never by comparing wall clocks
across nodes (``LivenessTracker``): a record whose version the observer has not seen change for
the session timeout is dead. Clocks only serve liveness; fencing is the store's CAS.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from tierlog.cluster.keys import BROKERS, BrokerRecord, broker_key, node_id_of
from tierlog.cluster.store import MetadataStore, Versioned
from tierlog.errors import BrokerFencedError, MetadataConflictError, NodeIdInUseError

__all__ = ["DEFAULT_HEARTBEAT_INTERVAL_MS", "DEFAULT_SESSION_TIMEOUT_MS", "BrokerRegistration",
           "LivenessTracker", "fence", "live_brokers", "read_brokers"]

log = logging.getLogger(__name__)

#: ``broker.session.timeout.ms``: Kafka's default.
DEFAULT_SESSION_TIMEOUT_MS = 9_000
#: ``broker.heartbeat.interval.ms``: Kafka's default.
DEFAULT_HEARTBEAT_INTERVAL_MS = 2_000


@dataclass(slots=True)
class _Seen:
    version: str
    since_ms: int


class LivenessTracker:
    """One observer's view of which records are alive: when, by the observer's own clock
    ``time_ms`` (monotonic), it first saw each key at its current version. A key unchanged for
    ``session_timeout_ms`` is dead; a key first seen now counts as alive for a whole session
    (an observer that just started gives every node its full timeout). Not thread-safe."""

    def __init__(self, session_timeout_ms: int, time_ms: Callable[[], int]) -> None:
        if session_timeout_ms < 1:
            raise ValueError(f"broker.session.timeout.ms must be positive, got "
                             f"{session_timeout_ms}")
        self.session_timeout_ms = session_timeout_ms
        self._time_ms = time_ms
        self._seen: dict[str, _Seen] = {}

    def observe(self, found: Versioned | None, key: str) -> None:
        """Note ``key``'s version as just read (None: it does not exist)."""
        if found is None:
            self._seen.pop(key, None)
            return
        seen = self._seen.get(key)
        if seen is None or seen.version != found.version:
            self._seen[key] = _Seen(found.version, self._time_ms())

    def alive(self, key: str) -> bool:
        """Whether ``key`` changed within the session timeout, as observed (a key never
        observed is not alive)."""
        seen = self._seen.get(key)
        return seen is not None and self._time_ms() - seen.since_ms < self.session_timeout_ms


def read_brokers(store: MetadataStore) -> dict[int, tuple[BrokerRecord, Versioned]]:
    """Every registered node's record and version (a LIST, then a GET each; a record removed
    between the two is left out)."""
    found: dict[int, tuple[BrokerRecord, Versioned]] = {}
    for key in store.list_keys(BROKERS):
        node_id = node_id_of(key)
        current = None if node_id is None else store.read(key)
        if node_id is not None and current is not None:
            found[node_id] = (BrokerRecord.from_value(key, current.value), current)
    return found


class BrokerRegistration:
    """This node's registration as ``node_id`` in ``store``: :meth:`register` once, then
    :meth:`heartbeat` every ``broker.heartbeat.interval.ms``. ``time_ms`` is this node's
    monotonic clock (liveness of a record held elsewhere), ``wall_ms`` its wall clock (the
    informative ``heartbeat_ms``). Not thread-safe: one task drives it."""

    def __init__(self, store: MetadataStore, node_id: int, *, host: str, port: int,
                 dirs_id: str, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 time_ms: Callable[[], int], wall_ms: Callable[[], int],
                 rack: str | None = None,
                 endpoints: Mapping[str, tuple[str, int]] | None = None) -> None:
        self.store = store
        self.key = broker_key(node_id)
        self.node_id = node_id
        self._address = (host, port, rack)
        self._endpoints = dict(endpoints or {})
        self._dirs_id = dirs_id
        self._wall_ms = wall_ms
        self._tracker = LivenessTracker(session_timeout_ms, time_ms)
        self._mine: Versioned | None = None
        #: The record as this node last wrote it (None before it registered).
        self.record: BrokerRecord | None = None

    def register(self) -> BrokerRecord:
        """Create this node's record, or take over the id's (see the module docstring).
        NodeIdInUseError while another live incarnation holds it; MetadataConflictError when
        another node won a race for it meanwhile (try again)."""
        current = self.store.read(self.key)
        host, port, rack = self._address
        fresh = BrokerRecord(self.node_id, host, port, uuid.uuid4().hex, self._dirs_id, 1,
                             heartbeat_ms=self._wall_ms(), rack=rack,
                             endpoints=self._endpoints)
        if current is None:
            self._mine = self.store.create(self.key, fresh.to_value())
        else:
            held = BrokerRecord.from_value(self.key, current.value)
            self._tracker.observe(current, self.key)
            if held.dirs_id != self._dirs_id and not held.fenced \
                    and self._tracker.alive(self.key):
                raise NodeIdInUseError(
                    f"node.id {self.node_id} is registered by another live node at "
                    f"{held.host}:{held.port} (other data directories, heartbeating); it can "
                    f"be taken over once that node has been silent for "
                    f"{self._tracker.session_timeout_ms} ms")
            fresh = replace(fresh, broker_epoch=held.broker_epoch + 1)
            self._mine = self.store.replace(self.key, fresh.to_value(), current)
        self.record = fresh
        log.info("registered node %d at %s:%d (broker epoch %d)", self.node_id, host, port,
                 fresh.broker_epoch)
        return fresh

    def heartbeat(self) -> BrokerRecord:
        """Tell the others this node lives: its record replaced at the version it last wrote.
        BrokerFencedError when the controller fenced it or a newer incarnation took the id."""
        if self._mine is None or self.record is None:
            raise BrokerFencedError(f"node {self.node_id} heartbeats before it registered")
        beat = replace(self.record, heartbeat_ms=self._wall_ms())
        try:
            self._mine = self.store.replace(self.key, beat.to_value(), self._mine)
        except MetadataConflictError:
            current = self.store.read(self.key)
            held = None if current is None else BrokerRecord.from_value(self.key, current.value)
            if current is None or held is None or held.fenced \
                    or held.incarnation != self.record.incarnation:
                self._mine = None
                why = ("its record is gone" if held is None else "the controller fenced it"
                       if held.incarnation == self.record.incarnation
                       else f"broker epoch {held.broker_epoch} took the id over")
                raise BrokerFencedError(
                    f"node {self.node_id} (broker epoch {self.record.broker_epoch}) lost its "
                    f"registration: {why}; it registers again") from None
            # Our own write whose answer was lost: adopt it and beat again.
            self._mine = self.store.replace(self.key, beat.to_value(), current)
        self.record = beat
        return beat


    def resign(self) -> None:
        """A clean shutdown (Kafka's controlled shutdown): this node fences its own record, so
        the controller moves its leaderships at once instead of after a silent session. A
        lost race (the controller fenced it first, or it was taken over) changes nothing."""
        if self._mine is None:
            return
        mine, self._mine = self._mine, None
        try:
            fence(self.store, self.node_id, mine)
        except MetadataConflictError:
            return
        log.info("node %d resigned its registration (broker epoch %d)", self.node_id,
                 self.record.broker_epoch if self.record is not None else 0)


def fence(store: MetadataStore, node_id: int, expected: Versioned) -> Versioned:
    """The controller's fencing of a silent node: its record, read at ``expected``, replaced
    with ``fenced`` set (MetadataConflictError when it changed since: it is alive after all)."""
    key = broker_key(node_id)
    record = BrokerRecord.from_value(key, expected.value)
    return store.replace(key, replace(record, fenced=True).to_value(), expected)


def live_brokers(brokers: Mapping[int, tuple[BrokerRecord, Versioned]],
                 tracker: LivenessTracker) -> dict[int, BrokerRecord]:
    """The unfenced nodes whose records ``tracker`` saw change within the session timeout
    (``brokers`` as :func:`read_brokers` gives them, observed into ``tracker`` here)."""
    alive: dict[int, BrokerRecord] = {}
    for node_id, (record, version) in brokers.items():
        key = broker_key(node_id)
        tracker.observe(version, key)
        if not record.fenced and tracker.alive(key):
            alive[node_id] = record
    return alive
