"""ClusterSettings: what a ``tierlog serve`` node needs to join a cluster, in Kafka's names
where Kafka has them (``broker.session.timeout.ms``, ``default.replication.factor``,
``replica.fetch.*``) and tierlog's own for the store (``cluster.metadata.url``,
``cluster.metadata.poll.ms``).

Without ``cluster.metadata.url`` a node is a cluster of one, exactly as before replication
existed: every key here is then ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.cluster.open_store import URL_KEY
from tierlog.cluster.registry import DEFAULT_HEARTBEAT_INTERVAL_MS, DEFAULT_SESSION_TIMEOUT_MS
from tierlog.config import parse_bool, parse_int_at_least
from tierlog.errors import ConfigError

__all__ = ["CLUSTER_KEYS", "ClusterSettings"]

#: Defaults, Kafka's where Kafka has the key.
_DEFAULTS: dict[str, int] = {
    "cluster.metadata.poll.ms": 500,
    "broker.session.timeout.ms": DEFAULT_SESSION_TIMEOUT_MS,
    "broker.heartbeat.interval.ms": DEFAULT_HEARTBEAT_INTERVAL_MS,
    "default.replication.factor": 1,
    "replica.fetch.wait.max.ms": 500,
    "replica.fetch.min.bytes": 1,
    "replica.fetch.max.bytes": 1_048_576,
    "replica.fetch.response.max.bytes": 10_485_760,
    "replica.fetch.backoff.ms": 1_000,
    "replica.socket.timeout.ms": 30_000,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.replication.factor": 3,
}

#: Every key read here (the server takes them out of what goes to the LogManager).
CLUSTER_KEYS = frozenset({URL_KEY, "unclean.leader.election.enable", *_DEFAULTS})


def _int(values: Mapping[str, Any], key: str, minimum: int) -> int:
    return parse_int_at_least(key, values.get(key, _DEFAULTS[key]), minimum)


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """A node's cluster settings (see the module docstring)."""

    url: str
    poll_ms: int = _DEFAULTS["cluster.metadata.poll.ms"]
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    default_replication_factor: int = 1
    fetch_wait_max_ms: int = _DEFAULTS["replica.fetch.wait.max.ms"]
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = _DEFAULTS["replica.fetch.max.bytes"]
    fetch_response_max_bytes: int = _DEFAULTS["replica.fetch.response.max.bytes"]
    fetch_backoff_ms: int = _DEFAULTS["replica.fetch.backoff.ms"]
    socket_timeout_ms: int = _DEFAULTS["replica.socket.timeout.ms"]
    offsets_replication_factor: int = 3
    transaction_state_replication_factor: int = 3

    @classmethod
    def from_properties(cls, values: Mapping[str, Any]) -> ClusterSettings | None:
        """The settings in ``values`` (None without ``cluster.metadata.url``); ConfigError
        names a bad key."""
        url = str(values.get(URL_KEY) or "").strip()
        if not url:
            return None
        if parse_bool("unclean.leader.election.enable",
                      values.get("unclean.leader.election.enable", False)):
            raise ConfigError("unclean.leader.election.enable",
                              "only false is supported: a leader is elected from the in-sync "
                              "set only, so no acknowledged record is lost")
        settings = cls(
            url=url,
            poll_ms=_int(values, "cluster.metadata.poll.ms", 10),
            session_timeout_ms=_int(values, "broker.session.timeout.ms", 1),
            heartbeat_interval_ms=_int(values, "broker.heartbeat.interval.ms", 1),
            default_replication_factor=_int(values, "default.replication.factor", 1),
            fetch_wait_max_ms=_int(values, "replica.fetch.wait.max.ms", 0),
            fetch_min_bytes=_int(values, "replica.fetch.min.bytes", 1),
            fetch_max_bytes=_int(values, "replica.fetch.max.bytes", 1),
            fetch_response_max_bytes=_int(values, "replica.fetch.response.max.bytes", 1),
            fetch_backoff_ms=_int(values, "replica.fetch.backoff.ms", 0),
            socket_timeout_ms=_int(values, "replica.socket.timeout.ms", 1),
            offsets_replication_factor=_int(values, "offsets.topic.replication.factor", 1),
            transaction_state_replication_factor=_int(
                values, "transaction.state.log.replication.factor", 1),
        )
        if settings.heartbeat_interval_ms >= settings.session_timeout_ms:
            raise ConfigError("broker.heartbeat.interval.ms",
                              f"{settings.heartbeat_interval_ms} must be below "
                              f"broker.session.timeout.ms ({settings.session_timeout_ms})")
        return settings
