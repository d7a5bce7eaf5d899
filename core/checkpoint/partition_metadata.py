"""Topic ids (Kafka's ``Uuid``) and the ``partition.metadata`` file that records a partition's id.

A topic id is 16 bytes shown as 22 characters of URL-safe base64 without padding.
"""

from __future__ import annotations

import base64
import re
import threading
import uuid
from pathlib import Path

from tierlog.common.atomic import atomic_write_text
from tierlog.errors import CorruptCheckpointError

#: The only ``partition.metadata`` version Kafka writes; newer versions are accepted on read.
PARTITION_METADATA_VERSION = 0
TOPIC_ID_BYTES = 16

#: Kafka reserves these ids: "no topic id" and the KRaft ``__cluster_metadata`` topic.
ZERO_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAA"
METADATA_TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"

_TOPIC_ID_RE = re.compile(r"[A-Za-z0-9_-]{22}(?:==)?")
_LINE_RE = re.compile(r"([^:]*):\s+(.*)")


def topic_id_from_bytes(raw: bytes) -> str:
    """The text form of a 16-byte topic id."""
    if len(raw) != TOPIC_ID_BYTES:
        raise ValueError(f"a topic id is {TOPIC_ID_BYTES} bytes, got {len(raw)}")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def topic_id_to_bytes(topic_id: str) -> bytes:
    """The 16 bytes of a topic id in text form (Kafka's ``Uuid.fromString``); ValueError if
    it is not 22 URL-safe base64 characters (optionally padded)."""
    if not isinstance(topic_id, str) or not _TOPIC_ID_RE.fullmatch(topic_id):
        raise ValueError(f"{topic_id!r} is not a base64 topic id (22 URL-safe characters)")
    return base64.urlsafe_b64decode(topic_id[:22] + "==")


def new_topic_id() -> str:
    """A random topic id as Kafka's ``Uuid.randomUuid`` makes one: a version-4 UUID that is
    not reserved and whose text does not start with '-' (it would read as a CLI option)."""
    while True:
        topic_id = topic_id_from_bytes(uuid.uuid4().bytes)
        if topic_id not in (ZERO_TOPIC_ID, METADATA_TOPIC_ID) and not topic_id.startswith("-"):
            return topic_id


class PartitionMetadataFile:
    """``partition.metadata``: exactly ``version: 0\\ntopic_id: <topic id>`` (no final newline).

    Written atomically. Thread-safe: reads and writes of one instance hold a lock.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def exists(self) -> bool:
        return self.path.exists()

    def write(self, topic_id: str) -> None:
        """Atomically record ``topic_id`` (validated; the zero id is refused)."""
        canonical = topic_id_from_bytes(topic_id_to_bytes(topic_id))
        if canonical == ZERO_TOPIC_ID:
            raise ValueError("the zero topic id cannot be recorded")
        with self._lock:
            atomic_write_text(
                self.path, f"version: {PARTITION_METADATA_VERSION}\ntopic_id: {canonical}"
            )

    def read(self) -> str:
        """The recorded topic id (canonical text form).

        Raises FileNotFoundError when absent and CorruptCheckpointError (naming the file)
        when a line is malformed, the version is below 0 or the id is the zero id.
        """
        with self._lock:
            raw = self.path.read_bytes()
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as e:
            raise CorruptCheckpointError(f"partition metadata file {self.path} is not UTF-8") from e
        version = self._value(lines, 0, "version")
        if not re.fullmatch(r"[+-]?[0-9]+", version):
            raise self._malformed(lines, 0)
        if int(version) < PARTITION_METADATA_VERSION:
            raise CorruptCheckpointError(
                f"unrecognized version {version} of partition metadata file {self.path}"
            )
        value = self._value(lines, 1, "topic_id")
        try:
            topic_id = topic_id_from_bytes(topic_id_to_bytes(value))
        except ValueError:
            raise self._malformed(lines, 1) from None
        if topic_id == ZERO_TOPIC_ID:
            raise CorruptCheckpointError(f"zero topic id in partition metadata file {self.path}")
        return topic_id

    def _value(self, lines: list[str], index: int, key: str) -> str:
        match = _LINE_RE.fullmatch(lines[index]) if index < len(lines) else None
        if match is None or match.group(1) != key:
            raise self._malformed(lines, index)
        return match.group(2)

    def _malformed(self, lines: list[str], index: int) -> CorruptCheckpointError:
        line = lines[index] if index < len(lines) else None
        return CorruptCheckpointError(
            f"malformed line {index + 1} in partition metadata file {self.path}: {line!r}"
        )

    def __repr__(self) -> str:
        return f"PartitionMetadataFile({str(self.path)!r})"
