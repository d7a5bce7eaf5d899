/* tierlog.log._segment_appender: the C twin of tierlog.segment_appender.PlainAppenderPy.
 *
 * A PlainAppender is an armed active segment's producer hot path in one call: it writes one
 * plain batch through tierlog.records._plain_batch_write's write_plain() (the capsule in
 * records/_plain_batch_write.h), then feeds the indexes by the rule whose one home is
 * tierlog.index.sparse.SparseIndexRule (core/index/sparse.py): an offset-index entry once more
 * than index.interval.bytes were written since the last one, and a time-index entry there when
 * the segment's max timestamp rose. prepare() mirrors SparseIndexRule.add (it cannot call
 * Python per batch); tests/index/test_index_sparse.py proves both place entries identically. It
 * keeps a copy of the segment's tail state, writes entries straight into the indexes' memory
 * maps (whose buffers it holds while armed, so the maps cannot be closed or resized under it),
 * and writes every change through to the Python objects' attributes before returning, so
 * readers never see stale state. It also does what the append means to the log around the
 * segment, so that the producer hot path is this one call: the batch's offsets start at the
 * log's end (`end.next_offset`, its LocalLog's), which it moves past the batch, and it counts
 * the batch into the log's counters (`counts`, a LogStats).
 * It reads and writes only the public contract that segment_appender.py declares
 * (PlainAppendTarget and its parts, PlainAppendEnd, PlainAppendCounts; the settable attributes
 * are APPEND_WRITES), never a private attribute; the tests prove both twins leave the same files and attributes and change nothing
 * else. Not thread-safe: the Log's lock serialises appends. Single-phase module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h> /* T_OBJECT_EX, READONLY: the members that __slots__ makes */
#include <limits.h>
#include <stdint.h>
#include <unistd.h>

#include "../records/_plain_batch_write.h"

#define OFFSET_ENTRY_SIZE 8 /* relative offset int32, position int32 */
#define TIME_ENTRY_SIZE 12  /* timestamp int64, relative offset int32 */

static const plain_batch_capi *batch_api;
static PyObject *timestamp_offset_type; /* tierlog.index.TimestampOffset, a namedtuple */
static PyObject *log_closed_error;      /* tierlog.errors.LogClosedError */

/* Names of the contract (segment_appender.PlainAppendTarget and its parts), interned once. */
static PyObject *str_log, *str_offset_index, *str_time_index, *str_base_offset,
    *str_index_interval_bytes, *str_fileno, *str_size, *str_mapping, *str_entries,
    *str_last_offset, *str_last_entry, *str_bytes_since, *str_max_ts, *str_next_offset,
    *str_append_bytes, *str_append_messages;

/* An attribute of the log's end or counters, read and written on every append. Both are
 * objects with __slots__ (LocalLog, LogStats): a slot is read and written in place, at its
 * offset, as CPython's own specialised LOAD_ATTR_SLOT and STORE_ATTR_SLOT do (the generic
 * protocol costs ~200 instructions an access); anything else, or an object whose type changed
 * since arming, goes through the generic protocol. */
typedef struct {
    PyObject *name;     /* interned (the module's) */
    PyTypeObject *type; /* the object's type when armed (borrowed: the object holds it) */
    Py_ssize_t offset;  /* the slot's offset in the object, or -1: the generic protocol */
} attr_ref;

typedef struct {
    PyObject_HEAD
    int armed;
    int fd;
    PyObject *segment, *log_file, *offset_index, *time_index; /* NULL once disarmed */
    PyObject *end, *counts; /* the log's end (PlainAppendEnd) and counters (PlainAppendCounts) */
    attr_ref next_offset, append_bytes, append_messages;
    PyObject *max_ts_and_offset; /* the segment's TimestampOffset of its max timestamp */
    Py_buffer offset_map, time_map; /* held while armed */
    plain_rules rules;
    int64_t base_offset, interval, position, since_index_entry;
    int64_t max_timestamp, offset_entries, time_entries, time_last_timestamp, room;
} Appender;

static int
get_i64(PyObject *obj, PyObject *name, int64_t *out)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* Finds `name` of obj: its slot when its type has a writable object slot of that name, and
 * reads it once (a wrong object fails when arming, not on an append). */
static int
attr_ref_init(attr_ref *ref, PyObject *obj, PyObject *name)
{
    ref->name = name;
    ref->type = Py_TYPE(obj);
    ref->offset = -1;
    PyObject *descr = PyObject_GetAttr((PyObject *)Py_TYPE(obj), name);
    if (descr == NULL)
        PyErr_Clear(); /* no class attribute: the instance's, read generically below */
    else {
        if (Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
            PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
            if (member->type == T_OBJECT_EX && !(member->flags & READONLY))
                ref->offset = member->offset;
        }
        Py_DECREF(descr);
    }
    int64_t value;
    return get_i64(obj, name, &value);
}

/* obj's attribute (a new reference), NULL with an exception set. */
static inline PyObject *
attr_get(const attr_ref *ref, PyObject *obj)
{
    if (ref->offset >= 0 && Py_IS_TYPE(obj, ref->type)) {
        PyObject *value = *(PyObject **)((char *)obj + ref->offset);
        if (value != NULL)
            return Py_NewRef(value);
    }
    return PyObject_GetAttr(obj, ref->name);
}

/* Sets obj's attribute unless an earlier set failed (*status < 0). */
static inline void
attr_set(int *status, const attr_ref *ref, PyObject *obj, PyObject *value)
{
    if (*status < 0)
        return;
    if (ref->offset >= 0 && Py_IS_TYPE(obj, ref->type)) {
        PyObject **slot = (PyObject **)((char *)obj + ref->offset);
        PyObject *old = *slot;
        *slot = Py_NewRef(value);
        Py_XDECREF(old);
        return;
    }
    *status = PyObject_SetAttr(obj, ref->name, value);
}

/* The first item of the TimestampOffset attribute `name` of obj (a new reference in *pair). */
static int
get_timestamp_offset(PyObject *obj, PyObject *name, PyObject **pair, int64_t *timestamp)
{
    *pair = PyObject_GetAttr(obj, name);
    if (*pair == NULL)
        return -1;
    if (!PyTuple_Check(*pair) || PyTuple_GET_SIZE(*pair) != 2) {
        PyErr_Format(PyExc_TypeError, "%R of %R is not a (timestamp, offset) pair", name, obj);
        Py_CLEAR(*pair);
        return -1;
    }
    *timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(*pair, 0));
    if (*timestamp == -1 && PyErr_Occurred()) {
        Py_CLEAR(*pair);
        return -1;
    }
    return 0;
}

/* Holds the writable buffer of index.mapping, which must have room for `entries + room`
 * entries of `entry_size` bytes. */
static int
hold_map(PyObject *index, Py_buffer *view, int64_t entries, int64_t room, int64_t entry_size)
{
    PyObject *mm = PyObject_GetAttr(index, str_mapping);
    if (mm == NULL)
        return -1;
    int status = PyObject_GetBuffer(mm, view, PyBUF_WRITABLE);
    Py_DECREF(mm);
    if (status < 0)
        return -1;
    if (entries < 0 || (entries + room) * entry_size > (int64_t)view->len) {
        PyErr_Format(PyExc_ValueError, "index %R maps %zd bytes: no room for %lld more entries "
                     "after %lld", index, view->len, (long long)room, (long long)entries);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

static void
appender_disarm_now(Appender *self)
{
    self->armed = 0;
    if (self->offset_map.obj != NULL)
        PyBuffer_Release(&self->offset_map);
    if (self->time_map.obj != NULL)
        PyBuffer_Release(&self->time_map);
    self->offset_map.obj = self->time_map.obj = NULL;
    Py_CLEAR(self->segment);
    Py_CLEAR(self->log_file);
    Py_CLEAR(self->offset_index);
    Py_CLEAR(self->time_index);
    Py_CLEAR(self->max_ts_and_offset);
    Py_CLEAR(self->end);
    Py_CLEAR(self->counts);
}

static PyObject *
appender_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"segment", "rules", "index_room", "end", "counts", NULL};
    PyObject *segment, *rules, *end, *counts;
    long long room;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOLOO:PlainAppender", kwlist, &segment,
                                     &rules, &room, &end, &counts))
        return NULL;
    if (room <= 0) {
        PyErr_Format(PyExc_ValueError, "index room %lld leaves no append to arm for", room);
        return NULL;
    }
    Appender *self = (Appender *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->room = room;
    int64_t fd;
    PyObject *fileno;
    self->segment = Py_NewRef(segment);
    self->end = Py_NewRef(end);
    self->counts = Py_NewRef(counts);
    if (attr_ref_init(&self->next_offset, end, str_next_offset) < 0
            || attr_ref_init(&self->append_bytes, counts, str_append_bytes) < 0
            || attr_ref_init(&self->append_messages, counts, str_append_messages) < 0)
        goto fail;
    if (batch_api->rules_from_tuple(rules, &self->rules) < 0
            || (self->log_file = PyObject_GetAttr(segment, str_log)) == NULL)
        goto fail;
    /* fileno() raises LogClosedError for a closed file: nothing to arm on. */
    if ((fileno = PyObject_CallMethodNoArgs(self->log_file, str_fileno)) == NULL)
        goto fail;
    fd = PyLong_AsLongLong(fileno);
    Py_DECREF(fileno);
    if ((fd == -1 && PyErr_Occurred())
            || (self->offset_index = PyObject_GetAttr(segment, str_offset_index)) == NULL
            || (self->time_index = PyObject_GetAttr(segment, str_time_index)) == NULL
            || get_i64(segment, str_base_offset, &self->base_offset) < 0
            || get_i64(segment, str_index_interval_bytes, &self->interval) < 0
            || get_i64(segment, str_bytes_since, &self->since_index_entry) < 0
            || get_timestamp_offset(segment, str_max_ts, &self->max_ts_and_offset,
                                    &self->max_timestamp) < 0
            || get_i64(self->log_file, str_size, &self->position) < 0
            || get_i64(self->offset_index, str_entries, &self->offset_entries) < 0
            || get_i64(self->time_index, str_entries, &self->time_entries) < 0)
        goto fail;
    PyObject *last_entry;
    if (get_timestamp_offset(self->time_index, str_last_entry, &last_entry,
                             &self->time_last_timestamp) < 0)
        goto fail;
    Py_DECREF(last_entry);
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(log_closed_error, "%R is closed", self->log_file);
        goto fail;
    }
    self->fd = (int)fd;
    /* Entries store positions and relative offsets as int32: the rules must keep them so. */
    if (self->rules.max_end_position > INT32_MAX
            || self->rules.max_last_offset - self->base_offset > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "rules allow positions or offsets past the 4-byte index "
                     "fields of the segment at base offset %lld", (long long)self->base_offset);
        goto fail;
    }
    if (hold_map(self->offset_index, &self->offset_map, self->offset_entries, room,
                 OFFSET_ENTRY_SIZE) < 0
            || hold_map(self->time_index, &self->time_map, self->time_entries, room,
                        TIME_ENTRY_SIZE) < 0)
        goto fail;
    self->armed = 1;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* A new TimestampOffset(timestamp, offset); `offset` is borrowed. */
static PyObject *
new_timestamp_offset(int64_t timestamp, PyObject *offset)
{
    PyObject *ts = PyLong_FromLongLong(timestamp);
    if (ts == NULL)
        return NULL;
    PyObject *items = PyTuple_Pack(2, ts, offset);
    Py_DECREF(ts);
    if (items == NULL)
        return NULL;
    /* tuple.__new__(TimestampOffset, items): what the namedtuple's own __new__ does. */
    PyObject *args = PyTuple_Pack(1, items);
    Py_DECREF(items);
    if (args == NULL)
        return NULL;
    PyObject *pair = PyTuple_Type.tp_new((PyTypeObject *)timestamp_offset_type, args, NULL);
    Py_DECREF(args);
    return pair;
}

/* The objects one append hands to Python, all made before any state changes (prepare), so that
 * running out of memory leaves nothing half done; then set in place (commit), which allocates
 * nothing. NULL where the append does not change that attribute. */
typedef struct {
    PyObject *result;       /* (size, last_offset, max_timestamp, record_count, leader_epoch) */
    PyObject *size;         /* log.size */
    PyObject *since;        /* segment.bytes_since_last_index_entry */
    PyObject *max_ts;       /* segment.max_timestamp_and_offset, when it rose */
    PyObject *entries;      /* offset_index.entries, when an entry is added */
    PyObject *time_entries; /* time_index.entries, when an entry is added */
    PyObject *next_offset;  /* end.next_offset: past the batch */
    PyObject *bytes;        /* counts.append_bytes, the batch's size added */
    PyObject *messages;     /* counts.append_messages, its records added */
} changes;

static void
changes_clear(changes *c)
{
    Py_CLEAR(c->result);
    Py_CLEAR(c->size);
    Py_CLEAR(c->since);
    Py_CLEAR(c->max_ts);
    Py_CLEAR(c->entries);
    Py_CLEAR(c->time_entries);
    Py_CLEAR(c->next_offset);
    Py_CLEAR(c->bytes);
    Py_CLEAR(c->messages);
}

/* The result tuple; `last` is borrowed. */
static PyObject *
new_result(const plain_written *w, PyObject *last)
{
    PyObject *items[5] = {PyLong_FromSsize_t(w->size), Py_NewRef(last),
                          PyLong_FromLongLong(w->max_timestamp), PyLong_FromLong(w->record_count),
                          PyLong_FromLong(w->leader_epoch)};
    PyObject *result = NULL;
    if (items[0] != NULL && items[2] != NULL && items[3] != NULL && items[4] != NULL)
        result = PyTuple_Pack(5, items[0], items[1], items[2], items[3], items[4]);
    for (int i = 0; i < 5; i++)
        Py_XDECREF(items[i]);
    return result;
}

/* counter + item, a new reference (NULL with an exception set): the counter's new value. */
static PyObject *
counted(PyObject *counts, const attr_ref *counter, PyObject *item)
{
    PyObject *value = attr_get(counter, counts);
    if (value == NULL)
        return NULL;
    PyObject *sum = PyNumber_Add(value, item);
    Py_DECREF(value);
    return sum;
}

/* What appending `w` at `position` changes, made ready. The index entries mirror
 * SparseIndexRule.add (core/index/sparse.py): since_index_entry is its `since`,
 * time_last_timestamp its `indexed_timestamp`; keep the two in step.
 * 0, or -1 with an exception set (MemoryError) and nothing made. */
static int
prepare(Appender *self, const plain_written *w, int64_t position, changes *c)
{
    *c = (changes){NULL};
    int index_entry = self->since_index_entry > self->interval;
    int new_max = w->max_timestamp > self->max_timestamp;
    int64_t max_timestamp = new_max ? w->max_timestamp : self->max_timestamp;
    /* The time index takes the segment's max timestamp when it is above its last entry's. */
    int time_entry = index_entry && max_timestamp > self->time_last_timestamp;
    PyObject *last = PyLong_FromLongLong(w->last_offset);
    if (last == NULL)
        return -1;
    c->result = new_result(w, last);
    c->size = PyLong_FromLongLong(position + w->size);
    c->since = PyLong_FromLongLong((index_entry ? 0 : self->since_index_entry) + w->size);
    if (new_max)
        c->max_ts = new_timestamp_offset(w->max_timestamp, last);
    if (index_entry)
        c->entries = PyLong_FromLongLong(self->offset_entries + 1);
    if (time_entry)
        c->time_entries = PyLong_FromLongLong(self->time_entries + 1);
    c->next_offset = PyLong_FromLongLong(w->last_offset + 1);
    if (c->result != NULL) { /* its size and record count are what the counters add */
        c->bytes = counted(self->counts, &self->append_bytes, PyTuple_GET_ITEM(c->result, 0));
        c->messages = counted(self->counts, &self->append_messages,
                              PyTuple_GET_ITEM(c->result, 3));
    }
    Py_DECREF(last);
    if (c->result == NULL || c->size == NULL || c->since == NULL || (new_max && !c->max_ts)
            || (index_entry && !c->entries) || (time_entry && !c->time_entries)
            || c->next_offset == NULL || c->bytes == NULL || c->messages == NULL) {
        changes_clear(c);
        return -1;
    }
    return 0;
}

/* Sets obj.name = value unless an earlier set failed (*status < 0). */
static inline void
set_attr(int *status, PyObject *obj, PyObject *name, PyObject *value)
{
    if (*status == 0)
        *status = PyObject_SetAttr(obj, name, value);
}

/* Applies prepared changes: the tail state, the index entries, the Python attributes (which
 * all exist already, so setting them allocates nothing), the log's end and counters. */
static int
commit(Appender *self, const plain_written *w, int64_t position, changes *c)
{
    int status = 0;
    self->position = position + w->size;
    set_attr(&status, self->log_file, str_size, c->size);
    if (c->max_ts != NULL) {
        Py_SETREF(self->max_ts_and_offset, Py_NewRef(c->max_ts));
        self->max_timestamp = w->max_timestamp;
        set_attr(&status, self->segment, str_max_ts, c->max_ts);
    }
    if (c->entries != NULL) {
        uint8_t *entry = (uint8_t *)self->offset_map.buf + self->offset_entries * OFFSET_ENTRY_SIZE;
        put_be32(entry, (uint32_t)(w->last_offset - self->base_offset));
        put_be32(entry + 4, (uint32_t)position);
        self->offset_entries++;
        set_attr(&status, self->offset_index, str_entries, c->entries);
        set_attr(&status, self->offset_index, str_last_offset, PyTuple_GET_ITEM(c->result, 1));
        if (c->time_entries != NULL) {
            /* max_ts_and_offset is (max timestamp, its offset): the entry to add. */
            PyObject *pair = self->max_ts_and_offset;
            int64_t offset = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 1));
            entry = (uint8_t *)self->time_map.buf + self->time_entries * TIME_ENTRY_SIZE;
            put_be32(entry, (uint32_t)((uint64_t)self->max_timestamp >> 32));
            put_be32(entry + 4, (uint32_t)self->max_timestamp);
            put_be32(entry + 8, (uint32_t)(offset - self->base_offset));
            self->time_entries++;
            self->time_last_timestamp = self->max_timestamp;
            set_attr(&status, self->time_index, str_entries, c->time_entries);
            set_attr(&status, self->time_index, str_last_entry, pair);
        }
        self->since_index_entry = 0;
        self->room--;
    }
    self->since_index_entry += w->size;
    set_attr(&status, self->segment, str_bytes_since, c->since);
    attr_set(&status, &self->next_offset, self->end, c->next_offset);
    attr_set(&status, &self->append_bytes, self->counts, c->bytes);
    attr_set(&status, &self->append_messages, self->counts, c->messages);
    if (self->room == 0 || status < 0)
        appender_disarm_now(self); /* an index may be full: the roll rule decides next */
    return status;
}

PyDoc_STRVAR(append_doc,
"append(data, leader_epoch)\n"
"--\n\n"
"Write one plain batch with offsets from the log end `end.next_offset` (and `leader_epoch`\n"
"unless None), feed the indexes, move the end past the batch and count it. Returns (size,\n"
"last_offset, max_timestamp, record_count, leader_epoch), or None (nothing written) when\n"
"disarmed or the batch is not plain, intact and within the rules.");

static PyObject *
appender_append(Appender *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "append takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!self->armed)
        Py_RETURN_NONE;
    int have_epoch;
    int32_t epoch;
    if (batch_api->epoch_from_object(args[1], &have_epoch, &epoch) < 0)
        return NULL;
    PyObject *next = attr_get(&self->next_offset, self->end);
    if (next == NULL)
        return NULL;
    int64_t base_offset = PyLong_AsLongLong(next);
    Py_DECREF(next);
    if (base_offset == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer buffer;
    if (PyObject_GetBuffer(args[0], &buffer, PyBUF_SIMPLE) < 0)
        return NULL;
    int64_t position = self->position;
    plain_written w;
    int status = batch_api->write_plain(self->fd, position, buffer.buf, buffer.len, base_offset,
                                        have_epoch, epoch, &self->rules, &w);
    PyBuffer_Release(&buffer);
    changes c;
    if (status > 0 && prepare(self, &w, position, &c) < 0)
        status = -1; /* out of memory after the write: undone below, nothing else changed */
    if (status < 0) {
        /* A failed write may have left part of the batch: cut the file back (as
         * FileRecords.append_plain_batch does); the first exception is the one to report. */
        int cut;
        Py_BEGIN_ALLOW_THREADS
        cut = ftruncate(self->fd, (off_t)position);
        Py_END_ALLOW_THREADS
        (void)cut;
        return NULL;
    }
    if (status == 0)
        Py_RETURN_NONE;
    PyObject *result = Py_NewRef(c.result);
    if (commit(self, &w, position, &c) < 0)
        Py_CLEAR(result); /* cannot happen short of a broken object; disarmed, so never again */
    changes_clear(&c);
    return result;
}

static PyObject *
appender_disarm(Appender *self, PyObject *Py_UNUSED(ignored))
{
    appender_disarm_now(self);
    Py_RETURN_NONE;
}

static PyObject *
appender_get_armed(Appender *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->armed);
}

static int
appender_traverse(Appender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->segment);
    Py_VISIT(self->log_file);
    Py_VISIT(self->offset_index);
    Py_VISIT(self->time_index);
    Py_VISIT(self->max_ts_and_offset);
    Py_VISIT(self->end);
    Py_VISIT(self->counts);
    return 0;
}

static int
appender_clear(Appender *self)
{
    appender_disarm_now(self);
    return 0;
}

static void
appender_dealloc(Appender *self)
{
    PyObject_GC_UnTrack(self);
    appender_disarm_now(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef appender_methods[] = {
    {"append", (PyCFunction)(void (*)(void))appender_append, METH_FASTCALL, append_doc},
    {"disarm", (PyCFunction)appender_disarm, METH_NOARGS,
     "Write nothing more (idempotent) and let go of the index mappings."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef appender_getset[] = {
    {"armed", (getter)appender_get_armed, NULL,
     "False once disarmed, by the segment or by filling the indexes' room.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject appender_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tierlog.log._segment_appender.PlainAppender",
    .tp_doc = PyDoc_STR("PlainAppender(segment, rules, index_room, end, counts): an armed "
                        "segment's hot path."),
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = appender_new,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_clear = (inquiry)appender_clear,
    .tp_methods = appender_methods,
    .tp_getset = appender_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_segment_appender",
    .m_doc = "C twin of tierlog.segment_appender.PlainAppenderPy.",
    .m_size = -1,
};

static int
intern_names(void)
{
    struct {
        PyObject **slot;
        const char *name;
    } names[] = {
        {&str_log, "log"}, {&str_offset_index, "offset_index"}, {&str_time_index, "time_index"},
        {&str_base_offset, "base_offset"}, {&str_index_interval_bytes, "index_interval_bytes"},
        {&str_fileno, "fileno"}, {&str_size, "size"}, {&str_mapping, "mapping"},
        {&str_entries, "entries"}, {&str_last_offset, "last_offset"},
        {&str_last_entry, "last_entry"}, {&str_bytes_since, "bytes_since_last_index_entry"},
        {&str_max_ts, "max_timestamp_and_offset"}, {&str_next_offset, "next_offset"},
        {&str_append_bytes, "append_bytes"}, {&str_append_messages, "append_messages"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if ((*names[i].slot = PyUnicode_InternFromString(names[i].name)) == NULL)
            return -1;
    return 0;
}

/* module.name, a new reference (NULL with an exception set). */
static PyObject *
import_attr(const char *module, const char *name)
{
    PyObject *imported = PyImport_ImportModule(module);
    if (imported == NULL)
        return NULL;
    PyObject *attr = PyObject_GetAttrString(imported, name);
    Py_DECREF(imported);
    return attr;
}

PyMODINIT_FUNC
PyInit__segment_appender(void)
{
    if (intern_names() < 0)
        return NULL;
    /* PyCapsule_Import walks attributes from the package: the submodule must be imported. */
    PyObject *writer = PyImport_ImportModule("tierlog.records._plain_batch_write");
    if (writer == NULL)
        return NULL;
    Py_DECREF(writer);
    batch_api = PyCapsule_Import(PLAIN_BATCH_CAPSULE, 0);
    if (batch_api == NULL)
        return NULL;
    if ((timestamp_offset_type = import_attr("tierlog.index", "TimestampOffset")) == NULL
            || (log_closed_error = import_attr("tierlog.errors", "LogClosedError")) == NULL)
        return NULL;
    if (!PyType_Check(timestamp_offset_type)
            || !PyType_IsSubtype((PyTypeObject *)timestamp_offset_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "tierlog.index.TimestampOffset is not a tuple type");
        return NULL;
    }
    if (PyType_Ready(&appender_type) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    if (PyModule_AddObjectRef(module, "PlainAppender", (PyObject *)&appender_type) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
