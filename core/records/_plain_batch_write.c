/* tierlog.records._plain_batch_write: the C twin of tierlog.records.plain_batch_write.write_plain_batch_py.
 *
 * write_plain_batch() checks one plain producer batch (v2, no producer id, no control records),
 * its CRC-32C and, when the rules ask, its records' framing; compares it with the caller's
 * limits, and writes it at a file position with its base offset (and optionally its partition
 * leader epoch) patched into a 16-byte prefix on the stack: one pwritev of that prefix and the
 * rest of the caller's buffer, with the GIL released. Same arguments, results and None cases as
 * the Python function; the CRC is the crc32c package's, the records check the codec's
 * (tierlog.records._speedups, through a capsule). Its core, write_plain(), is handed to
 * tierlog.log._segment_appender through the capsule described in _plain_batch_write.h. Single-phase module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "_plain_batch_write.h"

/* The v2 batch header fields this needs (byte offsets) and its size. */
#define LENGTH_AT 8
#define EPOCH_AT 12
#define MAGIC_AT 16
#define CRC_AT 17
#define ATTRIBUTES_AT 21
#define LAST_OFFSET_DELTA_AT 23
#define MAX_TIMESTAMP_AT 35
#define PRODUCER_ID_AT 43
#define RECORDS_COUNT_AT 57
#define HEADER_SIZE 61
#define LOG_OVERHEAD 12
#define CONTROL_MASK 0x20
#define COMPRESSION_MASK 0x07
#define CURRENT_MAGIC 2
#define CHECK_RECORDS_CAPSULE "tierlog.records._speedups.check_records_capi"

static PyObject *crc32c_function; /* crc32c.crc32c, imported once */
static PyObject *corrupt_error;   /* tierlog.errors.CorruptRecordError */
/* _speedups' check_records on a raw buffer: 0, or -1 with CorruptRecordError set. */
static int (*check_records)(const uint8_t *, Py_ssize_t, Py_ssize_t, Py_ssize_t);

static inline uint32_t
read_u32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static inline int64_t
read_i64(const uint8_t *p)
{
    return (int64_t)(((uint64_t)read_u32(p) << 32) | read_u32(p + 4));
}

/* 1 when crc32c(data[from:]) equals `expected`, 0 when not, -1 with an exception set. */
static int
crc_matches(const uint8_t *data, Py_ssize_t from, Py_ssize_t size, uint32_t expected)
{
    PyObject *view = PyMemoryView_FromMemory((char *)data + from, size - from, PyBUF_READ);
    if (view == NULL)
        return -1;
    PyObject *crc = PyObject_CallOneArg(crc32c_function, view);
    Py_DECREF(view);
    if (crc == NULL)
        return -1;
    unsigned long value = PyLong_AsUnsignedLong(crc);
    Py_DECREF(crc);
    if (value == (unsigned long)-1 && PyErr_Occurred())
        return -1;
    return value == expected;
}

/* pwritev of prefix + body at `position`, finishing short writes and retrying on EINTR.
 * Returns 0, or -1 with OSError set. */
static int
write_fully(int fd, int64_t position, uint8_t *prefix, Py_ssize_t prefix_size,
            const uint8_t *body, Py_ssize_t body_size)
{
    struct iovec iov[2] = {{prefix, (size_t)prefix_size}, {(void *)body, (size_t)body_size}};
    struct iovec *next = iov;
    int count = 2;
    for (;;) {
        ssize_t n;
        int saved_errno;
        Py_BEGIN_ALLOW_THREADS
        n = pwritev(fd, next, count, (off_t)position);
        saved_errno = errno;
        Py_END_ALLOW_THREADS
        if (n < 0) {
            if (saved_errno == EINTR) {
                if (PyErr_CheckSignals() < 0)
                    return -1;
                continue;
            }
            errno = saved_errno;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        position += n;
        while (count > 0 && (size_t)n >= next->iov_len) {
            n -= (ssize_t)next->iov_len;
            next++;
            count--;
        }
        if (count == 0)
            return 0;
        next->iov_base = (uint8_t *)next->iov_base + n;
        next->iov_len -= (size_t)n;
    }
}

/* Reads PlainBatchRules (4 ints and a bool) into *rules; 0, or -1 with TypeError set. */
static int
plain_rules_from_tuple(PyObject *tuple, plain_rules *rules)
{
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != 5) {
        PyErr_SetString(PyExc_TypeError, "rules must be a tuple of 4 ints and a bool");
        return -1;
    }
    int64_t *limits[4] = {&rules->max_end_position, &rules->max_last_offset,
                          &rules->max_timestamp, &rules->max_batch_bytes};
    for (int i = 0; i < 4; i++) {
        *limits[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(tuple, i));
        if (*limits[i] == -1 && PyErr_Occurred())
            return -1;
    }
    rules->check_records = PyObject_IsTrue(PyTuple_GET_ITEM(tuple, 4));
    return rules->check_records < 0 ? -1 : 0;
}

/* A leader epoch argument: None (*have_epoch = 0) or an int32; 0, or -1 with an exception set. */
static int
epoch_from_object(PyObject *obj, int *have_epoch, int32_t *epoch)
{
    *have_epoch = obj != Py_None;
    *epoch = 0;
    if (!*have_epoch)
        return 0;
    long value = PyLong_AsLong(obj);
    if (value == -1 && PyErr_Occurred())
        return -1;
    if (value < INT32_MIN || value > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "leader epoch %ld does not fit an int32", value);
        return -1;
    }
    *epoch = (int32_t)value;
    return 0;
}

/* The capsule's function (see _plain_batch_write.h): check, then write, one plain batch. */
static int
write_plain(int fd, int64_t position, const uint8_t *data, Py_ssize_t size, int64_t base_offset,
            int have_epoch, int32_t epoch, const plain_rules *rules, plain_written *out)
{
    if (size < HEADER_SIZE || size > rules->max_batch_bytes
            || position > rules->max_end_position - size)
        return 0;
    int64_t length = (int32_t)read_u32(data + LENGTH_AT);
    int32_t delta = (int32_t)read_u32(data + LAST_OFFSET_DELTA_AT);
    int32_t count = (int32_t)read_u32(data + RECORDS_COUNT_AT);
    int64_t max_timestamp = read_i64(data + MAX_TIMESTAMP_AT);
    int64_t last_offset;
    if (length + LOG_OVERHEAD != size || data[MAGIC_AT] != CURRENT_MAGIC
            || read_i64(data + PRODUCER_ID_AT) != -1 || (data[ATTRIBUTES_AT + 1] & CONTROL_MASK)
            || count < 1 || delta != count - 1 || max_timestamp > rules->max_timestamp
            || __builtin_add_overflow(base_offset, (int64_t)delta, &last_offset)
            || last_offset > rules->max_last_offset)
        return 0;
    int crc_ok = crc_matches(data, ATTRIBUTES_AT, size, read_u32(data + CRC_AT));
    if (crc_ok <= 0)
        return crc_ok;
    if (rules->check_records) {
        if (data[ATTRIBUTES_AT + 1] & COMPRESSION_MASK)
            return 0; /* the general path decompresses to check */
        if (check_records(data, HEADER_SIZE, size, count) < 0) {
            if (!PyErr_ExceptionMatches(corrupt_error))
                return -1; /* not a verdict on the batch (no memory?): let it propagate */
            PyErr_Clear(); /* the general path raises it again, with the batch's position */
            return 0;
        }
    }
    if (!have_epoch)
        epoch = (int32_t)read_u32(data + EPOCH_AT);
    uint8_t prefix[MAGIC_AT];
    put_be32(prefix, (uint32_t)((uint64_t)base_offset >> 32));
    put_be32(prefix + 4, (uint32_t)base_offset);
    memcpy(prefix + LENGTH_AT, data + LENGTH_AT, 4);
    put_be32(prefix + EPOCH_AT, (uint32_t)epoch);
    if (write_fully(fd, position, prefix, MAGIC_AT, data + MAGIC_AT, size - MAGIC_AT) < 0)
        return -1;
    out->size = size;
    out->last_offset = last_offset;
    out->max_timestamp = max_timestamp;
    out->record_count = count;
    out->leader_epoch = epoch;
    return 1;
}

PyDoc_STRVAR(write_plain_batch_doc,
"write_plain_batch(fd, position, data, base_offset, leader_epoch, rules)\n"
"--\n\n"
"Write one plain batch at `position` of `fd` with `base_offset` and, unless None, `leader_epoch`\n"
"patched in. Returns (size, last_offset, max_timestamp, record_count, written_leader_epoch),\n"
"or None (nothing written) when the batch is not plain, is damaged, or breaks `rules`\n"
"(max_end_position, max_last_offset, max_timestamp, max_batch_bytes, check_records).");

static PyObject *
write_plain_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "write_plain_batch takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    int64_t position = PyLong_AsLongLong(args[1]);
    int64_t base_offset = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "bad file descriptor %ld", fd);
        return NULL;
    }
    int have_epoch;
    int32_t epoch;
    plain_rules rules;
    if (epoch_from_object(args[4], &have_epoch, &epoch) < 0
            || plain_rules_from_tuple(args[5], &rules) < 0)
        return NULL;
    Py_buffer buffer;
    if (PyObject_GetBuffer(args[2], &buffer, PyBUF_SIMPLE) < 0)
        return NULL;
    plain_written out;
    int status = write_plain((int)fd, position, buffer.buf, buffer.len, base_offset, have_epoch,
                             epoch, &rules, &out);
    PyBuffer_Release(&buffer);
    if (status < 0)
        return NULL;
    if (status == 0)
        Py_RETURN_NONE;
    return Py_BuildValue("(nLLii)", out.size, (long long)out.last_offset,
                         (long long)out.max_timestamp, out.record_count, out.leader_epoch);
}

static PyMethodDef methods[] = {
    {"write_plain_batch", (PyCFunction)(void (*)(void))write_plain_batch, METH_FASTCALL,
     write_plain_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_plain_batch_write",
    .m_doc = "C twin of tierlog.records.plain_batch_write.write_plain_batch_py.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__plain_batch_write(void)
{
    PyObject *crc32c_module = PyImport_ImportModule("crc32c");
    if (crc32c_module == NULL)
        return NULL;
    crc32c_function = PyObject_GetAttrString(crc32c_module, "crc32c");
    Py_DECREF(crc32c_module);
    if (crc32c_function == NULL)
        return NULL;
    /* PyCapsule_Import walks attributes from the package: the submodule must be imported. */
    PyObject *speedups = PyImport_ImportModule("tierlog.records._speedups");
    if (speedups == NULL)
        return NULL;
    Py_DECREF(speedups);
    check_records = PyCapsule_Import(CHECK_RECORDS_CAPSULE, 0);
    if (check_records == NULL)
        return NULL;
    PyObject *errors = PyImport_ImportModule("tierlog.errors");
    if (errors == NULL)
        return NULL;
    corrupt_error = PyObject_GetAttrString(errors, "CorruptRecordError");
    Py_DECREF(errors);
    if (corrupt_error == NULL)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    static plain_batch_capi capi = {write_plain, plain_rules_from_tuple, epoch_from_object};
    PyObject *capsule = PyCapsule_New(&capi, PLAIN_BATCH_CAPSULE, NULL);
    if (PyModule_AddObject(module, "write_plain_capi", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
