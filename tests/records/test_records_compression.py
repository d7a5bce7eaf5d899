"""Codec ids and names, and each codec's framing checked against independent implementations.

pyarrow (C++ libsnappy/liblz4/libzstd/zlib), python-lz4, zstandard and the stdlib gzip/zlib
read what tierlog writes and write what tierlog reads.
"""

from __future__ import annotations

import gzip
import os
import random
import struct
import zlib

import lz4.block
import lz4.frame
import pyarrow as pa
import pytest
import zstandard

from tierlog.errors import CorruptRecordError, UnsupportedCompressionError
from tierlog.records.compression import (
    CODEC_NAMES,
    GZIP,
    LZ4,
    NONE,
    SNAPPY,
    ZSTD,
    codec_id,
    codec_name,
    compress,
    decompress,
)

CODECS = [NONE, GZIP, SNAPPY, LZ4, ZSTD]
SIZES = [0, 1, 1000, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1, 64 * 1024, 64 * 1024 + 1, 200_000]
XERIAL_HEADER = bytes.fromhex("82534e415050590000000001 00000001".replace(" ", ""))


def compressible(size: int, seed: int = 7) -> bytes:
    rng = random.Random(seed)
    words = [bytes(rng.choice(b"abcdefghij") for _ in range(rng.randint(2, 8))) for _ in range(200)]
    out = bytearray()
    while len(out) < size:
        out += rng.choice(words) + b" "
    return bytes(out[:size])


def mixed(size: int) -> bytes:
    """Compressible text with incompressible stretches, so both block kinds appear."""
    half = size // 2
    return compressible(half) + os.urandom(size - half)


def xerial_chunks(data: bytes) -> list[bytes]:
    assert data[:16] == XERIAL_HEADER
    chunks, pos = [], 16
    while pos < len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        chunks.append(data[pos + 4:pos + 4 + n])
        pos += 4 + n
    assert pos == len(data)
    return chunks


def lz4_blocks(frame: bytes) -> list[tuple[bytes, bool]]:
    """(block bytes, stored uncompressed) for a Kafka-style frame (no checksums)."""
    blocks, pos = [], 7
    while True:
        (word,) = struct.unpack_from("<I", frame, pos)
        pos += 4
        if word == 0:
            break
        n = word & 0x7FFFFFFF
        blocks.append((frame[pos:pos + n], bool(word & 0x80000000)))
        pos += n
    assert pos == len(frame), "no content checksum after the end mark"
    return blocks


# --- ids and names ----------------------------------------------------------------------


def test_codec_ids_match_kafka_attribute_values() -> None:
    assert (NONE, GZIP, SNAPPY, LZ4, ZSTD) == (0, 1, 2, 3, 4)
    assert CODEC_NAMES == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize(
    ("given", "expected"),
    [("none", 0), ("NONE", 0), ("uncompressed", 0), ("Uncompressed", 0), ("gzip", 1),
     ("GZip", 1), ("snappy", 2), ("LZ4", 3), ("zstd", 4), ("ZSTD", 4), (0, 0), (4, 4)],
)
def test_codec_id_accepts_names_and_ids(given: int | str, expected: int) -> None:
    assert codec_id(given) == expected


@pytest.mark.parametrize("bad", ["brotli", "", "lz4hc", 5, -1, 7, True, 2.0])
def test_codec_id_rejects_unknown_values_naming_them(bad: object) -> None:
    with pytest.raises(UnsupportedCompressionError, match=repr(bad).replace(".", r"\.")):
        codec_id(bad)  # type: ignore[arg-type]


def test_codec_name_round_trips() -> None:
    for name, cid in CODEC_NAMES.items():
        assert codec_name(cid) == name
    with pytest.raises(UnsupportedCompressionError):
        codec_name(6)


def test_unknown_codec_in_compress_and_decompress() -> None:
    with pytest.raises(UnsupportedCompressionError):
        compress(5, b"x")
    with pytest.raises(UnsupportedCompressionError):
        decompress("brotli", b"x")  # type: ignore[arg-type]


# --- round trips ------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("size", SIZES)
def test_round_trip(codec: int, size: int) -> None:
    data = mixed(size)
    packed = compress(codec, data)
    assert isinstance(packed, bytes)
    assert decompress(codec, packed) == data


@pytest.mark.parametrize("codec", CODECS)
def test_accepts_any_buffer(codec: int) -> None:
    data = compressible(50_000)
    backing = bytearray(b"xx" + data + b"yy")
    view = memoryview(backing)[2:-2]
    packed = compress(codec, view)
    assert decompress(codec, bytearray(packed)) == data
    assert decompress(codec, memoryview(b"--" + packed)[2:]) == data


@pytest.mark.parametrize("codec", [GZIP, LZ4, ZSTD])
def test_levels_change_output_but_not_content(codec: int) -> None:
    data = compressible(300_000)
    low, high = {GZIP: (1, 9), LZ4: (1, 12), ZSTD: (1, 19)}[codec]
    fast, small = compress(codec, data, low), compress(codec, data, high)
    assert fast != small
    assert len(small) < len(fast)
    assert decompress(codec, fast) == decompress(codec, small) == data


def test_compression_shrinks_compressible_data() -> None:
    data = compressible(100_000)
    for codec in (GZIP, SNAPPY, LZ4, ZSTD):
        assert len(compress(codec, data)) < len(data) // 2, codec_name(codec)


# --- gzip ---------------------------------------------------------------------------------


def test_gzip_is_one_member_readable_by_zlib() -> None:
    data = mixed(100_000)
    packed = compress(GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"  # magic, deflate
    inflater = zlib.decompressobj(wbits=31)
    assert inflater.decompress(packed) == data
    assert inflater.eof and inflater.unused_data == b""
    assert gzip.decompress(packed) == data


def test_gzip_reader_accepts_stdlib_gzip_and_concatenated_members() -> None:
    assert decompress(GZIP, gzip.compress(b"abc", mtime=0)) == b"abc"
    assert decompress(GZIP, gzip.compress(b"abc") + gzip.compress(b"def")) == b"abcdef"


# --- snappy (xerial framing) --------------------------------------------------------------


def test_snappy_writes_xerial_stream_of_32k_raw_blocks() -> None:
    data = mixed(100_000)
    packed = compress(SNAPPY, data)
    assert packed[:16] == XERIAL_HEADER
    assert packed[:8] == b"\x82SNAPPY\x00"
    chunks = xerial_chunks(packed)
    assert len(chunks) == 4  # 32768 * 3 + 1696
    pieces = [data[i:i + 32768] for i in range(0, len(data), 32768)]
    for chunk, piece in zip(chunks, pieces, strict=True):
        # every chunk is a bare raw snappy block, decoded here by libsnappy (pyarrow)
        assert pa.decompress(chunk, len(piece), codec="snappy", asbytes=True) == piece


def test_snappy_of_empty_input_is_just_the_header() -> None:
    assert compress(SNAPPY, b"") == XERIAL_HEADER
    assert decompress(SNAPPY, XERIAL_HEADER) == b""


def test_snappy_reader_accepts_a_bare_raw_block_from_libsnappy() -> None:
    data = mixed(70_000)
    raw = pa.compress(data, codec="snappy", asbytes=True)
    assert decompress(SNAPPY, raw) == data


def test_snappy_reader_accepts_xerial_built_from_libsnappy_blocks() -> None:
    data = compressible(90_000)
    parts = [XERIAL_HEADER]
    for i in range(0, len(data), 20_000):  # a writer with another chunk size
        block = pa.compress(data[i:i + 20_000], codec="snappy", asbytes=True)
        parts += [struct.pack(">i", len(block)), block]
    assert decompress(SNAPPY, b"".join(parts)) == data


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p[:18],  # chunk length cut
        lambda p: p[:-1],  # chunk body cut
        lambda p: p[:16] + struct.pack(">i", -5) + p[20:],  # negative chunk length
        lambda p: p[:16] + struct.pack(">i", 1 << 30) + p[20:],  # chunk past the end
        lambda p: p[:20] + b"\xff" * 8 + p[28:],  # garbage inside a chunk
    ],
)
def test_snappy_damaged_xerial_raises_corrupt(damage) -> None:  # type: ignore[no-untyped-def]
    packed = compress(SNAPPY, compressible(40_000))
    with pytest.raises(CorruptRecordError, match="snappy"):
        decompress(SNAPPY, damage(packed))


# --- lz4 (Kafka's frame) ------------------------------------------------------------------


def test_lz4_frame_header_is_kafkas() -> None:
    packed = compress(LZ4, b"hello")
    # magic 0x184D2204 LE, FLG 0x60 (v1, independent blocks, no checksums), BD 0x40 (64 KiB)
    assert packed[:7] == bytes.fromhex("04224d18604082")
    # the header checksum byte matches what liblz4 itself writes for FLG 0x60 / BD 0x40
    reference = lz4.frame.compress(
        b"hello", block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
        content_checksum=False, block_checksum=False, store_size=False,
    )
    assert reference[:7] == packed[:7]
    assert pa.compress(b"hello", codec="lz4", asbytes=True)[:7] == packed[:7]


def test_lz4_blocks_are_64k_independent_and_incompressible_ones_stored_raw() -> None:
    data = compressible(130_000) + os.urandom(70_000)
    packed = compress(LZ4, data)
    blocks = lz4_blocks(packed)
    assert len(blocks) == 4  # ceil(200000 / 65536)
    pieces = [data[i:i + 65536] for i in range(0, len(data), 65536)]
    stored = [raw for _, raw in blocks]
    assert stored[0] is False and stored[-1] is True
    for (block, raw), piece in zip(blocks, pieces, strict=True):
        if raw:
            assert block == piece
        else:  # each block decodes on its own: independent blocks
            assert lz4.block.decompress(block, uncompressed_size=len(piece)) == piece
    assert lz4.frame.decompress(packed) == data
    assert pa.decompress(packed, len(data), codec="lz4", asbytes=True) == data


def test_lz4_of_empty_input_is_header_and_end_mark() -> None:
    assert compress(LZ4, b"") == bytes.fromhex("04224d18604082") + b"\0\0\0\0"
    assert decompress(LZ4, compress(LZ4, b"")) == b""


@pytest.mark.parametrize(
    "options",
    [
        {"block_checksum": True},
        {"content_checksum": True},
        {"block_checksum": True, "content_checksum": True, "store_size": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
    ],
)
def test_lz4_reader_accepts_liblz4_frames_with_checksums(options: dict) -> None:
    data = mixed(150_000)
    frame = lz4.frame.compress(data, block_linked=False, **options)
    assert decompress(LZ4, frame) == data


def test_lz4_reader_verifies_block_checksums() -> None:
    data = compressible(10_000)
    frame = bytearray(lz4.frame.compress(data, block_linked=False, block_checksum=True,
                                         store_size=False))
    frame[-8] ^= 0xFF  # last byte of the single block's checksum
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(LZ4, bytes(frame))


def test_lz4_reader_rejects_dependent_blocks() -> None:
    frame = lz4.frame.compress(compressible(100_000), block_linked=True)
    assert not frame[4] & 0x20
    with pytest.raises(CorruptRecordError, match="dependent blocks"):
        decompress(LZ4, frame)


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x04\x22\x4d",
        b"\x04\x22\x4d\x19\x60\x40\x82\0\0\0\0",  # wrong magic
        b"\x04\x22\x4d\x18\xa0\x40\x82\0\0\0\0",  # version 2
        b"\x04\x22\x4d\x18\x60\x40\x00\0\0\0\0",  # bad header checksum
    ],
)
def test_lz4_reader_rejects_bad_frames(frame: bytes) -> None:
    with pytest.raises(CorruptRecordError, match="lz4"):
        decompress(LZ4, frame)


# --- zstd -----------------------------------------------------------------------------------


def test_zstd_is_a_zstd_frame_readable_by_libzstd() -> None:
    data = mixed(100_000)
    packed = compress(ZSTD, data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    assert zstandard.ZstdDecompressor().decompress(packed, max_output_size=len(data)) == data
    assert pa.decompress(packed, len(data), codec="zstd", asbytes=True) == data


def test_zstd_reader_accepts_streamed_frames_without_content_size() -> None:
    # zstd-jni's ZstdOutputStream (Kafka's writer) streams: no content size in the header
    data = mixed(150_000)
    streamer = zstandard.ZstdCompressor(level=3).compressobj()
    frame = streamer.compress(data) + streamer.flush()
    assert decompress(ZSTD, frame) == data


# --- garbage --------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
@pytest.mark.parametrize("garbage", [b"", b"\x07\x00", b"not compressed at all, just text" * 3])
def test_garbage_raises_corrupt_record_error(codec: int, garbage: bytes) -> None:
    with pytest.raises(CorruptRecordError, match=codec_name(codec)):
        decompress(codec, garbage)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_truncated_compressed_data_raises_corrupt_record_error(codec: int) -> None:
    packed = compress(codec, mixed(100_000))
    with pytest.raises(CorruptRecordError):
        decompress(codec, packed[: len(packed) // 2])
