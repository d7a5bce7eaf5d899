"""OffsetMap: the cleaner's digest -> latest offset table (Kafka's SkimpyOffsetMap)."""

from __future__ import annotations

import hashlib
import random
import sys

import pytest

from tierlog.cleaner.offset_map import INITIAL_SLOTS, OffsetMap

# Two different 128-byte messages with the same MD5 (Wang and Yu, 2004).
MD5_COLLISION = (
    bytes.fromhex(
        "d131dd02c5e6eec4693d9a0698aff95c2fcab58712467eab4004583eb8fb7f89"
        "55ad340609f4b30283e488832571415a085125e8f7cdc99fd91dbdf280373c5b"
        "d8823e3156348f5bae6dacd436c919c6dd53e2b487da03fd02396306d248cda0"
        "e99f33420f577ee8ce54b67080a80d1ec69821bcb6a8839396f9652b6ff72a70"
    ),
    bytes.fromhex(
        "d131dd02c5e6eec4693d9a0698aff95c2fcab50712467eab4004583eb8fb7f89"
        "55ad340609f4b30283e4888325f1415a085125e8f7cdc99fd91dbd7280373c5b"
        "d8823e3156348f5bae6dacd436c919c6dd53e23487da03fd02396306d248cda0"
        "e99f33420f577ee8ce54b67080280d1ec69821bcb6a8839396f965ab6ff72a70"
    ),
)


def test_put_get_overwrite_and_latest_offset():
    offsets = OffsetMap(1 << 20)
    assert offsets.get(b"a") == -1 and offsets.latest_offset == -1
    offsets.put(b"a", 5)
    offsets.put(bytearray(b"b"), 7)
    offsets.put(memoryview(b"a"), 9)
    assert (offsets.get(b"a"), offsets.get(b"b"), offsets.get(b"c")) == (9, 7, -1)
    assert len(offsets) == 2 and offsets.latest_offset == 9
    offsets.update_latest_offset(20)
    assert offsets.latest_offset == 20
    offsets.clear()
    assert len(offsets) == 0 and offsets.get(b"a") == -1 and offsets.latest_offset == -1


def test_grows_by_rehashing_and_keeps_every_entry_within_the_load_factor():
    offsets = OffsetMap(1 << 24)
    rng = random.Random(5)
    model = {}
    for offset in range(30_000):
        key = b"key-%d" % rng.randrange(12_000)
        offsets.put(key, offset)
        model[key] = offset
        assert len(offsets) <= offsets.slots * 0.9
    assert offsets.slots > INITIAL_SLOTS
    assert all(offsets.get(key) == offset for key, offset in model.items())
    assert len(offsets) == len(model)
    assert offsets.bytes_per_entry == 24
    assert offsets.memory_bytes == offsets.slots * 24


def test_fills_up_at_the_memory_cap_times_the_load_factor():
    offsets = OffsetMap(24 * 100)  # 100 slots, 90 keys
    assert (offsets.max_slots, offsets.max_entries) == (100, 90)
    for i in range(90):
        assert not offsets.is_full
        offsets.put(b"k%d" % i, i)
    assert offsets.is_full and offsets.slots == 100
    offsets.put(b"k3", 1000)  # an existing key may still move on
    assert offsets.get(b"k3") == 1000
    with pytest.raises(ValueError, match="full"):
        offsets.put(b"new", 1001)
    assert all(offsets.get(b"k%d" % i) == (1000 if i == 3 else i) for i in range(90))
    assert offsets.utilization == 0.9


def test_equal_digests_are_the_same_key_as_in_kafka():
    a, b = MD5_COLLISION
    assert a != b and hashlib.md5(a).digest() == hashlib.md5(b).digest()
    md5 = OffsetMap(1 << 16)
    md5.put(a, 1)
    md5.put(b, 2)
    assert len(md5) == 1 and md5.get(a) == 2  # a's record would look superseded
    sha = OffsetMap(1 << 16, hash_algorithm="sha256")
    sha.put(a, 1)
    sha.put(b, 2)
    assert (sha.get(a), sha.get(b), sha.bytes_per_entry) == (1, 2, 40)


@pytest.mark.parametrize("kwargs, message", [
    ({"max_memory": 10}, "cannot hold one"),
    ({"load_factor": 0}, "load factor"),
    ({"hash_algorithm": "no-such-hash"}, "unsupported"),
    ({"hash_algorithm": "shake_128"}, "8 or more needed"),
])
def test_rejects_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        OffsetMap(**kwargs)


def test_uses_a_fraction_of_a_dicts_memory():
    keys = [b"user-%08d" % i for i in range(50_000)]
    offsets = OffsetMap()
    for offset, key in enumerate(keys):
        offsets.put(key, offset)
    plain = dict(zip(keys, range(len(keys)), strict=True))
    dict_bytes = sys.getsizeof(plain) + sum(sys.getsizeof(k) for k in keys)
    assert offsets.memory_bytes / len(offsets) < 40
    assert offsets.memory_bytes * 3 < dict_bytes
