"""Chooses the per-record codec of v2 record batches: the C accelerator, or pure Python.

``TIERLOG_PURE_PYTHON=1`` forces the pure-Python codec; so does a missing or broken extension.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

#: Environment variable that, set to ``1``, disables the C accelerator.
PURE_PYTHON_ENV = "TIERLOG_PURE_PYTHON"

if os.environ.get(PURE_PYTHON_ENV) == "1":
    from tierlog.records._codec_py import decode_records, encode_records

    ACCELERATED = False
else:
    try:
        from tierlog.records._speedups import decode_records, encode_records
    except ImportError as exc:
        log.debug("tierlog C accelerator unavailable (%s); using the pure-Python codec", exc)
        from tierlog.records._codec_py import decode_records, encode_records

        ACCELERATED = False
    else:
        ACCELERATED = True

__all__ = ["ACCELERATED", "decode_records", "encode_records"]
