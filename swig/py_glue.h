/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hand-written CPython glue of the Python binding: the one header of
 * swig/py_conv.c, py_buffer.c, py_store.c and py_tensor.c, which are
 * compiled into the _capi module next to the SWIG wrapper
 * (bindings/python/local.mk).  swig/python.i includes it; its typemaps and
 * %extend methods are one-line calls into the functions declared here.
 *
 * Who may call whom: the wrapper calls everything below; py_store.c and
 * py_tensor.c call py_conv.c (arguments in, lists out) and py_buffer.c
 * (BufferHandle), and py_tensor.c the batch body of py_store.c
 * (mooncake_py_batch()); py_conv.c and py_buffer.c call only CPython and
 * the public libmooncake headers.  Nothing here is visible outside the module
 * (hidden visibility), and nothing here knows the SWIG runtime: a Store
 * method gets the store's mc_store_h, never the wrapper's object.
 *
 * The interpreter lock: every function taking or returning a PyObject is
 * called with the lock held (its SWIG declaration is %nothread) and
 * releases it itself, with Py_BEGIN_ALLOW_THREADS, around each libmooncake
 * call that can block.  The few functions without a PyObject (the
 * counters, mem_pool_alloc, the host-memory calls) never touch the
 * interpreter: the -threads wrapper calls them without the lock.
 * Functions returning PyObject * give a new reference, or NULL with a
 * Python exception set.
 */
#ifndef MOONCAKE_SWIG_PY_GLUE_H
#define MOONCAKE_SWIG_PY_GLUE_H

/* Py_ssize_t lengths for the s#/y# formats. */
#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <stdint.h>

#include <mooncake/mooncake.h>

#pragma GCC visibility push(hidden)

/* ---- arguments in (swig/py_conv.c) --------------------------------------- */

/* A str argument as UTF-8 (valid while the str lives: the caller holds
 * it for the call); 0, or -1 with a Python exception naming @p name. */
int mooncake_py_cstr(const char **out, PyObject *o, const char *name);

/* A sequence of C-contiguous buffers as mc_iov_t, each view held until
 * mooncake_py_iovs_cleanup() (the sources of mc_fastcopy_gather()). */
typedef struct mooncake_py_iovs {
    Py_buffer *views;
    mc_iov_t *iov;
    size_t n;
} mooncake_py_iovs_t;

/* 0, or -1 with TypeError (not a sequence, an item without the buffer
 * protocol) or ValueError (an item that is not C-contiguous) set. */
int mooncake_py_iovs_init(mooncake_py_iovs_t *iv, PyObject *seq);
void mooncake_py_iovs_cleanup(mooncake_py_iovs_t *iv);

/* A sequence of arrays (or None: a null row) as the rows of a codec call. */
typedef struct mooncake_py_rows {
    Py_buffer *views;
    char *held;  /* held[i]: views[i] must be released */
    mc_codec_row_t *rows;
    size_t n;
} mooncake_py_rows_t;

/* 0, or -1 with TypeError (not a sequence, an item that is neither None
 * nor a buffer) or ValueError (not C-contiguous) set. */
int mooncake_py_rows_init(mooncake_py_rows_t *rv, PyObject *seq);
void mooncake_py_rows_cleanup(mooncake_py_rows_t *rv);

/*
 * A sequence of str as a C array of UTF-8 strings.  The tuple keeps every
 * str alive (and so every pointer PyUnicode_AsUTF8AndSize() returned valid)
 * even if the caller's list is mutated by another thread meanwhile.
 */
typedef struct mooncake_py_strv {
    PyObject *tuple;
    const char **v;
    size_t n;
} mooncake_py_strv_t;

/* 0 or -1 with a Python exception set (TypeError for a non-str entry,
 * ValueError for an embedded NUL, which C strings cannot carry). */
int mooncake_py_strv_init(mooncake_py_strv_t *sv, PyObject *seq);
void mooncake_py_strv_cleanup(mooncake_py_strv_t *sv);

/* The buffers of the @p n items of tuple @p t as @p iovs, the views kept
 * in @p views; *nviews counts the views taken (release them with
 * mooncake_py_views_release(), also after a failure).  0, or -1 with an
 * exception set (TypeError naming item i as "<what> i" for a non-buffer). */
int mooncake_py_views_get(PyObject *t, size_t n, const char *what, Py_buffer *views,
                          mc_iov_t *iovs, size_t *nviews);
void mooncake_py_views_release(Py_buffer *views, size_t nviews);

/* A sequence of ints (or a 1-d int64/uint64 buffer) as a PyMem array of
 * @p n uint64 (n must match).  NULL with an exception set on any error. */
uint64_t *mooncake_py_u64v(PyObject *seq, size_t n);

/* A column of @p n uint64 for a call over many rows: a 1-d int64/uint64
 * buffer is read in place (its view held until the cleanup), any other
 * sequence of ints copied as by mooncake_py_u64v(). */
typedef struct mooncake_py_u64col {
    const uint64_t *v;
    uint64_t *copy; /* PyMem; NULL when read in place */
    Py_buffer view; /* view.obj NULL when copied */
} mooncake_py_u64col_t;

/* 0, or -1 with an exception set (nothing to clean up). */
int mooncake_py_u64col_init(mooncake_py_u64col_t *c, PyObject *seq, size_t n);
void mooncake_py_u64col_cleanup(mooncake_py_u64col_t *c);

/*
 * Nested per-key lists of (address, size[, offset]) as the mc_iov_t and
 * offset arrays the library takes: key i has counts[i] entries at
 * bufs[i][0..counts[i]).  One PyMem block per array of arrays.
 */
typedef struct mooncake_py_nested {
    size_t n;
    size_t *counts;
    mc_iov_t **bufs;
    uint64_t **offs;   /* NULL when no offsets were given */
} mooncake_py_nested_t;

/* 0, or -1 with an exception set (TypeError/ValueError for bad shapes). */
int mooncake_py_nested_init(mooncake_py_nested_t *nd, size_t n, PyObject *ptrs,
                            PyObject *sizes, PyObject *offsets);
void mooncake_py_nested_cleanup(mooncake_py_nested_t *nd);

/* ---- results out (swig/py_conv.c) ---------------------------------------- */

/* A fresh b"" (the interpreter shares the empty bytes object). */
PyObject *mooncake_py_empty_bytes(void);

/* The storage of a bytes or bytearray object. */
char *mooncake_py_bytes_data(PyObject *o);

/* A bytes object (a bytearray when @p mutable_) of @p size for a read to
 * fill, or NULL (no exception set) when it cannot be allocated; from
 * 2 MiB up its pages are marked for huge pages. */
PyObject *mooncake_py_bytes_for(uint64_t size, int mutable_);

/* Item @p i of a list being built: a new reference, or NULL with an
 * exception set. */
typedef PyObject *(*mooncake_py_item_func_t)(size_t i, void *arg);

/* A list of @p n items from @p item(i, @p arg), in order; NULL (with the
 * exception set) as soon as one fails, the items made so far released. */
PyObject *mooncake_py_list_of(size_t n, mooncake_py_item_func_t item, void *arg);

/* A list of n Python ints from C values. */
PyObject *mooncake_py_list_i64(const int64_t *v, size_t n);

/* A PyMem array of @p n statuses preset to MC_INTERNAL_ERROR (what a
 * slot the library never reached reports); NULL with MemoryError. */
mc_status_t *mooncake_py_status_array(size_t n);

/* The per-key statuses of a batch call that returned @p st, as a list: a
 * call that failed as a whole may leave slots unset, which report @p st. */
PyObject *mooncake_py_batch_statuses(mc_status_t *sts, size_t n, mc_status_t st);

/* ---- batches of keys with statuses out (swig/py_store.c) ---------------- */

/* The library call of such a batch, made without the interpreter lock:
 * the @p n keys, the uint64 columns the batch converted (cols[c][0..n)),
 * the method's own argument @p arg; fills sts[0..n) (preset to
 * MC_INTERNAL_ERROR) and returns the call's status. */
typedef mc_status_t (*mooncake_py_batch_func_t)(mc_store_h h, const char **keys, size_t n,
                                                uint64_t *const *cols, const void *arg,
                                                mc_status_t *sts);

/* A Store method of that shape, as a constant table entry. */
typedef struct mooncake_py_batch {
    mooncake_py_batch_func_t call;
    size_t ncols;   /* uint64 columns after the keys, at most 2 */
    int call_empty; /* 1: the library is called with no keys too */
} mooncake_py_batch_t;

/*
 * The body of such a method: @p keys as C strings (TypeError/ValueError
 * as mooncake_py_strv_init()), then each of @p cols[0..b->ncols) as n
 * uint64 (mooncake_py_u64v()), the statuses (MemoryError), the call (not
 * made for no keys unless b->call_empty), and the per-key statuses as a
 * list (mooncake_py_batch_statuses()).  Everything it converted is freed
 * before it returns.
 */
PyObject *mooncake_py_batch(mc_store_h h, const mooncake_py_batch_t *b, PyObject *keys,
                            PyObject *const *cols, const void *arg);

/* ---- BufferHandle (swig/py_buffer.c) ------------------------------------- */

/* Readies the BufferHandle type and adds it to module @p m (the module's
 * %init); 0, or -1 with an exception set. */
int mooncake_py_bufobj_type_add(PyObject *m);

/* A new BufferHandle over @p data with struct format @p format; owns
 * @p handle (may be NULL: memory someone else owns). */
PyObject *mooncake_py_bufobj_new(mc_store_buffer_h handle, void *data, uint64_t size,
                                 const char *format);

/* The module functions of that name (python.i documents them). */
PyObject *mooncake_region_view(uint64_t addr, uint64_t size);
PyObject *mooncake_region_view_as(PyObject *cls, uint64_t addr, uint64_t size);
uint64_t mooncake_host_mem_alloc(uint64_t size);
uint64_t mooncake_host_mem_alloc_lazy(uint64_t size);
int mooncake_host_mem_free(uint64_t addr);
uint64_t mooncake_host_mem_alloc_func_addr(void);
uint64_t mooncake_host_mem_free_func_addr(void);

/* ---- Store methods (swig/py_store.c) ------------------------------------- *
 * mooncake_py_store_<name>() is the body of the Store method <name>, with
 * the store's handle as @p h; python.i documents each method and declares
 * which ones keep the lock (%feature("nothread")). */

/* Operations of batch_zc(). */
enum {
    MOONCAKE_ZC_PUT_FROM = 0,
    MOONCAKE_ZC_UPSERT_FROM = 1,
    MOONCAKE_ZC_GET_INTO = 2,
    MOONCAKE_ZC_SESSION_READ = 3,
    MOONCAKE_ZC_SESSION_WRITE = 4
};
/* Operations of session_keys(). */
enum {
    MOONCAKE_SK_GET_START = 0,
    MOONCAKE_SK_PUT_END = 1,
    MOONCAKE_SK_PUT_REVOKE = 2
};

/* put_batch (@p upsert 0) / upsert_batch (1). */
PyObject *mooncake_py_write_batch(mc_store_h h, int upsert, PyObject *keys, PyObject *values,
                                  const mc_replicate_config_t *config);

PyObject *mooncake_py_store_get(mc_store_h h, const char *key, int mutable_);
PyObject *mooncake_py_store_get_batch(mc_store_h h, PyObject *keys, int mutable_);
PyObject *mooncake_py_store_batch_exist(mc_store_h h, PyObject *keys);

/* These five never touch the interpreter (called without the lock). */
int64_t mooncake_py_store_dummy_stat(mc_store_h h, int which);
int64_t mooncake_py_store_offload_stat(mc_store_h h, int which);
uint64_t mooncake_py_store_mem_pool_alloc(mc_store_h h, uint64_t size);
int64_t mooncake_py_store_remove_by_regex(mc_store_h h, const char *regex, int force);
int64_t mooncake_py_store_remove_all(mc_store_h h, int force);

PyObject *mooncake_py_store_mount_segment(mc_store_h h, const char *path, uint64_t size,
                                          uint64_t offset, const char *protocol,
                                          const char *location);
PyObject *mooncake_py_store_allocate_and_mount_segment(mc_store_h h, uint64_t size,
                                                       const char *protocol, const char *location);
PyObject *mooncake_py_store_create_copy_task(mc_store_h h, const char *key, const char *const *strs,
                                             size_t n);
PyObject *mooncake_py_store_create_move_task(mc_store_h h, const char *key, const char *source,
                                             const char *target);
PyObject *mooncake_py_store_query_task(mc_store_h h, const char *task_id);
PyObject *mooncake_py_store_write_parts(mc_store_h h, int upsert, const char *key, PyObject *parts,
                                        const mc_replicate_config_t *config);
/* @p mode of batch_write_parts: mc_store_batch_put_parts(),
 * mc_store_batch_upsert_parts() or mc_store_batch_put_parts_commit(). */
#define MOONCAKE_PY_PARTS_PUT 0
#define MOONCAKE_PY_PARTS_UPSERT 1
#define MOONCAKE_PY_PARTS_COMMIT 2
PyObject *mooncake_py_store_batch_write_parts(mc_store_h h, int mode, PyObject *keys,
                                              PyObject *parts, const mc_replicate_config_t *config);
PyObject *mooncake_py_store_batch_remove(mc_store_h h, PyObject *keys, int force);
PyObject *mooncake_py_store_batch_replica_clear(mc_store_h h, PyObject *keys,
                                                const char *segment_name);
PyObject *mooncake_py_store_batch_zc(mc_store_h h, int op, PyObject *keys, PyObject *ptrs,
                                     PyObject *sizes, PyObject *offsets,
                                     const mc_replicate_config_t *config);
PyObject *mooncake_py_store_batch_zc_flat(mc_store_h h, int op, PyObject *keys, PyObject *ptrs,
                                          PyObject *sizes, const mc_replicate_config_t *config);
PyObject *mooncake_py_store_read_blocks(mc_store_h h, PyObject *keys, PyObject *key_index,
                                        PyObject *bufs, PyObject *dst, PyObject *dst_stride,
                                        PyObject *src, PyObject *src_stride, PyObject *row_len,
                                        PyObject *rows);
PyObject *mooncake_py_store_read_ranges(mc_store_h h, PyObject *keys, PyObject *bufs, PyObject *dst,
                                        PyObject *src, PyObject *lens, int packed,
                                        PyObject *key_index);
PyObject *mooncake_py_store_session_keys(mc_store_h h, int op, PyObject *keys);
PyObject *mooncake_py_store_put_session_start(mc_store_h h, PyObject *keys, PyObject *sizes,
                                              const mc_replicate_config_t *config);
PyObject *mooncake_py_store_replica_descs(mc_store_h h, PyObject *keys);
PyObject *mooncake_py_store_get_buffers(mc_store_h h, PyObject *keys);

/* AsyncQueue.reap(): the list of @p n reaped records as (tag, result,
 * payload) tuples; every record is released, also when building the list
 * fails (NULL with the exception set). */
PyObject *mooncake_py_aq_done_list(mc_store_aq_done_t *done, size_t n);

/* ---- tensors (swig/py_tensor.c) ------------------------------------------ */

/* The module functions tensor_decode() and tensor_wrap(). */
PyObject *mooncake_py_tensor_decode(const void *data, size_t len);
PyObject *mooncake_py_tensor_wrap(PyObject *buf);

/* The Store methods tensor_put, tensor_put_from and tensor_get_into. */
PyObject *mooncake_py_store_tensor_put(mc_store_h h, int upsert, PyObject *keys, PyObject *recs,
                                       int tp_size, int split_dim,
                                       const mc_replicate_config_t *config);
PyObject *mooncake_py_store_tensor_put_from(mc_store_h h, int upsert, PyObject *keys,
                                            PyObject *ptrs, PyObject *sizes, int tp_size,
                                            int split_dim, const mc_replicate_config_t *config);
PyObject *mooncake_py_store_tensor_get_into(mc_store_h h, PyObject *keys, PyObject *ptrs,
                                            PyObject *caps);

#pragma GCC visibility pop

#endif /* MOONCAKE_SWIG_PY_GLUE_H */
