/* tierlog.records._plain_batch_write's C interface, shared with tierlog.log._segment_appender through a
 * capsule: write one plain producer batch with its offset patched in (see _plain_batch_write.c). */
#ifndef TIERLOG_PLAIN_BATCH_H
#define TIERLOG_PLAIN_BATCH_H

#include <Python.h>
#include <stdint.h>

#define PLAIN_BATCH_CAPSULE "tierlog.records._plain_batch_write.write_plain_capi"

/* Stores v big-endian at p: batch headers and index entries are big-endian. */
static inline void
put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* What a batch must keep to be written (PlainBatchRules in plain_batch_write.py). */
typedef struct {
    int64_t max_end_position; /* the batch must end at or before this file position */
    int64_t max_last_offset;
    int64_t max_timestamp;
    int64_t max_batch_bytes;
    int check_records; /* walk the records (record.validation=full) */
} plain_rules;

/* What was written. */
typedef struct {
    Py_ssize_t size;
    int64_t last_offset;
    int64_t max_timestamp;
    int32_t record_count;
    int32_t leader_epoch; /* the epoch written into the batch */
} plain_written;

/* Writes data[0:size] at `position` of `fd` with `base_offset` (and, when have_epoch, `epoch`)
 * patched in. Returns 1 (written, *out filled), 0 (refused: not plain, damaged or outside the
 * rules; nothing written) or -1 with an exception set (a failed write may have left part of the
 * batch in the file: the caller cuts it back). Call with the GIL held; it is released for the
 * write. */
typedef int (*write_plain_fn)(int fd, int64_t position, const uint8_t *data, Py_ssize_t size,
                              int64_t base_offset, int have_epoch, int32_t epoch,
                              const plain_rules *rules, plain_written *out);

/* What the capsule holds. */
typedef struct {
    write_plain_fn write_plain;
    /* Reads PlainBatchRules (a tuple of 4 ints and a bool); 0, or -1 with an exception set. */
    int (*rules_from_tuple)(PyObject *tuple, plain_rules *rules);
    /* Reads a leader epoch argument: None (*have_epoch = 0) or an int32; 0, or -1 with an
     * exception set. */
    int (*epoch_from_object)(PyObject *obj, int *have_epoch, int32_t *epoch);
} plain_batch_capi;

#endif
