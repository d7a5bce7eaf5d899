"""Writing one plain producer batch with its offset assigned: the append hot path in one call.

A *plain* batch is the commonest thing a producer sends: one v2 batch with no producer id
(not idempotent, not transactional) and no control records. ``write_plain_batch`` checks its
header, its CRC-32C and (unless the rules say the CRC is trusted) its records' framing against
the same rules as the general append path, checks it against the limits the caller computed
(so the batch can neither overflow the segment nor trigger a roll), and writes it at a file
position with its base offset (and optionally its partition leader epoch) patched in on the
way: the patched 16-byte prefix and the rest of the caller's buffer go out in one ``pwritev``,
so the batch is never copied. A compressed batch whose records must be checked is left to the
general path, which decompresses it.

Anything unusual returns ``None`` with nothing written; the caller then takes its general path,
which reports the precise error. The C accelerator has the same function
(``tierlog.records._plain_batch_write.write_plain_batch``, proven equal by the tests);
:data:`write_plain_batch` is whichever is in use.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable

from crc32c import crc32c

from tierlog.errors import CorruptRecordError
from tierlog.records._accelerator import accelerated
from tierlog.records._codec import check_records
from tierlog.records.batch import (
    ATTRIBUTES,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CURRENT_MAGIC,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
)

__all__ = ["PlainBatchRules", "write_plain_batch", "write_plain_batch_py"]

#: ``(max_end_position, max_last_offset, max_timestamp, max_batch_bytes, check_records)``: the
#: batch must end at or before ``max_end_position`` in the file, its last offset and max
#: timestamp must not exceed the next two (all fit a signed 64-bit int), its size must not
#: exceed ``max_batch_bytes``, and with ``check_records`` its records must be well formed with
#: offset deltas 0, 1, 2... (``record.validation=full``).
PlainBatchRules = tuple[int, int, int, int, bool]

_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch


def write_plain_batch_py(
    fd: int,
    position: int,
    data: bytes | bytearray | memoryview,
    base_offset: int,
    leader_epoch: int | None,
    rules: PlainBatchRules,
) -> tuple[int, int, int, int, int] | None:
    """Write ``data`` (one plain batch) at ``position`` of ``fd`` with ``base_offset`` and, unless
    None, ``leader_epoch`` patched in; the pure-Python twin of the C function.

    Returns ``(size, last_offset, max_timestamp, record_count, written_leader_epoch)``, or None
    (nothing written) when the batch is not plain, is damaged, or breaks ``rules``.
    Raises OSError if the write fails; a short write is completed before returning.
    """
    size = len(data)
    max_end, max_last_offset, max_timestamp_limit, max_batch_bytes, must_check_records = rules
    if size < HEADER_SIZE or size > max_batch_bytes or position + size > max_end:
        return None
    (_, length, batch_epoch, magic, crc, attributes, delta, _, max_timestamp, producer_id, _, _,
     count) = HEADER.unpack_from(data, 0)
    last_offset = base_offset + delta
    if (length + LOG_OVERHEAD != size or magic != CURRENT_MAGIC or producer_id != -1
            or attributes & CONTROL_MASK or count < 1 or delta != count - 1
            or last_offset > max_last_offset or max_timestamp > max_timestamp_limit):
        return None
    view = memoryview(data)
    if crc32c(view[ATTRIBUTES:]) != crc:
        return None
    if must_check_records:
        if attributes & COMPRESSION_MASK:
            return None
        try:
            check_records(data, HEADER_SIZE, size, count)
        except CorruptRecordError:
            return None
    epoch = batch_epoch if leader_epoch is None else leader_epoch
    pieces = (_PREFIX.pack(base_offset, length, epoch), view[MAGIC:])
    written = os.pwritev(fd, pieces, position)
    if written < size:  # a nearly full disk writes short, then raises; copying is fine here
        whole = memoryview(b"".join(pieces))
        while written < size:
            written += os.pwrite(fd, whole[written:], position + written)
    return size, last_offset, max_timestamp, count, epoch


_found = accelerated("tierlog.records._plain_batch_write", "write_plain_batch")
#: The C function when it is built (and TIERLOG_PURE_PYTHON is not 1), else the Python twin.
write_plain_batch: Callable[..., tuple[int, int, int, int, int] | None] = (
    _found[0] if _found else write_plain_batch_py)
