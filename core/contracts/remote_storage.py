"""The plugin-facing remote storage API (Kafka's ``storage/api``): ids, segment metadata and
its lifecycle, the data handed to a copy, and the RemoteStorageManager contract.

Imports nothing of the engine, so it sits below it, beside the hook specs that name
``RemoteStorageFactory``; plugins import it by its public name, :mod:`tierlog.remote.api`.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import enum
import json
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, BinaryIO, Protocol, runtime_checkable

from tierlog.common.filenames import (
    INDEX_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    validate_topic,
)
from tierlog.contracts.json_fields import SEGMENT_METADATA_KINDS, check_json_int, json_int
from tierlog.errors import CorruptRemoteMetadataError

#: Kafka's ``Uuid`` text form: 16 bytes as 22 characters of URL-safe base64 without padding.
_UUID_RE = re.compile(r"[A-Za-z0-9_-]{22}")
UUID_TEXT_LENGTH = 22
METADATA_FORMAT_VERSION = 1


class IndexType(enum.Enum):
    """The auxiliary objects copied with a segment; each value is its object suffix."""

    OFFSET = INDEX_SUFFIX
    TIMESTAMP = TIME_INDEX_SUFFIX
    PRODUCER_SNAPSHOT = SNAPSHOT_SUFFIX
    TRANSACTION = TXN_INDEX_SUFFIX
    LEADER_EPOCH = ".leader_epoch_checkpoint"

    @property
    def suffix(self) -> str:
        return str(self.value)


class RemoteLogSegmentState(enum.Enum):
    """Lifecycle of a remote segment; the values are Kafka's byte ids.

    COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED ->
    DELETE_SEGMENT_FINISHED, with COPY_SEGMENT_STARTED -> DELETE_SEGMENT_STARTED for a copy
    that is abandoned. Only COPY_SEGMENT_FINISHED segments may be read.
    """

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @property
    def id(self) -> int:
        return int(self.value)

    @classmethod
    def for_id(cls, state_id: int) -> RemoteLogSegmentState:
        return cls(state_id)

    @staticmethod
    def is_valid_transition(
        old: RemoteLogSegmentState | None, new: RemoteLogSegmentState
    ) -> bool:
        """Kafka's legal transitions. A state to itself is legal so that retries are idempotent."""
        if old is None:
            return new is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        return old is new or new in _NEXT_STATES[old]


_NEXT_STATES: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}
    ),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}

is_valid_transition = RemoteLogSegmentState.is_valid_transition


def new_uuid_text() -> str:
    """A random id in Kafka's ``Uuid`` text form that does not start with '-'."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")
        if not text.startswith("-"):
            return text


def _check_uuid_text(what: str, value: object) -> None:
    if not isinstance(value, str) or not _UUID_RE.fullmatch(value):
        raise ValueError(
            f"{what} must be {UUID_TEXT_LENGTH} URL-safe base64 characters, got {value!r}"
        )


@dataclass(frozen=True, slots=True)
class TopicIdPartition:
    """A partition named by topic id, topic and number; every part appears in object paths, so
    the topic name is validated and the topic id must be Kafka's 22-character base64 text."""

    topic_id: str
    topic: str
    partition: int

    def __post_init__(self) -> None:
        _check_uuid_text("topic_id", self.topic_id)
        validate_topic(self.topic)
        if isinstance(self.partition, bool) or not isinstance(self.partition, int) \
                or self.partition < 0:
            raise ValueError(f"partition must be a non-negative int, got {self.partition!r}")

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    """Names one copy attempt of a segment: ``id`` is a fresh Kafka ``Uuid`` (22-character
    URL-safe base64 text) per attempt, so a retried copy never collides with a failed one."""

    topic_id_partition: TopicIdPartition
    id: str

    def __post_init__(self) -> None:
        _check_uuid_text("remote log segment id", self.id)

    @classmethod
    def generate(cls, topic_id_partition: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(topic_id_partition, new_uuid_text())

    def __str__(self) -> str:
        return f"{self.topic_id_partition}/{self.id}"


def _sorted_epochs(epochs: Mapping[int, int]) -> Mapping[int, int]:
    return MappingProxyType(dict(sorted((int(e), int(o)) for e, o in epochs.items())))


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadata:
    """What the metadata store knows of one remote segment (keyword-only construction).

    JSON form (``to_json``), stored in the tier: one compact object with sorted keys,
    ``{"brokerId", "customMetadata" (base64 or null), "endOffset", "eventTimestampMs",
    "maxTimestampMs", "partition", "segmentId", "segmentLeaderEpochs" ([[epoch, start], ...]),
    "segmentSizeInBytes", "startOffset", "state" (name), "topic", "topicId", "txnIdxEmpty",
    "version": 1}``. Immutable, hence thread-safe.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    """First offset of the segment (inclusive)."""
    end_offset: int
    """Last offset of the segment (inclusive)."""
    max_timestamp_ms: int
    broker_id: int = 0
    event_timestamp_ms: int
    """When this metadata event happened (epoch milliseconds)."""
    segment_size_in_bytes: int
    """Size of the ``.log`` object."""
    segment_leader_epochs: Mapping[int, int] = field(hash=False)
    """Leader epoch -> the first offset written in that epoch within this segment, sorted."""
    custom_metadata: bytes | None = None
    """Opaque bytes the RemoteStorageManager returned from the copy."""
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    txn_idx_empty: bool = False
    """True when the segment has no aborted transactions (Kafka's ``txnIdxEmpty``)."""

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(f"start offset {self.start_offset} of a remote segment is negative")
        if self.end_offset < self.start_offset:
            raise ValueError(
                f"end offset {self.end_offset} is below start offset {self.start_offset}"
            )
        if self.segment_size_in_bytes < 0:
            raise ValueError(f"segment size {self.segment_size_in_bytes} is negative")
        if not self.segment_leader_epochs:
            raise ValueError(
                f"segment {self.remote_log_segment_id} needs at least one leader epoch entry"
            )
        if not isinstance(self.state, RemoteLogSegmentState):
            raise TypeError(f"state must be a RemoteLogSegmentState, got {self.state!r}")
        object.__setattr__(self, "segment_leader_epochs",
                           _sorted_epochs(self.segment_leader_epochs))

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def segment_id(self) -> str:
        """The copy attempt's uuid text (names the segment's objects)."""
        return self.remote_log_segment_id.id

    def create_with_update(
        self, update: RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """A copy with the update's state, broker, event time and custom metadata (the update's
        custom metadata replaces this one's, as in Kafka). ValueError when the update is for
        another segment or the state change is not a legal transition."""
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError(
                f"update for {update.remote_log_segment_id} cannot apply to "
                f"{self.remote_log_segment_id}"
            )
        if not is_valid_transition(self.state, update.state):
            raise ValueError(
                f"segment {self.remote_log_segment_id}: illegal state transition "
                f"{self.state.name} -> {update.state.name}"
            )
        return dataclasses.replace(
            self,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            custom_metadata=update.custom_metadata,
            state=update.state,
        )

    def to_dict(self) -> dict[str, Any]:
        tip = self.topic_id_partition
        custom = self.custom_metadata
        return {
            "version": METADATA_FORMAT_VERSION,
            "topicId": tip.topic_id,
            "topic": tip.topic,
            "partition": tip.partition,
            "segmentId": self.segment_id,
            "startOffset": self.start_offset,
            "endOffset": self.end_offset,
            "maxTimestampMs": self.max_timestamp_ms,
            "brokerId": self.broker_id,
            "eventTimestampMs": self.event_timestamp_ms,
            "segmentSizeInBytes": self.segment_size_in_bytes,
            "segmentLeaderEpochs": [[e, o] for e, o in self.segment_leader_epochs.items()],
            "customMetadata": None if custom is None else base64.b64encode(custom).decode(),
            "state": self.state.name,
            "txnIdxEmpty": self.txn_idx_empty,
        }

    @classmethod
    def from_dict(cls, data: object, source: str = "remote segment metadata"
                  ) -> RemoteLogSegmentMetadata:
        """Inverse of ``to_dict``. CorruptRemoteMetadataError (a RemoteStorageError and a
        ValueError) naming ``source`` and the first missing or malformed field."""
        try:
            return cls._from_dict(data)
        except KeyError as e:
            raise CorruptRemoteMetadataError(f"{source} lacks field {e}") from e
        except (TypeError, ValueError, AttributeError, RecursionError, binascii.Error) as e:
            raise CorruptRemoteMetadataError(f"{source} is malformed: {e}") from e

    @classmethod
    def _from_dict(cls, data: object) -> RemoteLogSegmentMetadata:
        if not isinstance(data, Mapping):
            raise TypeError(f"expected a JSON object, got {type(data).__name__}")
        if data["version"] != METADATA_FORMAT_VERSION:
            raise ValueError(f"unknown metadata version {data['version']!r}")
        custom = data["customMetadata"]
        if custom is not None and not isinstance(custom, str):
            raise TypeError(f"'customMetadata' must be base64 text or null, got {custom!r}")
        txn_idx_empty = data["txnIdxEmpty"]
        if not isinstance(txn_idx_empty, bool):
            raise TypeError(f"'txnIdxEmpty' must be true or false, got {txn_idx_empty!r}")
        tip = TopicIdPartition(data["topicId"], _str(data, "topic"), _int(data, "partition"))
        return cls(
            remote_log_segment_id=RemoteLogSegmentId(tip, data["segmentId"]),
            start_offset=_int(data, "startOffset"),
            end_offset=_int(data, "endOffset"),
            max_timestamp_ms=_int(data, "maxTimestampMs"),
            broker_id=_int(data, "brokerId"),
            event_timestamp_ms=_int(data, "eventTimestampMs"),
            segment_size_in_bytes=_int(data, "segmentSizeInBytes"),
            segment_leader_epochs=_epochs(data["segmentLeaderEpochs"]),
            custom_metadata=None if custom is None else base64.b64decode(custom, validate=True),
            state=_state(data["state"]),
            txn_idx_empty=txn_idx_empty,
        )

    def to_json(self) -> str:
        """Compact, stable JSON (sorted keys, no spaces): the form stored in the tier."""
        return dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str | bytes, source: str = "remote segment metadata"
                  ) -> RemoteLogSegmentMetadata:
        """Parse a metadata object; CorruptRemoteMetadataError naming ``source`` (the object's
        path) for any malformed content."""
        return cls.from_dict(load_json_object(text, source), source)


def load_json_object(text: str | bytes, source: str) -> dict[str, Any]:
    """A remote JSON object's top level, or CorruptRemoteMetadataError naming ``source``: not
    JSON, not UTF-8, nested too deeply to parse (RecursionError), or not an object."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CorruptRemoteMetadataError(f"{source} is not JSON: {e}") from e
    except RecursionError as e:
        raise CorruptRemoteMetadataError(f"{source} is not JSON: nested too deeply") from e
    if not isinstance(data, dict):
        raise CorruptRemoteMetadataError(
            f"{source} must be a JSON object, not {type(data).__name__}")
    return data


def _state(name: object) -> RemoteLogSegmentState:
    if not isinstance(name, str) or name not in RemoteLogSegmentState.__members__:
        raise ValueError(f"unknown remote segment state {name!r}")
    return RemoteLogSegmentState[name]


def _int(data: Mapping[str, Any], key: str) -> int:
    return json_int(data, key, SEGMENT_METADATA_KINDS[key])


def _str(data: Mapping[str, Any], key: str) -> str:
    value = data[key]
    if not isinstance(value, str):
        raise TypeError(f"field {key!r} must be a string, got {value!r:.60}")
    return value


def _epochs(pairs: object) -> dict[int, int]:
    """``[[epoch, start offset], ...]`` of ints."""
    if not isinstance(pairs, list):
        raise TypeError(f"'segmentLeaderEpochs' must be a list of pairs, got {pairs!r:.60}")
    epochs: dict[int, int] = {}
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int) and not isinstance(v, bool) for v in pair)):
            raise TypeError(f"'segmentLeaderEpochs' entry {pair!r:.60} is not [epoch, offset]")
        epochs[check_json_int(pair[0], "leader epoch", "a leader epoch")] = \
            check_json_int(pair[1], "offset", "a leader epoch's start offset")
    return epochs


def dumps(data: object) -> str:
    """The JSON spelling every tierlog remote object uses: sorted keys, no spaces."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoteLogSegmentMetadataUpdate:
    """A state change of a remote segment (Kafka's RemoteLogSegmentMetadataUpdate)."""

    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None
    broker_id: int = 0

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The local files of a closed segment handed to ``copy_log_segment_data``.

    ``transaction_index`` is None when the segment has none; ``producer_snapshot_index`` is the
    snapshot at the next segment's base offset; ``leader_epoch_index`` is the content of a
    leader-epoch checkpoint holding the entries up to the segment's end. ``extra_indexes``
    maps the object suffix of each plugin index type that is ``uploaded_to_remote`` to its
    file: the RSM stores it under the segment's object prefix with that suffix, serves it from
    ``fetch_index`` (given the index type, which has that ``suffix``) and deletes it with the
    segment.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes
    extra_indexes: Mapping[str, Path] = field(default_factory=dict)


class IndexObject(Protocol):
    """What ``fetch_index`` needs of an index type: its object ``suffix`` (an ``IndexType``,
    or a plugin index type uploaded through ``LogSegmentData.extra_indexes``)."""

    @property
    def suffix(self) -> str: ...


@runtime_checkable
class RemoteStorageManager(Protocol):
    """Copies, fetches and deletes segments in the remote tier (Kafka's RemoteStorageManager).

    Implementations must be thread-safe: the RemoteLogManager calls them from several threads.
    Every failure is raised as RemoteStorageError, and a missing object as its subclass
    RemoteResourceNotFoundError.
    """

    def copy_log_segment_data(
        self, metadata: RemoteLogSegmentMetadata, segment_data: LogSegmentData
    ) -> bytes | None:
        """Upload the segment and its indexes; return custom metadata to store with it, or None.

        Idempotent: a retry with the same metadata overwrites whatever an earlier attempt left
        and does not fail because objects exist. Callers use a fresh segment id per attempt. A
        failure part-way must not leave a complete-looking but short ``.log`` object.
        """
        ...

    def fetch_log_segment(
        self, metadata: RemoteLogSegmentMetadata, start_position: int,
        end_position: int | None = None,
    ) -> BinaryIO:
        """A binary stream of the ``.log`` object from ``start_position`` to ``end_position``,
        BOTH inclusive, or to the end of the object when ``end_position`` is None or beyond it.
        RemoteResourceNotFoundError when the segment is not in the tier."""
        ...

    def fetch_index(self, metadata: RemoteLogSegmentMetadata,
                    index_type: IndexType | IndexObject) -> BinaryIO:
        """A binary stream of one index object: an ``IndexType``, or a plugin index type
        copied in ``LogSegmentData.extra_indexes`` (named by its ``suffix``). A missing index
        (e.g. no transaction index was uploaded) raises RemoteResourceNotFoundError; None is
        never returned."""
        ...

    def delete_log_segment_data(self, metadata: RemoteLogSegmentMetadata) -> None:
        """Delete every object of the segment. Idempotent: objects already gone are not an
        error (an earlier attempt may have removed them)."""
        ...

    def close(self) -> None:
        """Release resources; further calls may fail. Closing twice is harmless."""
        ...


#: A remote storage backend, as a plugin registers it under its name:
#: ``factory(url, options) -> RemoteStorageManager`` (``remote.storage.url`` and the
#: ``remote.storage.options.*`` with the prefix removed).
RemoteStorageFactory = Callable[[str, Mapping[str, Any]], RemoteStorageManager]
