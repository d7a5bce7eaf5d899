"""Every file suffix and file name of a Kafka log directory, and topic-name validation.

Segment files are named by their base offset as 20 zero-padded digits; partition
directories are ``<topic>-<partition>``. Validating topic names also stops path traversal.
"""

from __future__ import annotations

import re
from pathlib import Path

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import InvalidTopicError, LogDirectoryError

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
TMP_SUFFIX = ".tmp"
DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

MAX_TOPIC_LENGTH = 249
_TOPIC_RE = re.compile(r"[a-zA-Z0-9._-]+")
_OFFSET_NAME_RE = re.compile(r"[0-9]{20}", re.ASCII)
#: A partition number as Kafka writes it in a directory name: canonical ASCII decimal.
_PARTITION_RE = re.compile(r"0|[1-9][0-9]{0,9}", re.ASCII)
#: Kafka's partition numbers are Java ints.
MAX_PARTITION = INT32_MAX


def filename_prefix_from_offset(offset: int) -> str:
    """The 20-digit, zero-padded base name of a segment file at ``offset``."""
    return f"{offset:020d}"


def offset_from_filename(name: str) -> int:
    """The base offset encoded in a segment file name such as ``00000000000000000042.log``."""
    prefix = name.split(".", 1)[0]
    if not _OFFSET_NAME_RE.fullmatch(prefix):
        raise LogDirectoryError(f"{name!r} is not a segment file name (20-digit offset expected)")
    return int(prefix)


def log_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{LOG_SUFFIX}{suffix}"


def offset_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{INDEX_SUFFIX}{suffix}"


def time_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{TIME_INDEX_SUFFIX}{suffix}"


def transaction_index_file(directory: Path, offset: int, suffix: str = "") -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{TXN_INDEX_SUFFIX}{suffix}"


def snapshot_file(directory: Path, offset: int) -> Path:
    return directory / f"{filename_prefix_from_offset(offset)}{SNAPSHOT_SUFFIX}"


def validate_topic(topic: str) -> str:
    """Return ``topic`` if it is a legal Kafka topic name, else raise InvalidTopicError."""
    if not isinstance(topic, str) or not topic:
        raise InvalidTopicError(f"topic name must be a non-empty string, got {topic!r}")
    if topic in (".", ".."):
        raise InvalidTopicError(f"topic name {topic!r} is not allowed")
    if len(topic) > MAX_TOPIC_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(topic)} characters long; the limit is {MAX_TOPIC_LENGTH}"
        )
    if not _TOPIC_RE.fullmatch(topic):
        raise InvalidTopicError(
            f"topic name {topic!r} may only contain ASCII letters, digits, '.', '_' and '-'"
        )
    return topic


def partition_dir_name(topic: str, partition: int) -> str:
    """``<topic>-<partition>``, after validating both parts."""
    validate_topic(topic)
    if (not isinstance(partition, int) or isinstance(partition, bool)
            or not 0 <= partition <= MAX_PARTITION):
        raise InvalidTopicError(
            f"partition must be an integer from 0 to {MAX_PARTITION}, got {partition!r}")
    return f"{topic}-{partition}"


def partition_from_text(text: str) -> int | None:
    """The partition number a directory name's last part spells (canonical ASCII decimal,
    0 to 2**31-1), else None. The one rule for local and remote partition directories."""
    if not _PARTITION_RE.fullmatch(text):
        return None
    partition = int(text)
    return partition if partition <= MAX_PARTITION else None


def parse_partition_dir(name: str) -> tuple[str, int]:
    """Split a partition directory name into (topic, partition); the topic may contain '-'."""
    topic, sep, text = name.rpartition("-")
    partition = partition_from_text(text) if sep else None
    if partition is None:
        raise LogDirectoryError(f"{name!r} is not a partition directory (<topic>-<partition>, "
                                f"a partition from 0 to {MAX_PARTITION})")
    validate_topic(topic)
    return topic, partition
