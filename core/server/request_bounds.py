"""The bounds check every request passes before kio decodes it: each length, count and size
fits in the bytes left in its frame, and no non-nullable field is null.

kio's native decoder allocates what a length announces before it reads the elements: a
47-byte DescribeGroups v5 whose compact-array length is about 2^35 made it allocate 256 GiB,
and the failed allocation aborts the process (no Python ``except`` sees it). So the frame is
walked here first, generically, from kio's own schema metadata (the dataclass fields and
their ``kafka_type``, tag and optionality, read with kio's introspection), for every API and
version: a string or bytes of n bytes needs n bytes, an array of n elements needs n times
its element's smallest encoding, a tagged field's size fits in what is left. The walk reads
lengths only (no values are built); each entity type's checker is built once.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from tierlog.errors import MalformedRequestError

#: A checker reads one value at ``pos`` of ``frame`` within ``end`` and returns where it
#: ends; MalformedRequestError when it does not fit.
Checker = Callable[[bytes | memoryview, int, int], int]

#: The encoded size of each fixed-size kafka_type.
FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_BYTES_TYPES = frozenset({"bytes", "records"})
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
#: A varint longer than this (70 bits) is garbage, whatever it was meant to say.
_MAX_VARINT_BYTES = 10


def _bad(detail: str, pos: int) -> MalformedRequestError:
    """A failed bound inside the walk; each level it rises through names itself in front
    (:func:`_within`), and :func:`check_request` names the request."""
    return MalformedRequestError("", "", pos, detail)


def _within(bad: MalformedRequestError, name: str) -> MalformedRequestError:
    """``bad`` one level up: ``name`` (a field, or ``[i]`` an array element) in front."""
    inner = bad.field
    field = name if not inner else name + (inner if inner.startswith("[") else "." + inner)
    return MalformedRequestError("", field, bad.position, bad.detail)


def check_request(request_type: type[Any], frame: bytes | memoryview) -> None:
    """Check the header and body of a request frame (without its size prefix) as
    ``request_type`` (a kio request class) before kio decodes it; MalformedRequestError
    naming the API, version, field and byte offset of the first length that does not fit
    (a decoder would allocate it) or null that is not allowed."""
    try:
        offset = entity_checker(request_type.__header_schema__)(frame, 0, len(frame))
        entity_checker(request_type)(frame, offset, len(frame))
    except MalformedRequestError as bad:
        raise MalformedRequestError(f"{request_type.__name__} v{request_type.__version__}",
                                    bad.field or "tagged fields", bad.position,
                                    bad.detail) from None


def check_header(header_type: type[Any], frame: bytes | memoryview) -> int:
    """Check a request header alone (as :func:`check_request`); returns its length."""
    try:
        return entity_checker(header_type)(frame, 0, len(frame))
    except MalformedRequestError as bad:
        raise MalformedRequestError(header_type.__name__, bad.field or "tagged fields",
                                    bad.position, bad.detail) from None


# -- primitives ------------------------------------------------------------------------------

def _uvarint(frame: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    value, shift = 0, 0
    for i in range(pos, min(end, pos + _MAX_VARINT_BYTES)):
        byte = frame[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i + 1
        shift += 7
    raise _bad("a varint runs past the end of the frame or is too long", pos)


def _need(pos: int, size: int, end: int, what: str) -> int:
    if size > end - pos:
        raise _bad(f"{what} needs at least {size} bytes, {max(end - pos, 0)} left", pos)
    return pos + size


def _fixed(size: int) -> Checker:
    def check(frame: bytes | memoryview, pos: int, end: int) -> int:
        if size > end - pos:
            raise _bad(f"{size} bytes of fixed-size fields, {max(end - pos, 0)} left", pos)
        return pos + size
    return check


def _compact_length(frame: bytes | memoryview, pos: int, end: int, nullable: bool,
                    what: str) -> tuple[int, int]:
    """(n or -1 for null, position after the length) of a compact (length + 1) prefix."""
    raw, after = _uvarint(frame, pos, end)
    if raw == 0:
        if not nullable:
            raise _bad(f"a null {what} where the field is not nullable", pos)
        return -1, after
    return raw - 1, after


def _legacy_length(frame: bytes | memoryview, pos: int, end: int, nullable: bool,
                   wide: bool, what: str) -> tuple[int, int]:
    """(n or -1 for null, position after the length) of an int16 or int32 prefix."""
    size = 4 if wide else 2
    after = _need(pos, size, end, f"the length of a {what}")
    n = (_I32 if wide else _I16).unpack_from(frame, pos)[0]
    if n == -1:
        if not nullable:
            raise _bad(f"a null {what} where the field is not nullable", pos)
        return -1, after
    if n < -1:
        raise _bad(f"a {what} of negative length {n}", pos)
    return int(n), after


def _sized(flexible: bool, nullable: bool, wide: bool, what: str) -> Checker:
    """A string (``wide`` False: int16 length) or bytes (int32) field."""
    def check(frame: bytes | memoryview, start: int, end: int) -> int:
        if flexible and start < end and frame[start] & 0x80 == 0:  # a one-byte length
            n, pos = frame[start] - 1, start + 1
            if n < 0 and not nullable:
                raise _bad(f"a null {what} where the field is not nullable", start)
        elif flexible:
            n, pos = _compact_length(frame, start, end, nullable, what)
        else:
            n, pos = _legacy_length(frame, start, end, nullable, wide, what)
        if n > end - pos:
            raise _bad(f"a {what} of {n} bytes, {end - pos} left", start)
        return pos if n < 0 else pos + n
    return check


def _array(flexible: bool, nullable: bool, element: Checker, element_min: int,
           element_fixed: bool) -> Checker:
    """An array of ``element``s, each at least ``element_min`` bytes (exactly that many
    when ``element_fixed``: the elements are then skipped, not walked)."""
    floor = max(element_min, 1)

    def check(frame: bytes | memoryview, start: int, end: int) -> int:
        if flexible:
            n, pos = _compact_length(frame, start, end, nullable, "array")
        else:
            n, pos = _legacy_length(frame, start, end, nullable, True, "array")
        if n <= 0:
            return pos
        if n * floor > end - pos:
            raise _bad(f"an array of {n} elements needs at least {n * floor} bytes, "
                       f"{end - pos} left", start)
        if element_fixed:
            return pos + n * element_min
        for i in range(n):
            try:
                pos = element(frame, pos, end)
            except MalformedRequestError as bad:
                raise _within(bad, f"[{i}]") from None
        return pos
    return check


# -- entities --------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True, slots=True)
class _Field:
    name: str
    check: Checker
    min_size: int
    fixed: bool


def _field(entity_type: type[Any], field: dataclasses.Field[Any], tagged: bool) -> _Field:
    flexible = bool(entity_type.__flexible__)
    # Tagged fields are optional by their tag's absence, not by a null (as kio writes them).
    nullable = False if tagged else is_optional(field)
    kind = classify_field(field)
    if entity_type.__name__ == "RequestHeader" and field.name == "client_id":
        # Kafka keeps the header's client id a legacy string even in flexible headers.
        return _Field(field.name, _sized(False, True, False, "string"), 2, False)
    if isinstance(kind, (PrimitiveField, PrimitiveTupleField)):
        kafka_type = get_schema_field_type(field)
        if kafka_type in FIXED_SIZES:
            size = FIXED_SIZES[kafka_type]
            inner, inner_min, inner_fixed = _fixed(size), size, True
        elif kafka_type == "string" or kafka_type in _BYTES_TYPES:
            wide = kafka_type != "string"
            inner_nullable = nullable and isinstance(kind, PrimitiveField)
            inner = _sized(flexible, inner_nullable, wide, kafka_type)
            inner_min, inner_fixed = (1 if flexible else 4 if wide else 2), False
        else:
            raise TypeError(f"{entity_type.__name__}.{field.name}: unknown kafka_type "
                            f"{kafka_type!r}")
        if isinstance(kind, PrimitiveField):
            return _Field(field.name, inner, inner_min, inner_fixed)
    else:
        assert isinstance(kind, (EntityField, EntityTupleField))
        checker, entity_min = _entity(kind.type_)
        if isinstance(kind, EntityField):
            if nullable:
                return _Field(field.name, _nullable_entity(checker), 1, False)
            return _Field(field.name, checker, entity_min, False)
        inner, inner_min, inner_fixed = checker, entity_min, False
    return _Field(field.name, _array(flexible, nullable, inner, inner_min, inner_fixed),
                  1 if flexible else 4, False)


def _nullable_entity(checker: Checker) -> Checker:
    """A nullable struct (KIP-893): an int8 marker, -1 for null, then the struct."""
    def check(frame: bytes | memoryview, pos: int, end: int) -> int:
        after = _need(pos, 1, end, "a nullable struct's marker")
        return after if frame[pos] == 0xFF else checker(frame, after, end)
    return check


def entity_checker(entity_type: type[Any]) -> Checker:
    """The checker of one kio entity type (a request, its header, or a nested struct)."""
    return _entity(entity_type)[0]


#: Each entity type's (checker, smallest encoded size), built on first use.
_ENTITIES: dict[type[Any], tuple[Checker, int]] = {}


def _entity(entity_type: type[Any]) -> tuple[Checker, int]:
    """(checker, smallest encoded size) of ``entity_type``: its fields in order, then, when
    flexible, the tagged-field section (tags it knows are checked within their size)."""
    built = _ENTITIES.get(entity_type)
    if built is None:
        built = _ENTITIES[entity_type] = _build_entity(entity_type)
    return built


def _build_entity(entity_type: type[Any]) -> tuple[Checker, int]:
    flexible = bool(entity_type.__flexible__)
    plain: list[_Field] = []
    tagged: dict[int, _Field] = {}
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        if tag is None:
            plain.append(_field(entity_type, field, False))
        else:
            tagged[int(tag)] = _field(entity_type, field, True)
    min_size = sum(f.min_size for f in plain) + (1 if flexible else 0)
    steps = _merge_fixed(plain)

    def check(frame: bytes | memoryview, pos: int, end: int) -> int:
        for name, field_check in steps:
            try:
                pos = field_check(frame, pos, end)
            except MalformedRequestError as bad:
                raise _within(bad, name) from None
        if flexible:
            if pos < end and frame[pos] == 0:  # no tagged fields, nearly always
                return pos + 1
            pos = _tagged_fields(frame, pos, end, tagged)
        return pos

    return check, min_size


def _merge_fixed(fields: list[_Field]) -> tuple[tuple[str, Checker], ...]:
    """(name, checker) of each field, a run of fixed-size fields checked as one."""
    steps: list[tuple[str, Checker]] = []
    run: list[_Field] = []
    for field in [*fields, None]:
        if field is not None and field.fixed:
            run.append(field)
            continue
        if len(run) == 1:
            steps.append((run[0].name, run[0].check))
        elif run:
            steps.append((f"{run[0].name}..{run[-1].name}",
                          _fixed(sum(f.min_size for f in run))))
        run = []
        if field is not None:
            steps.append((field.name, field.check))
    return tuple(steps)


def _tagged_fields(frame: bytes | memoryview, pos: int, end: int,
                   known: dict[int, _Field]) -> int:
    count, pos = _uvarint(frame, pos, end)
    if count * 2 > end - pos:  # each at least a tag and a size
        raise _bad(f"{count} tagged fields need at least {count * 2} bytes, "
                   f"{end - pos} left", pos)
    for _ in range(count):
        tag, pos = _uvarint(frame, pos, end)
        size, pos = _uvarint(frame, pos, end)
        stop = _need(pos, size, end, f"tagged field {tag} of {size} bytes")
        field = known.get(tag)
        if field is not None:
            try:
                if field.check(frame, pos, stop) != stop:
                    raise _bad(f"tagged field {tag} is shorter than its size {size}", pos)
            except MalformedRequestError as bad:
                raise _within(bad, field.name) from None
        pos = stop
    return pos
