"""Appends on a partition's leader, answered once replicated (the one home of the rule for
client produces and the coordinators' own writes alike).

After appending, a leader reports the append to its replica rules (the high watermark may
move at once when it is the whole in-sync set), wakes the fetches waiting for data (the
followers' first: records are replicated only once they fetch them), and, for ``acks=all``,
waits in the :class:`~tierlog.server.replication.delayed_produce.DelayedProduces` until every
in-sync replica holds the records (Kafka's ``DelayedProduce``). The coordinators append as
Kafka's do, with ``acks=all`` (Kafka's ``appendRecords(requiredAcks = -1)``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from tierlog.errors import (
    NotEnoughReplicasAfterAppendError,
    NotLeaderOrFollowerError,
    ReplicationTimeoutError,
)
from tierlog.log.append_plan import LogAppendInfo
from tierlog.log.log import Log

if TYPE_CHECKING:
    from tierlog.server.context import BrokerServices
    from tierlog.server.replication.node import ClusterNode

__all__ = ["append_replicated", "replicate"]

TopicPartition = tuple[str, int]


async def replicate(cluster: ClusterNode, wake_fetches: Callable[[], None],
                    appended: Mapping[TopicPartition, int], timeout_s: float, *,
                    wait: bool) -> dict[TopicPartition, ErrorCode]:
    """Report appends (partition -> its last appended offset + 1) to their leaders' rules and
    wake the waiting fetches; with ``wait`` (``acks=all``) wait until every in-sync replica
    holds them: each partition's code (NONE; NOT_LEADER_OR_FOLLOWER when its leadership moved;
    NOT_ENOUGH_REPLICAS_AFTER_APPEND; REQUEST_TIMED_OUT once ``timeout_s`` passed)."""
    for tp in appended:
        cluster.replicas.appended(tp)
    wake_fetches()
    if not wait or not appended:
        return dict.fromkeys(appended, ErrorCode.none)
    return await cluster.delayed.wait(appended, max(timeout_s, 0.0))


async def append_replicated(cluster: ClusterNode, services: BrokerServices, tp: TopicPartition,
                            append: Callable[[Log, int | None], LogAppendInfo],
                            timeout_s: float) -> LogAppendInfo:
    """Run ``append(log, leader_epoch)`` on ``tp``'s log (on the worker threads) if this node
    leads it and its in-sync set is large enough, and return once every in-sync replica holds
    what it appended. ``append`` passes the epoch to the log as ``as_leader_at``: a
    leadership lost before the append runs refuses it there.
    NotLeaderOrFollowerError, NotEnoughReplicasError (nothing appended),
    NotEnoughReplicasAfterAppendError or ReplicationTimeoutError (appended, not known
    replicated)."""
    role = cluster.replicas.leader_role(tp)
    role.leader.check_min_isr()
    epoch = role.leader.leader_epoch
    info = await services.run_blocking(lambda: append(role.log, epoch))
    code = (await replicate(cluster, services.appended, {tp: info.last_offset + 1}, timeout_s,
                            wait=True))[tp]
    where = f"{tp[0]}-{tp[1]}"
    if code is ErrorCode.none:
        return info
    if code is ErrorCode.not_leader_or_follower:
        raise NotLeaderOrFollowerError(f"{where}: node {cluster.node_id} lost its leadership "
                                       f"before offset {info.last_offset} was replicated")
    if code is ErrorCode.not_enough_replicas_after_append:
        raise NotEnoughReplicasAfterAppendError(
            f"{where}: the in-sync set shrank below min.insync.replicas while offset "
            f"{info.last_offset} was replicated")
    raise ReplicationTimeoutError(f"{where}: offset {info.last_offset} not held by every "
                                  f"in-sync replica within {timeout_s:.1f} s ({code.name})")
