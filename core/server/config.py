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

from tierlog.config import parse_bool, parse_int_at_least
from tierlog.errors import ConfigError
from tierlog.manager.manager_config import ManagerConfig
from tierlog.security.listeners import (
    LISTENER_KEYS,
    LISTENER_PREFIX,
    Listener,
    ListenerSettings,
    parse_listeners,
)
from tierlog.security.sensitive import redact
from tierlog.security.tls import TLS_KEYS
from tierlog.server.coordinator.coordinator_config import COORDINATOR_KEYS
from tierlog.server.replication.settings import CLUSTER_KEYS, ClusterSettings
from tierlog.server.request_memory import DEFAULT_QUEUED_MAX_REQUEST_BYTES
from tierlog.server.sasl_session import SASL_KEYS, SaslListenerSettings

#: Kafka's default port.
DEFAULT_PORT = 9092
#: tierlog's default listener: loopback only (see tierlog.security.listeners).
DEFAULT_LISTENER = Listener("PLAINTEXT", "127.0.0.1", DEFAULT_PORT, "PLAINTEXT")
#: Kafka's default ``socket.request.max.bytes`` (100 MiB).
DEFAULT_MAX_REQUEST_BYTES = 104_857_600
#: ``max.broker.partitions`` (KIP-578): the partitions one node holds, internal topics
#: included. Kafka leaves it unbounded; 4,000 is the per-broker figure Kafka's operators are
#: advised to stay under, and a single tierlog process serves them all.
DEFAULT_MAX_BROKER_PARTITIONS = 4000
#: Kafka's default ``connection.failed.authentication.delay.ms``.
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100
#: Kafka's default ``connections.max.idle.ms`` (10 minutes).
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000

DEFAULT_LISTENER_TEXT = str(DEFAULT_LISTENER)

#: The keys the server reads itself (all others go to ManagerConfig).
SERVER_KEYS = frozenset({
    "listeners", "advertised.listeners", "node.id", "broker.id", "log.dirs", "log.dir",
    "socket.request.max.bytes", "auto.create.topics.enable", "num.network.threads",
    "num.io.threads", "process.roles", "listener.security.protocol.map",
    "inter.broker.listener.name", "controller.listener.names", "max.broker.partitions",
    "queued.max.request.bytes", "connections.max.idle.ms",
    # The authorizer (tierlog.security.authorizer), in Kafka's names.
    "authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found",
    # Kafka's re-authentication bound (KIP-368) and the delay before closing a connection
    # that failed authentication.
    "connections.max.reauth.ms", "connection.failed.authentication.delay.ms",
}) | LISTENER_KEYS | TLS_KEYS | SASL_KEYS

#: The ``authorizer.class.name`` values that turn on Kafka's ACL authorizer (Kafka's two
#: built-in classes and tierlog's own name for it); empty: no authorizer.
AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
    "tierlog.security.authorizer.Authorizer",
})


def _parse_limit(key: str, raw: object) -> int:
    """A positive bound, or -1 for none (Kafka's convention)."""
    value = parse_int_at_least(key, raw, -1)
    if value == 0:
        raise ConfigError(key, "must be positive, or -1 for no limit")
    return value


@dataclass(frozen=True)
class ServerConfig:
    """What ``tierlog serve`` runs: its listeners, identity, limits and the LogManager's
    settings (``manager``: the remaining keys, validated by ManagerConfig)."""

    #: The first of ``listeners`` (its address goes to ``--port-file``).
    listener: Listener = DEFAULT_LISTENER
    #: What the first listener advertises, when ``advertised.listeners`` names it.
    advertised: Listener | None = None
    #: Every listener bound, in the order given (``listeners``), and what each advertises.
    listeners: tuple[Listener, ...] = (DEFAULT_LISTENER,)
    advertised_listeners: tuple[Listener, ...] = (DEFAULT_LISTENER,)
    #: The advertised listener other nodes reach this one on (``inter.broker.listener.name``).
    inter_broker: Listener = DEFAULT_LISTENER
    #: The SASL settings of each SASL_PLAINTEXT and SASL_SSL listener, by listener name.
    sasl: Mapping[str, SaslListenerSettings] = field(default_factory=dict)
    #: ``connections.max.reauth.ms`` (KIP-368): a SASL session's lifetime; 0: unbounded.
    connections_max_reauth_ms: int = 0
    #: How long a connection that failed authentication stays open before it is closed
    #: (``connection.failed.authentication.delay.ms``): its answer reaches the client first,
    #: and a client retrying at once is slowed.
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
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

    def __repr__(self) -> str:
        # Secrets (key passwords, JAAS entries, the tier's credentials) masked: never in a log
        return (f"ServerConfig(listeners={[str(x) for x in self.listeners]}, "
                f"node_id={self.node_id}, log_dirs={[str(d) for d in self.log_dirs]}, "
                f"properties={redact(self.properties)})")

    @classmethod
    def from_properties(cls, values: Mapping[str, Any]) -> ServerConfig:
        """Split a flat ``server.properties`` dict; ConfigError names any bad key."""
        cluster = ClusterSettings.from_properties(values)
        manager = {k: v for k, v in values.items()
                   if k not in SERVER_KEYS and k not in COORDINATOR_KEYS and k not in CLUSTER_KEYS
                   and not k.startswith(LISTENER_PREFIX)}
        if cluster is not None:
            # A replicated partition's high watermark is its in-sync replicas' (the leader's
            # rules), not its log end.
            manager["auto.high.watermark"] = False
        ManagerConfig(manager)  # validate the engine's keys before anything opens
        settings = _listener_settings(values, replicated=cluster is not None)
        listener = settings.listeners[0]
        advertised = next((a for a in settings.advertised if a.name == listener.name), None) \
            if values.get("advertised.listeners") else None
        node_text = values.get("node.id", values.get("broker.id", 1))
        dirs_text = str(values.get("log.dirs") or values.get("log.dir") or "")
        dirs = tuple(Path(d.strip()) for d in dirs_text.split(",") if d.strip())
        return cls(
            listener=listener,
            advertised=advertised,
            listeners=settings.listeners,
            advertised_listeners=settings.advertised,
            inter_broker=settings.inter_broker,
            sasl={sasl_listener.name: SaslListenerSettings.from_config(values, sasl_listener)
                  for sasl_listener in settings.listeners
                  if sasl_listener.security_protocol.startswith("SASL_")},
            connections_max_reauth_ms=parse_int_at_least("connections.max.reauth.ms", values.get(
                "connections.max.reauth.ms", 0), 0),
            failed_authentication_delay_ms=parse_int_at_least(
                "connection.failed.authentication.delay.ms", values.get(
                    "connection.failed.authentication.delay.ms",
                    DEFAULT_FAILED_AUTHENTICATION_DELAY_MS), 0),
            node_id=parse_int_at_least("node.id", node_text, 0),
            log_dirs=dirs,
            max_request_bytes=parse_int_at_least("socket.request.max.bytes", values.get(
                "socket.request.max.bytes", DEFAULT_MAX_REQUEST_BYTES), 1024),
            auto_create_topics=parse_bool("auto.create.topics.enable",
                                           values.get("auto.create.topics.enable", True)),
            max_broker_partitions=parse_int_at_least("max.broker.partitions", values.get(
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


def _listener_settings(values: Mapping[str, Any], *, replicated: bool) -> ListenerSettings:
    """The listener settings, checked as Kafka checks them. One leniency: a node that is a
    cluster of one has no inter-broker traffic, so when neither ``inter.broker.listener.name``
    nor ``security.inter.broker.protocol`` is set and no PLAINTEXT listener is advertised
    (Kafka's default inter-broker listener), its first listener stands for it instead of the
    ConfigError a replicating node gets."""
    config = {"listeners": DEFAULT_LISTENER_TEXT, **values}
    explicit = any(values.get(key) for key in ("inter.broker.listener.name",
                                               "security.inter.broker.protocol"))
    if not replicated and not explicit:
        names = {listener.name for listener in parse_listeners(config)}
        if "PLAINTEXT" not in names:
            config["inter.broker.listener.name"] = parse_listeners(config)[0].name
    return ListenerSettings.from_config(config)


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
