"""Record batch compression: codec ids and names, each codec framed as Kafka's Java client does.

Every codec runs on cramjam; the snappy and lz4 framing is written here to match Kafka's bytes.
:func:`decompress` (and :func:`decompress_into`, into a buffer kept across batches) is the one
place a batch's records are decompressed, and it is bounded.
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import TYPE_CHECKING

import cramjam

from tierlog.errors import CorruptRecordError, DecompressionLimitError, UnsupportedCompressionError

if TYPE_CHECKING:
    from typing_extensions import Buffer

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

#: Kafka's `compression.type` names, by codec id (also the attribute bits 0-2 of a batch).
CODEC_NAMES = {"none": NONE, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
_NAMES_BY_ID = {value: name for name, value in CODEC_NAMES.items()}
_ALIASES = {**CODEC_NAMES, "uncompressed": NONE}

#: Kafka's default zstd level (KIP-390); cramjam's own default is higher and slower.
ZSTD_DEFAULT_LEVEL = 3
#: Kafka's default lz4 level: at this level Kafka uses the fast compressor, else the HC one.
LZ4_DEFAULT_LEVEL = 9
#: liblz4 frame level of its fast (non-HC) compressor.
LZ4_FAST_LEVEL = 1

# xerial snappy-java stream: 8-byte magic, int32 version 1, int32 compatible version 1,
# then `int32 length | raw snappy block` for each 32 KiB of input.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_SIZE = 32 * 1024
_INT32_BE = struct.Struct(">i")

# LZ4 frame as Kafka writes it: magic, FLG 0x60 (version 1, independent blocks, no
# checksums), BD 0x40 (64 KiB blocks), header checksum = (xxh32(FLG BD) >> 8) & 0xFF.
LZ4_MAGIC = b"\x04\x22\x4d\x18"
LZ4_FLG = 0x60
LZ4_BD = 0x40
LZ4_FRAME_HEADER = LZ4_MAGIC + bytes((LZ4_FLG, LZ4_BD, 0x82))
LZ4_END_MARK = b"\x00\x00\x00\x00"
_LZ4_FLG_VERSION_MASK = 0xC0
_LZ4_FLG_VERSION_1 = 0x40
_LZ4_FLG_INDEPENDENT = 0x20
_LZ4_FLG_BLOCK_CHECKSUM = 0x10
_LZ4_FLG_CONTENT_SIZE = 0x08
_LZ4_UNCOMPRESSED_BLOCK = 0x80000000
_LZ4_BLOCK_MAX_SIZES = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_UINT32_LE = struct.Struct("<I")

#: A batch's records may expand to at most this many times max.message.bytes: far above what
#: real data compresses by (text and JSON: 3-20x), far below what a bomb does (zstd: 30,000x).
DECOMPRESSION_RATIO_LIMIT = 64
#: Kafka's default max.message.bytes; the bound never falls below this many times the ratio,
#: so a small max.message.bytes does not make ordinary batches undecodable.
_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588
#: The bound where no max.message.bytes is at hand (reads, compaction, dump-log): 64 MiB.
DEFAULT_MAX_DECOMPRESSED_BYTES = _DEFAULT_MAX_MESSAGE_BYTES * DECOMPRESSION_RATIO_LIMIT
#: First output buffer of a bounded decompression: a few times the input, at least 64 KiB;
#: it grows by _GROWTH (decompressing again) until the data fits or the bound is reached.
_FIRST_GUESS_RATIO = 8
_FIRST_GUESS_MIN = 64 * 1024
_GROWTH = 4
#: What cramjam reports when the output buffer it writes into is full (Rust's WriteZero).
_OUTPUT_FULL = "failed to write whole buffer"


def codec_id(codec: int | str) -> int:
    """The codec id of an id or a name (any case; "uncompressed" is none)."""
    if isinstance(codec, str):
        found = _ALIASES.get(codec.strip().lower())
        if found is None:
            raise UnsupportedCompressionError(
                f"unknown compression codec {codec!r} (expected one of "
                f"{', '.join(_ALIASES)})"
            )
        return found
    if isinstance(codec, int) and not isinstance(codec, bool) and codec in _NAMES_BY_ID:
        return codec
    raise UnsupportedCompressionError(
        f"unknown compression codec id {codec!r} (Kafka defines 0-4: "
        f"{', '.join(f'{i}={n}' for i, n in _NAMES_BY_ID.items())})"
    )


def codec_name(codec: int) -> str:
    """Kafka's name for a codec id ("none", "gzip", "snappy", "lz4", "zstd")."""
    return _NAMES_BY_ID[codec_id(codec)]


def compress(codec: int, data: Buffer, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec``, framed exactly as Kafka's Java producer frames it."""
    codec = codec_id(codec)
    try:
        if codec == GZIP:
            return bytes(cramjam.gzip.compress(data, level=level))
        if codec == SNAPPY:
            return _xerial_compress(memoryview(data))
        if codec == LZ4:
            return _lz4_frame_compress(data, level)
        if codec == ZSTD:
            return bytes(cramjam.zstd.compress(
                data, level=ZSTD_DEFAULT_LEVEL if level is None else level))
    except cramjam.CompressionError as e:
        raise ValueError(f"{codec_name(codec)} compression failed (level {level}): {e}") from e
    return bytes(data)


def max_decompressed_bytes(max_message_bytes: int) -> int:
    """The most bytes one batch's records may expand to under ``max.message.bytes``."""
    return max(max_message_bytes, _DEFAULT_MAX_MESSAGE_BYTES) * DECOMPRESSION_RATIO_LIMIT


def decompress(codec: int, data: Buffer,
               max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress one batch's records section, expanding it to at most ``max_bytes``.

    Output is written into buffers of bounded size, so a bomb stops where the bound is
    reached instead of being expanded first and measured after: DecompressionLimitError.
    Bad input raises CorruptRecordError.
    """
    if codec_id(codec) == NONE:
        return bytes(data)
    out, written = _decompress(codec, data, max_bytes, None)
    with memoryview(out) as view, view[:written] as used:
        return bytes(used)


def decompress_into(codec: int, data: Buffer, out: bytearray,
                    max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> int:
    """:func:`decompress` into ``out``, a buffer kept across calls (grown as needed, never past
    ``max_bytes``): returns how many of its first bytes hold the records. For a reader that
    decompresses batch after batch without a new buffer each time; same bound, same errors.
    ``out`` must not be exported (no live memoryview of it) while this runs.
    """
    return _decompress(codec, data, max_bytes, out)[1]


def _decompress(codec: int, data: Buffer, max_bytes: int, out: bytearray | None
                ) -> tuple[bytearray, int]:
    """The one bounded decompression: ``(buffer, bytes written)``, the buffer ``out`` (grown)
    or, when None, a new one of the size the data needs."""
    codec = codec_id(codec)
    try:
        if codec == GZIP:
            return _bounded(cramjam.gzip, data, max_bytes, out, _gzip_size(memoryview(data)))
        if codec == SNAPPY:
            return _xerial_decompress(memoryview(data), max_bytes, out)
        if codec == LZ4:
            return _lz4_frame_decompress(memoryview(data), max_bytes, out)
        if codec == ZSTD:
            return _bounded(cramjam.zstd, data, max_bytes, out,
                            _zstd_content_size(memoryview(data)))
    except cramjam.DecompressionError as e:
        raise CorruptRecordError(f"invalid {codec_name(codec)} data: {e}") from e
    with memoryview(data) as view:
        out = _sized(out, len(view))
        out[:len(view)] = view
        return out, len(view)


def _sized(out: bytearray | None, size: int) -> bytearray:
    """``out`` grown to at least ``size`` bytes (its contents are scratch), or a new buffer of
    ``size`` bytes when None."""
    if out is None:
        return bytearray(size)
    if len(out) < size:
        out.extend(bytes(size - len(out)))
    return out


def _bounded(module: ModuleType, data: Buffer, max_bytes: int, out: bytearray | None,
             size_hint: int = 0) -> tuple[bytearray, int]:
    """``module.decompress_into`` a buffer grown in steps, up to ``max_bytes``: (buffer, bytes
    written). cramjam stops writing (and decompressing) when the buffer is full, so nothing
    beyond it is produced.

    The first size is ``size_hint`` (what the data says it expands to: a liar only costs
    a retry) or a few times the input, or all of ``out`` when it is already larger.
    """
    if size_hint <= 0:
        size_hint = max(_FIRST_GUESS_MIN, len(memoryview(data)) * _FIRST_GUESS_RATIO)
    size = min(max_bytes, max(size_hint, 0 if out is None else len(out)))
    while True:
        buffer = _sized(out, size)
        try:
            with memoryview(buffer) as whole, whole[:size] as target:
                return buffer, int(module.decompress_into(data, target))
        except cramjam.DecompressionError as e:
            if _OUTPUT_FULL not in str(e):
                raise
            if size >= max_bytes:
                raise _too_large(max_bytes) from None
            size = min(max_bytes, size * _GROWTH)


def _gzip_size(view: memoryview) -> int:
    """ISIZE, the last member's uncompressed size mod 2^32 (gzip's trailer), or 0."""
    return _UINT32_LE.unpack_from(view, len(view) - 4)[0] if len(view) >= 18 else 0


def _zstd_content_size(view: memoryview) -> int:
    """Frame_Content_Size from the first zstd frame header when it is there, else 0."""
    if len(view) < 6 or view[:4] != ZSTD_MAGIC:
        return 0
    descriptor = view[4]
    single_segment = descriptor >> 5 & 1
    field_size = (single_segment, 2, 4, 8)[descriptor >> 6]
    start = 5 + (not single_segment) + (0, 1, 2, 4)[descriptor & 3]
    if field_size == 0 or len(view) < start + field_size:
        return 0
    size = int.from_bytes(view[start:start + field_size], "little")
    return size + 256 if field_size == 2 else size


def _too_large(max_bytes: int) -> DecompressionLimitError:
    return DecompressionLimitError(
        f"records section expands to more than {max_bytes} bytes "
        f"({DECOMPRESSION_RATIO_LIMIT} x max.message.bytes): refused as a decompression bomb"
    )


def _xerial_compress(view: memoryview) -> bytes:
    parts: list[Buffer] = [XERIAL_HEADER]
    for start in range(0, len(view), XERIAL_BLOCK_SIZE):
        block = cramjam.snappy.compress_raw(view[start:start + XERIAL_BLOCK_SIZE])
        parts.append(_INT32_BE.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _xerial_decompress(view: memoryview, max_bytes: int, out: bytearray | None
                       ) -> tuple[bytearray, int]:
    """A xerial stream, or (as Kafka's reader also accepts) one bare raw snappy block, into
    ``out`` (or a new buffer): (buffer, bytes written).

    A raw block declares its length up front: the declared lengths are summed and checked
    against ``max_bytes`` before any block is decompressed (snappy allocates what it declares).
    """
    blocks = _xerial_blocks(view) if view[:len(XERIAL_MAGIC)] == XERIAL_MAGIC else [view]
    sizes = []
    declared = 0
    for block in blocks:
        sizes.append(_snappy_length(block))
        declared += sizes[-1]
        if declared > max_bytes:
            raise _too_large(max_bytes)
    out = _sized(out, declared)
    written = 0
    with memoryview(out) as whole:
        for block, size in zip(blocks, sizes, strict=True):
            with whole[written:written + size] as target:
                got = int(cramjam.snappy.decompress_raw_into(block, target))
            if got != size:
                raise CorruptRecordError(
                    f"snappy: a block declares {size} bytes but decompresses to {got}")
            written += got
    return out, written


def _xerial_blocks(view: memoryview) -> list[memoryview]:
    """The raw snappy blocks of a xerial stream (each ``int32 length | block``)."""
    total = len(view)
    if total < len(XERIAL_HEADER):
        raise CorruptRecordError(f"snappy: xerial header cut short ({total} bytes)")
    blocks = []
    position = len(XERIAL_HEADER)
    while position < total:
        if position + _INT32_BE.size > total:
            raise CorruptRecordError(f"snappy: xerial block length cut short at byte {position}")
        (length,) = _INT32_BE.unpack_from(view, position)
        position += _INT32_BE.size
        if length < 0 or position + length > total:
            raise CorruptRecordError(
                f"snappy: xerial block at byte {position - 4} declares {length} bytes but "
                f"{total - position} remain"
            )
        blocks.append(view[position:position + length])
        position += length
    return blocks


def _snappy_length(block: memoryview) -> int:
    """The length a raw snappy block declares (its header varint; nothing is decompressed)."""
    return int(cramjam.snappy.decompress_raw_len(block))


def _lz4_frame_compress(data: Buffer, level: int | None) -> bytes:
    """liblz4 (through cramjam) compresses; its frame is re-emitted with Kafka's header.

    cramjam always adds block checksums, which Kafka does not write: they are dropped
    and the blocks copied once into the output. Its streaming compressor takes only
    ``bytes``, so other buffers are copied once on the way in.
    """
    if level is None or level == LZ4_DEFAULT_LEVEL:
        level = LZ4_FAST_LEVEL
    compressor = cramjam.lz4.Compressor(level=level, content_checksum=False, block_linked=False)
    compressor.compress(data if isinstance(data, bytes) else bytes(data))
    frame = memoryview(compressor.finish())
    flg = frame[4]
    checksum_size = 4 if flg & _LZ4_FLG_BLOCK_CHECKSUM else 0
    parts: list[Buffer] = [LZ4_FRAME_HEADER]
    position = 7 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0)
    while True:
        (word,) = _UINT32_LE.unpack_from(frame, position)
        if word == 0:
            break
        end = position + 4 + (word & ~_LZ4_UNCOMPRESSED_BLOCK)
        parts.append(frame[position:end])
        position = end + checksum_size
    parts.append(LZ4_END_MARK)
    return b"".join(parts)


def _lz4_frame_decompress(view: memoryview, max_bytes: int, out: bytearray | None
                          ) -> tuple[bytearray, int]:
    """An LZ4 frame into ``out`` (or a new buffer): (buffer, bytes written); checksums are verified, dependent (linked) blocks are refused as Kafka does."""
    if len(view) < 7 or view[:4] != LZ4_MAGIC:
        raise CorruptRecordError(f"lz4: not an LZ4 frame (starts {bytes(view[:4]).hex()})")
    flg = view[4]
    if flg & _LZ4_FLG_VERSION_MASK != _LZ4_FLG_VERSION_1:
        raise CorruptRecordError(f"lz4: unsupported frame version (FLG {flg:#04x})")
    if not flg & _LZ4_FLG_INDEPENDENT:
        raise CorruptRecordError(
            f"lz4: frame with dependent blocks (FLG {flg:#04x}); Kafka requires independent blocks"
        )
    return _bounded(cramjam.lz4, view, max_bytes, out, _lz4_frame_bound(view, flg))


def _lz4_frame_bound(view: memoryview, flg: int) -> int:
    """The most a frame can expand to: its blocks (walked by their length words) times the
    block maximum of its BD byte; 0 when the frame cannot be walked (decompression will say why)."""
    block_max = _LZ4_BLOCK_MAX_SIZES.get(view[5] >> 4 & 0x07)
    position = 7 + (8 if flg & _LZ4_FLG_CONTENT_SIZE else 0)
    checksum_size = 4 if flg & _LZ4_FLG_BLOCK_CHECKSUM else 0
    blocks = 0
    while block_max is not None and position + 4 <= len(view):
        (word,) = _UINT32_LE.unpack_from(view, position)
        if word == 0:
            return blocks * block_max
        blocks += 1
        position += 4 + (word & ~_LZ4_UNCOMPRESSED_BLOCK) + checksum_size
    return 0
