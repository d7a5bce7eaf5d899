"""Chooses the columnar batch decoder of tierlog.records.arrow: the C accelerator ``_columnar``, or its
pure-Python twin ``_columnar_py`` (``TIERLOG_PURE_PYTHON=1``, or no compiler at install time).

``decode_batch`` appends the records of one batch's uncompressed records section to ``COLUMNS``,
growable bytearrays that become the Arrow buffers of ``SCHEMA`` with no Python object per
record; ``used`` (an ``array('q')`` of 16) holds how much of each buffer is filled.
"""

from __future__ import annotations

from tierlog.records._accelerator import accelerated
from tierlog.records.arrow import _columnar_py

#: The column buffers, in the order decode_batch takes them: validity bitmaps, int32 offsets
#: (starting with a 0) and data of the binary columns, the int64 offsets and millisecond
#: timestamps, the int32 timestamp types, and the headers' list validity and offsets, key
#: offsets and data, and value validity, offsets and data.
COLUMNS = ("key_valid", "key_offsets", "key_data", "value_valid", "value_offsets", "value_data",
           "offset", "timestamp", "timestamp_type", "headers_valid", "headers_offsets",
           "header_key_offsets", "header_key_data", "header_value_valid",
           "header_value_offsets", "header_value_data")
#: The columns of int32 offsets, which start with one 0.
OFFSET_COLUMNS = frozenset(i for i, name in enumerate(COLUMNS) if name.endswith("_offsets"))

_found = accelerated("tierlog.records.arrow._columnar", "decode_batch")
#: True when the C decoder is in use.
ACCELERATED = _found is not None
# The C twin has the pure-Python function's signature (the parity tests hold them to the same
# results), so the name takes the pure-Python type.
decode_batch = _columnar_py.decode_batch if _found is None else _found[0]

__all__ = ["ACCELERATED", "COLUMNS", "OFFSET_COLUMNS", "decode_batch"]
