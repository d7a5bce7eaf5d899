"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession.scala keeps them.

A consumer opens a session with a full fetch (session id 0, epoch 0); later fetches name the
session and the next epoch and list only the partitions that changed (added, new offset or
size) and those to forget. The response of an incremental fetch lists only the partitions
with records, an error, or a changed high watermark, last stable offset or log start offset.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from tierlog.common.int_bounds import INT32_MAX
from tierlog.errors import FetchSessionError

#: Epochs of Kafka's FetchMetadata.
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's max.incremental.fetch.session.cache.slots.
DEFAULT_MAX_SESSIONS = 1000

TopicPartition = tuple[str, int]


@dataclass(slots=True)
class PartitionState:
    """What a session knows of one partition: the client's position and limit, and what the
    last response told it (to decide whether an incremental response must include it)."""

    fetch_offset: int
    max_bytes: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass(slots=True)
class FetchSession:
    id: int
    epoch: int
    partitions: OrderedDict[TopicPartition, PartitionState] = field(default_factory=OrderedDict)


def _session_error(code: ErrorCode) -> FetchSessionError:
    return FetchSessionError(int(code), code.name)


@dataclass(slots=True)
class FetchContext:
    """The partitions one fetch reads and how its response is made."""

    partitions: list[tuple[TopicPartition, PartitionState]]
    #: 0 when the fetch is sessionless (or closes its session).
    session_id: int
    #: An incremental fetch answers only the partitions that changed.
    incremental: bool
    session: FetchSession | None = None


class FetchSessionCache:
    """The sessions of one server (bounded: the least recently used goes first)."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS,
                 rng: random.Random | None = None) -> None:
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()
        self._max = max_sessions
        self._rng = rng or random.Random()
        self._fallback = itertools.count(1)

    def __len__(self) -> int:
        return len(self._sessions)

    def _new_id(self) -> int:
        for _ in range(10):
            candidate = self._rng.randint(1, INT32_MAX)
            if candidate not in self._sessions:
                return candidate
        return next(self._fallback)  # pragma: no cover - the id space is not that full

    def context(self, session_id: int, epoch: int,
                wanted: Iterable[tuple[TopicPartition, int, int]],
                forgotten: Iterable[TopicPartition]) -> FetchContext:
        """Resolve one request's session fields; ``wanted`` holds (partition, fetch offset,
        max bytes) of each partition the request lists. FetchSessionError for a session that is
        unknown or an epoch that is not the next one."""
        listed = [(tp, PartitionState(offset, max_bytes)) for tp, offset, max_bytes in wanted]
        if session_id == 0:
            if epoch == FINAL_EPOCH:
                return FetchContext(listed, 0, False)
            if epoch != INITIAL_EPOCH:
                raise _session_error(ErrorCode.invalid_fetch_session_epoch)
            session = FetchSession(self._new_id(), 1, OrderedDict(listed))
            self._sessions[session.id] = session
            while len(self._sessions) > self._max:
                self._sessions.popitem(last=False)
            return FetchContext(list(session.partitions.items()), session.id, False, session)
        if epoch == FINAL_EPOCH:
            self._sessions.pop(session_id, None)
            return FetchContext(listed, 0, False)
        found = self._sessions.get(session_id)
        if found is None:
            raise _session_error(ErrorCode.fetch_session_id_not_found)
        session = found
        if epoch != session.epoch:
            raise _session_error(ErrorCode.invalid_fetch_session_epoch)
        self._sessions.move_to_end(session_id)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        for tp, state in listed:
            known = session.partitions.get(tp)
            if known is None:
                session.partitions[tp] = state
            else:
                known.fetch_offset, known.max_bytes = state.fetch_offset, state.max_bytes
        session.epoch += 1
        return FetchContext(list(session.partitions.items()), session.id, True, session)

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)


def must_answer(state: PartitionState, high_watermark: int, last_stable_offset: int,
                log_start_offset: int, has_records: bool, has_error: bool) -> bool:
    """Whether an incremental response includes a partition (FetchSession.scala's rule),
    updating what the session last told the client."""
    changed = (state.high_watermark != high_watermark
               or state.last_stable_offset != last_stable_offset
               or state.log_start_offset != log_start_offset)
    state.high_watermark = high_watermark
    state.last_stable_offset = last_stable_offset
    state.log_start_offset = log_start_offset
    return has_records or has_error or changed
