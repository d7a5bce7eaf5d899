"""Which backfill jobs a reader may see: a job's segments become visible to every reader at
once, or not at all, although its commit replaces one manifest per partition.

A commit (tierlog.remote.ops.backfill_commit) tags each segment it writes with its job id and the
job's *generation* (in the segment's custom metadata, JSON beside the fsspec RSM's), and
keeps this order:

1. write the job record ``_jobs/<job id>.json`` (the plan);
2. raise the tier's generation counter ``_jobs/_generation.json`` to the job's generation;
3. replace the partitions' manifests, one by one (the tagged segments appear);
4. delete the job record: the job is published.

A reader takes a :class:`JobVisibility` BEFORE it reads any manifest: the counter (one GET),
then the names in ``_jobs/`` (one LIST). A tagged segment is visible iff its generation is at
most the counter read and its job had no record listed. Why that is all or nothing: a
generation at most the counter means step 2, hence step 1, came before the reader's GET; so
the record is listed unless step 4, hence every manifest of step 3, came before the LIST,
and every manifest read afterwards holds the job. A later generation hides the job wherever
its tags already are. Segments without a tag (a LogManager's copies, backfills of earlier
versions) are always visible. A crashed commit's job stays hidden until a roll-forward
(the next commit, ``recover``, a restore) completes and publishes it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.errors import CorruptRemoteMetadataError, RemoteResourceNotFoundError
from tierlog.remote.api import RemoteLogSegmentMetadata, dumps, load_json_object
from tierlog.remote.tier.layout import JOBS_DIR, job_generation_key
from tierlog.remote.tier.object_store import RemoteTier

log = logging.getLogger(__name__)

#: The keys of a backfill segment's tag in its custom metadata (a JSON object).
JOB_KEY = "backfillJob"
GENERATION_KEY = "backfillGeneration"
GENERATION_VERSION = 1
#: A job record's name in ``_jobs/``: ``<job id>`` + this.
JOB_RECORD_SUFFIX = ".json"


def job_tag(job_id: str, generation: int) -> bytes:
    """The custom metadata of a segment job ``job_id`` commits at ``generation``."""
    return dumps({JOB_KEY: job_id, GENERATION_KEY: generation}).encode()


def tagged_job(metadata: RemoteLogSegmentMetadata) -> tuple[str, int] | None:
    """``(job id, generation)`` of a segment a backfill committed; None for any other
    segment (no custom metadata, or another writer's)."""
    custom = metadata.custom_metadata
    if not custom or not custom.startswith(b"{"):
        return None
    try:
        data = load_json_object(custom, "custom metadata")
    except CorruptRemoteMetadataError:
        return None
    job, generation = data.get(JOB_KEY), data.get(GENERATION_KEY)
    if not isinstance(job, str) or isinstance(generation, bool) or \
            not isinstance(generation, int):
        return None
    return job, generation


def job_record_names(tier: RemoteTier) -> list[str]:
    """The job ids whose records are in ``_jobs/`` (one LIST): commits not yet published."""
    # Only the generation counter is not a job: a job id is base64url and may itself start
    # with "_" (1 in 64), so no prefix rule may stand in for the counter's exact name.
    generation = job_generation_key().rsplit("/", 1)[-1]
    return [n.removesuffix(JOB_RECORD_SUFFIX) for n in tier.list_names(tier.path(JOBS_DIR))
            if n.endswith(JOB_RECORD_SUFFIX) and n != generation]


def read_generation(tier: RemoteTier) -> int:
    """The tier's backfill generation counter (0 before any tagged commit)."""
    path = tier.path(job_generation_key())
    try:
        data = load_json_object(tier.get_bytes(path), path)
    except RemoteResourceNotFoundError:
        return 0
    generation = data.get("generation")
    if isinstance(generation, bool) or not isinstance(generation, int) or generation < 0:
        raise CorruptRemoteMetadataError(f"{path} holds no generation (a non-negative int): "
                                         f"{generation!r:.60}")
    return generation


def raise_generation(tier: RemoteTier, generation: int) -> None:
    """Make the counter at least ``generation`` (one GET; one PUT when it was lower). One
    commit at a time writes it (as the commits themselves)."""
    if read_generation(tier) < generation:
        tier.put_bytes(dumps({"version": GENERATION_VERSION, "generation": generation})
                       .encode(), tier.path(job_generation_key()))


@dataclass(frozen=True, slots=True)
class JobVisibility:
    """What one reader sees of the backfill jobs: read it (:meth:`read`) before the
    manifests, and filter every partition's committed segments of that read with it."""

    generation: int
    """The counter when read: jobs of a later generation are hidden."""
    unpublished: frozenset[str]
    """Jobs whose record was listed: their commit is not complete."""

    @classmethod
    def read(cls, tier: RemoteTier) -> JobVisibility:
        """The counter (one GET), then the job records (one LIST), in this order."""
        generation = read_generation(tier)
        return cls(generation, frozenset(job_record_names(tier)))

    def visible(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Whether a reader holding this view may read the segment."""
        tag = tagged_job(metadata)
        if tag is None:
            return True
        job, generation = tag
        return generation <= self.generation and job not in self.unpublished

    def filter(self, segments: Iterable[RemoteLogSegmentMetadata]
               ) -> list[RemoteLogSegmentMetadata]:
        """``segments`` without those of unpublished jobs (logged once per call)."""
        kept: list[RemoteLogSegmentMetadata] = []
        hidden: list[RemoteLogSegmentMetadata] = []
        for md in segments:
            (kept if self.visible(md) else hidden).append(md)
        if hidden:
            jobs = sorted({tag[0] for md in hidden if (tag := tagged_job(md)) is not None})
            log.info("%s: %d segments of backfill jobs %s are hidden: their commit is not "
                     "complete", hidden[0].topic_id_partition, len(hidden), ", ".join(jobs))
        return kept
