"""Control records: the key and value of transaction markers (and the names of other control types).

A control batch (attribute bit 5) holds one record whose key says which marker it is.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tierlog.errors import CorruptRecordError

ABORT = 0
COMMIT = 1
LEADER_CHANGE = 2
SNAPSHOT_HEADER = 3
SNAPSHOT_FOOTER = 4
KRAFT_VERSION = 5
KRAFT_VOTERS = 6

#: Display names of Kafka's control record types; readers skip types other than ABORT/COMMIT.
CONTROL_TYPE_NAMES = {
    ABORT: "ABORT",
    COMMIT: "COMMIT",
    LEADER_CHANGE: "LEADER_CHANGE",
    SNAPSHOT_HEADER: "SNAPSHOT_HEADER",
    SNAPSHOT_FOOTER: "SNAPSHOT_FOOTER",
    KRAFT_VERSION: "KRAFT_VERSION",
    KRAFT_VOTERS: "KRAFT_VOTERS",
}

#: The only key and end-transaction-marker value versions Kafka writes.
CONTROL_VERSION = 0
#: coordinator_epoch of a control record that is not a transaction marker.
NO_COORDINATOR_EPOCH = -1

_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinatorEpoch


class ControlRecord(NamedTuple):
    """A decoded control record: its type, key version and (for ABORT/COMMIT) coordinator epoch."""

    type: int
    version: int
    coordinator_epoch: int

    @property
    def is_transaction_marker(self) -> bool:
        return self.type in (ABORT, COMMIT)

    @property
    def type_name(self) -> str:
        return CONTROL_TYPE_NAMES.get(self.type, f"UNKNOWN({self.type})")


def encode_control_key(control_type: int) -> bytes:
    """``version int16=0 | type int16``."""
    return _KEY.pack(CONTROL_VERSION, control_type)


def encode_control_value(coordinator_epoch: int) -> bytes:
    """An end transaction marker value: ``version int16=0 | coordinatorEpoch int32``."""
    return _VALUE.pack(CONTROL_VERSION, coordinator_epoch)


def decode_control_record(key: bytes | None, value: bytes | None) -> ControlRecord:
    """Parse a control record's key and, for ABORT/COMMIT, its marker value.

    Like Kafka, a key needs at least 4 bytes and a non-negative version; a marker value
    needs at least 6 bytes (newer value versions are read as version 0).
    """
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(
            f"control record key must be at least {_KEY.size} bytes, got "
            f"{'null' if key is None else len(key)}"
        )
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has invalid version {version}")
    if control_type not in (ABORT, COMMIT):
        return ControlRecord(control_type, version, NO_COORDINATOR_EPOCH)
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(
            f"{CONTROL_TYPE_NAMES[control_type]} marker value must be at least {_VALUE.size} "
            f"bytes, got {'null' if value is None else len(value)}"
        )
    _value_version, coordinator_epoch = _VALUE.unpack_from(value)
    return ControlRecord(control_type, version, coordinator_epoch)
