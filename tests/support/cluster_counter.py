"""A counter in the cluster metadata store, incremented read-modify-replace with a retry on
every conflict: the workload that shows a compare-and-swap loses no update. Run as a module
(``python -m support.cluster_counter <store url> <increments>``) it is one worker process."""

from __future__ import annotations

import sys

from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.store import MetadataStore
from tierlog.errors import MetadataConflictError

#: A worker that loses this many races in a row for one increment gives up (a livelock bug).
MAX_ATTEMPTS = 10_000


def increment(store: MetadataStore, key: str) -> int:
    """Add one to the counter ``key`` (created by the caller); the conflicts lost on the way."""
    for lost in range(MAX_ATTEMPTS):
        current = store.read(key)
        assert current is not None, f"counter {key!r} was never created"
        try:
            store.replace(key, {"count": current.value["count"] + 1}, current)
        except MetadataConflictError:
            continue
        return lost
    raise AssertionError(f"increment of {key!r} lost {MAX_ATTEMPTS} races in a row")


def main(argv: list[str]) -> None:
    url, key, increments = argv[0], argv[1], int(argv[2])
    store = open_metadata_store(url)
    for _ in range(increments):
        increment(store, key)


if __name__ == "__main__":
    main(sys.argv[1:])
