"""Where the coordinators' own records go: appended to an internal partition (a group's
offsets and metadata, a transactional id's state, a transaction marker) and answered only
once they are as durable as the partition's replication makes them (the one home of that rule
for both coordinators).

On a node that is a cluster of one the append is the whole write (its high watermark follows
it). On a replicating node the append runs on the partition's leader and returns once every
in-sync replica holds it, as Kafka's coordinators append with ``acks=all``
(:func:`~tierlog.server.replication.leader_appends.append_replicated`).
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from tierlog.log.append_plan import LogAppendInfo
from tierlog.log.log import Log
from tierlog.server.context import BrokerServices
from tierlog.server.error_codes import error_code_for
from tierlog.server.replication.leader_appends import append_replicated

__all__ = ["InternalLog", "coordinator_error"]

#: Kafka's ``offsets.commit.timeout.ms``: how long a coordinator's write may wait for its
#: replicas before the client is told COORDINATOR_NOT_AVAILABLE (and retries).
DEFAULT_WRITE_TIMEOUT_MS = 5000

#: How a failed append of a coordinator's records answers the client (Kafka's
#: ``GroupMetadataManager`` / ``TransactionStateManager`` mapping): a lost leadership or a
#: broken disk moves the coordinator (NOT_COORDINATOR); too few replicas or a timeout is worth
#: a retry here (COORDINATOR_NOT_AVAILABLE).
_COORDINATOR_CODES = {
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
}


def coordinator_error(exc: BaseException) -> ErrorCode:
    """The code a coordinator answers when appending its records failed with ``exc``."""
    code = error_code_for(exc)
    return _COORDINATOR_CODES.get(code, code)


class InternalLog:
    """Appends to the coordinators' internal partitions (see the module docstring)."""

    def __init__(self, services: BrokerServices,
                 write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS) -> None:
        self.services = services
        self.write_timeout_s = write_timeout_ms / 1000

    async def append(self, topic: str, partition: int,
                     append: Callable[[Log, int | None], LogAppendInfo]) -> LogAppendInfo:
        """Run ``append(log, as_leader_at)`` on the partition's log (``as_leader_at``: the
        leader epoch to append at, None on a node that is a cluster of one; passed on to the
        log) and return once it is durable as the partition's replication demands; raises
        what the append or replication raised."""
        services = self.services
        cluster = services.cluster
        if cluster is not None:
            return await append_replicated(cluster, services, (topic, partition), append,
                                           self.write_timeout_s)
        manager = services.manager

        def run() -> LogAppendInfo:
            partition_log = manager.log(topic, partition)
            info = append(partition_log, None)
            partition_log.update_high_watermark(partition_log.log_end_offset)
            return info

        info = await services.run_blocking(run)
        services.appended()
        return info
