"""Planning a read of one partition: offsets and timestamps resolved against the tier's
metadata and indexes, the last stable offset, aborted transactions, and the ReadSplits.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierlog.reader._indexes import OffsetIndexView, TimeIndexView
from tierlog.records.batch import HEADER_SIZE
from tierlog.remote import IndexType, RemoteLogSegmentMetadata, RemoteTier, TopicIdPartition
from tierlog.remote.read.readable import ChainLink
from tierlog.remote.read.split import ISOLATION_LEVELS, READ_COMMITTED, ReadSplit
from tierlog.remote.read.transactions import aborted_txns, chain_end, last_stable_offset
from tierlog.remote.tier.layout import SEGMENT_SUFFIX, segment_object_key, tail_object_key
from tierlog.remote.tier.tail_manifest import TailManifest, TailObject

log = logging.getLogger(__name__)

#: Kafka's sentinel offsets (Spark's ``startingOffsets`` JSON uses them too).
EARLIEST = -2
LATEST = -1
DEFAULT_SPLIT_BYTES = 128 << 20


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """What to read of one partition. ``start``/``end`` are offsets (end exclusive) or
    EARLIEST/LATEST; a ``start_timestamp``/``end_timestamp`` (epoch ms) replaces them with
    the first offset stamped at or after it, as Kafka's offsetsForTimes. ``min_offset``,
    ``max_offset`` (inclusive) and ``min_timestamp`` are row filters on top of that."""

    start: int = EARLIEST
    end: int = LATEST
    start_timestamp: int | None = None
    end_timestamp: int | None = None
    min_offset: int | None = None
    max_offset: int | None = None
    min_timestamp: int | None = None
    isolation_level: str = "read_uncommitted"

    def __post_init__(self) -> None:
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation level must be one of {', '.join(ISOLATION_LEVELS)}, "
                             f"got {self.isolation_level!r}")
        if self.start < EARLIEST:
            raise ValueError(f"starting offset {self.start} is negative (only -2 = earliest "
                             f"and -1 = latest are special)")
        if self.end < LATEST:
            raise ValueError(f"ending offset {self.end} is not an offset or -1 (latest)")


@dataclass(frozen=True, slots=True)
class _Region:
    """Bytes of a segment a split must not be cut inside (a timestamp lookup lands there)."""

    start: int
    end: int

    def overlaps(self, a: int, b: int) -> bool:
        return self.start < b and a < self.end


class PartitionPlanner:
    """Plans the splits of one partition from its segment chain, then its published tail
    (``tail``: the tail manifest, read BEFORE the chain so that the two leave no gap: the
    committed end only grows, and a tail covers from the committed end it saw). Fetches each
    index object it needs once (one GET each). Not thread-safe; cheap to create."""

    def __init__(self, tier: RemoteTier, url: str, storage_options: Mapping[str, Any],
                 tip: TopicIdPartition, chain: list[ChainLink], *, split_bytes: int,
                 batch_rows: int, verify_crc: bool,
                 tail: TailManifest | None = None) -> None:
        self.tier = tier
        self.url = url
        self.storage_options = dict(storage_options)
        self.tip = tip
        self.chain = chain
        self.split_bytes = split_bytes
        self.batch_rows = batch_rows
        self.verify_crc = verify_crc
        self.tail = tail
        self._offset_indexes: dict[str, OffsetIndexView] = {}
        self._time_indexes: dict[str, TimeIndexView] = {}
        self._stable_end: int | None = None

    # -- offsets ------------------------------------------------------------------------

    @property
    def chain_end(self) -> int:
        """One past the last offset of the committed segments."""
        return chain_end(self.chain)

    @property
    def tail_objects(self) -> tuple[TailObject, ...]:
        """The tail objects holding offsets past the committed segments."""
        if self.tail is None:
            return ()
        return tuple(o for o in self.tail.objects if o.end_offset > self.chain_end)

    @property
    def has_data(self) -> bool:
        """Whether the committed segments or the tail hold anything to read."""
        return bool(self.chain or self.tail_objects)

    def reaches_timestamp(self, timestamp: int) -> bool:
        """Whether some record of the segments or the tail is stamped ``timestamp`` or later
        (by their max timestamps)."""
        return (self._first_link_reaching(timestamp, self.chain) is not None
                or _first_object_reaching(timestamp, self.tail_objects) is not None)

    @property
    def earliest(self) -> int:
        tail = self.tail_objects
        if self.chain:
            first = self.chain[0].first_offset
        elif tail:
            first = tail[0].first_offset
        else:
            first = self.tier_end
        if self.tail is not None:  # DeleteRecords/retention the segment manifest lags
            first = min(max(first, self.tail.log_start_offset), self.tier_end)
        return first

    @property
    def tier_end(self) -> int:
        """One past the last offset in the tier: the committed segments' end, or the
        published tail's high watermark beyond it."""
        return max(self.chain_end, self.tail.high_watermark if self.tail else 0)

    def latest(self, isolation_level: str) -> int:
        """The end of what ``isolation_level`` may read: the tier's end, or under
        read_committed its last stable offset."""
        if isolation_level == READ_COMMITTED:
            return self.stable_end()
        return self.tier_end

    def stable_end(self) -> int:
        """The tier's last stable offset (``tierlog.remote.read.transactions``), fetched
        once."""
        if self._stable_end is None:
            self._stable_end = last_stable_offset(self.tier, self.tip, self.chain, self.tail)
        return self._stable_end

    def _resolve_start(self, start: int, latest: int) -> int:
        if start == EARLIEST:
            return self.earliest
        if start == LATEST:
            return latest
        # RemoteTopicReader has checked an explicit start (data loss, past the end) already.
        return min(max(start, self.earliest), latest)

    def _resolve_end(self, end: int, latest: int) -> int:
        return latest if end == LATEST else min(end, latest)

    # -- indexes ------------------------------------------------------------------------

    def offset_index(self, md: RemoteLogSegmentMetadata) -> OffsetIndexView:
        view = self._offset_indexes.get(md.segment_id)
        if view is None:
            path = self.tier.path(segment_object_key(md, IndexType.OFFSET.suffix))
            view = OffsetIndexView(self.tier.get_bytes(path), md.start_offset, path)
            self._offset_indexes[md.segment_id] = view
        return view

    def time_index(self, md: RemoteLogSegmentMetadata) -> TimeIndexView:
        view = self._time_indexes.get(md.segment_id)
        if view is None:
            path = self.tier.path(segment_object_key(md, IndexType.TIMESTAMP.suffix))
            view = TimeIndexView(self.tier.get_bytes(path), md.start_offset, path)
            self._time_indexes[md.segment_id] = view
        return view

    def _first_link_reaching(self, timestamp: int, links: list[ChainLink]) -> int | None:
        """Index of the first link whose segment holds a record stamped ``timestamp`` or
        later (by its max timestamp)."""
        return next((i for i, link in enumerate(links)
                     if link.segment.max_timestamp_ms >= timestamp), None)

    def _timestamp_region(self, link: ChainLink, timestamp: int) -> tuple[int, int | None]:
        """``(first, reaching)``: every record of ``link`` before offset ``first`` is older
        than ``timestamp``; one at or after it appears by offset ``reaching`` (None: unknown,
        the end of the segment)."""
        below, reaching = self.time_index(link.segment).bracket(timestamp)
        first = link.first_offset if below is None else max(link.first_offset, below + 1)
        return first, reaching

    # -- planning -------------------------------------------------------------------------

    def plan(self, request: PartitionRequest) -> list[ReadSplit]:
        """The splits reading ``request``, in offset order (empty when nothing matches)."""
        bounds = self.bounds(request)
        if bounds is None:
            return []
        return self._splits(request, self.tail_objects, *bounds)

    def bounds(self, request: PartitionRequest
               ) -> tuple[int, int, tuple[str, int] | None, tuple[str, int] | None] | None:
        """``(start, end, seek, stop)``: the offsets ``[start, end)`` of ``request`` and, for a
        read starting or ending at a timestamp, the object and timestamp whose batches resolve
        it (the true start or end lies inside ``[start, end)``); None when nothing matches."""
        tail = self.tail_objects
        if not self.chain and not tail:
            return None
        latest = self.latest(request.isolation_level)
        start = self._resolve_start(request.start, latest)
        end = self._resolve_end(request.end, latest)
        seek: tuple[str, int] | None = None
        stop: tuple[str, int] | None = None
        if request.start_timestamp is not None:
            reached = self._start_at_timestamp(request.start_timestamp, tail)
            if reached is None:
                return None
            start, seek = reached
        if request.end_timestamp is not None:
            end, stop = self._end_at_timestamp(request.end_timestamp, tail, end)
        if request.min_offset is not None:
            start = max(start, request.min_offset)
        if request.max_offset is not None:
            end = min(end, request.max_offset + 1)
        if request.min_timestamp is not None:
            first = self._first_offset_at_timestamp(request.min_timestamp, tail)
            if first is None:
                return None
            start = max(start, first)
        if start >= end:
            return None
        return start, end, seek, stop

    def _start_at_timestamp(self, timestamp: int, tail: tuple[TailObject, ...]
                            ) -> tuple[int, tuple[str, int]] | None:
        """``(start, seek)`` of a read starting at ``timestamp``: the first offset that may
        hold it and the object where the batches are searched for it (None: no record is
        stamped that late)."""
        links = self.chain
        i = self._first_link_reaching(timestamp, links)
        if i is not None:
            start, _ = self._timestamp_region(links[i], timestamp)
            return start, (links[i].segment.segment_id, timestamp)
        obj = _first_object_reaching(timestamp, tail)
        if obj is None:
            return None
        return max(obj.first_offset, self.chain_end), (obj.name, timestamp)

    def _end_at_timestamp(self, timestamp: int, tail: tuple[TailObject, ...], end: int
                          ) -> tuple[int, tuple[str, int] | None]:
        """``(end, stop)`` of a read ending at ``timestamp``: ``end`` lowered to past the last
        offset that may be stamped before it, and the object where the batches are searched
        for it (``end`` and None when no record is stamped that late)."""
        links = self.chain
        i = self._first_link_reaching(timestamp, links)
        if i is not None:
            _, reaching = self._timestamp_region(links[i], timestamp)
            end = min(end, links[i].last_offset + 1 if reaching is None else reaching + 1)
            return end, (links[i].segment.segment_id, timestamp)
        if (obj := _first_object_reaching(timestamp, tail)) is not None:
            return min(end, obj.end_offset), (obj.name, timestamp)
        return end, None

    def _first_offset_at_timestamp(self, timestamp: int, tail: tuple[TailObject, ...]
                                   ) -> int | None:
        """Every record before this offset is stamped before ``timestamp`` (None: every
        record is)."""
        links = self.chain
        i = self._first_link_reaching(timestamp, links)
        if i is not None:
            return self._timestamp_region(links[i], timestamp)[0]
        if (obj := _first_object_reaching(timestamp, tail)) is not None:
            return obj.first_offset
        return None

    def _splits(self, request: PartitionRequest, tail: tuple[TailObject, ...], start: int,
                end: int, seek: tuple[str, int] | None, stop: tuple[str, int] | None
                ) -> list[ReadSplit]:
        """The splits of the offsets ``[start, end)``: the remote segments' then the tail
        objects' past the chain."""
        aborted: tuple[tuple[int, int, int], ...] = ()
        if request.isolation_level == READ_COMMITTED:
            aborted = aborted_txns(self.tier, self.chain, start, end, self.tail)
        splits: list[ReadSplit] = []
        for link in self.chain:
            lo, hi = max(start, link.first_offset), min(end, link.last_offset + 1)
            if lo < hi:
                splits += self._link_splits(link, lo, hi, request, aborted, seek, stop)
        for obj in tail:
            lo = max(start, obj.first_offset, self.chain_end)
            hi = min(end, obj.end_offset)
            if lo < hi:
                splits.append(self._tail_split(obj, lo, hi, request, aborted, seek, stop))
        log.debug("%s: %d splits for offsets [%d, %d)", self.tip, len(splits), start, end)
        return splits

    def _link_splits(
        self, link: ChainLink, lo: int, hi: int, request: PartitionRequest,
        aborted: tuple[tuple[int, int, int], ...],
        seek: tuple[str, int] | None, stop: tuple[str, int] | None,
    ) -> list[ReadSplit]:
        md = link.segment
        size = md.segment_size_in_bytes
        regions: dict[str, _Region] = {}
        for name, target in (("seek", seek), ("stop", stop)):
            if target is not None and target[0] == md.segment_id:
                first, reaching = self._timestamp_region(link, target[1])
                index = self.offset_index(md)
                regions[name] = _Region(
                    index.start_position(first),
                    size if reaching is None else index.end_position(reaching + 1, size))
        byte_start, byte_end = 0, size
        if lo > md.start_offset or hi <= md.end_offset or size > self.split_bytes or regions:
            index = self.offset_index(md)
            if lo > md.start_offset:
                byte_start = index.start_position(lo)
            if hi <= md.end_offset:
                byte_end = index.end_position(hi, size)
            cuts = index.split_points(byte_start, byte_end, self.split_bytes,
                                      [(r.start, r.end) for r in regions.values()])
        else:
            cuts = []
        for region in regions.values():  # a timestamp search starts where the index says
            byte_start = min(byte_start, region.start)
        bounds = [byte_start, *cuts, byte_end]
        txns = tuple(t for t in aborted if t[2] >= lo and t[1] < hi)
        log_path = self.tier.path(segment_object_key(md, SEGMENT_SUFFIX))
        # Every bound past 0 is a batch the offset index names: its entry anchors the check
        # of the split's offsets, and the header at the split's end is fetched along.
        anchors = {a: self.offset_index(md).offset_at(a) if a else None for a in bounds[:-1]}
        return [
            ReadSplit(
                url=self.url, storage_options=self.storage_options, topic=self.tip.topic,
                partition=self.tip.partition, log_path=log_path, byte_start=a, byte_end=b,
                start_offset=lo, end_offset=hi, isolation_level=request.isolation_level,
                aborted=txns,
                seek_timestamp=seek[1] if seek and "seek" in regions
                and regions["seek"].overlaps(a, b) else None,
                stop_timestamp=stop[1] if stop and "stop" in regions
                and regions["stop"].overlaps(a, b) else None,
                min_timestamp=request.min_timestamp, batch_rows=self.batch_rows,
                verify_crc=self.verify_crc, segment_first_offset=md.start_offset,
                segment_last_offset=md.end_offset, anchor_offset=anchors[a],
                fetch_end=min(size, b + HEADER_SIZE), object_size=size,
            )
            for a, b in itertools.pairwise(bounds)
        ]

    def _tail_split(
        self, obj: TailObject, lo: int, hi: int, request: PartitionRequest,
        aborted: tuple[tuple[int, int, int], ...],
        seek: tuple[str, int] | None, stop: tuple[str, int] | None,
    ) -> ReadSplit:
        """One split reading a whole tail object (whole batches; offsets outside
        ``[lo, hi)`` are dropped by the split)."""
        return ReadSplit(
            url=self.url, storage_options=self.storage_options, topic=self.tip.topic,
            partition=self.tip.partition,
            log_path=self.tier.path(tail_object_key(self.tip, obj.name)),
            byte_start=0, byte_end=obj.size, start_offset=lo, end_offset=hi,
            isolation_level=request.isolation_level,
            aborted=tuple(t for t in aborted if t[2] >= lo and t[1] < hi),
            seek_timestamp=seek[1] if seek and seek[0] == obj.name else None,
            stop_timestamp=stop[1] if stop and stop[0] == obj.name else None,
            min_timestamp=request.min_timestamp, batch_rows=self.batch_rows,
            verify_crc=self.verify_crc, segment_first_offset=obj.first_offset,
            segment_last_offset=obj.end_offset - 1, anchor_offset=None, fetch_end=obj.size,
            object_size=obj.size,
        )


def _first_object_reaching(timestamp: int, objects: tuple[TailObject, ...]) -> TailObject | None:
    """The first tail object holding a record stamped ``timestamp`` or later."""
    return next((o for o in objects if o.max_timestamp >= timestamp), None)
