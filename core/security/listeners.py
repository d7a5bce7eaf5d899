"""Kafka's listener settings, parsed and checked: which ``NAME://host:port`` sockets a node
opens, the security protocol each speaks, which it advertises, which carries the traffic
between nodes, and the configuration each listener sees (Kafka's ``listener.name.<l>.`` rule).

Pure: nothing here opens a socket or reads a file. Every bad value is a ConfigError naming the
key and the value, as Kafka's KafkaConfig refuses them. Listener names are upper-cased, as
Kafka's ``ListenerName.normalised``; their config prefix is the lower-cased name.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.errors import ConfigError

#: Kafka's four security protocols.
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: Kafka's default ``listener.security.protocol.map``: each protocol names a listener of itself.
DEFAULT_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in SECURITY_PROTOCOLS)
#: tierlog's default ``listeners``: loopback only (Kafka binds every interface, ``:9092``), so
#: an unconfigured node is not reachable from the network.
DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"
#: Kafka's default ``security.inter.broker.protocol``.
DEFAULT_INTER_BROKER_PROTOCOL = "PLAINTEXT"
#: Where a per-listener override starts: ``listener.name.<listener lower-cased>.<key>``.
LISTENER_PREFIX = "listener.name."
#: The keys this module reads (for the server's list of known keys).
LISTENER_KEYS = frozenset({"listeners", "advertised.listeners", "listener.security.protocol.map",
                           "inter.broker.listener.name", "security.inter.broker.protocol"})

#: A listener name: it becomes a config prefix, so no dots.
_NAME_RE = re.compile(r"[A-Za-z0-9_-]+", re.ASCII)
#: Kafka's host characters (a name, an IPv4 address, or an IPv6 address in brackets).
_HOST_RE = re.compile(r"[0-9A-Za-z%._:-]*", re.ASCII)
_PORT_RE = re.compile(r"[0-9]+", re.ASCII)


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener: ``NAME://host:port`` and the security protocol its name maps to."""

    name: str
    """The listener name, upper-cased (``PLAINTEXT``, ``SASL_SSL``, ``INTERNAL``)."""
    host: str
    """The host to bind or advertise; empty binds every interface."""
    port: int
    """The port; 0 binds an ephemeral port."""
    security_protocol: str
    """One of :data:`SECURITY_PROTOCOLS`."""

    @property
    def config_prefix(self) -> str:
        """``listener.name.<name lower-cased>.``: the prefix of this listener's overrides."""
        return f"{LISTENER_PREFIX}{self.name.lower()}."

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def unprefixed(key: str) -> str:
    """``key`` without a ``listener.name.<listener>.`` prefix (the plain Kafka name)."""
    if key.startswith(LISTENER_PREFIX):
        _listener, dot, rest = key[len(LISTENER_PREFIX):].partition(".")
        if dot:
            return rest
    return key


def _text(config: Mapping[str, object], key: str, default: str | None) -> str | None:
    value = config.get(key)
    return default if value is None else str(value).strip()


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def parse_protocol_map(config: Mapping[str, object]) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``, Kafka's default when absent)
    as listener name -> security protocol, both upper-cased."""
    key = "listener.security.protocol.map"
    text = _text(config, key, DEFAULT_PROTOCOL_MAP) or ""
    mapping: dict[str, str] = {}
    for item in _items(text):
        name, colon, protocol = (part.strip() for part in item.partition(":"))
        if not colon or not _NAME_RE.fullmatch(name):
            raise ConfigError(key, f"expects LISTENER_NAME:PROTOCOL entries, got {item!r}")
        if protocol.upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(key, f"unknown security protocol {protocol!r} for listener "
                                   f"{name!r} (one of {', '.join(SECURITY_PROTOCOLS)})")
        if name.upper() in mapping:
            raise ConfigError(key, f"listener {name!r} is mapped twice")
        mapping[name.upper()] = protocol.upper()
    return mapping


def _parse_one(key: str, text: str, protocols: Mapping[str, str]) -> Listener:
    name, sep, rest = text.partition("://")
    host, colon, port_text = rest.rpartition(":")
    if not sep or not colon or not _PORT_RE.fullmatch(port_text):
        raise ConfigError(key, f"expects LISTENER_NAME://HOST:PORT, got {text!r}")
    if not _NAME_RE.fullmatch(name):
        raise ConfigError(key, f"listener name {name!r} in {text!r} may hold only letters, "
                               "digits, '_' and '-'")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ConfigError(key, f"an IPv6 host goes in brackets ([::1]), got {text!r}")
    if not _HOST_RE.fullmatch(host):
        raise ConfigError(key, f"host {host!r} in {text!r} is not a host name or address")
    port = int(port_text)
    if port > 65535:
        raise ConfigError(key, f"port must be in [0, 65535], got {port} in {text!r}")
    protocol = protocols.get(name.upper())
    if protocol is None:
        raise ConfigError(key, f"listener {name.upper()!r} has no security protocol in "
                               f"listener.security.protocol.map ({', '.join(protocols)})")
    return Listener(name.upper(), host, port, protocol)


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host).version
    except ValueError:
        return None


def _check_distinct(key: str, listeners: list[Listener], *, ports: bool) -> None:
    names = [listener.name for listener in listeners]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(key, f"each listener must have a different name, {twice[0]!r} is "
                               "given twice")
    if not ports:
        return
    by_port: dict[int, list[Listener]] = {}
    for listener in listeners:
        if listener.port != 0:  # port 0: each listener gets its own ephemeral port
            by_port.setdefault(listener.port, []).append(listener)
    for port, sharing in sorted(by_port.items()):
        # KIP-797: an IPv4 and an IPv6 address may share a port, nothing else may
        versions = sorted(str(_ip_version(listener.host)) for listener in sharing)
        if len(sharing) > 1 and versions != ["4", "6"]:
            raise ConfigError(key, f"each listener must have a different port, port {port} is "
                                   f"used by {', '.join(str(s) for s in sharing)}")


def parse_listeners(config: Mapping[str, object]) -> list[Listener]:
    """``listeners`` (:data:`DEFAULT_LISTENERS` when absent), each with its protocol from the
    map; names and ports distinct (port 0 may repeat; KIP-797's IPv4 and IPv6 pair may share)."""
    protocols = parse_protocol_map(config)
    text = _text(config, "listeners", DEFAULT_LISTENERS) or ""
    listeners = [_parse_one("listeners", item, protocols) for item in _items(text)]
    if not listeners:
        raise ConfigError("listeners", "names no listener")
    _check_distinct("listeners", listeners, ports=True)
    return listeners


def advertised_listeners(config: Mapping[str, object]) -> list[Listener]:
    """``advertised.listeners``, or ``listeners`` when absent: names among ``listeners``,
    none advertising the meta-address 0.0.0.0 (ports may repeat: a proxy may front them)."""
    key = "advertised.listeners"
    listeners = parse_listeners(config)
    text = _text(config, key, None)
    if not text:
        return listeners
    protocols = parse_protocol_map(config)
    advertised = [_parse_one(key, item, protocols) for item in _items(text)]
    _check_distinct(key, advertised, ports=False)
    known = {listener.name for listener in listeners}
    for listener in advertised:
        if listener.name not in known:
            raise ConfigError(key, f"listener {listener.name!r} is not among listeners "
                                   f"({', '.join(sorted(known))})")
        if listener.host in ("0.0.0.0", "::"):
            raise ConfigError(key, f"cannot advertise the non-routable address {listener.host!r}"
                                   f" ({listener})")
    return advertised


def inter_broker_listener_name(config: Mapping[str, object]) -> str:
    """``inter.broker.listener.name``, else the listener named after
    ``security.inter.broker.protocol`` (PLAINTEXT by default), as Kafka; not both."""
    name = _text(config, "inter.broker.listener.name", None)
    protocol = _text(config, "security.inter.broker.protocol", None)
    if name and protocol:
        raise ConfigError("inter.broker.listener.name", "only one of inter.broker.listener.name "
                          "and security.inter.broker.protocol may be set")
    if name:
        return name.upper()
    protocol = (protocol or DEFAULT_INTER_BROKER_PROTOCOL).upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise ConfigError("security.inter.broker.protocol", f"unknown security protocol "
                          f"{protocol!r} (one of {', '.join(SECURITY_PROTOCOLS)})")
    return protocol


def inter_broker_listener(config: Mapping[str, object]) -> Listener:
    """The advertised listener that carries the traffic between nodes (replication)."""
    name = inter_broker_listener_name(config)
    advertised = advertised_listeners(config)
    for listener in advertised:
        if listener.name == name:
            return listener
    key = ("inter.broker.listener.name" if config.get("inter.broker.listener.name")
           else "security.inter.broker.protocol")
    raise ConfigError(key, f"the inter-broker listener {name!r} is not among the advertised "
                           f"listeners ({', '.join(str(x) for x in advertised)}); set "
                           "inter.broker.listener.name to one of them")


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """All of a node's listener settings, checked together."""

    listeners: tuple[Listener, ...]
    """What the node binds, in the order given."""
    advertised: tuple[Listener, ...]
    """What the node tells clients and other nodes (Metadata answers, the cluster store)."""
    inter_broker: Listener
    """The advertised listener other nodes reach this one on."""

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> ListenerSettings:
        """Parse and check ``listeners``, ``advertised.listeners`` and the inter-broker
        listener; ConfigError names the first bad key."""
        return cls(tuple(parse_listeners(config)), tuple(advertised_listeners(config)),
                   inter_broker_listener(config))


def listener_config(config: Mapping[str, object], listener: Listener) -> dict[str, object]:
    """The configuration ``listener`` sees: every plain key, with each
    ``listener.name.<listener>.<key>`` overriding ``<key>`` (Kafka's
    ``valuesWithPrefixOverride``); other listeners' overrides are left out. On a SASL_SSL
    listener, ``ssl.client.auth`` applies only when listener-prefixed (KIP-684)."""
    prefix = listener.config_prefix
    plain = {key: value for key, value in config.items() if not key.startswith(LISTENER_PREFIX)}
    if listener.security_protocol == "SASL_SSL":
        plain.pop("ssl.client.auth", None)
    overrides = {key[len(prefix):]: value for key, value in config.items()
                 if key.startswith(prefix)}
    return {**plain, **overrides}


def sasl_jaas_config(config: Mapping[str, object], listener: Listener,
                     mechanism: str) -> str | None:
    """A broker's JAAS settings for ``mechanism`` on ``listener``: Kafka reads them only from
    ``listener.name.<listener>.<mechanism lower-cased>.sasl.jaas.config``; None when unset."""
    value = config.get(f"{listener.config_prefix}{mechanism.lower()}.sasl.jaas.config")
    return None if value is None else str(value)
