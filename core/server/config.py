"""ServerConfig: the broker settings of ``tierlog serve`` in Kafka's names, split from the
LogManager's.

One flat ``server.properties`` dict feeds both: the keys below are the server's (listeners,
node id, request size limit, auto creation) and every other key goes to the LogManager's
ManagerConfig, which validates it (an unknown key is a ConfigError naming it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierlog.errors import ConfigError
from tierlog.manager.manager_config import ManagerConfig
from tierlog.server.coordinator.coordinator_config import COORDINATOR_KEYS
from tierlog.server.replication.settings import CLUSTER_KEYS, ClusterSettings
from tierlog.server.request_memory import DEFAULT_QUEUED_MAX_REQUEST_BYTES

#: Kafka's default port, used when a listener names none.
DEFAULT_PORT = 9092
#: Kafka's default ``socket.request.max.bytes`` (100 MiB).
DEFAULT_MAX_REQUEST_BYTES = 104_857_600
#: ``max.broker.partitions`` (KIP-578): the partitions one node holds, internal topics
#: included. Kafka leaves it unbounded; 4,000 is the per-broker figure Kafka's operators are
#: advised to stay under, and a single tierlog process serves them all.
DEFAULT_MAX_BROKER_PARTITIONS = 4000
#: Kafka's default ``connections.max.idle.ms`` (10 minutes).
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000

#: The keys the server reads itself (all others go to ManagerConfig).
SERVER_KEYS = frozenset({
    "listeners", "advertised.listeners", "node.id", "broker.id", "log.dirs", "log.dir",
    "socket.request.max.bytes", "auto.create.topics.enable", "num.network.threads",
    "num.io.threads", "process.roles", "listener.security.protocol.map",
    "inter.broker.listener.name", "controller.listener.names", "max.broker.partitions",
    "queued.max.request.bytes", "connections.max.idle.ms",
    # The authorizer (tierlog.security.authorizer), in Kafka's names.
    "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
})

#: The ``authorizer.class.name`` values that turn on Kafka's ACL authorizer (Kafka's two
#: built-in classes and tierlog's own name for it); empty: no authorizer.
AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "tierlog.security.authorizer.Authorizer",
})


@dataclass(frozen=True, slots=True)
class Listener:
    """One ``PLAINTEXT://host:port`` listener (port 0: an ephemeral port)."""

    name: str
    host: str
    port: int


def parse_listener(key: str, text: str) -> Listener:
    """``PLAINTEXT://127.0.0.1:9092`` -> Listener; only PLAINTEXT is served (ConfigError)."""
    first = text.split(",")[0].strip()
    name, sep, rest = first.partition("://")
    if not sep:
        raise ConfigError(key, f"expects PLAINTEXT://HOST:PORT, got {text!r}")
    if name.upper() != "PLAINTEXT":
        raise ConfigError(key, f"only PLAINTEXT listeners are supported, got {name!r}")
    host, colon, port_text = rest.rpartition(":")
    if not colon:
        host, port_text = rest, str(DEFAULT_PORT)
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(key, f"port must be an integer, got {port_text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(key, f"port must be in [0, 65535], got {port}")
    return Listener(name.upper(), host, port)


def _parse_bool(key: str, raw: object) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(key, f"expects true or false, got {raw!r}")


def _parse_int(key: str, raw: object, minimum: int) -> int:
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(key, f"expects an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(key, f"must be at least {minimum}, got {value}")
    return value


def _parse_limit(key: str, raw: object) -> int:
    """A positive bound, or -1 for none (Kafka's convention)."""
    value = _parse_int(key, raw, -1)
    if value == 0:
        raise ConfigError(key, "must be positive, or -1 for no limit")
    return value


@dataclass(frozen=True)
class ServerConfig:
    """What ``tierlog serve`` runs: its listener, identity, limits and the LogManager's
    settings (``manager``: the remaining keys, validated by ManagerConfig)."""

    listener: Listener = Listener("PLAINTEXT", "127.0.0.1", DEFAULT_PORT)
    advertised: Listener | None = None
    node_id: int = 1
    log_dirs: tuple[Path, ...] = ()
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    auto_create_topics: bool = True
    max_broker_partitions: int = DEFAULT_MAX_BROKER_PARTITIONS
    #: Bytes of requests all connections together may hold (-1: unbounded).
    queued_max_request_bytes: int = DEFAULT_QUEUED_MAX_REQUEST_BYTES
    #: A connection with no bytes in or out for this long is closed (-1: never).
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    manager: Mapping[str, Any] = field(default_factory=dict)
    #: The group and transaction coordinators' settings (coordinator_config.COORDINATOR_KEYS).
    coordinator: Mapping[str, Any] = field(default_factory=dict)
    #: The cluster this node replicates with (``cluster.metadata.url``); None: a cluster of one.
    cluster: ClusterSettings | None = None
    #: Whether an ACL authorizer checks every request (``authorizer.class.name``).
    authorizer: bool = False
    #: Every setting as given (the security settings read them by Kafka's names).
    properties: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, values: Mapping[str, Any]) -> ServerConfig:
        """Split a flat ``server.properties`` dict; ConfigError names any bad key."""
        cluster = ClusterSettings.from_properties(values)
        manager = {k: v for k, v in values.items()
                   if k not in SERVER_KEYS and k not in COORDINATOR_KEYS and k not in CLUSTER_KEYS}
        if cluster is not None:
            # A replicated partition's high watermark is its in-sync replicas' (the leader's
            # rules), not its log end.
            manager["auto.high.watermark"] = False
        ManagerConfig(manager)  # validate the engine's keys before anything opens
        listener = parse_listener("listeners", str(values.get(
            "listeners", f"PLAINTEXT://127.0.0.1:{DEFAULT_PORT}")))
        advertised = (parse_listener("advertised.listeners", str(values["advertised.listeners"]))
                      if values.get("advertised.listeners") else None)
        node_text = values.get("node.id", values.get("broker.id", 1))
        dirs_text = str(values.get("log.dirs") or values.get("log.dir") or "")
        dirs = tuple(Path(d.strip()) for d in dirs_text.split(",") if d.strip())
        return cls(
            listener=listener,
            advertised=advertised,
            node_id=_parse_int("node.id", node_text, 0),
            log_dirs=dirs,
            max_request_bytes=_parse_int("socket.request.max.bytes", values.get(
                "socket.request.max.bytes", DEFAULT_MAX_REQUEST_BYTES), 1024),
            auto_create_topics=_parse_bool("auto.create.topics.enable",
                                           values.get("auto.create.topics.enable", True)),
            max_broker_partitions=_parse_int("max.broker.partitions", values.get(
                "max.broker.partitions", DEFAULT_MAX_BROKER_PARTITIONS), 1),
            queued_max_request_bytes=_parse_limit("queued.max.request.bytes", values.get(
                "queued.max.request.bytes", DEFAULT_QUEUED_MAX_REQUEST_BYTES)),
            connections_max_idle_ms=_parse_limit("connections.max.idle.ms", values.get(
                "connections.max.idle.ms", DEFAULT_CONNECTIONS_MAX_IDLE_MS)),
            manager=manager,
            coordinator={k: v for k, v in values.items() if k in COORDINATOR_KEYS},
            cluster=cluster,
            authorizer=_authorizer(values),
            properties=dict(values),
        )


def _authorizer(values: Mapping[str, Any]) -> bool:
    """Whether ``authorizer.class.name`` names Kafka's ACL authorizer (ConfigError for a class
    tierlog does not have)."""
    name = str(values.get("authorizer.class.name") or "").strip()
    if not name:
        return False
    if name not in AUTHORIZER_CLASSES:
        raise ConfigError("authorizer.class.name",
                          f"{name!r} is not an authorizer tierlog has; use one of "
                          f"{sorted(AUTHORIZER_CLASSES)}")
    return True
