"""unsigned_varint: the one encoder of Kafka's UNSIGNED_VARINT (protobuf base-128)."""

from __future__ import annotations

import pytest

from tierlog.records.varint import unsigned_varint


@pytest.mark.parametrize(("value", "encoded"), [
    (0, b"\x00"),
    (1, b"\x01"),
    (0x7F, b"\x7f"),
    (0x80, b"\x80\x01"),
    (300, b"\xac\x02"),
    (0x3FFF, b"\xff\x7f"),
    (0x4000, b"\x80\x80\x01"),
    ((1 << 32) - 1, b"\xff\xff\xff\xff\x0f"),
    ((1 << 64) - 1, b"\xff" * 9 + b"\x01"),
])
def test_known_encodings(value, encoded):
    assert unsigned_varint(value) == encoded


def test_a_negative_value_is_refused_not_wrapped():
    # A table lookup alone would answer -1 with the byte of 127.
    with pytest.raises(ValueError, match="negative value -1"):
        unsigned_varint(-1)
    with pytest.raises(ValueError, match="-300"):
        unsigned_varint(-300)
