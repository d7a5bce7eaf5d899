"""The tierlog exception tree: one class per failure mode, all under TierlogError.

Each class also inherits the builtin a Python caller would naturally catch
(ValueError for bad input, OSError for storage trouble, IndexError for offsets).
"""

from __future__ import annotations


class TierlogError(Exception):
    """Root of every error tierlog raises on purpose."""


# --- configuration and names ---------------------------------------------------------


class ConfigError(TierlogError, ValueError):
    """A configuration key is unknown or its value is invalid; names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class PropertiesError(ConfigError):
    """A ``.properties`` file that cannot be read: missing, not UTF-8, a malformed escape.
    ``key`` names the file (and line)."""


class InvalidTopicError(TierlogError, ValueError):
    """A topic name is illegal (characters, length, '.' or '..')."""


# --- records -------------------------------------------------------------------------


class CorruptRecordError(TierlogError, ValueError):
    """Record batch bytes fail a check: CRC, sizes, record count, framing."""


class TruncatedBatchError(CorruptRecordError):
    """A batch ends before its declared length (a torn write or a cut buffer)."""


class UnsupportedMagicError(CorruptRecordError):
    """A batch has a magic byte other than 2 (only v2 record batches are supported)."""


class DecompressionLimitError(CorruptRecordError):
    """A compressed batch expands beyond the decompression bound (a multiple of
    max.message.bytes): refused as a decompression bomb before it is fully expanded."""


class UnsupportedCompressionError(TierlogError, ValueError):
    """A compression codec id or name that Kafka does not define."""


class RecordBatchTooLargeError(TierlogError, ValueError):
    """A batch is larger than max.message.bytes (or the segment size)."""


class InvalidTimestampError(TierlogError, ValueError):
    """A batch timestamp is invalid for the topic's timestamp settings."""


class InvalidRecordError(TierlogError, ValueError):
    """A batch is well formed but not acceptable for this log (e.g. control batch from a client)."""


class OffsetsOutOfOrderError(TierlogError, ValueError):
    """Appended batches with offsets already assigned do not increase past the log end."""


# --- log -----------------------------------------------------------------------------


class OffsetOutOfRangeError(TierlogError, IndexError):
    """A requested offset is below the log start offset or above the log end offset."""


class CorruptIndexError(TierlogError):
    """An index file fails its sanity check."""


class IndexOffsetOverflowError(TierlogError, ValueError):
    """An offset does not fit the 4-byte relative offset of a segment's index."""


class CorruptSnapshotError(TierlogError):
    """A producer-state snapshot fails its CRC or is malformed."""


class CorruptCheckpointError(TierlogError):
    """A text checkpoint file is malformed."""


class LogClosedError(TierlogError, RuntimeError):
    """An operation was attempted on a closed log."""


class LogDirectoryError(TierlogError, OSError):
    """A log or partition directory is missing, unreadable or not a partition directory."""


# --- topics and partitions of a LogManager -------------------------------------------


class UnknownTopicOrPartitionError(TierlogError, KeyError):
    """No such topic or partition in this LogManager (or, for a tier reader, in the tier)."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class TopicExistsError(TierlogError, ValueError):
    """create_topic for a topic that already exists."""


# --- producer state ------------------------------------------------------------------


class OutOfOrderSequenceError(TierlogError, ValueError):
    """An idempotent producer's batch sequence does not follow the last one."""


class ProducerFencedError(TierlogError, ValueError):
    """A batch comes from a producer epoch older than the one already seen."""


class InvalidTxnStateError(TierlogError, ValueError):
    """A transaction marker or transactional batch does not fit the producer's state."""


# --- plugins and remote storage ------------------------------------------------------


class PluginError(TierlogError):
    """A plugin failed to load or a named plugin does not exist."""


class RemoteStorageError(TierlogError, OSError):
    """The remote tier failed an operation."""


class RemoteResourceNotFoundError(RemoteStorageError, FileNotFoundError):
    """A remote object (segment or index) does not exist."""


class TierNotFoundError(RemoteResourceNotFoundError):
    """A reader's URL holds no remote tier (no partition directory at all): a typo in the
    path must not read as an empty topic; names the URL."""


class CorruptRemoteMetadataError(RemoteStorageError, ValueError):
    """A remote metadata object (a partition manifest, a segment's metadata) is malformed:
    not JSON, nested too deeply, wrong types or missing fields; names the object."""


class IndexFullError(TierlogError, ValueError):
    """An append to an offset or time index with no free slot (the segment should have rolled)."""


class InvalidIndexOffsetError(TierlogError, ValueError):
    """An index append that goes backwards (offset, timestamp or aborted-txn last offset)."""


class TransactionCoordinatorFencedError(TierlogError, ValueError):
    """A transaction marker carries a coordinator epoch older than the one already seen."""


class LogCleaningAbortedError(TierlogError, RuntimeError):
    """Compaction gave up on a log that changed under it (segments deleted, truncated, closed)."""


class PartitionOwnedError(TierlogError, ValueError):
    """A backfill (Spark's ``df.write.format("tierlog")``) of a partition that a live
    LogManager owns (tiers) in the remote tier: writing behind its back would fork the
    partition; names the topic-partition and the owner."""


class BackfillError(TierlogError, ValueError):
    """Rows a backfill cannot write: a missing ``value`` column, no topic, a partition out of
    range, a column of the wrong type; names the column or row and the topic-partition."""


class RestoreNotConfirmedError(TierlogError, ValueError):
    """A restore that would delete segments from the remote tier (``execute``, ``tierlog
    restore --execute``) or leave a partition empty (``allow_empty``, ``--allow-empty``)
    without being told to; names each partition and what it would delete. Nothing changed."""


class TierDamagedError(RemoteStorageError):
    """A restore found an object it relies on damaged (missing, its size not the recorded
    one, batches that do not pass the scrub's checks): names each object, expected vs found.
    Nothing changed."""


# --- retriable conditions of the remote tier (quotas, timeouts, copy lag) --------------


class RetriableError(TierlogError):
    """Base of the errors whose operation may succeed when retried later, unchanged (Kafka's
    RetriableException): a remote tier that timed out, a busy reader, a quota, a copy lag."""


class RemoteTimeoutError(RemoteStorageError, RetriableError, TimeoutError):
    """A call to the remote tier did not answer within ``remote.storage.request.timeout.ms``
    and was abandoned (nothing was committed for it); names the call."""


class RemoteFetchTimeoutError(RemoteTimeoutError):
    """A read of the remote tier did not finish within ``remote.fetch.max.wait.ms``; names the
    partition and offset. Retry the read later."""


class RemoteReaderBusyError(RemoteStorageError, RetriableError):
    """The remote reader's queue holds ``remote.log.reader.max.pending.tasks`` reads already:
    this one was rejected without waiting (Kafka's RejectedExecutionException)."""


class RemoteFetchQuotaExceededError(RemoteStorageError, RetriableError):
    """Reads of the remote tier are over ``remote.log.manager.fetch.max.bytes.per.second``;
    ``throttle_time_ms`` says when to retry."""

    def __init__(self, message: str, throttle_time_ms: int = 0) -> None:
        super().__init__(message)
        self.throttle_time_ms = throttle_time_ms


class CopyLagExceededError(RetriableError, OSError):
    """An append to a tiered partition whose local bytes not yet copied to the remote tier
    exceed ``remote.log.copy.lag.max.bytes`` (the tier is out or slow): refused instead of
    filling the disk; names the partition and the lag. Retry once tiering catches up."""


# --- the Kafka protocol server (tierlog.server) -------------------------------------------


class ProtocolError(TierlogError):
    """A Kafka protocol request that cannot be served as sent."""


class BadRequestError(ProtocolError, ValueError):
    """A request frame that cannot be decoded (too short, an unknown API key or version, a
    truncated or malformed body): the connection that sent it is closed, as Kafka does."""


class FrameTooLargeError(BadRequestError):
    """A request frame whose size prefix is negative or over ``socket.request.max.bytes``:
    refused before its body is buffered, and the connection closed."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"a request of {size} bytes is over socket.request.max.bytes "
                         f"({limit})")
        self.size = size


class FetchSessionError(ProtocolError):
    """A fetch naming an incremental fetch session (KIP-227) that is gone, or an epoch out of
    step: ``code`` (Kafka's error code number) goes in the response's top level and the
    client starts a new session."""

    def __init__(self, code: int, name: str) -> None:
        super().__init__(name)
        self.code = code


class SparkWorkerError(TierlogError, RuntimeError):
    """Spark's Python workers cannot run the ``tierlog`` data source (they cannot import
    tierlog); names the interpreter they run and how to point them at one that can."""
