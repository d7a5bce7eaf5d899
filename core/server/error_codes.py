"""The one home of the mapping from tierlog's errors to Kafka's protocol error codes.

Every handler that turns an engine exception into a response field calls
:func:`error_code_for`; the mapping follows each type's MRO, so a subclass gets its parent's
code unless it has its own. Errors that a retry may cure (a closed log being reopened by a
config change, an unreachable tier, a failing disk) map to Kafka's retriable codes, so clients
retry instead of failing the send.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from types import MappingProxyType

from kio.schema.errors import ErrorCode

from tierlog import errors as e

log = logging.getLogger(__name__)

#: An absolute path (group 1: its directories, group 2: its last name).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/((?:[^\s/:'\",()]+/)*)([^\s/:'\",()]+)")


def _cut_path(match: re.Match[str]) -> str:
    # A path below a directory keeps its file's name; a top-level one (a data dir) nothing.
    return f".../{match.group(2)}" if match.group(1) else "..."

#: tierlog error type -> Kafka error code (looked up along the exception's MRO).
ERROR_CODES: Mapping[type[BaseException], ErrorCode] = MappingProxyType({
    e.CorruptRecordError: ErrorCode.corrupt_message,
    e.OffsetsOutOfOrderError: ErrorCode.corrupt_message,
    e.UnsupportedCompressionError: ErrorCode.unsupported_compression_type,
    e.RecordBatchTooLargeError: ErrorCode.message_too_large,
    e.RecordListTooLargeError: ErrorCode.record_list_too_large,
    e.PartitionLimitError: ErrorCode.policy_violation,
    e.InvalidTimestampError: ErrorCode.invalid_timestamp,
    e.InvalidRecordError: ErrorCode.invalid_record,
    e.OffsetOutOfRangeError: ErrorCode.offset_out_of_range,
    e.UnknownTopicOrPartitionError: ErrorCode.unknown_topic_or_partition,
    e.TopicExistsError: ErrorCode.topic_already_exists,
    e.InvalidTopicError: ErrorCode.invalid_topic_exception,
    e.ConfigError: ErrorCode.invalid_config,
    e.OutOfOrderSequenceError: ErrorCode.out_of_order_sequence_number,
    e.ProducerFencedError: ErrorCode.invalid_producer_epoch,
    e.InvalidTxnStateError: ErrorCode.invalid_txn_state,
    e.TransactionCoordinatorFencedError: ErrorCode.transaction_coordinator_fenced,
    # Security (SASL and the SCRAM admin APIs).
    e.SaslAuthenticationError: ErrorCode.sasl_authentication_failed,
    e.UnsupportedSaslMechanismError: ErrorCode.unsupported_sasl_mechanism,
    e.UnacceptableCredentialError: ErrorCode.unacceptable_credential,
    e.CredentialNotFoundError: ErrorCode.resource_not_found,
    # Retriable: the client backs off and tries again.
    e.LogClosedError: ErrorCode.not_leader_or_follower,
    e.LogDirectoryError: ErrorCode.kafka_storage_error,
    e.RemoteStorageError: ErrorCode.kafka_storage_error,
    e.CorruptIndexError: ErrorCode.kafka_storage_error,
    e.CorruptSnapshotError: ErrorCode.kafka_storage_error,
    e.CorruptCheckpointError: ErrorCode.kafka_storage_error,
    e.LogCleaningAbortedError: ErrorCode.kafka_storage_error,
    e.PartitionOwnedError: ErrorCode.not_leader_or_follower,
    # Replication: the client refreshes its metadata (or waits for the in-sync set) and retries.
    e.NotLeaderOrFollowerError: ErrorCode.not_leader_or_follower,
    e.NotEnoughReplicasError: ErrorCode.not_enough_replicas,
    e.NotEnoughReplicasAfterAppendError: ErrorCode.not_enough_replicas_after_append,
    e.ReplicationTimeoutError: ErrorCode.request_timed_out,
    e.MarkersAbandonedError: ErrorCode.not_coordinator,
    e.FencedPartitionEpochError: ErrorCode.invalid_update_version,
    e.InvalidReplicationFactorError: ErrorCode.invalid_replication_factor,
    e.InvalidPartitionsError: ErrorCode.invalid_partitions,
    e.InvalidReplicaAssignmentError: ErrorCode.invalid_replica_assignment,
    e.FencedLeaderEpochError: ErrorCode.fenced_leader_epoch,
    e.UnknownLeaderEpochError: ErrorCode.unknown_leader_epoch,
    e.LeaderNotAvailableError: ErrorCode.leader_not_available,
    # A tiered partition whose local bytes not yet copied exceed remote.log.copy.lag.max.bytes:
    # the write is refused until tiering catches up, as a disk that cannot take it now.
    e.CopyLagExceededError: ErrorCode.kafka_storage_error,
    e.RemoteTimeoutError: ErrorCode.request_timed_out,
    e.RemoteFetchQuotaExceededError: ErrorCode.throttling_quota_exceeded,
    e.RetriableError: ErrorCode.kafka_storage_error,
})


def error_code_for(exc: BaseException) -> ErrorCode:
    """Kafka's error code for ``exc``: the nearest mapped type in its MRO, else
    UNKNOWN_SERVER_ERROR (logged with its traceback, since it is a server bug or an
    unexpected failure rather than a client's mistake)."""
    for klass in type(exc).__mro__:
        code = ERROR_CODES.get(klass)
        if code is not None:
            return code
    log.error("unexpected error answered as UNKNOWN_SERVER_ERROR: %r", exc, exc_info=exc)
    return ErrorCode.unknown_server_error


def error_message(exc: BaseException) -> str:
    """The error message a response carries: the exception's text, bounded, with every
    absolute path cut to its last name (``.../00000000000000000000.index``): a client learns
    which file, not where the broker keeps its data. A cut text is logged whole here."""
    text = str(exc) or type(exc).__name__
    public = _ABSOLUTE_PATH.sub(_cut_path, text)
    if public != text:
        log.warning("answering a client with %s: %s", type(exc).__name__, text)
    return public[:1000]
