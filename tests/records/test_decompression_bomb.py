"""Decompression bombs: a small compressed batch that expands far beyond max.message.bytes is
refused with DecompressionLimitError on every path that decompresses (append validation,
record iteration on reads), and never expands past the bound: peak memory is measured in a
fresh subprocess, where the 512 MiB a zstd bomb declares would show.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tierlog.errors import CorruptRecordError, DecompressionLimitError
from tierlog.records.compression import (
    GZIP,
    LZ4,
    SNAPPY,
    ZSTD,
    compress,
    decompress,
    max_decompressed_bytes,
)

MIB = 1 << 20

# Builds the bomb with streaming compressors (1 MiB of zeros at a time), so the process
# that builds it never holds the expanded bytes itself.
_BOMB = textwrap.dedent("""
    import struct, zlib
    import lz4.frame, zstandard
    from tierlog.records.builder import _assemble
    from tierlog.records.compression import CODEC_NAMES

    def body(codec, expanded):
        chunk = bytes(1 << 20)
        if codec == "zstd":
            c = zstandard.ZstdCompressor().compressobj()
        elif codec == "gzip":
            c = zlib.compressobj(9, zlib.DEFLATED, 31)
        elif codec == "lz4":
            c = lz4.frame.LZ4FrameCompressor(block_size=lz4.frame.BLOCKSIZE_MAX64KB,
                                             block_linked=False)
            parts = [c.begin()]
            parts += [c.compress(chunk) for _ in range(expanded >> 20)]
            return b"".join(parts + [c.flush()])
        elif codec == "snappy":
            # One bare raw snappy block whose header declares `expanded` bytes: a
            # decompressor that trusts the header allocates all of it up front.
            n, head = expanded, bytearray()
            while n >= 0x80:
                head.append(n & 0x7F | 0x80); n >>= 7
            head.append(n)
            return bytes(head) + b"\\x00" * 16
        parts = [c.compress(chunk) for _ in range(expanded >> 20)]
        return b"".join(parts + [c.flush()])

    def bomb(codec, expanded):
        return _assemble(0, 0, CODEC_NAMES[codec], 1, 1_700_000_000_000, 1_700_000_000_000,
                         -1, -1, -1, body(codec, expanded))
""")

_SCRIPT = _BOMB + textwrap.dedent("""
    import json, resource, sys, tempfile
    from tierlog import Log
    from tierlog.records.batch import RecordBatch

    codec, expanded, path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    data = bomb(codec, expanded)
    with tempfile.TemporaryDirectory() as tmp:
        config = {"record.validation": "crc"} if path == "read" else {}
        log = Log.open(tmp + "/t-0", config)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        try:
            if path == "append":
                log.append(data, leader_epoch=0)
            else:
                log.append(data, leader_epoch=0)  # trusted (crc only): nothing decompressed
                for batch in log.read(0, 1 << 22).batches():
                    batch.records()
            error = None
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        log.close()
    print(json.dumps({"size": len(data), "error": error, "growth_kib": peak - before}))
""")

# codec -> how far its bomb expands (each compresses to less than max.message.bytes).
BOMBS = {"zstd": 512 * MIB, "gzip": 256 * MIB, "lz4": 128 * MIB, "snappy": 2048 * MIB}


def _run(codec: str, path: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, codec, str(BOMBS[codec]), path],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("codec", sorted(BOMBS))
def test_append_refuses_a_bomb_without_expanding_it(codec):
    result = _run(codec, "append")
    assert result["size"] < 1_048_588, "the bomb must pass the max.message.bytes check"
    assert result["error"] is not None and result["error"].startswith("DecompressionLimitError")
    assert "batch at offset 0" in result["error"]
    assert str(max_decompressed_bytes(1_048_588)) in result["error"]
    # The bound is 64 MiB; the bomb declares up to 2 GiB. Expanding it would show here.
    assert result["growth_kib"] < 160 * 1024, result


def test_reading_a_trusted_bomb_refuses_it_without_expanding_it():
    result = _run("zstd", "read")
    assert result["error"] is not None and result["error"].startswith("DecompressionLimitError")
    assert result["growth_kib"] < 160 * 1024, result


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_decompress_stops_at_the_bound(codec):
    data = compress(codec, bytes(3 * MIB))
    with pytest.raises(DecompressionLimitError, match=f"more than {MIB} bytes"):
        decompress(codec, data, max_bytes=MIB)
    assert decompress(codec, data, max_bytes=3 * MIB) == bytes(3 * MIB)


@pytest.mark.parametrize("codec", [GZIP, SNAPPY, LZ4, ZSTD])
def test_data_up_to_the_bound_still_decompresses(codec):
    payload = bytes(range(256)) * 4096 + b"tail"  # ~1 MiB, a ratio the first guess misses
    assert decompress(codec, compress(codec, payload), max_bytes=len(payload)) == payload


def test_a_bomb_is_still_a_corrupt_record_to_callers_that_catch_those():
    assert issubclass(DecompressionLimitError, CorruptRecordError)


def test_the_bound_follows_max_message_bytes():
    assert max_decompressed_bytes(1_048_588) == 64 * 1_048_588
    assert max_decompressed_bytes(10 * MIB) == 640 * MIB
    # A tiny max.message.bytes does not make ordinary batches undecodable.
    assert max_decompressed_bytes(100) == max_decompressed_bytes(1_048_588)
