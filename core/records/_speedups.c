/* tierlog.records._speedups: the C accelerator of the per-record codec of v2 record batches.
 *
 * decode_records(), check_records(), encode_records() and encode_columns() mirror
 * core/records/_codec_py.py: the same bytes out and the same exception types on bad input. Every read is checked against the
 * end of the record or of the data, so hostile bytes can only raise CorruptRecordError.
 * Single-phase module; the GIL is held throughout.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* PyMemberDef, T_OBJECT_EX, READONLY */
#include <stdint.h>
#include <string.h>

/* First output size for encode_records: bytes a record, and a cap for long sequences. */
#define GUESS_PER_RECORD 128
#define MAX_FIRST_GUESS (4 << 20)
/* The varint of -1, written for a null key or value. */
#define NULL_LENGTH_BYTE 0x01
/* The capsule holding check_records_raw: int (*)(const uint8_t *, Py_ssize_t position,
 * Py_ssize_t end, Py_ssize_t count), 0 or -1 with CorruptRecordError set. */
#define CHECK_RECORDS_CAPSULE "tierlog.records._speedups.check_records_capi"

/* Imported once at module init and kept for the life of the process. */
static PyObject *record_type;   /* tierlog.records.record.Record */
static PyObject *corrupt_error; /* tierlog.errors.CorruptRecordError */

/* Varints, lengths and their errors: the framing rules shared with reader/_columnar.c. */
#include "_record_framing.h"

/* The Record slots. When every slot is a plain writable object member, decode stores straight
 * into the instance (fast_slots); otherwise it falls back to setattr. */
enum { F_OFFSET, F_TIMESTAMP, F_KEY, F_VALUE, F_HEADERS, N_FIELDS };
static const char *const field_names[N_FIELDS] = {"offset", "timestamp", "key", "value", "headers"};
static PyObject *field_str[N_FIELDS];
static Py_ssize_t field_offset[N_FIELDS];
static int fast_slots;

/* --- Decoding ------------------------------------------------------------------------------ */

/* Raises CorruptRecordError("record <index> at byte <pos>: <detail>"); always returns NULL.
 * The message, varints and lengths are the shared framing rules (_record_framing.h). */
static PyObject *
corrupt(Py_ssize_t index, Py_ssize_t pos, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    framing_errorv(index, pos, fmt, va);
    va_end(va);
    return NULL;
}

/* Reads a `length | bytes` field: a new reference to bytes, or to None for length -1 (or when
 * not `keep`ing what is read: then it is only checked). */
static PyObject *
read_nullable_bytes(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t rec_end, Py_ssize_t index,
                    const char *what, int keep)
{
    int64_t n;
    if (read_length(buf, pos, rec_end, index, what, &n) < 0)
        return NULL;
    if (n == -1)
        return Py_NewRef(Py_None);
    *pos += (Py_ssize_t)n;
    if (!keep)
        return Py_NewRef(Py_None);
    return PyBytes_FromStringAndSize((const char *)buf + *pos - n, (Py_ssize_t)n);
}

/* Reads a record's header count and headers: a new tuple of (str, bytes | None) pairs, or
 * None when not `keep`ing them (every check is still made). */
static PyObject *
read_headers(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t rec_end, Py_ssize_t index,
             int keep)
{
    int64_t count, n;
    if (read_varint(buf, pos, rec_end, VARINT_MAX_BYTES, index, &count) < 0)
        return NULL;
    if (count == 0)
        return keep ? PyTuple_New(0) : Py_NewRef(Py_None);
    /* Each header takes at least two bytes (its two lengths): never allocate past the data. */
    if (count < 0 || count > (rec_end - *pos) / 2)
        return corrupt(index, *pos, "header count %lld does not fit the record", (long long)count);
    PyObject *headers = keep ? PyTuple_New((Py_ssize_t)count) : Py_NewRef(Py_None);
    if (headers == NULL)
        return NULL;
    for (Py_ssize_t k = 0; k < (Py_ssize_t)count; k++) {
        Py_ssize_t key_start = *pos;
        PyObject *key, *value, *pair;
        if (read_length(buf, pos, rec_end, index, "header key", &n) < 0)
            goto fail;
        if (n == -1) {
            corrupt(index, key_start, "header key is null");
            goto fail;
        }
        key = PyUnicode_DecodeUTF8((const char *)buf + *pos, (Py_ssize_t)n, NULL);
        if (key == NULL) {
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                corrupt(index, key_start, "header key is not UTF-8");
            }
            goto fail;
        }
        *pos += (Py_ssize_t)n;
        value = read_nullable_bytes(buf, pos, rec_end, index, "header value", keep);
        if (!keep && value != NULL) {
            Py_DECREF(key);
            Py_DECREF(value);
            continue;
        }
        pair = value == NULL ? NULL : PyTuple_New(2);
        if (pair == NULL) {
            Py_DECREF(key);
            Py_XDECREF(value);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, key);
        PyTuple_SET_ITEM(pair, 1, value);
        PyTuple_SET_ITEM(headers, k, pair);
    }
    return headers;
fail:
    Py_DECREF(headers);
    return NULL;
}

/* base + delta as a Python int, exact even where the int64 sum would overflow. */
static PyObject *
long_from_sum(int64_t base, int64_t delta)
{
    if ((delta > 0 && base > INT64_MAX - delta) || (delta < 0 && base < INT64_MIN - delta)) {
        PyObject *a = PyLong_FromLongLong(base), *b = PyLong_FromLongLong(delta), *sum = NULL;
        if (a != NULL && b != NULL)
            sum = PyNumber_Add(a, b);
        Py_XDECREF(a);
        Py_XDECREF(b);
        return sum;
    }
    return PyLong_FromLongLong(base + delta);
}

/* A new Record holding `values` (in field order). Consumes the references, even on failure. */
static PyObject *
new_record(PyObject *values[N_FIELDS])
{
    PyTypeObject *type = (PyTypeObject *)record_type;
    PyObject *record = type->tp_alloc(type, 0);
    for (int f = 0; f < N_FIELDS; f++) {
        if (record != NULL && fast_slots) {
            /* tp_alloc zero-fills the instance, so the slot is empty: store the reference. */
            *(PyObject **)((char *)record + field_offset[f]) = values[f];
            continue;
        }
        if (record != NULL && PyObject_SetAttr(record, field_str[f], values[f]) < 0)
            Py_CLEAR(record);
        Py_DECREF(values[f]);
    }
    return record;
}

/* Decodes the record at *pos (record number `index`) that must end by `end`. Without `keep`,
 * only checks it: returns None, and its offset delta in *offset_delta_out. */
static inline PyObject *
decode_one(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t index,
           int64_t base_offset, int64_t base_timestamp, int keep, int64_t *offset_delta_out)
{
    PyObject *values[N_FIELDS] = {NULL};
    Py_ssize_t start = *pos;
    int64_t length, ts_delta, offset_delta;

    if (read_varint(buf, pos, end, VARINT_MAX_BYTES, index, &length) < 0)
        return NULL;
    if (length < 0)
        return corrupt(index, start, "negative record length %lld", (long long)length);
    if (length > end - *pos)
        return corrupt(index, start, "record length %lld runs past the data end",
                       (long long)length);
    Py_ssize_t body = *pos, rec_end = *pos + (Py_ssize_t)length;
    if (*pos >= rec_end)
        return corrupt(index, start, "record ends before its attributes");
    (*pos)++; /* attributes: Kafka defines no record-level attribute */
    if (read_varint(buf, pos, rec_end, VARLONG_MAX_BYTES, index, &ts_delta) < 0 ||
        read_varint(buf, pos, rec_end, VARINT_MAX_BYTES, index, &offset_delta) < 0 ||
        (values[F_KEY] = read_nullable_bytes(buf, pos, rec_end, index, "key", keep)) == NULL ||
        (values[F_VALUE] = read_nullable_bytes(buf, pos, rec_end, index, "value", keep)) == NULL ||
        (values[F_HEADERS] = read_headers(buf, pos, rec_end, index, keep)) == NULL)
        goto fail;
    if (*pos != rec_end) {
        corrupt(index, start, "record length %lld differs from the %zd bytes read",
                (long long)length, *pos - body);
        goto fail;
    }
    if (!keep) {
        *offset_delta_out = offset_delta;
        for (int f = 0; f < N_FIELDS; f++)
            Py_XDECREF(values[f]);
        return Py_NewRef(Py_None);
    }
    values[F_OFFSET] = long_from_sum(base_offset, offset_delta);
    if (values[F_OFFSET] == NULL)
        goto fail;
    values[F_TIMESTAMP] = long_from_sum(base_timestamp, ts_delta);
    if (values[F_TIMESTAMP] == NULL)
        goto fail;
    return new_record(values);
fail:
    for (int f = 0; f < N_FIELDS; f++)
        Py_XDECREF(values[f]);
    return NULL;
}

/* Reads a varint of at most three bytes at *pos, all before `limit`, into *value (zigzag
 * decoded): such a varint cannot overflow. Returns 1, or 0 (nothing moved) for anything else:
 * a longer varint or one cut by `limit`, which the full reader then judges. */
static inline int
short_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t limit, int64_t *value)
{
    Py_ssize_t p = *pos;
    uint32_t raw;
    if (p < limit && buf[p] < 0x80) {
        raw = buf[p];
        p += 1;
    } else if (p + 1 < limit && buf[p + 1] < 0x80) {
        raw = (buf[p] & 0x7Fu) | ((uint32_t)buf[p + 1] << 7);
        p += 2;
    } else if (p + 2 < limit && buf[p + 1] >= 0x80 && buf[p + 2] < 0x80) {
        raw = (buf[p] & 0x7Fu) | ((buf[p + 1] & 0x7Fu) << 7) | ((uint32_t)buf[p + 2] << 14);
        p += 3;
    } else {
        return 0;
    }
    *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
    *pos = p;
    return 1;
}

/* Checks the record at *pos the quick way: 1 (and *pos past it) when it is plainly well formed
 * with offset delta `index`: short varints, key and value null or inside the record, no
 * headers, nothing left over. 0 (nothing moved) sends it to decode_one, which judges anything
 * else exactly; so this accepts nothing decode_one would reject. */
static inline int
quick_check_one(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t end, Py_ssize_t index)
{
    Py_ssize_t p = *pos;
    int64_t length, ts_delta, offset_delta, n;
    if (!short_varint(buf, &p, end, &length) || length < 1 || length > end - p)
        return 0;
    Py_ssize_t rec_end = p + (Py_ssize_t)length;
    p++; /* attributes */
    if (!short_varint(buf, &p, rec_end, &ts_delta) ||
        !short_varint(buf, &p, rec_end, &offset_delta) || offset_delta != index)
        return 0;
    for (int field = 0; field < 2; field++) { /* key, value */
        if (!short_varint(buf, &p, rec_end, &n) || n < -1 || n > rec_end - p)
            return 0;
        if (n > 0)
            p += (Py_ssize_t)n;
    }
    if (p + 1 != rec_end || buf[p] != 0) /* the header count, zero, ends the record */
        return 0;
    *pos = rec_end;
    return 1;
}

/* Walks `count` records in buf[position:end]: decodes them into `list` (offsets and timestamps
 * from the bases), or, with `list` NULL, checks them as decoding would and also that their
 * offset deltas are 0, 1, 2... (a producer's batch). Returns 0, or -1 with an exception set. */
static int
walk_records(const uint8_t *buf, Py_ssize_t position, Py_ssize_t end, Py_ssize_t count,
             int64_t base_offset, int64_t base_timestamp, PyObject *list)
{
    if (count < 0) {
        corrupt(0, position, "negative record count %zd", count);
        return -1;
    }
    Py_ssize_t pos = position;
    for (Py_ssize_t i = 0; i < count; i++) {
        /* No record is shorter than MIN_RECORD_SIZE: a hostile count stops here, early. */
        if (pos >= end || i >= (end - position) / MIN_RECORD_SIZE) {
            corrupt(i, pos, "only %zd of %zd records fit the data", i, count);
            return -1;
        }
        if (list == NULL && quick_check_one(buf, &pos, end, i))
            continue;
        Py_ssize_t start = pos;
        int64_t offset_delta = 0;
        /* Two calls with a constant `keep`, so the compiler can make a version of each. */
        PyObject *record = list != NULL
            ? decode_one(buf, &pos, end, i, base_offset, base_timestamp, 1, &offset_delta)
            : decode_one(buf, &pos, end, i, base_offset, base_timestamp, 0, &offset_delta);
        if (record == NULL)
            return -1;
        if (list != NULL) {
            PyList_SET_ITEM(list, i, record);
            continue;
        }
        Py_DECREF(record);
        if (offset_delta != i) {
            corrupt(i, start, "offset delta %lld where a producer writes %zd",
                    (long long)offset_delta, i);
            return -1;
        }
    }
    if (pos != end) {
        corrupt(count, pos, "%zd bytes remain after %zd records", end - pos, count);
        return -1;
    }
    return 0;
}

/* The capsule's function (see PyInit__speedups): check_records on a raw buffer. */
static int
check_records_raw(const uint8_t *buf, Py_ssize_t position, Py_ssize_t end, Py_ssize_t count)
{
    return walk_records(buf, position, end, count, 0, 0, NULL);
}

/* Gets data's buffer and checks that [position, end) lies inside it; 0 or -1. */
static int
get_records_range(PyObject *data, Py_buffer *view, Py_ssize_t position, Py_ssize_t end)
{
    if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0)
        return -1;
    if (position < 0 || position > end || end > view->len) {
        PyErr_Format(PyExc_ValueError, "records range [%zd, %zd) is outside a buffer of %zd bytes",
                     position, end, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(decode_records_doc,
"decode_records(data, position, end, count, base_offset, base_timestamp) -> list[Record]\n\n"
"Decode `count` uncompressed v2 records from data[position:end] (any buffer).\n"
"Raises CorruptRecordError naming the record index and byte position on bad framing.");

static PyObject *
decode_records(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "position", "end", "count", "base_offset", "base_timestamp",
                             NULL};
    PyObject *data, *list = NULL;
    Py_ssize_t position, end, count;
    long long base_offset, base_timestamp;
    Py_buffer view;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnnnLL:decode_records", kwlist, &data,
                                     &position, &end, &count, &base_offset, &base_timestamp))
        return NULL;
    if (get_records_range(data, &view, position, end) < 0)
        return NULL;
    /* No more than (end - position) / MIN_RECORD_SIZE records fit: a hostile count cannot make
     * us allocate more than the data justifies. */
    Py_ssize_t capacity = (end - position) / MIN_RECORD_SIZE;
    if (count < capacity)
        capacity = count;
    list = PyList_New(capacity < 0 ? 0 : capacity);
    if (list != NULL && walk_records((const uint8_t *)view.buf, position, end, count,
                                     base_offset, base_timestamp, list) < 0)
        Py_CLEAR(list); /* unfilled items are NULL, which list dealloc skips */
    PyBuffer_Release(&view);
    return list;
}

PyDoc_STRVAR(check_records_doc,
"check_records(data, position, end, count) -> None\n\n"
"Check, without decoding them, that data[position:end] holds exactly `count` well-formed\n"
"uncompressed v2 records whose offset deltas are 0, 1, 2... Raises CorruptRecordError as\n"
"decode_records would, naming the record index and byte position.");

static PyObject *
check_records(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "position", "end", "count", NULL};
    PyObject *data;
    Py_ssize_t position, end, count;
    Py_buffer view;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Onnn:check_records", kwlist, &data,
                                     &position, &end, &count))
        return NULL;
    if (get_records_range(data, &view, position, end) < 0)
        return NULL;
    int status = check_records_raw((const uint8_t *)view.buf, position, end, count);
    PyBuffer_Release(&view);
    return status < 0 ? NULL : Py_NewRef(Py_None);
}

/* --- Encoding ------------------------------------------------------------------------------ */

/* The output: a bytes object over-allocated as records are appended, trimmed at the end. */
typedef struct {
    PyObject *bytes;
    Py_ssize_t len;
    Py_ssize_t cap;
} writer;

/* Makes room for `extra` more bytes; returns a pointer to the first free byte, or NULL. */
static uint8_t *
writer_reserve(writer *w, Py_ssize_t extra)
{
    if (extra > w->cap - w->len) {
        if (extra > PY_SSIZE_T_MAX / 2 - w->len) {
            PyErr_NoMemory();
            return NULL;
        }
        Py_ssize_t cap = w->len + extra;
        if (cap < w->cap * 2)
            cap = w->cap * 2;
        if (_PyBytes_Resize(&w->bytes, cap) < 0) /* frees and clears w->bytes on failure */
            return NULL;
        w->cap = cap;
    }
    return (uint8_t *)PyBytes_AS_STRING(w->bytes) + w->len;
}

/* Marks everything up to p (a pointer into the writer's buffer) as written. */
static inline void
writer_commit(writer *w, const uint8_t *p)
{
    w->len = p - (const uint8_t *)PyBytes_AS_STRING(w->bytes);
}

/* Writes the zigzag varint of `value` at p; returns the next free byte. */
static inline uint8_t *
put_varint(uint8_t *p, int64_t value)
{
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (raw >= 0x80) {
        *p++ = (uint8_t)(raw | 0x80);
        raw >>= 7;
    }
    *p++ = (uint8_t)raw;
    return p;
}

static int
write_byte(writer *w, uint8_t byte)
{
    uint8_t *p = writer_reserve(w, 1);
    if (p == NULL)
        return -1;
    *p = byte;
    writer_commit(w, p + 1);
    return 0;
}

/* Appends `length varint | data`; the length must fit int32. */
static int
write_sized(writer *w, const char *data, Py_ssize_t len, Py_ssize_t index, const char *what)
{
    if (len > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "record %zd: %s length %zd does not fit int32", index,
                     what, len);
        return -1;
    }
    uint8_t *p = writer_reserve(w, VARINT_MAX_BYTES + len);
    if (p == NULL)
        return -1;
    p = put_varint(p, len);
    memcpy(p, data, (size_t)len);
    writer_commit(w, p + len);
    return 0;
}

/* Appends a key or value: bytes, bytearray, memoryview (its raw bytes) or None (length -1). */
static int
write_nullable(writer *w, PyObject *obj, Py_ssize_t index, const char *what)
{
    if (obj == Py_None)
        return write_byte(w, NULL_LENGTH_BYTE);
    if (PyBytes_Check(obj))
        return write_sized(w, PyBytes_AS_STRING(obj), PyBytes_GET_SIZE(obj), index, what);
    /* No Python code runs between reading a bytearray's pointer and copying from it. */
    if (PyByteArray_Check(obj))
        return write_sized(w, PyByteArray_AS_STRING(obj), PyByteArray_GET_SIZE(obj), index, what);
    if (PyMemoryView_Check(obj)) {
        /* A copy, as the Python codec makes: a memoryview may be strided or of wider items. */
        PyObject *copy = PyBytes_FromObject(obj);
        if (copy == NULL)
            return -1;
        int rc = write_sized(w, PyBytes_AS_STRING(copy), PyBytes_GET_SIZE(copy), index, what);
        Py_DECREF(copy);
        return rc;
    }
    PyErr_Format(PyExc_TypeError,
                 "record %zd: %s must be bytes, bytearray, memoryview or None, not %.100s", index,
                 what, Py_TYPE(obj)->tp_name);
    return -1;
}

/* An int that fits int64, else TypeError/ValueError naming `what`, prefixed with the record
 * index when index >= 0 (the Python codec's messages). */
static int
as_int64(PyObject *obj, const char *what, Py_ssize_t index, int64_t *out)
{
    int overflow = 0;
    if (PyLong_Check(obj) && (*out = PyLong_AsLongLongAndOverflow(obj, &overflow), !overflow))
        return 0;
    char prefix[48] = "";
    if (index >= 0)
        PyOS_snprintf(prefix, sizeof prefix, "record %zd: ", index);
    if (overflow)
        PyErr_Format(PyExc_ValueError, "%s%s %R does not fit int64", prefix, what, obj);
    else
        PyErr_Format(PyExc_TypeError, "%s%s must be an int, not %.100s", prefix, what,
                     Py_TYPE(obj)->tp_name);
    return -1;
}

/* Appends a record's header count and its (str key, nullable bytes value) pairs. */
static int
write_headers(writer *w, PyObject *headers, Py_ssize_t index)
{
    int nonempty = PyObject_IsTrue(headers); /* as the Python codec: () and None mean none */
    if (nonempty <= 0)
        return nonempty < 0 ? -1 : write_byte(w, 0);
    PyObject *seq = PySequence_Fast(headers, "headers must be an iterable of (key, value) pairs");
    if (seq == NULL)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    uint8_t *p = writer_reserve(w, VARINT_MAX_BYTES);
    if (p == NULL)
        goto fail;
    writer_commit(w, put_varint(p, count));
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, k);
        if (!(PyTuple_CheckExact(pair) || PyList_CheckExact(pair)) ||
            PySequence_Fast_GET_SIZE(pair) != 2) {
            PyErr_Format(PyExc_TypeError, "record %zd: header %R is not a (key, value) pair",
                         index, pair);
            goto fail;
        }
        PyObject *key = PySequence_Fast_GET_ITEM(pair, 0);
        if (!PyUnicode_Check(key)) {
            PyErr_Format(PyExc_TypeError, "record %zd: header key must be str, not %.100s", index,
                         Py_TYPE(key)->tp_name);
            goto fail;
        }
        Py_ssize_t key_len;
        const char *key_utf8 = PyUnicode_AsUTF8AndSize(key, &key_len);
        if (key_utf8 == NULL || write_sized(w, key_utf8, key_len, index, "header key") < 0 ||
            write_nullable(w, PySequence_Fast_GET_ITEM(pair, 1), index, "header value") < 0)
            goto fail;
    }
    Py_DECREF(seq);
    return 0;
fail:
    Py_DECREF(seq);
    return -1;
}

/* A record field as a new reference: straight from the slot for an exact Record. */
static PyObject *
get_field(PyObject *record, int f)
{
    if (fast_slots && Py_IS_TYPE(record, (PyTypeObject *)record_type)) {
        PyObject *value = *(PyObject **)((char *)record + field_offset[f]);
        if (value == NULL)
            PyErr_Format(PyExc_AttributeError, "Record has no attribute '%s'", field_names[f]);
        return Py_XNewRef(value);
    }
    return PyObject_GetAttr(record, field_str[f]);
}

/* Appends the key, value or headers field of `record`. */
static int
write_field(writer *w, PyObject *record, int f, Py_ssize_t index)
{
    PyObject *obj = get_field(record, f);
    if (obj == NULL)
        return -1;
    int rc = f == F_HEADERS ? write_headers(w, obj, index)
                            : write_nullable(w, obj, index, field_names[f]);
    Py_DECREF(obj);
    return rc;
}

/* The framing of one record, shared by encode_records and encode_columns. The length comes
 * first but is known last: record_begin leaves room for its longest varint and writes
 * attributes, timestampDelta and offsetDelta; the caller appends key, value and headers;
 * record_end puts the length in front of the body and closes the gap. */
static Py_ssize_t
record_begin(writer *w, int64_t timestamp_delta, int64_t offset_delta)
{
    Py_ssize_t start = w->len;
    uint8_t *p = writer_reserve(w, VARINT_MAX_BYTES + 1 + VARLONG_MAX_BYTES + VARINT_MAX_BYTES);
    if (p == NULL)
        return -1;
    p += VARINT_MAX_BYTES;
    *p++ = 0; /* attributes */
    p = put_varint(p, timestamp_delta);
    writer_commit(w, put_varint(p, offset_delta));
    return start;
}

static int
record_end(writer *w, Py_ssize_t start, Py_ssize_t index)
{
    Py_ssize_t body = start + VARINT_MAX_BYTES, size = w->len - body;
    if (size > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "record %zd: record size %zd does not fit int32", index,
                     size);
        return -1;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(w->bytes);
    uint8_t *after_length = put_varint(out + start, size);
    memmove(after_length, out + body, (size_t)size);
    writer_commit(w, after_length + size);
    return 0;
}

/* Appends record number `index`; *max_timestamp tracks the largest timestamp. */
static int
encode_one(writer *w, PyObject *record, Py_ssize_t index, int64_t base_timestamp, int64_t now_ms,
           int has_base_offset, int64_t base_offset, int64_t *max_timestamp)
{
    int64_t timestamp, offset_delta = (int64_t)index;
    PyObject *obj = get_field(record, F_TIMESTAMP);
    if (obj == NULL)
        return -1;
    int rc = obj == Py_None ? (timestamp = now_ms, 0)
                            : as_int64(obj, "timestamp", index, &timestamp);
    Py_DECREF(obj);
    if (rc < 0)
        return -1;
    if (timestamp > *max_timestamp)
        *max_timestamp = timestamp;
    if ((base_timestamp < 0 && timestamp > INT64_MAX + base_timestamp) ||
        (base_timestamp > 0 && timestamp < INT64_MIN + base_timestamp)) {
        PyErr_Format(PyExc_ValueError, "record %zd: timestamp delta %lld - %lld does not fit int64",
                     index, (long long)timestamp, (long long)base_timestamp);
        return -1;
    }
    if (has_base_offset) {
        /* Rewritten batches (compaction) keep each record's own offset. */
        int64_t offset;
        PyObject *off = get_field(record, F_OFFSET);
        if (off == NULL)
            return -1;
        rc = as_int64(off, "offset", index, &offset);
        Py_DECREF(off);
        if (rc < 0)
            return -1;
        if (offset < base_offset || (uint64_t)offset - (uint64_t)base_offset > INT32_MAX) {
            PyErr_Format(PyExc_ValueError,
                         "record %zd: offset %lld is not within 2^31-1 after base offset %lld",
                         index, (long long)offset, (long long)base_offset);
            return -1;
        }
        offset_delta = offset - base_offset;
    }
    if (offset_delta > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "record %zd: offset delta does not fit int32", index);
        return -1;
    }
    Py_ssize_t start = record_begin(w, timestamp - base_timestamp, offset_delta);
    if (start < 0 || write_field(w, record, F_KEY, index) < 0 ||
        write_field(w, record, F_VALUE, index) < 0 || write_field(w, record, F_HEADERS, index) < 0)
        return -1;
    return record_end(w, start, index);
}

PyDoc_STRVAR(encode_records_doc,
"encode_records(records, base_timestamp, now_ms, base_offset=None) -> tuple[bytes, int]\n\n"
"Encode the records section of a batch: (bytes, max timestamp, or -1 when empty).\n"
"offsetDelta is each record's index, or record.offset - base_offset when base_offset is\n"
"given; a None timestamp becomes now_ms.");

static PyObject *
encode_records(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"records", "base_timestamp", "now_ms", "base_offset", NULL};
    PyObject *records, *base_obj, *now_obj, *offset_obj = Py_None;
    int64_t base_timestamp, now_ms, base_offset = 0, max_timestamp = -1;

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|O:encode_records", kwlist, &records,
                                     &base_obj, &now_obj, &offset_obj) ||
        as_int64(base_obj, "base_timestamp", -1, &base_timestamp) < 0 ||
        as_int64(now_obj, "now_ms", -1, &now_ms) < 0 ||
        (offset_obj != Py_None && as_int64(offset_obj, "base_offset", -1, &base_offset) < 0))
        return NULL;
    int has_base_offset = offset_obj != Py_None;
    PyObject *seq = PySequence_Fast(records, "records must be a sequence of Record");
    if (seq == NULL)
        return NULL;
    /* A first guess; the writer doubles when it is short. */
    Py_ssize_t guess = PySequence_Fast_GET_SIZE(seq) * GUESS_PER_RECORD + GUESS_PER_RECORD;
    if (guess > MAX_FIRST_GUESS)
        guess = MAX_FIRST_GUESS;
    writer w = {PyBytes_FromStringAndSize(NULL, guess), 0, guess};
    if (w.bytes == NULL)
        goto fail;
    /* Re-read the size and item each time: a property on a Record subclass could mutate a list. */
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *record = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        int rc = encode_one(&w, record, i, base_timestamp, now_ms, has_base_offset, base_offset,
                            &max_timestamp);
        Py_DECREF(record);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(seq);
    if (_PyBytes_Resize(&w.bytes, w.len) < 0)
        return NULL;
    PyObject *result = Py_BuildValue("(OL)", w.bytes, (long long)max_timestamp);
    Py_DECREF(w.bytes);
    return result;
fail:
    Py_DECREF(seq);
    Py_XDECREF(w.bytes);
    return NULL;
}

/* --- Encoding from Arrow columns ----------------------------------------------------------- */

/* One Arrow variable-width binary column (int32 offsets), or a list's offsets when data is
 * absent: the buffers as Arrow holds them and the array's offset in elements. */
typedef struct {
    Py_buffer valid, offsets, data;
    int has_valid, has_offsets, has_data;
    Py_ssize_t off;
} arrow_col;

static void
col_release(arrow_col *c)
{
    if (c->has_valid)
        PyBuffer_Release(&c->valid);
    if (c->has_offsets)
        PyBuffer_Release(&c->offsets);
    if (c->has_data)
        PyBuffer_Release(&c->data);
    c->has_valid = c->has_offsets = c->has_data = 0;
}

/* Takes optional buffers (None: absent) from items[0..] of `columns`. */
static int
get_buffer(PyObject *obj, Py_buffer *view, int *has)
{
    *has = 0;
    if (obj == Py_None)
        return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0)
        return -1;
    *has = 1;
    return 0;
}

static int
col_get(arrow_col *c, PyObject *valid, PyObject *offsets, PyObject *data, PyObject *off)
{
    c->off = PyLong_AsSsize_t(off);
    if (c->off == -1 && PyErr_Occurred())
        return -1;
    if (c->off < 0) {
        PyErr_SetString(PyExc_ValueError, "a column's offset must not be negative");
        return -1;
    }
    if (get_buffer(valid, &c->valid, &c->has_valid) < 0 ||
        get_buffer(offsets, &c->offsets, &c->has_offsets) < 0 ||
        (data != NULL && get_buffer(data, &c->data, &c->has_data) < 0))
        return -1;
    return 0;
}

/* Whether element i is valid (no validity bitmap: all are). The bitmap was bounds-checked. */
static inline int
col_valid(const arrow_col *c, Py_ssize_t i)
{
    if (!c->has_valid)
        return 1;
    Py_ssize_t bit = c->off + i;
    return (((const uint8_t *)c->valid.buf)[bit >> 3] >> (bit & 7)) & 1;
}

/* Checks that elements [0, n) are inside the column's buffers. */
static int
col_check(const arrow_col *c, Py_ssize_t n, const char *what)
{
    if ((c->has_valid && c->valid.len < (c->off + n + 7) / 8) ||
        (c->has_offsets && c->offsets.len / 4 < c->off + n + 1)) {
        PyErr_Format(PyExc_ValueError, "%s column is shorter than its %zd rows", what, n);
        return -1;
    }
    return 0;
}

/* Element i's [begin, end) in the data (or child) buffer, checked against `limit`. */
static int
col_span(const arrow_col *c, Py_ssize_t i, Py_ssize_t limit, Py_ssize_t index, const char *what,
         int32_t *begin, int32_t *end)
{
    const char *o = (const char *)c->offsets.buf + 4 * (c->off + i);
    memcpy(begin, o, 4);
    memcpy(end, o + 4, 4);
    if (*begin < 0 || *end < *begin || *end > limit) {
        PyErr_Format(PyExc_ValueError, "record %zd: %s offsets %d..%d outside 0..%zd", index,
                     what, (int)*begin, (int)*end, limit);
        return -1;
    }
    return 0;
}

/* Appends element i of a binary column: its bytes, or a null length when invalid. */
static int
write_col_value(writer *w, const arrow_col *c, Py_ssize_t i, Py_ssize_t index, const char *what)
{
    if (!c->has_offsets || !col_valid(c, i))
        return write_byte(w, NULL_LENGTH_BYTE);
    int32_t begin, end;
    if (col_span(c, i, c->has_data ? c->data.len : 0, index, what, &begin, &end) < 0)
        return -1;
    return write_sized(w, (const char *)c->data.buf + begin, end - begin, index, what);
}

enum { C_KEY, C_VALUE, C_HEADERS, C_HEADER_KEY, C_HEADER_VALUE, N_COLS };
#define N_COLUMN_ITEMS 21

PyDoc_STRVAR(encode_columns_doc,
"encode_columns(columns, start, end, base_timestamp) -> tuple[bytes, int]\n\n"
"encode_records for rows start..end-1 of Arrow columns (a RecordColumns, see\n"
"tierlog.records.columns): offsetDelta is the row's index from start, the timestamps are\n"
"set. Same bytes as encode_records on the equivalent Records.");

static PyObject *
encode_columns(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"columns", "start", "end", "base_timestamp", NULL};
    PyObject *columns, *base_obj;
    Py_ssize_t start, end;
    int64_t base_timestamp, max_timestamp = -1;
    arrow_col cols[N_COLS];
    Py_buffer stamps;
    int has_stamps = 0;
    Py_ssize_t stamps_off = 0;
    memset(cols, 0, sizeof cols);
    writer w = {NULL, 0, 0};

    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OnnO:encode_columns", kwlist, &columns,
                                     &start, &end, &base_obj) ||
        as_int64(base_obj, "base_timestamp", -1, &base_timestamp) < 0)
        return NULL;
    if (!PyTuple_Check(columns) || PyTuple_GET_SIZE(columns) != N_COLUMN_ITEMS) {
        PyErr_Format(PyExc_TypeError, "columns must be a RecordColumns of %d items",
                     N_COLUMN_ITEMS);
        return NULL;
    }
    if (start < 0 || end < start) {
        PyErr_Format(PyExc_ValueError, "rows %zd..%zd are not a range", start, end);
        return NULL;
    }
#define ITEM(k) PyTuple_GET_ITEM(columns, k)
    if (col_get(&cols[C_KEY], ITEM(0), ITEM(1), ITEM(2), ITEM(3)) < 0 ||
        col_get(&cols[C_VALUE], ITEM(4), ITEM(5), ITEM(6), ITEM(7)) < 0 ||
        get_buffer(ITEM(8), &stamps, &has_stamps) < 0 ||
        (stamps_off = PyLong_AsSsize_t(ITEM(9)), stamps_off == -1 && PyErr_Occurred()) ||
        col_get(&cols[C_HEADERS], ITEM(10), ITEM(11), NULL, ITEM(12)) < 0 ||
        col_get(&cols[C_HEADER_KEY], ITEM(13), ITEM(14), ITEM(15), ITEM(16)) < 0 ||
        col_get(&cols[C_HEADER_VALUE], ITEM(17), ITEM(18), ITEM(19), ITEM(20)) < 0)
        goto fail;
#undef ITEM
    if (!cols[C_VALUE].has_offsets || !has_stamps) {
        PyErr_SetString(PyExc_ValueError, "columns need values and timestamps");
        goto fail;
    }
    if (col_check(&cols[C_KEY], end, "the key") < 0 ||
        col_check(&cols[C_VALUE], end, "the value") < 0 ||
        col_check(&cols[C_HEADERS], end, "the headers") < 0 || stamps_off < 0 ||
        stamps.len / 8 < stamps_off + end) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_ValueError, "the timestamp column is shorter than its %zd rows",
                         end);
        goto fail;
    }
    /* The header children: every element any row's list points at must be inside them. */
    Py_ssize_t children = 0;
    if (cols[C_HEADERS].has_offsets) {
        if (!cols[C_HEADER_KEY].has_offsets || !cols[C_HEADER_VALUE].has_offsets) {
            PyErr_SetString(PyExc_ValueError, "headers need their key and value columns");
            goto fail;
        }
        Py_ssize_t a = cols[C_HEADER_KEY].offsets.len / 4 - cols[C_HEADER_KEY].off - 1;
        Py_ssize_t b = cols[C_HEADER_VALUE].offsets.len / 4 - cols[C_HEADER_VALUE].off - 1;
        children = a < b ? a : b;
        for (int k = C_HEADER_KEY; k <= C_HEADER_VALUE; k++)
            if (cols[k].has_valid) {
                Py_ssize_t bits = cols[k].valid.len * 8 - cols[k].off;
                children = children < bits ? children : bits;
            }
        if (children < 0)
            children = 0;
    }
    Py_ssize_t guess = (end - start) * GUESS_PER_RECORD + GUESS_PER_RECORD;
    if (guess > MAX_FIRST_GUESS)
        guess = MAX_FIRST_GUESS;
    w.bytes = PyBytes_FromStringAndSize(NULL, guess);
    w.cap = guess;
    if (w.bytes == NULL)
        goto fail;
    for (Py_ssize_t row = start; row < end; row++) {
        Py_ssize_t index = row - start;
        int64_t timestamp;
        memcpy(&timestamp, (const char *)stamps.buf + 8 * (stamps_off + row), 8);
        if (timestamp > max_timestamp)
            max_timestamp = timestamp;
        if ((base_timestamp < 0 && timestamp > INT64_MAX + base_timestamp) ||
            (base_timestamp > 0 && timestamp < INT64_MIN + base_timestamp)) {
            PyErr_Format(PyExc_ValueError,
                         "record %zd: timestamp delta %lld - %lld does not fit int64", index,
                         (long long)timestamp, (long long)base_timestamp);
            goto fail;
        }
        if (index > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "record %zd: offset delta does not fit int32", index);
            goto fail;
        }
        Py_ssize_t rec = record_begin(&w, timestamp - base_timestamp, index);
        if (rec < 0 || write_col_value(&w, &cols[C_KEY], row, index, "key") < 0 ||
            write_col_value(&w, &cols[C_VALUE], row, index, "value") < 0)
            goto fail;
        int32_t first = 0, last = 0;
        if (cols[C_HEADERS].has_offsets && col_valid(&cols[C_HEADERS], row) &&
            col_span(&cols[C_HEADERS], row, children, index, "header", &first, &last) < 0)
            goto fail;
        uint8_t *p = writer_reserve(&w, VARINT_MAX_BYTES);
        if (p == NULL)
            goto fail;
        writer_commit(&w, put_varint(p, last - first));
        for (int32_t h = first; h < last; h++) {
            if (!col_valid(&cols[C_HEADER_KEY], h)) {
                PyErr_Format(PyExc_ValueError, "record %zd: a header key is null", index);
                goto fail;
            }
            if (write_col_value(&w, &cols[C_HEADER_KEY], h, index, "header key") < 0 ||
                write_col_value(&w, &cols[C_HEADER_VALUE], h, index, "header value") < 0)
                goto fail;
        }
        if (record_end(&w, rec, index) < 0)
            goto fail;
    }
    for (int k = 0; k < N_COLS; k++)
        col_release(&cols[k]);
    PyBuffer_Release(&stamps);
    if (_PyBytes_Resize(&w.bytes, w.len) < 0)
        return NULL;
    PyObject *result = Py_BuildValue("(OL)", w.bytes, (long long)max_timestamp);
    Py_DECREF(w.bytes);
    return result;
fail:
    for (int k = 0; k < N_COLS; k++)
        col_release(&cols[k]);
    if (has_stamps)
        PyBuffer_Release(&stamps);
    Py_XDECREF(w.bytes);
    return NULL;
}

/* --- Module -------------------------------------------------------------------------------- */

/* A new reference to `module`.`name`. */
static PyObject *
import_attr(const char *module, const char *name)
{
    PyObject *mod = PyImport_ImportModule(module);
    if (mod == NULL)
        return NULL;
    PyObject *attr = PyObject_GetAttrString(mod, name);
    Py_DECREF(mod);
    return attr;
}

/* Imports Record and CorruptRecordError and locates Record's slots. */
static int
load_types(void)
{
    record_type = import_attr("tierlog.records.record", "Record");
    if (record_type == NULL)
        return -1;
    corrupt_error = import_attr("tierlog.errors", "CorruptRecordError");
    if (corrupt_error == NULL)
        return -1;
    if (!PyType_Check(record_type)) {
        PyErr_SetString(PyExc_TypeError, "tierlog.records.record.Record is not a class");
        return -1;
    }
    fast_slots = 1;
    for (int f = 0; f < N_FIELDS; f++) {
        field_str[f] = PyUnicode_InternFromString(field_names[f]);
        if (field_str[f] == NULL)
            return -1;
        PyObject *descr = PyObject_GetAttr(record_type, field_str[f]);
        if (descr == NULL)
            return -1;
        field_offset[f] = -1;
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY))
                field_offset[f] = member->offset;
        }
        Py_DECREF(descr);
        if (field_offset[f] < 0)
            fast_slots = 0;
    }
    return 0;
}

static PyMethodDef methods[] = {
    {"decode_records", (PyCFunction)(void (*)(void))decode_records, METH_VARARGS | METH_KEYWORDS,
     decode_records_doc},
    {"encode_records", (PyCFunction)(void (*)(void))encode_records, METH_VARARGS | METH_KEYWORDS,
     encode_records_doc},
    {"check_records", (PyCFunction)(void (*)(void))check_records, METH_VARARGS | METH_KEYWORDS,
     check_records_doc},
    {"encode_columns", (PyCFunction)(void (*)(void))encode_columns, METH_VARARGS | METH_KEYWORDS,
     encode_columns_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_speedups",
    .m_doc = "C accelerator of tierlog's per-record codec for v2 record batches.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    if (load_types() < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    /* For tierlog.records._plain_batch_write, which checks records on the append hot path. */
    PyObject *capsule = PyCapsule_New((void *)check_records_raw, CHECK_RECORDS_CAPSULE, NULL);
    if (capsule == NULL || PyModule_AddObject(module, "check_records_capi", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
