"""Kafka v2 record batches: parse, build, compress, and zero-copy views over bytes and files.

``file_records`` (segment files) is imported from its own module, not re-exported here.
"""

from __future__ import annotations

from tierlog.records.batch import HEADER_SIZE, LOG_OVERHEAD, RecordBatch, iter_batches
from tierlog.records.builder import build_batch, build_control_batch
from tierlog.records.compression import codec_id, codec_name, compress, decompress
from tierlog.records.control import ABORT, COMMIT, ControlRecord
from tierlog.records.record import Record

__all__ = [
    "ABORT",
    "COMMIT",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "ControlRecord",
    "Record",
    "RecordBatch",
    "build_batch",
    "build_control_batch",
    "codec_id",
    "codec_name",
    "compress",
    "decompress",
    "iter_batches",
]
