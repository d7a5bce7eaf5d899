"""The cluster metadata store (issue 24, "The store"): every change a compare-and-swap, on a
local directory and on S3 (moto over HTTP, behind a front that serializes its request handling,
see conftest.py) through the same test functions: create once, replace only at the expected
version, no lost update under concurrent increments, bad keys and objects named."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from support.cluster_counter import increment
from support.moto_front import SerializedS3, SerializingFront
from support.s3 import S3_BUCKET

from tierlog.cluster.local_store import LocalMetadataStore
from tierlog.cluster.open_store import open_metadata_store
from tierlog.cluster.s3_store import CONFLICT_RETRIES
from tierlog.cluster.store import MAX_OBJECT_BYTES, MetadataStore, Versioned
from tierlog.errors import (
    CorruptRemoteMetadataError,
    InvalidMetadataKeyError,
    InvalidMetadataValueError,
    MetadataConflictError,
    RemoteStorageError,
)

TESTS = Path(__file__).resolve().parents[1]
THREADS = 4
INCREMENTS = 8


def test_reading_a_missing_key_finds_nothing(store: MetadataStore) -> None:
    assert store.read("brokers/1") is None


def test_a_second_create_is_a_conflict_and_keeps_the_first(store: MetadataStore) -> None:
    first = store.create("controller", {"node": 1, "epoch": 1})
    assert first.value == {"node": 1, "epoch": 1}
    with pytest.raises(MetadataConflictError, match=r"'controller'.*exists") as lost:
        store.create("controller", {"node": 2, "epoch": 1})
    assert (lost.value.key, lost.value.expected, lost.value.found) == (
        "controller", None, first.version)
    assert store.read("controller") == first


def test_a_replace_at_a_stale_version_is_a_conflict_and_changes_nothing(
        store: MetadataStore) -> None:
    first = store.create("partitions/orders/0", {"leader": 1, "leaderEpoch": 0})
    second = store.replace("partitions/orders/0", {"leader": 2, "leaderEpoch": 1}, first)
    with pytest.raises(MetadataConflictError, match="'partitions/orders/0'") as lost:
        store.replace("partitions/orders/0", {"leader": 3, "leaderEpoch": 1}, first)
    assert (lost.value.expected, lost.value.found) == (first.version, second.version)
    assert store.read("partitions/orders/0") == second


def test_a_replace_at_the_current_version_makes_a_new_version(store: MetadataStore) -> None:
    first = store.create("brokers/1", {"host": "127.0.0.1", "port": 9092})
    # The same value again is still a new version: a version never comes back (no ABA).
    second = store.replace("brokers/1", {"host": "127.0.0.1", "port": 9092}, first)
    assert second.version != first.version and second.value == first.value
    assert store.read("brokers/1") == second
    third = store.replace("brokers/1", {"host": "127.0.0.1", "port": 9093}, second)
    assert store.read("brokers/1") == third
    with pytest.raises(MetadataConflictError):
        store.replace("brokers/1", {"host": "127.0.0.1", "port": 9094}, first)


def test_listing_a_prefix_finds_the_keys_directly_under_it(store: MetadataStore) -> None:
    assert store.list_keys("brokers") == []  # nothing there yet
    first = store.create("brokers/2", {"n": 1})
    store.create("brokers/10", {"n": 2})
    store.create("brokers/x/deeper", {"n": 3})  # not directly under it
    store.create("controller", {"n": 4})
    store.replace("brokers/2", {"n": 5}, first)  # a replace leaves no other object listed
    assert store.list_keys("brokers") == ["brokers/10", "brokers/2"]
    with pytest.raises(InvalidMetadataKeyError):
        store.list_keys("../brokers")


def test_a_replace_of_a_key_never_created_is_a_conflict(store: MetadataStore) -> None:
    other = store.create("a", {"n": 1})
    with pytest.raises(MetadataConflictError, match="found no object"):
        store.replace("b/c", {"n": 2}, Versioned("b/c", {}, other.version, other.write_id))
    assert store.read("b/c") is None


def test_concurrent_increments_lose_no_update(store: MetadataStore) -> None:
    """Threads read-modify-replace one counter, retrying each lost race. On S3 the requests go
    through the front that serializes moto's request handling (moto checks a condition and then
    stores without a lock; S3 and MinIO do both atomically)."""
    store.create("counter", {"count": 0})
    barrier = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait(timeout=10)
            for _ in range(INCREMENTS):
                increment(store, "counter")
        except Exception as e:  # noqa: BLE001 - reported to the test thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    current = store.read("counter")
    assert current is not None and current.value == {"count": THREADS * INCREMENTS}


def test_processes_and_threads_incrementing_a_local_counter_lose_no_update(
        tmp_path: Path) -> None:
    url = str(tmp_path / "cluster")
    store = open_metadata_store(url)
    store.create("counter", {"count": 0})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS),
                                                        os.environ.get("PYTHONPATH", "")])}
    workers = [subprocess.Popen([sys.executable, "-m", "support.cluster_counter", url, "counter",
                                 str(INCREMENTS * 2)], env=env, stderr=subprocess.PIPE)
               for _ in range(3)]
    threads = [threading.Thread(target=lambda: [increment(store, "counter")
                                                for _ in range(INCREMENTS)])
               for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for worker in workers:
        _, stderr = worker.communicate(timeout=60)
        assert worker.returncode == 0, stderr.decode()
    current = store.read("counter")
    assert current is not None
    assert current.value == {"count": 3 * INCREMENTS * 2 + 2 * INCREMENTS}


@pytest.mark.parametrize("key", ["", "/brokers/1", "../escape", "brokers/../../x", "a//b",
                                 "a/", "a/./b", ".hidden", "brokers/1 2", "a\\b",
                                 "brokers/1.json", "x.lock", "x.tmp/y", "x.partial"])
def test_a_bad_key_is_refused_by_name_and_writes_nothing(store: MetadataStore,
                                                         key: str) -> None:
    with pytest.raises(InvalidMetadataKeyError, match="cluster metadata key") as refused:
        store.create(key, {"n": 1})
    assert repr(key) in str(refused.value)
    with pytest.raises(InvalidMetadataKeyError):
        store.read(key)
    assert store.tier.list_names(store.tier.root) == []


@pytest.mark.parametrize(("value", "problem"), [
    ([1, 2], "must be a JSON object"),
    ({"nodes": {1, 2}}, "not serializable as JSON"),
    ({"blob": "x" * MAX_OBJECT_BYTES}, "would hold"),
])
def test_a_bad_value_is_refused_by_key_and_writes_nothing(store: MetadataStore, value: Any,
                                                          problem: str) -> None:
    with pytest.raises(InvalidMetadataValueError, match=f"'topics/orders'.*{problem}"):
        store.create("topics/orders", value)
    assert store.read("topics/orders") is None


@pytest.mark.parametrize(("stored", "problem"), [
    (b"\x00\x01 not json", "is not JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'{"format":1,"key":"elsewhere","value":{},"writeId":"' + b"0" * 32 + b'"}',
     "holds key 'elsewhere'"),
    (b'{"format":1,"key":"topics/orders","value":{},"writeId":"zz"}', "writeId"),
    (b'{"format":9,"key":"topics/orders","value":{},"writeId":"' + b"0" * 32 + b'"}',
     "format 9"),
])
def test_an_object_that_is_no_envelope_of_its_key_is_named(store: MetadataStore, stored: bytes,
                                                           problem: str) -> None:
    path = store.path("topics/orders")
    store.tier.put_bytes(stored, path)  # damage from outside the store
    with pytest.raises(CorruptRemoteMetadataError, match=f"'topics/orders'.*{problem}"):
        store.read("topics/orders")
    with pytest.raises(CorruptRemoteMetadataError, match="'topics/orders'"):
        store.create("topics/orders", {"partitions": 1})  # it exists, and is damaged
    assert store.tier.get_bytes(path) == stored


def test_a_409_is_sent_again_and_a_409_every_time_is_a_conflict(
        front: SerializingFront, s3_store: MetadataStore) -> None:
    store = s3_store
    first = store.create("controller", {"epoch": 1})
    front.conflicts = 1
    second = store.replace("controller", {"epoch": 2}, first)
    assert store.read("controller") == second and front.conflicts == 0
    front.conflicts = CONFLICT_RETRIES + 1
    before = front.conditional_puts
    with pytest.raises(MetadataConflictError, match="409"):
        store.replace("controller", {"epoch": 3}, second)
    assert front.conditional_puts - before == CONFLICT_RETRIES + 1
    assert store.read("controller") == second


def test_a_replace_that_landed_but_lost_its_answer_is_recognised_as_its_own(
        front: SerializingFront, s3_store: MetadataStore) -> None:
    # The first PUT stores the object and answers 500; botocore sends it again, and the store
    # answers 412 (the ETag moved): the write id read back is this writer's, so it succeeded.
    store = s3_store
    first = store.create("controller", {"epoch": 1})
    front.lost_answers = 1
    second = store.replace("controller", {"epoch": 2}, first)
    assert front.lost_answers == 0
    assert store.read("controller") == second


def test_a_local_store_is_opened_on_a_new_directory(tmp_path: Path) -> None:
    store = open_metadata_store((tmp_path / "new" / "cluster").as_uri())
    assert isinstance(store, LocalMetadataStore)
    assert store.create("brokers/1", {"id": 1}).value == {"id": 1}
    assert (tmp_path / "new" / "cluster" / "brokers" / "1.json").is_file()


def test_a_resent_replace_overtaken_by_another_writer_is_an_unknown_outcome(
        front: SerializingFront, s3_store: MetadataStore) -> None:
    # The first PUT lands and, before its 500 answer, another writer replaces the object; the
    # resent PUT gets 412 and the object holds the other's write: this replace did land, or
    # not, and only a re-read can tell the caller what holds now; never a plain conflict.
    store = s3_store
    first = store.create("controller", {"epoch": 1})
    overtaken: list[Versioned] = []

    def other_writer() -> None:
        landed = store.read("controller")
        assert landed is not None and landed.value == {"epoch": 2}
        overtaken.append(store.replace("controller", {"epoch": 3}, landed))

    front.lost_answers, front.after_landing = 1, other_writer
    with pytest.raises(RemoteStorageError, match=r"'controller'.*outcome unknown"):
        store.replace("controller", {"epoch": 2}, first)
    assert store.read("controller") == overtaken[0]


def test_s3_requests_carry_the_tiers_additional_arguments(
        serialized_s3: SerializedS3, s3_options: dict[str, str]) -> None:
    options = {**s3_options, "endpoint_url": serialized_s3.endpoint,
               "s3_additional_kwargs": {"StorageClass": "STANDARD_IA"}}
    store = open_metadata_store(f"s3://{S3_BUCKET}/cluster-{uuid.uuid4().hex[:12]}", options)
    first = store.create("brokers/1", {"id": 1})
    store.replace("brokers/1", {"id": 1, "rack": "a"}, first)
    path = store.path("brokers/1")
    store.tier.fs.invalidate_cache(path)
    assert store.tier.fs.info(path)["StorageClass"] == "STANDARD_IA"
