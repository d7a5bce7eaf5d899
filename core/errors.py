"""The tierlog exception tree: one class per failure mode, all under TierlogError.

Each class also inherits the builtin a Python caller would naturally catch
(ValueError for bad input, OSError for storage trouble, IndexError for offsets).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Self


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
    """Record batch bytes fail a check: CRC, sizes, record count, framing.

    Besides ``detail`` (what was found), the error says where, in fields that callers fill
    in as it rises (:meth:`located`): ``topic`` and ``partition``, ``file`` (a segment file's
    path or a remote object's key), ``offset`` (the batch's base offset), ``position`` (its
    byte position in ``file``; in whatever buffer was parsed while ``file`` is None) and
    ``check`` (the check that failed: ``CRC``, ``record framing``, ``size``, ...). ``str()``
    is built from them here, the one home of the message format::

        orders-0, /data/orders-0/00000000000000072000.log, batch at offset 72600
        (position 110488): CRC check failed: stored crc 0x1c2d3e4f != computed crc ...
    """

    def __init__(self, detail: str = "", *, topic: str | None = None,
                 partition: int | None = None, file: str | None = None,
                 offset: int | None = None, position: int | None = None,
                 check: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.topic = topic
        self.partition = partition
        self.file = file
        self.offset = offset
        self.position = position
        self.check = check

    def located(self, *, topic: str | None = None, partition: int | None = None,
                file: str | None = None, offset: int | None = None,
                position: int | None = None, check: str | None = None,
                shift: int = 0) -> Self:
        """A copy of this error (same class, chained by the caller with ``from``) with the
        fields it lacks filled in: what a caller knows that the code below it did not. Fields
        already set are kept (they are more precise). ``shift`` is where the parsed buffer
        starts in ``file``: a position found in the buffer moves by it when ``file`` is given
        here; once a file is named, positions are the file's and stay."""
        moved = self.position
        if moved is not None and self.file is None and file is not None:
            moved += shift
        copy = type(self).__new__(type(self))
        CorruptRecordError.__init__(
            copy, self.detail,
            topic=self.topic if self.topic is not None else topic,
            partition=self.partition if self.partition is not None else partition,
            file=self.file if self.file is not None else file,
            offset=self.offset if self.offset is not None else offset,
            position=moved if moved is not None else position,
            check=self.check if self.check is not None else check)
        return copy

    def __str__(self) -> str:
        where = []
        if self.topic is not None:
            where.append(self.topic if self.partition is None
                         else f"{self.topic}-{self.partition}")
        if self.file is not None:
            where.append(self.file)
        batch = ""
        if self.offset is not None:
            batch = f"batch at offset {self.offset}"
        if self.position is not None:
            batch += f" (position {self.position})" if batch else f"position {self.position}"
        if batch:
            where.append(batch)
        what = f"{self.check} check failed: {self.detail}" if self.check else self.detail
        return f"{', '.join(where)}: {what}" if where else what


@contextmanager
def locating_corrupt_records(*, topic: str | None = None, partition: int | None = None,
                             file: str | None = None, offset: int | None = None,
                             position: int | None = None, check: str | None = None,
                             shift: int = 0) -> Iterator[None]:
    """Re-raise a CorruptRecordError from the block with the location filled in (see
    :meth:`CorruptRecordError.located`): how a caller adds what it knows as the error rises."""
    try:
        yield
    except CorruptRecordError as exc:
        raise exc.located(topic=topic, partition=partition, file=file, offset=offset,
                          position=position, check=check, shift=shift) from exc


class TruncatedBatchError(CorruptRecordError):
    """A batch ends before its declared length (a torn write or a cut buffer)."""


class UnsupportedMagicError(CorruptRecordError):
    """A batch has a magic byte other than 2 (only v2 record batches are supported)."""


class DecompressionLimitError(CorruptRecordError):
    """A compressed batch expands beyond the decompression bound (a multiple of
    max.message.bytes): refused as a decompression bomb before it is fully expanded."""


class LogDamagedError(CorruptRecordError):
    """A read reached damaged bytes of a local segment (a failed CRC, a broken batch header,
    offsets out of order) that a read-only open found and left as they are: the message names
    the partition, the segment file, the position, the offset and the check that failed."""


class UnsupportedCompressionError(TierlogError, ValueError):
    """A compression codec id or name that Kafka does not define."""


class RecordBatchTooLargeError(TierlogError, ValueError):
    """A batch is larger than max.message.bytes (or the segment size)."""


class RecordListTooLargeError(RecordBatchTooLargeError):
    """An append larger than ``segment.bytes``: no segment could hold it (Kafka's
    RecordBatchTooLargeException, answered RECORD_LIST_TOO_LARGE)."""


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


class ReadOnlyLogError(TierlogError, PermissionError):
    """A change (append, roll, truncation, retention, a new log start offset) was asked of a
    log opened read-only (``read_only=True``: beside a live owner, it must write nothing)."""


class LogDirectoryError(TierlogError, OSError):
    """A log or partition directory is missing, unreadable or not a partition directory."""


class DataDirLockedError(LogDirectoryError):
    """Another live process holds a data dir's ``.lock`` (Kafka's exclusive lock on
    ``<log.dir>/.lock``): one process writes a data dir at a time. ``pid`` is the holder's
    (None when the lock file does not name it)."""

    def __init__(self, directory: object, pid: int | None) -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"data dir {directory} is in use by {holder} (it holds {directory}/.lock): stop "
            f"it first; topics --list/--describe, consume, dump-log and metrics can read beside it")
        self.directory = directory
        self.pid = pid


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


class TierFencedError(RemoteStorageError):
    """A leader's write to its partition's tier lost its compare-and-swap (issue 24): another
    node claimed the partition at a newer leader epoch since this one last read or wrote it
    (``_manifest.json``, ``_owner.json``), so nothing of this write was committed; the node
    stops tiering the partition and re-reads its role. Names the partition, the object and
    the epochs."""


class TierNotFoundError(RemoteResourceNotFoundError):
    """A reader's URL holds no remote tier (no partition directory at all): a typo in the
    path must not read as an empty topic; names the URL."""


class CorruptRemoteMetadataError(RemoteStorageError, ValueError):
    """A remote metadata object (a partition manifest, a segment's metadata) is malformed:
    not JSON, nested too deeply, wrong types or missing fields; names the object."""


class TableCoverageError(TierlogError, ValueError):
    """A change of a topic table's coverage (``tierlog.remote.table.coverage``) that would move
    a partition's covered end or start backwards, or name a partition or offset out of range;
    names the partition and the offsets. Nothing is committed."""


class TableCatalogRequiredError(ConfigError):
    """A change of a topic table that a user's catalog owns (its ``_pointer.json`` names the
    catalog), asked of a writer not given that catalog's ``remote.log.table.catalog.*``
    properties (a CLI over a bare bucket); names the catalog and the table. Nothing changes."""


class TableChainError(TableCoverageError):
    """A file offered to a topic table (``tierlog.remote.table.commit``) that does not continue
    its partition's coverage: it starts past the covered end (a gap), overlaps offsets the
    table holds, or the partition has no coverage and no start was given; names the
    partition, the file's offsets and the covered end. Nothing is committed."""


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


class TableCommitConflictError(RetriableError, RuntimeError):
    """A change of a topic table lost every attempt to other commits (or never learned its
    outcome) within the committer's bound; names the table and the attempts. The next change
    reloads the table and finds out what landed."""


class TableCompactionStaleError(TableCommitConflictError):
    """A compaction of a topic table (``TableCommitter.compact``) whose input files are no
    longer all current: retention, a cut, a repair or another compaction replaced one since
    the run was merged; names the partition, the run and the missing input. Nothing is
    committed; the run file is an orphan for the sweep, and the next compaction plans again."""


class MetadataConflictError(RetriableError, RuntimeError):
    """A compare-and-swap of the cluster metadata store (``tierlog.cluster``) lost: a create
    found the key existing, or a replace found another version than the one it expected.
    Names the key and both versions (``expected``/``found``; None: absent). Nothing of this
    write was stored: re-read the key and decide again."""

    def __init__(self, message: str, *, key: str, expected: str | None,
                 found: str | None) -> None:
        super().__init__(message)
        self.key = key
        self.expected = expected
        self.found = found


class InvalidMetadataKeyError(TierlogError, ValueError):
    """A cluster metadata key that names no object of the store: empty, absolute, with ``..``
    or an empty segment, a character outside ``[A-Za-z0-9._-]`` or a reserved suffix."""


class InvalidMetadataValueError(TierlogError, ValueError):
    """A cluster metadata value that the store does not keep: not a JSON object, not
    serializable as JSON, or larger than the store's limit; names the key."""


# --- replication: the leader's replica rules (tierlog.cluster.partition_leader) -------------


class NotLeaderOrFollowerError(RetriableError, RuntimeError):
    """A request for a partition to a broker that is not its leader, or a follower fetch from
    a broker that is not one of its replicas (Kafka's NOT_LEADER_OR_FOLLOWER); names the
    partition and the broker. The client refreshes its metadata and retries."""


class NotEnoughReplicasError(RetriableError, RuntimeError):
    """An ``acks=all`` produce to a partition whose in-sync set is smaller than
    ``min.insync.replicas`` (Kafka's NOT_ENOUGH_REPLICAS): refused before anything is
    appended; names the partition, the in-sync set and the minimum."""


class NotEnoughReplicasAfterAppendError(NotEnoughReplicasError):
    """An ``acks=all`` produce that was appended and reached the high watermark, but the
    in-sync set shrank below ``min.insync.replicas`` meanwhile (Kafka's
    NOT_ENOUGH_REPLICAS_AFTER_APPEND): the records are in the log; names the partition."""


class MarkersAbandonedError(TierlogError):
    """A transaction coordinator stopped completing a transaction with markers unwritten: it
    no longer coordinates the transaction (its ``__transaction_state`` partition moved), or a
    newer coordinator's marker fenced it. The next coordinator completes it; names the
    producer and the partitions."""


class ReplicationTimeoutError(RetriableError, TimeoutError):
    """A leader's append that every in-sync replica did not hold within its timeout (Kafka's
    REQUEST_TIMED_OUT for an ``acks=all`` write): the records are in the leader's log and may
    still be replicated; names the partition and the timeout."""


class FencedPartitionEpochError(TierlogError, ValueError):
    """An in-sync set change (or a leader update) made against a partition epoch that is no
    longer the partition's (Kafka's INVALID_UPDATE_VERSION): another change got there first.
    Names the partition and both epochs (``expected``: the partition's, ``found``: the
    change's). Nothing changed: re-read the partition's state and decide again."""

    def __init__(self, message: str, *, expected: int, found: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.found = found


class BrokerConnectionError(RetriableError, ConnectionError):
    """A request from this node to another broker (a follower's fetch from its leader) got no
    whole answer: the connection failed or closed, the answer did not come within the
    timeout, or its frame was malformed or larger than allowed. Names the broker's address and
    the request. The connection is closed; the caller backs off and connects again."""


class InvalidReplicationFactorError(TierlogError, ValueError):
    """A topic asked for more replicas than there are live brokers, or fewer than one (Kafka's
    INVALID_REPLICATION_FACTOR); names the factor and the brokers."""


class InvalidPartitionsError(TierlogError, ValueError):
    """A CreatePartitions count that does not grow the topic (Kafka's INVALID_PARTITIONS);
    names the topic and both counts."""


class InvalidReplicaAssignmentError(TierlogError, ValueError):
    """An explicit replica assignment Kafka refuses (INVALID_REPLICA_ASSIGNMENT): the wrong
    number of partitions or replicas, a node named twice or not live; names the partition."""


class NodeIdInUseError(RetriableError, RuntimeError):
    """A node registering a ``node.id`` whose record in the cluster store belongs to another
    live incarnation (another data directory, not fenced, its record still changing within
    ``broker.session.timeout.ms``); names the id and the holder's address. Tried again once
    the holder stops heartbeating, or start this node with another ``node.id``."""


class BrokerFencedError(TierlogError, RuntimeError):
    """This node's registration was fenced by the controller (its record marked ``fenced``,
    or taken over by a newer incarnation of the same id): it must stop acting as a replica
    and register again, with a new broker epoch; names the id and the broker epoch lost."""


class InvalidIsrError(TierlogError, ValueError):
    """An in-sync set that cannot be the partition's: without its leader, naming a broker that
    is not a replica, or not the change the leader proposed; names the partition and the set."""


class FencedLeaderEpochError(RetriableError, RuntimeError):
    """A request that names a leader epoch older than the partition's on this broker (Kafka's
    FENCED_LEADER_EPOCH): the client's metadata is stale; it refreshes and retries. Names the
    partition and both epochs."""


class UnknownLeaderEpochError(RetriableError, RuntimeError):
    """A request that names a leader epoch newer than this broker knows (Kafka's
    UNKNOWN_LEADER_EPOCH): this broker has not learned of the election yet; the client retries.
    Names the partition and both epochs."""


class LeaderNotAvailableError(RetriableError, RuntimeError):
    """A partition with no leader now (every in-sync replica offline, or an election under
    way; Kafka's LEADER_NOT_AVAILABLE); names the partition."""


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


class MalformedRequestError(BadRequestError):
    """A request whose length, count or size does not fit in the bytes left in its frame (a
    decoder would allocate it), or a null in a non-nullable field: refused before kio decodes
    it, and the connection closed; names the request type, the field path and the byte."""

    def __init__(self, request: str, field: str, position: int, detail: str) -> None:
        super().__init__(f"malformed {request}: {field} at byte {position}: {detail}")
        self.request = request
        self.field = field
        self.position = position
        self.detail = detail


class PartitionLimitError(ProtocolError, ValueError):
    """A request that would create more partitions than ``max.broker.partitions`` allows or
    the log dirs' free space can hold: refused before any is created; names the counts."""


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


class MetricsBindError(TierlogError, OSError):
    """The metrics endpoint cannot listen on its host and port (in use, or not an address of
    this machine); the message names both."""


# --- security: SASL and SCRAM credentials (tierlog.security) -------------------------------


class SaslAuthenticationError(TierlogError, PermissionError):
    """A SASL exchange that failed (Kafka's SASL_AUTHENTICATION_FAILED): a wrong password or
    proof, an unknown user (answered the same way, so users cannot be enumerated), a message
    out of the mechanism's grammar, channel binding or a delegation token asked for. The
    message says why in the client's terms and never holds a password, proof or signature."""


class UnsupportedSaslMechanismError(TierlogError, ValueError):
    """A SASL mechanism this server does not offer or a SCRAM mechanism it does not know
    (Kafka's UNSUPPORTED_SASL_MECHANISM); names the mechanism and the supported ones."""


class UnacceptableCredentialError(TierlogError, ValueError):
    """A SCRAM credential that cannot be stored (Kafka's UNACCEPTABLE_CREDENTIAL): an empty
    user name, iterations outside 4096..16384, an empty salt, a salted password of the wrong
    length; names the user, the mechanism and the problem, never the secret."""


class CredentialNotFoundError(TierlogError, KeyError):
    """A change or description of a SCRAM credential that does not exist (Kafka's
    RESOURCE_NOT_FOUND: "Attempt to delete a user credential that does not exist"); names the
    user and the mechanism."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


# --- security: ACLs (tierlog.security.acl, acl_store) -------------------------------------


class InvalidAclError(TierlogError, ValueError):
    """An ACL binding or filter Kafka's CreateAcls, DescribeAcls or DeleteAcls refuse: ANY,
    MATCH or UNKNOWN where a definite value is needed, an empty name or host, a principal not
    of the form ``Type:name``, a CLUSTER resource not named ``kafka-cluster``. Names the binding
    and the field. ``code`` is Kafka's INVALID_REQUEST (42), the code its answer carries."""

    code = 42


class AclLimitError(TierlogError, ValueError):
    """ACLs that would take the cluster store's ACL object over the store's size limit: nothing
    was created; names the count and the bytes. ``code`` is UNKNOWN_SERVER_ERROR (-1), as
    Kafka answers a change over its own bound on ACL records."""

    code = -1
