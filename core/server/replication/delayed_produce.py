"""Delayed ``acks=all`` answers (Kafka's produce purgatory, ``DelayedProduce``): a produce
whose records are appended on the leader waits until every in-sync replica holds them (the
high watermark reached each partition's last offset + 1), or the partition's leadership
moved, or the request's ``timeout_ms`` passed (REQUEST_TIMED_OUT for what is still pending).

Waiters are kept by partition, and only a partition's waiters are checked again when its high
watermark moves or its role changes (Kafka's watch keys). Everything runs on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

__all__ = ["AcksCheck", "DelayedProduces"]

TopicPartition = tuple[str, int]
#: Whether an ``acks=all`` append up to a required offset is answered: None while pending,
#: ErrorCode.none once replicated, another code when it can never be (leadership lost, the
#: in-sync set under min.insync.replicas).
AcksCheck = Callable[[TopicPartition, int], ErrorCode | None]


class _Waiter:
    def __init__(self, required: Mapping[TopicPartition, int], done: asyncio.Future[None]
                 ) -> None:
        self.pending = dict(required)
        self.results: dict[TopicPartition, ErrorCode] = {}
        self.done = done

    def check(self, tp: TopicPartition, check: AcksCheck) -> None:
        required = self.pending.get(tp)
        if required is None:
            return
        found = check(tp, required)
        if found is None:
            return
        del self.pending[tp]
        self.results[tp] = found
        if not self.pending and not self.done.done():
            self.done.set_result(None)


class DelayedProduces:
    """The ``acks=all`` produces waiting for their replication, by partition."""

    def __init__(self, check: AcksCheck) -> None:
        self._check = check
        self._by_tp: dict[TopicPartition, set[_Waiter]] = {}

    def __len__(self) -> int:
        return len({w for ws in self._by_tp.values() for w in ws})

    async def wait(self, required: Mapping[TopicPartition, int],
                   timeout_s: float) -> dict[TopicPartition, ErrorCode]:
        """Each partition's answer once every partition of ``required`` (partition -> last
        appended offset + 1) is answered, or REQUEST_TIMED_OUT for those still pending after
        ``timeout_s``."""
        waiter = _Waiter(required, asyncio.get_running_loop().create_future())
        for tp in list(waiter.pending):
            waiter.check(tp, self._check)
        if not waiter.pending:
            return waiter.results
        for tp in waiter.pending:
            self._by_tp.setdefault(tp, set()).add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter.done), timeout_s)
        finally:
            for tp in required:
                waiters = self._by_tp.get(tp)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._by_tp[tp]
        for tp in waiter.pending:
            waiter.results[tp] = ErrorCode.request_timed_out
        return waiter.results

    def poke(self, tp: TopicPartition) -> None:
        """Check ``tp``'s waiters again: its high watermark moved, or its role changed."""
        for waiter in list(self._by_tp.get(tp, ())):
            waiter.check(tp, self._check)
