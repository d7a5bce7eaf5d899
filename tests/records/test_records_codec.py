"""Tests of the per-record codec: the C accelerator and the pure-Python codec, side by side.

Both must write the bytes kafka-python writes, decode what it writes, and agree on hostile input.
"""

from __future__ import annotations

import array
import importlib
import mmap
import os
import random
import re
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import pytest
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from tierlog.errors import CorruptRecordError
from tierlog.records import _codec, _codec_py
from tierlog.records.record import Record

HEADER_SIZE = 61  # kafka-python's batches: the records section starts after the v2 header
BASE_TS = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1


def _c_module() -> ModuleType:
    # Imported here so that a missing accelerator fails the C cases instead of skipping them.
    return importlib.import_module("tierlog.records._speedups")


@pytest.fixture(params=["c", "python"])
def codec(request: pytest.FixtureRequest) -> ModuleType:
    return _c_module() if request.param == "c" else _codec_py


def both() -> list[ModuleType]:
    return [_c_module(), _codec_py]


# --- helpers: an independent writer for hand-made (and broken) records ------------------


def zz(value: int) -> bytes:
    """Zigzag varint of any length (no range check, so it can write over-long ones)."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw > 0x7F:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def field(data: bytes | None) -> bytes:
    return zz(-1) if data is None else zz(len(data)) + data


def framed(body: bytes) -> bytes:
    return zz(len(body)) + body


def raw_record(
    ts_delta: int = 0,
    offset_delta: int = 0,
    key: bytes | None = b"k",
    value: bytes | None = b"v",
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    length_adjust: int = 0,
) -> bytes:
    """One record as Kafka frames it; ``length_adjust`` corrupts its length field."""
    body = (
        b"\x00" + zz(ts_delta) + zz(offset_delta) + field(key) + field(value) + zz(len(headers))
        + b"".join(field(k) + field(v) for k, v in headers)
    )
    return zz(len(body) + length_adjust) + body


def decode(module: ModuleType, data: object, count: int, position: int = 0, end: int | None = None,
           base_offset: int = 0, base_timestamp: int = BASE_TS) -> list[Record]:
    if end is None:
        end = len(data)  # type: ignore[arg-type]
    return module.decode_records(data, position, end, count, base_offset, base_timestamp)


def random_records(rng: random.Random, n: int) -> list[Record]:
    def blob() -> bytes | None:
        kind = rng.random()
        if kind < 0.15:
            return None
        if kind < 0.25:
            return b""
        if kind < 0.3:
            return rng.randbytes(rng.choice([127, 128, 8191, 8192, 20_000, 70_000]))
        return rng.randbytes(rng.randrange(1, 40))

    header_keys = ["", "h", "trace-id", "é", "ключ", "🔑 key", "a" * 200]
    records = []
    for _ in range(n):
        timestamp = rng.choice([
            None, BASE_TS, BASE_TS + rng.randrange(-64, 64), BASE_TS + rng.randrange(-10**6, 10**6),
            BASE_TS - 2**40, BASE_TS + 2**50, 0, -1,
        ])
        headers = [
            (rng.choice(header_keys), rng.choice([None, b"", rng.randbytes(rng.randrange(1, 30))]))
            for _ in range(rng.choice([0, 0, 0, 1, 2, 5]))
        ]
        records.append(Record(key=blob(), value=blob(), headers=headers, timestamp=timestamp))
    return records


def expected(records: Sequence[Record], base_offset: int, now_ms: int) -> list[Record]:
    return [
        Record(r.key, r.value, tuple(r.headers),
               now_ms if r.timestamp is None else r.timestamp, base_offset + i)
        for i, r in enumerate(records)
    ]


def kafka_python_section(records: Sequence[Record]) -> tuple[bytes, int, int]:
    """(records section, first timestamp, max timestamp) as kafka-python's builder writes them."""
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i, r in enumerate(records):
        assert builder.append(i, r.timestamp, r.key, r.value, list(r.headers)) is not None
    batch = bytes(builder.build())
    parsed = DefaultRecordBatch(batch)
    return batch[HEADER_SIZE:], parsed.first_timestamp, parsed.max_timestamp


# --- selection of the implementation ---------------------------------------------------


def test_accelerator_is_built_and_chosen_unless_disabled() -> None:
    if os.environ.get(_codec.PURE_PYTHON_ENV) == "1":
        assert _codec.ACCELERATED is False
        assert _codec.decode_records is _codec_py.decode_records
    else:
        assert _codec.ACCELERATED is True
        assert _codec.decode_records is _c_module().decode_records
        assert _codec.encode_records is _c_module().encode_records


def test_pure_python_env_var_selects_python_codec(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_codec.PURE_PYTHON_ENV, "1")
    try:
        reloaded = importlib.reload(_codec)
        assert reloaded.ACCELERATED is False
        assert reloaded.decode_records is _codec_py.decode_records
        assert reloaded.encode_records is _codec_py.encode_records
    finally:
        monkeypatch.undo()  # restore the environment, then the module chosen under it
        importlib.reload(_codec)


# --- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_round_trip_identical_in_c_and_python(seed: int) -> None:
    rng = random.Random(seed)
    records = random_records(rng, rng.randrange(1, 60))
    base_ts = rng.choice([BASE_TS, 0, -(2**50), 2**62])
    now_ms = BASE_TS + 5
    base_offset = rng.choice([0, 17, 2**40, INT64_MAX - 100])
    c, py = both()
    c_bytes, c_max = c.encode_records(records, base_ts, now_ms)
    py_bytes, py_max = py.encode_records(records, base_ts, now_ms)
    assert c_bytes == py_bytes
    assert c_max == py_max == max(now_ms if r.timestamp is None else r.timestamp for r in records)
    want = expected(records, base_offset, now_ms)
    # Decoding yields absolute timestamps: base_ts + delta.
    for module in (c, py):
        got = decode(module, c_bytes, len(records), base_offset=base_offset, base_timestamp=base_ts)
        assert got == want
        assert all(type(r.headers) is tuple for r in got)
        assert all(type(r.key) in (bytes, type(None)) for r in got)


def test_decode_values_are_exact(codec: ModuleType) -> None:
    records = [
        Record(key=None, value=None, timestamp=BASE_TS),
        Record(key=b"", value=b"", headers=[("é", None), ("", b"")], timestamp=BASE_TS - 1),
        Record(key=b"k" * 300, value=b"v" * 70_000, headers=[("h", b"x")],
               timestamp=BASE_TS + 2**40),
    ]
    section, max_ts = codec.encode_records(records, BASE_TS, 0)
    assert max_ts == BASE_TS + 2**40
    got = decode(codec, section, 3, base_offset=1000)
    assert [r.offset for r in got] == [1000, 1001, 1002]
    assert [r.timestamp for r in got] == [BASE_TS, BASE_TS - 1, BASE_TS + 2**40]
    assert got[0].key is None and got[0].value is None and got[0].headers == ()
    assert got[1].key == b"" and got[1].value == b"" and got[1].headers == (("é", None), ("", b""))
    assert got[2].value == b"v" * 70_000


def test_decode_large_and_negative_deltas_agree(codec: ModuleType) -> None:
    section = (
        raw_record(ts_delta=-(2**62), offset_delta=2**31 - 1)
        + raw_record(ts_delta=2**63 - 1, offset_delta=-(2**31))
        + raw_record(ts_delta=-(2**63), offset_delta=5)
    )
    got = decode(codec, section, 3, base_offset=INT64_MAX, base_timestamp=INT64_MAX)
    # Sums past int64 stay exact Python ints in both codecs.
    assert [r.offset for r in got] == [INT64_MAX + 2**31 - 1, INT64_MAX - 2**31, INT64_MAX + 5]
    assert [r.timestamp for r in got] == [INT64_MAX - 2**62, 2 * INT64_MAX, -1]


def test_encode_empty(codec: ModuleType) -> None:
    assert codec.encode_records([], BASE_TS, BASE_TS) == (b"", -1)
    assert decode(codec, b"", 0) == []


def test_encode_none_timestamp_uses_now_and_counts_for_max(codec: ModuleType) -> None:
    section, max_ts = codec.encode_records([Record(value=b"a", timestamp=BASE_TS),
                                            Record(value=b"b")], BASE_TS, BASE_TS + 99)
    assert max_ts == BASE_TS + 99
    assert [r.timestamp for r in decode(codec, section, 2)] == [BASE_TS, BASE_TS + 99]


def test_encode_accepts_any_bytes_like_and_sequence(codec: ModuleType) -> None:
    wide = memoryview(array.array("H", [1, 2, 3]))
    strided = memoryview(b"abcdef")[::2]

    class Batch(Sequence[Record]):
        def __init__(self, items: list[Record]) -> None:
            self.items = items

        def __getitem__(self, i):  # type: ignore[no-untyped-def]
            return self.items[i]

        def __len__(self) -> int:
            return len(self.items)

    class SubRecord(Record):
        __slots__ = ()

    records = [
        Record(key=bytearray(b"ba"), value=wide, headers=[("h", bytearray(b"hv"))], timestamp=1),
        SubRecord(key=strided, value=memoryview(b"mv"), headers=(["l", strided],), timestamp=2),
    ]
    plain = [Record(b"ba", wide.tobytes(), [("h", b"hv")], 1),
             Record(b"ace", b"mv", [("l", b"ace")], 2)]
    want, _ = codec.encode_records(plain, 0, 0)
    assert codec.encode_records(records, 0, 0)[0] == want
    assert codec.encode_records(tuple(records), 0, 0)[0] == want
    assert codec.encode_records(Batch(records), 0, 0)[0] == want


@pytest.mark.parametrize(
    ("record", "error", "pattern"),
    [
        (Record(value="text"), TypeError, r"record 1: value must be bytes"),
        (Record(key=7), TypeError, r"record 1: key must be bytes"),
        (Record(timestamp=1.5), TypeError, r"record 1: timestamp must be an int"),
        (Record(timestamp="1"), TypeError, r"record 1: timestamp must be an int"),
        (Record(timestamp=2**63), ValueError, r"record 1: timestamp .* does not fit int64"),
        (Record(headers=[(b"k", b"v")]), TypeError, r"record 1: header key must be str"),
        (Record(headers=[("k", "v")]), TypeError, r"record 1: header value must be bytes"),
        (Record(headers=[("k", b"v", b"w")]), TypeError, r"record 1: header .* is not a"),
        (Record(headers=["kv"]), TypeError, r"record 1: header .* is not a"),
        (Record(headers=[("\ud800", b"v")]), UnicodeEncodeError, r"surrogate"),
        (Record(headers=5), TypeError, None),
    ],
)
def test_encode_rejects_bad_fields(
    codec: ModuleType, record: Record, error: type[Exception], pattern: str
) -> None:
    with pytest.raises(error, match=pattern):
        codec.encode_records([Record(value=b"ok"), record], BASE_TS, BASE_TS)


def test_encode_rejects_bad_arguments(codec: ModuleType) -> None:
    with pytest.raises(TypeError, match="base_timestamp must be an int"):
        codec.encode_records([], None, 0)
    with pytest.raises(ValueError, match=r"now_ms .* does not fit int64"):
        codec.encode_records([], 0, 2**64)
    with pytest.raises(ValueError, match="record 0: timestamp delta"):
        codec.encode_records([Record(timestamp=INT64_MAX)], -(2**63), 0)
    with pytest.raises(AttributeError):
        codec.encode_records([object()], 0, 0)
    with pytest.raises(TypeError):
        codec.encode_records(5, 0, 0)


# --- compatibility with kafka-python ---------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
def test_encoded_section_equals_kafka_python(codec: ModuleType, seed: int) -> None:
    rng = random.Random(100 + seed)
    records = random_records(rng, rng.randrange(1, 40))
    for r in records:  # kafka-python stamps a missing timestamp with the wall clock
        r.timestamp = BASE_TS + rng.randrange(-5000, 5000) if r.timestamp is None else r.timestamp
    section, first_ts, max_ts = kafka_python_section(records)
    assert codec.encode_records(records, first_ts, 0) == (section, max_ts)


def test_encoded_section_equals_kafka_python_benchmark_shape(codec: ModuleType) -> None:
    records = [Record(key=b"key-%d" % i, value=bytes(100), timestamp=BASE_TS + i)
               for i in range(10_000)]
    section, first_ts, max_ts = kafka_python_section(records)
    assert codec.encode_records(records, first_ts, 0) == (section, max_ts)


@pytest.mark.parametrize("seed", range(6))
def test_decodes_kafka_python_batches(codec: ModuleType, seed: int) -> None:
    rng = random.Random(200 + seed)
    records = random_records(rng, rng.randrange(1, 40))
    for r in records:
        r.timestamp = BASE_TS if r.timestamp is None else r.timestamp
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 30)
    for i, r in enumerate(records):
        builder.append(i, r.timestamp, r.key, r.value, list(r.headers))
    batch = bytearray(builder.build())
    batch[0:8] = (5000).to_bytes(8, "big")  # a base offset, as a log assigns it
    theirs = list(DefaultRecordBatch(bytes(batch)))
    ours = decode(codec, batch, len(records), position=HEADER_SIZE, base_offset=5000,
                  base_timestamp=DefaultRecordBatch(bytes(batch)).first_timestamp)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in ours] == [
        (r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs
    ]


# --- buffers ----------------------------------------------------------------------------


def _sample() -> tuple[list[Record], bytes]:
    records = [Record(key=b"k%d" % i, value=b"value-%d" % i, headers=[("h", b"%d" % i)],
                      timestamp=BASE_TS + i) for i in range(5)]
    return records, _codec_py.encode_records(records, BASE_TS, 0)[0]


def test_decodes_from_every_buffer_type(codec: ModuleType, tmp_path: Path) -> None:
    records, section = _sample()
    want = expected(records, 0, 0)
    padded = b"junk" + section + b"tail"
    start, stop = 4, 4 + len(section)
    assert decode(codec, section, 5) == want
    assert decode(codec, bytearray(section), 5) == want
    assert decode(codec, padded, 5, position=start, end=stop) == want
    assert decode(codec, bytearray(padded), 5, position=start, end=stop) == want
    assert decode(codec, memoryview(padded)[start:stop], 5) == want
    assert decode(codec, memoryview(padded)[2:], 5, position=2, end=2 + len(section)) == want
    path = tmp_path / "records.bin"
    path.write_bytes(padded)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        assert decode(codec, mm, 5, position=start, end=stop) == want
        with pytest.raises(CorruptRecordError):
            decode(codec, mm, 6, position=start, end=stop)
    # Leaving the with-block closed the mmap: no buffer export outlived either call.
    assert mm.closed


def test_decode_rejects_a_range_outside_the_buffer(codec: ModuleType) -> None:
    _, section = _sample()
    for position, end in [(-1, 5), (6, 5), (0, len(section) + 1)]:
        with pytest.raises(ValueError, match="outside a buffer"):
            decode(codec, section, 5, position=position, end=end)


# --- hostile input ----------------------------------------------------------------------


def outcome(module: ModuleType, data: bytes, count: int, end: int | None = None) -> object:
    """The decoded records, or "corrupt"; any other exception fails the test."""
    try:
        return decode(module, data, count, end=end)
    except CorruptRecordError as exc:
        assert re.match(r"record -?\d+ at byte \d+: ", str(exc)), str(exc)
        return "corrupt"


def test_every_truncation_is_corrupt() -> None:
    _, section = _sample()
    for cut in range(len(section)):
        for module in both():
            # A cut buffer, and a whole buffer with an end before its last byte.
            assert outcome(module, section[:cut], 5) == "corrupt", cut
            assert outcome(module, section, 5, end=cut) == "corrupt", cut


def test_random_byte_flips_never_crash_and_codecs_agree() -> None:
    rng = random.Random(7)
    _, section = _sample()
    c, py = both()
    for _ in range(3000):
        data = bytearray(section)
        for _ in range(rng.choice([1, 1, 2, 3])):
            data[rng.randrange(len(data))] = rng.choice([rng.randrange(256), 0x80, 0xFF, 0x01])
        count = rng.choice([5, 5, 5, 4, 6])
        end = rng.choice([len(data), len(data), rng.randrange(len(data) + 1)])
        assert outcome(c, bytes(data), count, end) == outcome(py, bytes(data), count, end)


HOSTILE = {
    "record length varint too long": b"\x80\x80\x80\x80\x80\x00" + raw_record()[1:],
    "varint past int32": b"\xff\xff\xff\xff\x7f" + raw_record()[1:],
    "timestamp varlong too long": framed(b"\x00" + b"\x80" * 10 + b"\x00" + b"\x00" * 4),
    "varlong past int64": framed(b"\x00" + b"\xff" * 9 + b"\x02" + b"\x00" * 4),
    "varint runs past end": b"\x80",
    "negative record length": zz(-1) + raw_record()[1:],
    "record length past end": raw_record(length_adjust=1),
    "record length short": raw_record(length_adjust=-1),
    "record length long": raw_record(length_adjust=1) + b"\x00",
    "empty record": zz(0),
    "key length below -1": framed(b"\x00\x00\x00" + zz(-2) + zz(-1) + b"\x00"),
    "value length below -1": framed(b"\x00\x00\x00" + zz(-1) + zz(-3) + b"\x00"),
    "key past record end": framed(b"\x00\x00\x00" + zz(40) + b"x" * 30 + zz(-1) + b"\x00")
    + b"x" * 10,
    "value past record end": framed(b"\x00\x00\x00" + zz(-1) + zz(3) + b"xx")[:-1] + b"\x00xx",
    "header value below -1": framed(b"\x00\x00\x00\x01\x01" + zz(1) + field(b"h") + zz(-2)),
    "header key null": framed(b"\x00\x00\x00\x01\x01" + zz(1) + zz(-1) + zz(-1)),
    "header key not utf-8": raw_record(headers=[(b"\xff\xfe", None)]),
    "header key overlong utf-8": raw_record(headers=[(b"\xc0\x80", None)]),
    "header count negative": framed(b"\x00\x00\x00\x01\x01" + zz(-1)),
    "header count huge": framed(b"\x00\x00\x00\x01\x01" + zz(2**31 - 1) + b"\x00\x00\x00"),
    "trailing bytes": raw_record() + b"\x00",
    "one record short": raw_record(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_record_is_corrupt(codec: ModuleType, name: str) -> None:
    count = 2 if name == "one record short" else 1
    with pytest.raises(CorruptRecordError, match=r"^record \d+ at byte \d+: "):
        decode(codec, HOSTILE[name], count)


def test_errors_name_the_record_and_position(codec: ModuleType) -> None:
    good = raw_record()
    with pytest.raises(CorruptRecordError, match=rf"^record 2 at byte {2 * len(good)}: .*differs"):
        decode(codec, good * 2 + raw_record(length_adjust=1) + b"\x00", 3)
    with pytest.raises(CorruptRecordError, match=rf"^record 2 at byte {2 * len(good)}: .*2 of 3"):
        decode(codec, good * 2, 3)
    with pytest.raises(CorruptRecordError, match=rf"^record 2 at byte {2 * len(good)}: 1 bytes"):
        decode(codec, good * 2 + b"\x00", 2)
    with pytest.raises(CorruptRecordError, match=r"^record 1 at byte \d+: .*UTF-8"):
        decode(codec, good + raw_record(headers=[(b"\xff", None)]), 2)


def test_hostile_counts_do_not_allocate(codec: ModuleType) -> None:
    with pytest.raises(CorruptRecordError):
        decode(codec, raw_record() * 3, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="negative record count"):
        decode(codec, raw_record(), -1)


def test_hostile_inputs_agree_across_codecs() -> None:
    c, py = both()
    for data in HOSTILE.values():
        for count in (1, 2):
            for end in (len(data), max(0, len(data) - 1)):
                assert outcome(c, data, count, end) == outcome(py, data, count, end)


def test_encode_with_base_offset_keeps_each_records_offset(codec: ModuleType) -> None:
    """Rewritten batches (compaction) keep their records' offsets: deltas with gaps."""
    records = [Record(key=b"a", value=b"1", timestamp=5, offset=100),
               Record(key=None, value=b"2", timestamp=7, offset=103),
               Record(key=b"c", value=None, headers=[("h", b"x")], timestamp=6, offset=400)]
    data, max_ts = codec.encode_records(records, 5, 0, base_offset=100)
    assert max_ts == 7
    got = codec.decode_records(data, 0, len(data), 3, 100, 5)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (100, b"a", b"1", 5), (103, None, b"2", 7), (400, b"c", None, 6)]
    others = [m for m in both() if m is not codec]
    for other in others:
        assert other.encode_records(records, 5, 0, base_offset=100) == (data, max_ts)
    # Without base_offset the deltas are the indexes, as before.
    plain, _ = codec.encode_records(records, 5, 0)
    assert [r.offset for r in codec.decode_records(plain, 0, len(plain), 3, 100, 5)] == [100, 101, 102]


@pytest.mark.parametrize("offset", [99, 100 + (1 << 31)])
def test_encode_base_offset_out_of_range(codec: ModuleType, offset: int) -> None:
    records = [Record(value=b"v", timestamp=1, offset=offset)]
    with pytest.raises(ValueError, match=r"record 0: offset .* base offset 100"):
        codec.encode_records(records, 1, 0, base_offset=100)
