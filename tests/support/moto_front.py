"""A WSGI front for moto's server that handles one request at a time, and injects the answers
of a real S3 under load that moto never gives (the cluster room's harness, tests/cluster).

moto's server checks a PUT's ``If-Match``/``If-None-Match`` and then stores the object without
a lock, so two conditional PUTs overlapping in its threads can both succeed (issue 24 measured
7 of 25 rounds with 8 MB bodies); real S3 and MinIO evaluate the condition and store
atomically. One request at a time gives moto S3's atomicity.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

StartResponse = Callable[..., Any]

_CONFLICT_409 = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict'
                 b'</Code><Message>A conflicting conditional operation is in progress</Message>'
                 b'</Error>')
_INTERNAL_500 = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InternalError</Code>'
                 b'<Message>We encountered an internal error. Please try again.</Message>'
                 b'</Error>')


@dataclass
class SerializingFront:
    """A WSGI app running moto's app one request at a time, with injected answers to
    conditional PUTs (``If-Match``): ``conflicts`` answer 409 without reaching moto,
    ``lost_answers`` reach moto (the write lands) and answer 500, after calling
    ``after_landing`` (when set; outside the lock, so it may send requests of its own)."""

    app: Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
    conflicts: int = 0
    lost_answers: int = 0
    after_landing: Callable[[], object] | None = None
    conditional_puts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse
                 ) -> Iterable[bytes]:
        with self.lock:
            if environ["REQUEST_METHOD"] == "PUT" and "HTTP_IF_MATCH" in environ:
                self.conditional_puts += 1
                if self.conflicts:
                    self.conflicts -= 1
                    return _answer(start_response, "409 Conflict", _CONFLICT_409)
            if not (self.lost_answers and environ["REQUEST_METHOD"] == "PUT"
                    and "HTTP_IF_MATCH" in environ):
                # The whole answer is produced under the lock: moto stores while it is built.
                return [b"".join(self.app(environ, start_response))]
            self.lost_answers -= 1
            b"".join(self.app(environ, lambda *args: None))
            after_landing = self.after_landing
        if after_landing is not None:
            after_landing()
        return _answer(start_response, "500 Internal Server Error", _INTERNAL_500)

    def reset(self) -> None:
        """Clear every injection."""
        with self.lock:
            self.conflicts = self.lost_answers = 0
            self.after_landing = None


@dataclass(frozen=True)
class SerializedS3:
    """A moto server behind a SerializingFront: its endpoint URL and its front."""

    endpoint: str
    front: SerializingFront


def _answer(start_response: StartResponse, status: str, body: bytes) -> list[bytes]:
    start_response(status, [("Content-Type", "application/xml"),
                            ("Content-Length", str(len(body)))])
    return [body]
