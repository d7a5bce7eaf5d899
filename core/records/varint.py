"""The unsigned varint encoder (protobuf base-128, Kafka's UNSIGNED_VARINT): its one home.

Record fields (zigzag-mapped first), compact lengths and tagged fields all use it: the
pure-Python records codec, the response framing, the coordinators' records and the produce
response writer call :func:`unsigned_varint`. (The C accelerator mirrors it in ``_speedups.c``.)
"""

from __future__ import annotations

__all__ = ["unsigned_varint"]

#: Values below 2**7 are one byte: nearly every length on the wire, so they come from a table.
_ONE_BYTE = tuple(bytes((value,)) for value in range(0x80))


def unsigned_varint(value: int) -> bytes:
    """``value`` in base 128, low 7-bit group first, high bit set on all but the last byte.

    ValueError for a negative value (it has no unsigned encoding)."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        raise ValueError(f"an unsigned varint cannot encode the negative value {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
