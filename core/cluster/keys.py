"""The cluster store's layout: which key holds what, and each object's value, checked on the way
in and out. Built and parsed here only.

```text
brokers/<nodeId>              BrokerRecord: a registered node, its address and incarnation
controller                    the controller's claim
topics/t_<topic>              a topic's id, assignment and configuration overrides (or its
                              tombstone, once deleted)
partitions/t_<topic>/<p>      a partition's leader, epochs and in-sync set (or {"deleted": true})
producer-ids                  the start of the next free block of producer ids
```

A topic's segment carries the prefix ``t_``: Kafka allows a topic named ``.metrics``, and the
store refuses a key segment that starts with a dot (so that no key holds ``..``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import CorruptRemoteMetadataError, InvalidTopicError

__all__ = ["BROKERS", "CONTROLLER", "DELETED_PARTITION", "NO_LEADER", "PRODUCER_IDS", "TOPICS",
           "BrokerRecord", "ControllerRecord", "PartitionRecord", "TopicRecord", "broker_key",
           "is_deleted_partition", "node_id_of", "partition_key", "partitions_prefix",
           "topic_key", "topic_of"]

#: The prefix under which each node registers (``brokers/<nodeId>``).
BROKERS = "brokers"
_T = TypeVar("_T")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_NODE_KEY = re.compile(r"brokers/(0|[1-9]\d{0,9})")
_MAX_NODE_ID = INT32_MAX


def broker_key(node_id: int) -> str:
    """The key of node ``node_id``'s registration."""
    if not 0 <= node_id <= _MAX_NODE_ID:
        raise ValueError(f"node.id {node_id} is not a node id (0 to {_MAX_NODE_ID})")
    return f"{BROKERS}/{node_id}"


def node_id_of(key: str) -> int | None:
    """The node id a ``brokers/<id>`` key names; None for another key."""
    found = _NODE_KEY.fullmatch(key)
    return None if found is None or int(found.group(1)) > _MAX_NODE_ID else int(found.group(1))


def topic_key(topic: str) -> str:
    """The key of ``topic``'s assignment; InvalidTopicError for a name Kafka refuses."""
    return f"{TOPICS}/{_topic_segment(topic)}"


def partitions_prefix(topic: str) -> str:
    """The prefix under which ``topic``'s partitions are kept."""
    return f"partitions/{_topic_segment(topic)}"


def partition_key(topic: str, partition: int) -> str:
    """The key of one partition's leadership and in-sync set."""
    if not 0 <= partition <= _MAX_NODE_ID:
        raise ValueError(f"{partition} is not a partition number")
    return f"{partitions_prefix(topic)}/{partition}"


def _topic_segment(topic: str) -> str:
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise InvalidTopicError(f"{topic!r} is not a topic name (1 to 249 of [A-Za-z0-9._-], "
                                f"not '.' or '..')")
    return f"t_{topic}"


@dataclass(frozen=True, slots=True)
class BrokerRecord:
    """A node's registration: where clients and followers reach it, and which incarnation of
    ``node_id`` it is.

    ``broker_epoch`` grows with every registration of the id (Kafka's broker epoch): a leader
    resets what it knew of a follower whose epoch changed, since a restarted node lost its
    fetch state. ``dirs_id`` names the data directories (kept there), so a node restarted on
    the same disks knows the record is its own previous life's. ``fenced`` is set by the
    controller when the node stopped heartbeating. ``heartbeat_ms`` is the node's wall clock
    at its last heartbeat, for people; liveness is judged by each observer's own clock."""

    node_id: int
    host: str
    port: int
    incarnation: str
    dirs_id: str
    broker_epoch: int
    fenced: bool = False
    heartbeat_ms: int = 0
    rack: str | None = None
    endpoints: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    """The advertised (host, port) of each of the node's listeners, by listener name: a client
    is answered with the nodes' endpoints on the listener it came through (``host``/``port``
    are the inter-broker listener's, where the other nodes reach it)."""

    def endpoint(self, listener: str) -> tuple[str, int]:
        """Where clients of ``listener`` reach this node (the inter-broker address when it
        advertises nothing there)."""
        return self.endpoints.get(listener, (self.host, self.port))

    def to_value(self) -> dict[str, Any]:
        """The JSON object the store keeps."""
        value = asdict(self)
        value["endpoints"] = {name: [host, port] for name, (host, port) in
                              self.endpoints.items()}
        return {_CAMEL.get(k, k): v for k, v in value.items()}

    @classmethod
    def from_value(cls, key: str, value: Mapping[str, Any]) -> BrokerRecord:
        """The record a stored value holds; CorruptRemoteMetadataError naming the key when a
        field is missing or of another type, or the id is not the key's."""
        try:
            record = cls(
                node_id=_typed(value, "nodeId", int), host=_typed(value, "host", str),
                port=_typed(value, "port", int), incarnation=_typed(value, "incarnation", str),
                dirs_id=_typed(value, "dirsId", str),
                broker_epoch=_typed(value, "brokerEpoch", int),
                fenced=_typed(value, "fenced", bool),
                heartbeat_ms=_typed(value, "heartbeatMs", int),
                rack=_optional(value, "rack", str),
                endpoints=_endpoints(value.get("endpoints") or {}))
        except (KeyError, TypeError) as e:
            raise CorruptRemoteMetadataError(f"cluster metadata {key!r}: {e}") from e
        if node_id_of(key) != record.node_id or not 0 < record.port < 65536:
            raise CorruptRemoteMetadataError(
                f"cluster metadata {key!r}: node {record.node_id} at port {record.port} is not "
                f"the registration this key names")
        return record


#: The controller's claim.
CONTROLLER = "controller"
#: The prefix of the topics' assignments.
TOPICS = "topics"
#: The next block of producer ids free for any node (Kafka's AllocateProducerIds, KIP-730).
PRODUCER_IDS = "producer-ids"


@dataclass(frozen=True, slots=True)
class ControllerRecord:
    """The controller's claim: which node holds it, at which ``controller_epoch`` (grown by
    every takeover), by which ``incarnation`` of that node (so that a restarted node does not
    mistake its previous life's claim for its own)."""

    node_id: int
    controller_epoch: int
    incarnation: str

    def to_value(self) -> dict[str, Any]:
        return {"nodeId": self.node_id, "controllerEpoch": self.controller_epoch,
                "incarnation": self.incarnation}

    @classmethod
    def from_value(cls, key: str, value: Mapping[str, Any]) -> ControllerRecord:
        """The claim a stored value holds; CorruptRemoteMetadataError naming the key."""
        try:
            return cls(_typed(value, "nodeId", int), _typed(value, "controllerEpoch", int),
                       _typed(value, "incarnation", str))
        except (KeyError, TypeError) as e:
            raise CorruptRemoteMetadataError(f"cluster metadata {key!r}: {e}") from e


@dataclass(frozen=True, slots=True)
class TopicRecord:
    """A topic's id and the replicas of each of its partitions (``assignment[p]``).

    A deleted topic keeps its key as a tombstone (``deleted``; the store has no delete):
    readers take it for an absent topic, and a node that still holds the topic's logs deletes
    them on seeing it. A topic created again under the same name replaces the tombstone with a
    new id, and lists the ids the name had before in ``previous_ids``: a node that missed the
    deletion deletes its logs of any of those ids (and only those: a log whose id the store
    never named is kept)."""

    topic_id: str
    assignment: tuple[tuple[int, ...], ...]
    configs: Mapping[str, str] = field(default_factory=dict)
    """The topic's configuration overrides (``min.insync.replicas``, ``retention.ms``, ...),
    which every replica's log is created with and follows when they change."""
    deleted: bool = False
    previous_ids: tuple[str, ...] = ()

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"topicId": self.topic_id,
                                 "assignment": [list(r) for r in self.assignment],
                                 "configs": dict(self.configs)}
        if self.deleted:
            value["deleted"] = True
        if self.previous_ids:
            value["previousTopicIds"] = list(self.previous_ids)
        return value

    @classmethod
    def from_value(cls, key: str, value: Mapping[str, Any]) -> TopicRecord:
        """The topic a stored value holds; CorruptRemoteMetadataError naming the key."""
        try:
            assignment = _typed(value, "assignment", list)
            if not assignment or not all(
                    isinstance(r, list) and r and all(
                        isinstance(n, int) and not isinstance(n, bool) for n in r)
                    for r in assignment):
                raise TypeError("assignment must be a non-empty list of replica lists")
            configs = value.get("configs") or {}
            if not isinstance(configs, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in configs.items()):
                raise TypeError("configs must map names to strings")
            previous = value.get("previousTopicIds") or []
            if not isinstance(previous, list) or not all(isinstance(i, str) for i in previous):
                raise TypeError("previousTopicIds must be a list of topic ids")
            deleted = value.get("deleted", False)
            if not isinstance(deleted, bool):
                raise TypeError(f"field 'deleted' is {deleted!r:.40}, not a bool")
            return cls(_typed(value, "topicId", str), tuple(tuple(r) for r in assignment),
                       configs, deleted, tuple(previous))
        except (KeyError, TypeError) as e:
            raise CorruptRemoteMetadataError(f"cluster metadata {key!r}: {e}") from e


#: The value a deleted topic's partition objects are replaced with: no state, so that no
#: reader takes it for a partition of a topic created again under the name.
DELETED_PARTITION: Mapping[str, Any] = MappingProxyType({"deleted": True})


def is_deleted_partition(value: Mapping[str, Any]) -> bool:
    """Whether a partition object's value is :data:`DELETED_PARTITION`."""
    return value.get("deleted") is True


def topic_of(key: str) -> str | None:
    """The topic a ``topics/t_<topic>`` key names; None for another key."""
    prefix = f"{TOPICS}/t_"
    return key[len(prefix):] if key.startswith(prefix) and "/" not in key[len(prefix):] \
        else None


#: A partition without a leader (Kafka's NO_LEADER): every in-sync replica is offline.
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class PartitionRecord:
    """One partition's replicas, leader and in-sync set, as the controller (elections) and the
    leader (in-sync changes) keep it. ``leader_epoch`` grows with every change of leader;
    ``partition_epoch`` with every change at all (Kafka's partition epoch, which fences an
    in-sync change made from an older state). ``replicas`` is in preference order: the first
    is the preferred leader."""

    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem is not None:
            raise ValueError(problem)

    def problem(self) -> str | None:
        """What makes this not a partition's state (None: nothing)."""
        if not self.replicas or len(set(self.replicas)) != len(self.replicas):
            return f"replicas {list(self.replicas)} are not distinct node ids"
        if not self.isr or not set(self.isr) <= set(self.replicas) \
                or len(set(self.isr)) != len(self.isr):
            return (f"in-sync set {list(self.isr)} is not a non-empty set of the replicas "
                    f"{list(self.replicas)}")
        if self.leader != NO_LEADER and self.leader not in self.isr:
            return f"leader {self.leader} is not in the in-sync set {list(self.isr)}"
        if self.leader_epoch < 0 or self.partition_epoch < 0:
            return f"epochs {self.leader_epoch}/{self.partition_epoch} are negative"
        return None

    def to_value(self) -> dict[str, Any]:
        return {"replicas": list(self.replicas), "isr": list(self.isr), "leader": self.leader,
                "leaderEpoch": self.leader_epoch, "partitionEpoch": self.partition_epoch}

    @classmethod
    def from_value(cls, key: str, value: Mapping[str, Any]) -> PartitionRecord:
        """The record a stored value holds; CorruptRemoteMetadataError naming the key."""
        try:
            replicas = _typed(value, "replicas", list)
            isr = _typed(value, "isr", list)
            if not all(isinstance(n, int) and not isinstance(n, bool) for n in replicas + isr):
                raise TypeError("replicas and isr must be lists of node ids")
            return cls(tuple(replicas), tuple(isr), _typed(value, "leader", int),
                       _typed(value, "leaderEpoch", int), _typed(value, "partitionEpoch", int))
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptRemoteMetadataError(f"cluster metadata {key!r}: {e}") from e


def _endpoints(found: object) -> dict[str, tuple[str, int]]:
    """A broker record's ``endpoints``: listener name -> [host, port]."""
    if not isinstance(found, dict):
        raise TypeError(f"field 'endpoints' is {found!r:.40}, not an object")
    endpoints = {}
    for name, address in found.items():
        if not (isinstance(name, str) and isinstance(address, list) and len(address) == 2
                and isinstance(address[0], str) and isinstance(address[1], int)
                and not isinstance(address[1], bool)):
            raise TypeError(f"endpoint {name!r:.40} is {address!r:.40}, not [host, port]")
        endpoints[name] = (address[0], address[1])
    return endpoints


_CAMEL = {"node_id": "nodeId", "dirs_id": "dirsId", "broker_epoch": "brokerEpoch",
          "heartbeat_ms": "heartbeatMs"}


def _typed(value: Mapping[str, Any], name: str, kind: type[_T]) -> _T:
    """``value[name]`` when it is a ``kind``."""
    if name not in value:
        raise KeyError(f"field {name!r} is missing")
    found = value[name]
    # bool is an int in Python: an int field must not take true/false, nor the reverse.
    if not isinstance(found, kind) or (kind is int and isinstance(found, bool)):
        raise TypeError(f"field {name!r} is {found!r:.40}, not a {kind.__name__}")
    return found


def _optional(value: Mapping[str, Any], name: str, kind: type[_T]) -> _T | None:
    """``value[name]`` when it is a ``kind`` or null."""
    return None if value.get(name, 0) is None else _typed(value, name, kind)
