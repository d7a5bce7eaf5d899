/* The one C home of Kafka's v2 record framing rules that tierlog's C decoders share
 * (tierlog.records._speedups, which decodes and checks records, and
 * tierlog.records.arrow._columnar, which decodes them into Arrow buffers): zigzag varints with
 * their longest encodings and overflow rules, length fields (-1 = null) bounded by the
 * record's end, and the error they
 * raise. The pure-Python twin of these rules is core/records/_codec_py.py.
 *
 * A file that includes this header defines, before including it,
 *     static PyObject *corrupt_error;   (tierlog.errors.CorruptRecordError, set at module init)
 * Every function is static inline: each extension gets its own copy of the code, from one text.
 */
#ifndef TIERLOG_RECORD_FRAMING_H
#define TIERLOG_RECORD_FRAMING_H

#include <Python.h>
#include <stdarg.h>
#include <stdint.h>

/* Longest encodings Kafka allows: an int32 varint and an int64 varlong. */
#define VARINT_MAX_BYTES 5
#define VARLONG_MAX_BYTES 10
/* Smallest record: length, attributes, timestampDelta, offsetDelta, keyLength, valueLength and
 * headerCount of one byte each. Bounds how many records a byte range can hold. */
#define MIN_RECORD_SIZE 7

/* Sets CorruptRecordError("record <index> at byte <pos>: <detail>"); returns -1. */
static inline int
framing_errorv(Py_ssize_t index, Py_ssize_t pos, const char *fmt, va_list va)
{
    PyObject *detail = PyUnicode_FromFormatV(fmt, va);
    if (detail != NULL) {
        PyErr_Format(corrupt_error, "record %zd at byte %zd: %U", index, pos, detail);
        Py_DECREF(detail);
    }
    return -1;
}

static inline int
framing_error(Py_ssize_t index, Py_ssize_t pos, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    framing_errorv(index, pos, fmt, va);
    va_end(va);
    return -1;
}

/* The zigzag varint at *pos, reading no byte at or past `limit`. 0, or -1 with
 * CorruptRecordError (truncated, longer than max_bytes, or overflowing its type: the last byte
 * may only carry the bits that fit int32 / int64); *pos is left where it was on error. */
static inline int
read_varint(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t limit, int max_bytes,
            Py_ssize_t index, int64_t *out)
{
    Py_ssize_t p = *pos;
    if (p < limit && buf[p] < 0x80) { /* the common one-byte case */
        uint64_t raw = buf[p];
        *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
        *pos = p + 1;
        return 0;
    }
    uint64_t raw = 0;
    *out = 0; /* defined on every path (and no maybe-uninitialized warnings at call sites) */
    for (int n = 0; n < max_bytes; n++) {
        if (p + n >= limit)
            return framing_error(index, p, "varint runs past the end of its data");
        uint64_t b = buf[p + n];
        raw |= (b & 0x7F) << (7 * n);
        if (b < 0x80) {
            if (max_bytes == VARINT_MAX_BYTES ? raw > UINT32_MAX : (n == 9 && b > 1))
                return framing_error(index, p, "varint overflows its integer type");
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pos = p + n + 1;
            return 0;
        }
    }
    return framing_error(index, p, "varint longer than %d bytes", max_bytes);
}

/* A length varint (-1 = null) whose bytes must end by rec_end. 0 or -1; errors name the
 * position just after the varint, where the bytes would start. */
static inline int
read_length(const uint8_t *buf, Py_ssize_t *pos, Py_ssize_t rec_end, Py_ssize_t index,
            const char *what, int64_t *n)
{
    if (read_varint(buf, pos, rec_end, VARINT_MAX_BYTES, index, n) < 0)
        return -1;
    if (*n < -1)
        return framing_error(index, *pos, "%s length %lld is below -1", what, (long long)*n);
    if (*n > rec_end - *pos)
        return framing_error(index, *pos, "%s length %lld runs past the record end", what,
                             (long long)*n);
    return 0;
}

#endif /* TIERLOG_RECORD_FRAMING_H */
