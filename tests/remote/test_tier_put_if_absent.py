"""RemoteTier.put_if_absent, the tier's compare-and-swap: an exclusive create of a small object
(os.link of a fsynced temp file on a local directory, a PUT with If-None-Match: * on S3), that
recognises an identical re-PUT as the writer's own. Local and moto's S3 over HTTP."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import fsspec
import pytest
from support.s3 import S3_BUCKET

from tierlog.errors import RemoteStorageError
from tierlog.plugins.s3 import create_remote_storage
from tierlog.remote.tier.object_store import RemoteTier

RACE_ROUNDS = 20


@pytest.fixture(params=["local", "s3"])
def cas_tier(request: pytest.FixtureRequest, tmp_path: Path) -> RemoteTier:
    if request.param == "local":
        return RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    options: dict[str, Any] = request.getfixturevalue("s3_options")
    return create_remote_storage(f"s3://{S3_BUCKET}/cas-{uuid.uuid4().hex[:12]}", options).tier


def test_creates_once_and_never_replaces(cas_tier: RemoteTier) -> None:
    path = cas_tier.path("t", "metadata", "v1.metadata.json")
    assert cas_tier.put_if_absent(b"first", path) is True
    assert cas_tier.put_if_absent(b"second", path) is False
    assert cas_tier.get_bytes(path) == b"first"


def test_an_identical_re_put_is_the_writers_own(cas_tier: RemoteTier) -> None:
    # A retried PUT whose first attempt landed finds its own bytes: that is a success.
    path = cas_tier.path("v1.metadata.json")
    assert cas_tier.put_if_absent(b"same bytes", path) is True
    assert cas_tier.put_if_absent(b"same bytes", path) is True
    assert cas_tier.put_if_absent(b"same bytes plus", path) is False


def _race(tier: RemoteTier, path: str) -> dict[bytes, bool | BaseException]:
    """Two threads released together create ``path`` with different bytes."""
    barrier = threading.Barrier(2)
    results: dict[bytes, bool | BaseException] = {}

    def create(body: bytes) -> None:
        barrier.wait(timeout=10)
        try:
            results[body] = tier.put_if_absent(body, path)
        except RemoteStorageError as e:
            results[body] = e

    threads = [threading.Thread(target=create, args=(body,)) for body in (b"a" * 64, b"b" * 64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_two_threads_racing_on_a_local_directory_exactly_one_wins(tmp_path: Path) -> None:
    tier = RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    for round_ in range(RACE_ROUNDS):
        path = tier.path("race", f"v{round_}.metadata.json")
        results = _race(tier, path)
        winners = [body for body, won in results.items() if won is True]
        assert len(winners) == 1, results
        assert [won for won in results.values() if won is not True] == [False]
        assert tier.get_bytes(path) == winners[0]
    # The temporary files are gone (one LIST shows only the created objects).
    assert sorted(p.name for p in (tmp_path / "tier" / "race").iterdir()) == sorted(
        f"v{r}.metadata.json" for r in range(RACE_ROUNDS))


def test_two_threads_racing_on_s3_never_store_a_losers_bytes(s3_options: dict[str, Any]
                                                              ) -> None:
    # moto checks If-None-Match and stores without a lock, so two PUTs overlapping on the
    # server may both succeed there; real S3 serializes them and answers one 412 (or a 409 to
    # retry). What this proves on moto: at least one writer wins, the object holds a winner's
    # bytes, and a writer told False (or an error) never has its bytes stored.
    tier = create_remote_storage(f"s3://{S3_BUCKET}/race-{uuid.uuid4().hex[:12]}",
                                 s3_options).tier
    for round_ in range(RACE_ROUNDS // 4):
        path = tier.path(f"v{round_}.metadata.json")
        results = _race(tier, path)
        stored = tier.get_bytes(path)
        assert results.get(stored) is True, results
        assert all(won is True or body != stored for body, won in results.items())


def test_a_filesystem_without_exclusive_create_is_refused() -> None:
    tier = RemoteTier(fsspec.filesystem("memory"), f"/cas-{uuid.uuid4().hex[:8]}")
    with pytest.raises(NotImplementedError, match="no exclusive create"):
        tier.put_if_absent(b"x", tier.path("v1.metadata.json"))
    assert not tier.fs.exists(tier.path("v1.metadata.json"))


def test_a_failed_local_create_names_the_object_and_leaves_nothing(tmp_path: Path) -> None:
    tier = RemoteTier(fsspec.filesystem("file"), str(tmp_path / "tier"))
    (tmp_path / "tier").mkdir()
    (tmp_path / "tier" / "metadata").write_bytes(b"a file where a directory should be")
    path = tier.path("metadata", "v1.metadata.json")
    with pytest.raises(RemoteStorageError, match=r"v1\.metadata\.json"):
        tier.put_if_absent(b"x", path)
    assert sorted(p.name for p in (tmp_path / "tier").iterdir()) == ["metadata"]
