"""Chooses the per-record codec of v2 record batches: the C accelerator, or pure Python.

``TIERLOG_PURE_PYTHON=1`` forces the pure-Python codec; so does a missing or broken extension.
"""

from __future__ import annotations

from tierlog.records import _codec_py
from tierlog.records._accelerator import PURE_PYTHON_ENV, accelerated

_found = accelerated("tierlog.records._speedups", "decode_records", "check_records",
                     "encode_records", "encode_columns")
#: True when the C codec is in use.
ACCELERATED = _found is not None
# The C twins have the pure-Python functions' signatures (the differential tests hold them to
# the same behaviour), so the names take the pure-Python types.
if _found is None:
    decode_records, check_records, encode_records, encode_columns = (
        _codec_py.decode_records, _codec_py.check_records, _codec_py.encode_records,
        _codec_py.encode_columns)
else:
    decode_records, check_records, encode_records, encode_columns = _found

__all__ = ["ACCELERATED", "PURE_PYTHON_ENV", "check_records", "decode_records", "encode_columns",
           "encode_records"]
