"""Object names in the remote tier, as Kafka's test RemoteStorageManager lays them out, plus
tierlog's metadata objects. Pure string functions: no I/O.

```
<root>/<topic>-<partition>-<topicId>/
    <20-digit startOffset>-<segment uuid>.log | .index | .timeindex | .txnindex | .snapshot
                                            | .leader_epoch_checkpoint
    _metadata/<20-digit startOffset>-<segment uuid>.json   one per segment not yet deleted
    _manifest.json                                         snapshot of every _metadata object
    _tail/<20-digit first>-<20-digit end>-<uuid>.log       tail objects (tierlog.remote.rlm.tail)
    _tail.json                                             the tail manifest
    _owner.json                                            the LogManager tiering it (ownership)
<root>/_staging/<job id>/<partition dir>/<task attempt>/   a backfill task's staged chunks
<root>/_jobs/<job id>.json                                 a backfill commit's record
<root>/_jobs/_generation.json                              the backfills' generation counter
<root>/_streams/<stream id>.json                           a streaming write's last batch id
<root>/_tables/<topic>-<topicId>/                          a topic's Iceberg table (remote.table)
```
Names starting with ``_`` are skipped by most dataset readers (Spark, pyarrow). The ``*_key``
functions give an object's path relative to the root (``RemoteTier.path(key)`` makes it full):
the one place the writer (RemoteStorageManager, metadata manager) and the readers
(``tierlog.reader``, ``read_partition_manifest``) learn where an object lives.
"""

from __future__ import annotations

import re

from tierlog.common.filenames import LOG_SUFFIX, filename_prefix_from_offset, partition_from_text
from tierlog.remote.api import (
    UUID_TEXT_LENGTH,
    IndexType,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)

SEGMENT_SUFFIX = LOG_SUFFIX
METADATA_DIR = "_metadata"
METADATA_SUFFIX = ".json"
MANIFEST_NAME = "_manifest.json"
TAIL_DIR = "_tail"
TAIL_MANIFEST_NAME = "_tail.json"
#: Suffix of the temporary name an object is written under before its rename (local tiers).
PARTIAL_SUFFIX = ".partial"

#: Every object suffix of a segment, data first.
SEGMENT_OBJECT_SUFFIXES: tuple[str, ...] = (SEGMENT_SUFFIX, *(t.suffix for t in IndexType))

_METADATA_NAME_RE = re.compile(rf"(\d{{20}})-([A-Za-z0-9_-]{{{UUID_TEXT_LENGTH}}})\.json")
_TAIL_NAME_RE = re.compile(rf"(\d{{20}})-(\d{{20}})-([A-Za-z0-9_-]{{{UUID_TEXT_LENGTH}}})\.log")


def partition_dir_name(tip: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>``."""
    return f"{tip.topic}-{tip.partition}-{tip.topic_id}"


def parse_partition_dir_name(name: str) -> TopicIdPartition | None:
    """The partition a directory name denotes, or None when the name is not one of ours.

    The topic id is the last 22 characters (it may itself contain '-'), the partition the
    digits before it; the topic (which may contain '-') is the rest.
    """
    if len(name) <= UUID_TEXT_LENGTH + 1 or name[-UUID_TEXT_LENGTH - 1] != "-":
        return None
    head, topic_id = name[:-UUID_TEXT_LENGTH - 1], name[-UUID_TEXT_LENGTH:]
    topic, sep, text = head.rpartition("-")
    partition = partition_from_text(text) if sep else None
    if partition is None:
        return None
    try:
        return TopicIdPartition(topic_id, topic, partition)
    except ValueError:
        return None


def segment_file_prefix(metadata: RemoteLogSegmentMetadata) -> str:
    """``<20-digit startOffset>-<segment uuid>``: the common stem of a segment's objects."""
    return f"{filename_prefix_from_offset(metadata.start_offset)}-{metadata.segment_id}"


def metadata_object_name(metadata: RemoteLogSegmentMetadata) -> str:
    """The name (inside ``_metadata/``) of a segment's metadata object."""
    return segment_object_name(metadata, METADATA_SUFFIX)


def is_metadata_object_name(name: str) -> bool:
    return _METADATA_NAME_RE.fullmatch(name) is not None


def segment_object_name(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    """``<20-digit startOffset>-<segment uuid><suffix>``: the name of one of a segment's
    objects (``suffix``: SEGMENT_SUFFIX or an ``IndexType.suffix``)."""
    return segment_file_prefix(metadata) + suffix


def segment_object_key(metadata: RemoteLogSegmentMetadata, suffix: str) -> str:
    """``<topic>-<partition>-<topicId>/<20-digit startOffset>-<uuid><suffix>``."""
    tip = metadata.topic_id_partition
    return f"{partition_dir_name(tip)}/{segment_object_name(metadata, suffix)}"


def manifest_key(tip: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>/_manifest.json``."""
    return f"{partition_dir_name(tip)}/{MANIFEST_NAME}"


def metadata_dir_key(tip: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>/_metadata``."""
    return f"{partition_dir_name(tip)}/{METADATA_DIR}"


def metadata_object_key(metadata: RemoteLogSegmentMetadata) -> str:
    """``<topic>-<partition>-<topicId>/_metadata/<20-digit startOffset>-<uuid>.json``."""
    return f"{metadata_dir_key(metadata.topic_id_partition)}/{metadata_object_name(metadata)}"


def tail_manifest_key(tip: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>/_tail.json``: the partition's tail manifest."""
    return f"{partition_dir_name(tip)}/{TAIL_MANIFEST_NAME}"


def tail_dir_key(tip: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>/_tail``: where the tail objects live."""
    return f"{partition_dir_name(tip)}/{TAIL_DIR}"


def tail_object_name(first_offset: int, end_offset: int, object_id: str) -> str:
    """``<20-digit first offset>-<20-digit end offset (exclusive)>-<uuid>.log``: a tail
    object (whole batches of offsets ``[first_offset, end_offset)``)."""
    return (f"{filename_prefix_from_offset(first_offset)}-"
            f"{filename_prefix_from_offset(end_offset)}-{object_id}{SEGMENT_SUFFIX}")


def is_tail_object_name(name: str) -> bool:
    return _TAIL_NAME_RE.fullmatch(name) is not None


def tail_object_key(tip: TopicIdPartition, name: str) -> str:
    """``<topic>-<partition>-<topicId>/_tail/<name>``."""
    return f"{tail_dir_key(tip)}/{name}"


# -- backfill (Spark's df.write.format("tierlog")): staging, job records, ownership ----------

#: A job's staging area at the tier's root (so a new topic's partition directories appear only
#: when the job commits): ``_staging/<job id>/<partition dir>/<task attempt>/<chunk objects>``.
STAGING_DIR = "_staging"
#: Which log owns (tiers) a partition: written when a LogManager attaches it.
OWNER_NAME = "_owner.json"
#: Job commit records and stream progress, at the tier's root (not a partition directory).
JOBS_DIR = "_jobs"
STREAMS_DIR = "_streams"
#: The topics' Iceberg tables (tierlog.remote.table), at the tier's root.
TABLES_DIR = "_tables"


def staging_dir_key(job_id: str | None = None) -> str:
    """``_staging[/<job id>]``."""
    return STAGING_DIR if job_id is None else f"{STAGING_DIR}/{job_id}"


def staged_chunk_key(tip: TopicIdPartition, job_id: str, attempt: str, chunk: int,
                     suffix: str) -> str:
    """``_staging/<job id>/<partition dir>/<task attempt>/<6-digit chunk index><suffix>``: one
    staged segment chunk's object (provisional base offset 0; ``.log`` or an index's)."""
    return f"{staging_dir_key(job_id)}/{partition_dir_name(tip)}/{attempt}/{chunk:06d}{suffix}"


def owner_key(tip: TopicIdPartition) -> str:
    """``<topic>-<partition>-<topicId>/_owner.json``."""
    return f"{partition_dir_name(tip)}/{OWNER_NAME}"


def job_record_key(job_id: str) -> str:
    """``_jobs/<job id>.json``: a backfill job's commit record while it commits."""
    return f"{JOBS_DIR}/{job_id}.json"


def job_generation_key() -> str:
    """``_jobs/_generation.json``: the backfill commits' generation counter (which jobs a
    reader may see: tierlog.remote.ops.backfill_visibility)."""
    return f"{JOBS_DIR}/_generation.json"


def stream_record_key(stream_id: str) -> str:
    """``_streams/<stream id>.json``: the last micro-batch a streaming write committed."""
    return f"{STREAMS_DIR}/{stream_id}.json"


def table_key(topic: str, topic_id: str) -> str:
    """``_tables/<topic>-<topicId>``: the Iceberg table of one incarnation of a topic."""
    return f"{TABLES_DIR}/{topic}-{topic_id}"
