/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Python typemaps and declarations of the libmooncake binding (included
 * from mooncake.i before the declarations it applies to).
 *
 * This file holds no C logic of its own: the typemaps and the %extend
 * methods below are one-line calls into the hand-written C compiled into
 * the module next to the wrapper (swig/py_glue.h, the one header of
 * swig/py_conv.c, py_buffer.c, py_store.c and py_tensor.c; and
 * swig/pyhelpers.h).  What stays here is what SWIG must see: the
 * typemaps, the declarations of the module functions, the Store methods'
 * signatures and which of them keep the interpreter lock (%nothread).
 *
 * Buffers in: any object with the buffer protocol (bytes, bytearray,
 * memoryview, numpy arrays, mmap) is read in place: the Py_buffer is held
 * for the whole call, which also stops a bytearray from being resized
 * underneath the library while the interpreter lock is released.
 *
 * Bytes out: get()/get_batch() are two-phase.  The lookup runs without the
 * lock; the bytes object of the exact size is created with the lock held;
 * the read lands straight in that object's storage without the lock; no
 * intermediate copy is ever made.  Nothing else can see the object before
 * it is returned, so filling it without the lock is safe.
 *
 * Locking: the module is generated with -threads, so plain wrapped calls
 * release the lock around the C call.  The hand-written methods call
 * the Python C API themselves, are marked %nothread, and release the lock
 * explicitly (Py_BEGIN_ALLOW_THREADS) around every libmooncake call that
 * can block.  Keys are converted to UTF-8 while the lock is held and the
 * str objects are kept alive in a private tuple until the call returns, so
 * the char pointers stay valid while the lock is released.
 *
 * Addresses in: the zero-copy calls take memory as ints (upstream's
 * uintptr_t); nested Python lists of them are converted to C arrays with
 * the lock held, then the lock is released for the library call, which
 * refuses any address outside registered memory before touching it.
 *
 * Memory out: BufferHandle is a small C type exporting the buffer
 * protocol.  A get_buffer() handle owns its mc_store_buffer_h (released in
 * tp_dealloc, and a live memoryview keeps the handle alive); a BufferPool
 * lease view only counts its exports so the pool can refuse to free
 * memory that a memoryview still points into.
 */

%begin %{
/* Py_ssize_t lengths for the s#/y# formats. */
#define PY_SSIZE_T_CLEAN
%}

%header %{
/* SWIG defines the module init function without a prototype. */
PyMODINIT_FUNC PyInit__capi(void);
/* The hand-written C the typemaps and methods below call. */
#include "py_glue.h"
%}

/* ---- const char *: a str in (None is NULL) -------------------------------- *
 * SWIG's own conversion reports a str it cannot encode (a lone surrogate
 * from a non-UTF-8 file name, say) as "argument 2 of type 'char const *'";
 * this one names the argument: TypeError for a non-str, ValueError for
 * a str that is not valid UTF-8 or holds a NUL. */

%typemap(in) const char *
{
    if ($input == Py_None) {
        $1 = NULL;
    } else if (mooncake_py_cstr((const char **)&$1, $input, "$1_name") != 0) {
        SWIG_fail;
    }
}

%typemap(freearg) const char * ""

%typemap(typecheck, precedence=SWIG_TYPECHECK_STRING) const char *
{
    $1 = ($input == Py_None) || PyUnicode_Check($input);
}

/* ---- (const void *data, size_t len): a bytes-like object in ---------------- */

%typemap(in) (const void *data, size_t len) (Py_buffer view, int have_view = 0)
{
    if (!PyObject_CheckBuffer($input)) {
        PyErr_Format(PyExc_TypeError, "a bytes-like object is required, not '%s'",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    if (PyObject_GetBuffer($input, &view, PyBUF_SIMPLE) != 0)
        SWIG_fail;
    have_view = 1;
    $1 = view.buf;
    $2 = (size_t)view.len;
}

%typemap(freearg) (const void *data, size_t len)
{
    if (have_view$argnum)
        PyBuffer_Release(&view$argnum);
}

%typemap(typecheck, precedence=SWIG_TYPECHECK_POINTER) (const void *data, size_t len)
{
    $1 = PyObject_CheckBuffer($input) ? 1 : 0;
}

/* ---- mc_fastcopy_gather(): destination address, source buffers, count out ---- */

/* The destination is an address (int), as in the zero-copy store calls. */
%typemap(in) void *dst
{
    unsigned long long a = PyLong_Check($input) ? PyLong_AsUnsignedLongLong($input) : 0;
    if (!PyLong_Check($input)) {
        PyErr_Format(PyExc_TypeError, "dst must be an int address, not '%s'",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    if (PyErr_Occurred())
        SWIG_fail;
    $1 = (void *)(uintptr_t)a;
}

/* The sources: a sequence of C-contiguous buffer objects (numpy arrays,
 * bytes, ...), each held for the whole call. */
%typemap(in) (const mc_iov_t *srcs, size_t n) (mooncake_py_iovs_t iv = {0})
{
    if (mooncake_py_iovs_init(&iv, $input) != 0)
        SWIG_fail;
    $1 = iv.iov;
    $2 = iv.n;
}

%typemap(freearg) (const mc_iov_t *srcs, size_t n)
{
    mooncake_py_iovs_cleanup(&iv$argnum);
}

%typemap(in, numinputs=0) size_t *copied_p (size_t copied = 0)
{
    $1 = &copied;
}

%typemap(argout) size_t *copied_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromSize_t(*$1));
}

/* ---- mc_reshard_*(): parameter blocks and columns by address ---------------- */

/* The parameter block and the per-source columns are addresses (int) that
 * mooncake.reshard.weight.planner keeps alive for the call; 0 is NULL. */
%define MOONCAKE_PY_CADDR(TYPE, NAME)
%typemap(in) TYPE NAME
{
    if (!PyLong_Check($input)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int address, not '%s'", "NAME",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    $1 = ($1_ltype)(uintptr_t)PyLong_AsUnsignedLongLong($input);
    if (PyErr_Occurred())
        SWIG_fail;
}
%enddef
MOONCAKE_PY_CADDR(const mc_reshard_plan_params_t *, params)
MOONCAKE_PY_CADDR(const uint8_t *, target_selected)
MOONCAKE_PY_CADDR(mc_reshard_table_h, plan)
MOONCAKE_PY_CADDR(mc_reshard_table_h, table)

/* The new table comes back as an address for mc_reshard_table_*(). */
%typemap(in, numinputs=0) mc_reshard_table_h *table_p (mc_reshard_table_h table = NULL)
{
    $1 = &table;
}
%typemap(argout) mc_reshard_table_h *table_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromVoidPtr(*$1));
}

/* The refusal comes back as (kind, index, value, limit). */
%typemap(in, numinputs=0) mc_reshard_plan_error_t *error_p (mc_reshard_plan_error_t err)
{
    memset(&err, 0, sizeof(err));
    $1 = &err;
}
%typemap(argout) mc_reshard_plan_error_t *error_p
{
    $result = SWIG_Python_AppendOutput(
        $result, Py_BuildValue("(LLKK)", (long long)$1->kind, (long long)$1->index,
                               (unsigned long long)$1->value, (unsigned long long)$1->limit));
}

/* A column is an address; numpy views it without a copy until the table
 * is destroyed. */
%typemap(out) const int64_t *mc_reshard_table_column
{
    $result = PyLong_FromVoidPtr((void *)$1);
}

/* ---- reshard_attr_ints(): integer columns of many Python objects ---------- */

/* reshard_attr_ints(objects, name, out, ndims, mapping): integer columns of
 * many Python objects' attributes in one pass (swig/pyhelpers.h has the
 * contract; the code lives in swig/pyhelpers.c).  It reads Python
 * objects, so it keeps the interpreter lock. */
%nothread mooncake_py_reshard_attr_ints;
%rename(reshard_attr_ints) mooncake_py_reshard_attr_ints;
PyObject *mooncake_py_reshard_attr_ints(PyObject *objects, PyObject *name, PyObject *out,
                                        PyObject *ndims, PyObject *mapping);

/* ---- mc_codec_ragged_*(): rows in, arrays by address, counts out ------------ */

/* The arrays a codec call reads or fills: addresses (int), as the
 * destination of mc_fastcopy_gather(); numpy arrays give theirs with
 * a.ctypes.data. */
%define MOONCAKE_PY_ADDR(TYPE, NAME)
%typemap(in) TYPE NAME
{
    if (!PyLong_Check($input)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int address, not '%s'", "NAME",
                     Py_TYPE($input)->tp_name);
        SWIG_fail;
    }
    $1 = ($1_ltype)(uintptr_t)PyLong_AsUnsignedLongLong($input);
    if (PyErr_Occurred())
        SWIG_fail;
}
%enddef
MOONCAKE_PY_ADDR(void *, data_out)
MOONCAKE_PY_ADDR(int64_t *, offsets_out)
MOONCAKE_PY_ADDR(int64_t *, shapes_out)
MOONCAKE_PY_ADDR(int16_t *, ndims_out)
MOONCAKE_PY_ADDR(uint8_t *, nulls_out)

%typemap(in, numinputs=0) size_t *elems_p (size_t elems = 0)
{
    $1 = &elems;
}
%typemap(argout) size_t *elems_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromSize_t(*$1));
}
%typemap(in, numinputs=0) uint32_t *max_ndim_p (uint32_t max_ndim = 0)
{
    $1 = &max_ndim;
}
%typemap(argout) uint32_t *max_ndim_p
{
    $result = SWIG_Python_AppendOutput($result, PyLong_FromUnsignedLong(*$1));
}

/* The rows: a sequence of C-contiguous arrays (their shape and bytes) or
 * None (a null row), each buffer held for the whole call. */
%typemap(in) (const mc_codec_row_t *rows, size_t n) (mooncake_py_rows_t rv = {0})
{
    if (mooncake_py_rows_init(&rv, $input) != 0)
        SWIG_fail;
    $1 = rv.rows;
    $2 = rv.n;
}

%typemap(freearg) (const mc_codec_row_t *rows, size_t n)
{
    mooncake_py_rows_cleanup(&rv$argnum);
}

/* ---- column builders: per-row objects of a codec payload in one call ------- */

/* codec_blob_rows(data, offsets, nulls, text) and
 * codec_ragged_rows(data, offsets, shapes, ndims, nulls): the rows of a
 * fetched payload as Python objects; codec_utf8_pack(values, offsets_out,
 * nulls_out): a column of str as its payload (swig/pyhelpers.h has the
 * contracts; the code lives in swig/pyhelpers.c).  They build Python
 * objects, so they keep the interpreter lock. */
%{
#include "pyhelpers.h"
%}
%nothread mooncake_py_blob_rows;
%nothread mooncake_py_ragged_rows;
%nothread mooncake_py_utf8_pack;
%rename(codec_blob_rows) mooncake_py_blob_rows;
%rename(codec_ragged_rows) mooncake_py_ragged_rows;
%rename(codec_utf8_pack) mooncake_py_utf8_pack;
PyObject *mooncake_py_blob_rows(PyObject *data, PyObject *offsets, PyObject *nulls, int text);
PyObject *mooncake_py_ragged_rows(PyObject *data, PyObject *offsets, PyObject *shapes,
                                  PyObject *ndims, PyObject *nulls);
PyObject *mooncake_py_utf8_pack(PyObject *values, PyObject *offsets_out, PyObject *nulls_out,
                                int exact);

/* codec_ragged_column(values, array_type, offsets_out, shapes_out,
 * ndims_out, nulls_out): the one typing pass of a column of arrays and
 * its typed-ragged layout, or None for a column typed the general way
 * (swig/pyhelpers.h).  It reads Python objects, so it keeps the lock. */
/* codec_object_array(values): a sequence as a 1-D object array, or None
 * without numpy's C API (swig/pyhelpers.h).  It reads Python objects, so
 * it keeps the lock. */
%nothread mooncake_py_object_array;
%rename(codec_object_array) mooncake_py_object_array;
PyObject *mooncake_py_object_array(PyObject *values);

/* codec_stage_json(prefix, object_id, meta_head, members, chunk_bytes,
 * version): mc_codec_stage_json() of member tuples (swig/pyhelpers.h).
 * It reads Python objects, so it keeps the lock. */
%nothread mooncake_py_stage_json;
%rename(codec_stage_json) mooncake_py_stage_json;
PyObject *mooncake_py_stage_json(PyObject *prefix, PyObject *object_id, PyObject *meta_head,
                                 PyObject *members, unsigned long long chunk_bytes,
                                 unsigned int version);

%nothread mooncake_py_ragged_column;
%rename(codec_ragged_column) mooncake_py_ragged_column;
PyObject *mooncake_py_ragged_column(PyObject *values, PyObject *array_type,
                                    PyObject *offsets_out, PyObject *shapes_out,
                                    PyObject *ndims_out, PyObject *nulls_out);

/* ---- (const char *const *strs, size_t n): a sequence of str in ------------- */

%typemap(in) (const char *const *strs, size_t n) (mooncake_py_strv_t sv = {0})
{
    if (mooncake_py_strv_init(&sv, $input) != 0)
        SWIG_fail;
    $1 = ($1_ltype)sv.v;
    $2 = sv.n;
}

%typemap(freearg) (const char *const *strs, size_t n)
{
    mooncake_py_strv_cleanup(&sv$argnum);
}

/* ---- hand-written methods that manage the interpreter lock themselves ---- */

%feature("nothread") mooncake_store::get;
%feature("nothread") mooncake_store::get_batch;
%feature("nothread") mooncake_store::put_batch;
%feature("nothread") mooncake_store::batch_exist;

%extend mooncake_store {
    /*
     * The object as bytes (a bytearray with @p mutable_), b"" when it is
     * missing or on any error (the upstream contract).  Raises only for a
     * key that is not a str.
     */
    PyObject *get(const char *key, int mutable_ = 0)
    {
        return mooncake_py_store_get($self->h, key, mutable_);
    }

    /*
     * A list with one bytes object (bytearray with @p mutable_) per key,
     * b"" for a miss or a failed read.  One master round trip for the
     * lookups, then every read runs concurrently.  Raises TypeError when
     * @p keys is not a list of str.
     */
    PyObject *get_batch(PyObject *keys, int mutable_ = 0)
    {
        return mooncake_py_store_get_batch($self->h, keys, mutable_);
    }

    /*
     * Store values[i] under keys[i]; 0 when every key succeeded, else the
     * first error.  Different lengths give MC_INVALID_PARAMS.  Raises
     * TypeError when keys is not a list of str or a value is not
     * bytes-like.
     */
    PyObject *put_batch(PyObject *keys, PyObject *values,
                        const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_write_batch($self->h, 0, keys, values, config);
    }

    /*
     * A list with 1, 0 or a negative status per key.  Raises TypeError when
     * keys is not a list of str.
     */
    PyObject *batch_exist(PyObject *keys)
    {
        return mooncake_py_store_batch_exist($self->h, keys);
    }
}

/* ======================================================================
 * The whole object API (issue 3).
 *
 * Integer arguments (addresses, sizes, offsets) reach these methods already
 * checked by mooncake.store; the converters (swig/py_conv.c) still refuse
 * anything else with a Python exception.  BufferHandle and the region
 * views live in swig/py_buffer.c, the method bodies in swig/py_store.c.
 * ====================================================================== */

%init %{
    if (mooncake_py_bufobj_type_add(m) != 0)
        return NULL;
%}

/* The type lives in the extension module; re-export it from the shadow module. */
%pythoncode %{
BufferHandle = _capi.BufferHandle
%}

%nothread mooncake_region_view;
%nothread mooncake_region_view_as;
/* A BufferHandle over memory the caller owns (BufferPool leases).  The
 * caller must keep the memory valid while exports() > 0. */
PyObject *mooncake_region_view(uint64_t addr, uint64_t size);

/* mooncake_region_view() as an instance of @p cls, a Python subclass of
 * BufferHandle (BufferPool's BufferLeaseView), whose own attributes keep
 * the owner of the memory alive. */
PyObject *mooncake_region_view_as(PyObject *cls, uint64_t addr, uint64_t size);

/* mc_host_mem_alloc() and mc_host_mem_alloc_lazy() as an address, 0 on
 * failure. */
uint64_t mooncake_host_mem_alloc(uint64_t size);
uint64_t mooncake_host_mem_alloc_lazy(uint64_t size);
int mooncake_host_mem_free(uint64_t addr);

/* The addresses of the pluggable allocator pair, for torch
 * (mooncake.store.get_alloc_func_addr / get_free_func_addr). */
uint64_t mooncake_host_mem_alloc_func_addr(void);
uint64_t mooncake_host_mem_free_func_addr(void);

/* ---- plain calls: -threads releases the lock around each ---------------- */

%extend mooncake_store {
    int setup_dummy(uint64_t mem_pool_size, uint64_t local_buffer_size,
                    const char *server_address)
    {
        return mc_store_setup_dummy($self->h, mem_pool_size, local_buffer_size,
                                    server_address);
    }

    /* Counter @p which (0 dummies, 1 mapped bytes, 2 allocated bytes) of
     * the real client serving this dummy, or a negative status. */
    int64_t dummy_stat(int which)
    {
        return mooncake_py_store_dummy_stat($self->h, which);
    }

    int is_dummy()
    {
        return mc_store_is_dummy($self->h);
    }

    /* The SSD tier (docs/tiers.md): start it in @p dir. */
    int offload_start(const char *dir)
    {
        return mc_store_offload_start($self->h, dir);
    }

    /* Turn the SSD tier off for good and hold @p grace_seconds
     * (unmount_local_disk_segment). */
    int offload_stop(uint64_t grace_seconds)
    {
        return mc_store_offload_stop($self->h, grace_seconds);
    }

    /* NoF segments (docs/tiers.md §8): serve @p size bytes of @p path. */
    int nof_mount(const char *path, uint64_t size)
    {
        return mc_store_nof_mount($self->h, path, size);
    }

    int nof_unmount(const char *path)
    {
        return mc_store_nof_unmount($self->h, path);
    }

    /* Counter @p which of mc_store_disk_stats_t (in its field order), or
     * a negative status. */
    int64_t offload_stat(int which)
    {
        return mooncake_py_store_offload_stat($self->h, which);
    }

    int upsert(const char *key, const void *data, size_t len,
               const mc_replicate_config_t *config = NULL)
    {
        return mc_store_upsert($self->h, key, data, len, config);
    }

    int register_buffer(uint64_t addr, uint64_t len)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_register_buffer($self->h, (void *)(uintptr_t)addr, (size_t)len);
    }

    int unregister_buffer(uint64_t addr)
    {
        return mc_store_unregister_buffer($self->h, (void *)(uintptr_t)addr);
    }

    /* An address in the local buffer, 0 on failure. */
    uint64_t mem_pool_alloc(uint64_t size)
    {
        return mooncake_py_store_mem_pool_alloc($self->h, size);
    }

    int mem_pool_free(uint64_t addr)
    {
        return mc_store_mem_pool_free($self->h, (void *)(uintptr_t)addr);
    }

    int put_from(const char *key, uint64_t addr, uint64_t len,
                 const mc_replicate_config_t *config = NULL)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_put_from($self->h, key, (const void *)(uintptr_t)addr, (size_t)len,
                                 config);
    }

    int upsert_from(const char *key, uint64_t addr, uint64_t len,
                    const mc_replicate_config_t *config = NULL)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_upsert_from($self->h, key, (const void *)(uintptr_t)addr,
                                    (size_t)len, config);
    }

    int64_t get_into(const char *key, uint64_t addr, uint64_t len)
    {
        if (len > (uint64_t)SIZE_MAX)
            return MC_INVALID_PARAMS;
        return mc_store_get_into($self->h, key, (void *)(uintptr_t)addr, (size_t)len);
    }

    /* Number removed, or a negative status. */
    int64_t remove_by_regex(const char *regex, int force = 0)
    {
        return mooncake_py_store_remove_by_regex($self->h, regex, force);
    }

    int64_t remove_all(int force = 0)
    {
        return mooncake_py_store_remove_all($self->h, force);
    }

    int get_session_end(const char *const *strs, size_t n)
    {
        return mc_store_get_session_end($self->h, strs, n);
    }
}

/* ---- segment mounting ------------------------------------------------------------ */

%feature("nothread") mooncake_store::mount_segment;
%feature("nothread") mooncake_store::allocate_and_mount_segment;

%extend mooncake_store {
    /* (status, id): id is "" unless status is 0 */
    PyObject *mount_segment(const char *path, uint64_t size, uint64_t offset,
                            const char *protocol, const char *location)
    {
        return mooncake_py_store_mount_segment($self->h, path, size, offset, protocol, location);
    }

    /* (status, id, allocated_size) */
    PyObject *allocate_and_mount_segment(uint64_t size, const char *protocol,
                                         const char *location)
    {
        return mooncake_py_store_allocate_and_mount_segment($self->h, size, protocol, location);
    }

    /* and_free 0: mc_store_unmount_segments, else ..._and_free_segments */
    int unmount_segments(const char *const *strs, size_t n, uint64_t grace_period_seconds,
                         int and_free)
    {
        if (and_free)
            return mc_store_unmount_and_free_segments($self->h, strs, n,
                                                      grace_period_seconds);
        return mc_store_unmount_segments($self->h, strs, n, grace_period_seconds);
    }
}

/* ---- copy and move tasks --------------------------------------------------------- */

%feature("nothread") mooncake_store::create_copy_task;
%feature("nothread") mooncake_store::create_move_task;
%feature("nothread") mooncake_store::query_task;

%extend mooncake_store {
    /* (status, task id text): the id is "" unless status is 0 */
    PyObject *create_copy_task(const char *key, const char *const *strs, size_t n)
    {
        return mooncake_py_store_create_copy_task($self->h, key, strs, n);
    }

    PyObject *create_move_task(const char *key, const char *source, const char *target)
    {
        return mooncake_py_store_create_move_task($self->h, key, source, target);
    }

    /* (status, None) or (0, (type, status, created_ms, updated_ms, client id
     * text, message)); a message that is not UTF-8 is decoded with
     * replacement characters rather than failing the call. */
    PyObject *query_task(const char *task_id)
    {
        return mooncake_py_store_query_task($self->h, task_id);
    }
}

/* ---- hand-written calls ------------------------------------------------------ */

%feature("nothread") mooncake_store::write_parts;
%feature("nothread") mooncake_store::batch_write_parts;
%feature("nothread") mooncake_store::upsert_batch;
%feature("nothread") mooncake_store::batch_remove;
%feature("nothread") mooncake_store::batch_replica_clear;
%feature("nothread") mooncake_store::batch_zc;
%feature("nothread") mooncake_store::batch_zc_flat;
%feature("nothread") mooncake_store::read_ranges;
%feature("nothread") mooncake_store::read_blocks;
%feature("nothread") mooncake_store::session_keys;
%feature("nothread") mooncake_store::put_session_start;
%feature("nothread") mooncake_store::replica_descs;
%feature("nothread") mooncake_store::get_buffers;

%extend mooncake_store {
    /* put_parts (upsert = 0) or upsert_parts (1): @p parts is a sequence of
     * bytes-like objects, stored as their concatenation. */
    PyObject *write_parts(int upsert, const char *key, PyObject *parts,
                          const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_write_parts($self->h, upsert, key, parts, config);
    }

    /*
     * batch_put_parts (mode 0) / batch_upsert_parts (1) /
     * batch_put_parts_commit (2: the last key is the commit key): object i
     * is the concatenation of the bytes-like items of parts[i], read from
     * any memory (mc_store_batch_put_parts(): one master round trip, no
     * staging copy).  One status per key.  TypeError for keys that are not
     * str, a parts[i] that is not a sequence of bytes-like objects;
     * ValueError when the lists differ in length.
     */
    PyObject *batch_write_parts(int mode, PyObject *keys, PyObject *parts,
                                const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_batch_write_parts($self->h, mode, keys, parts, config);
    }

    /* upsert_batch: as put_batch, with upsert semantics. */
    PyObject *upsert_batch(PyObject *keys, PyObject *values,
                           const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_write_batch($self->h, 1, keys, values, config);
    }

    /* Per-key statuses of a batch remove. */
    PyObject *batch_remove(PyObject *keys, int force = 0)
    {
        return mooncake_py_store_batch_remove($self->h, keys, force);
    }

    /* Per-key statuses of a batch replica clear (0 = cleared). */
    PyObject *batch_replica_clear(PyObject *keys, const char *segment_name)
    {
        return mooncake_py_store_batch_replica_clear($self->h, keys, segment_name);
    }

    /*
     * The batch zero-copy calls over nested per-key (address, size[,
     * offset]) lists; @p op is one of MOONCAKE_ZC_*.  A list of one int per
     * key: a status (writes) or bytes moved / negative status (reads).
     */
    PyObject *batch_zc(int op, PyObject *keys, PyObject *ptrs, PyObject *sizes,
                       PyObject *offsets, const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_batch_zc($self->h, op, keys, ptrs, sizes, offsets, config);
    }

    /*
     * batch_put_from / batch_upsert_from / batch_get_into with one buffer
     * per key, checked and converted here in one pass (the hot path of
     * small-value batches).  TypeError for keys that are not str or items
     * that are not ints (bools included), ValueError for a NUL in a key or
     * lists of different lengths; a key whose address or size is outside
     * [0, 2**64-1] gets INVALID_PARAMS and is not sent.  @p op is
     * MOONCAKE_ZC_PUT_FROM, _UPSERT_FROM or _GET_INTO.
     */
    PyObject *batch_zc_flat(int op, PyObject *keys, PyObject *ptrs, PyObject *sizes,
                            const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_batch_zc_flat($self->h, op, keys, ptrs, sizes, config);
    }

    /*
     * get_into_ranges, flattened: fragment i reads lens[i] bytes of object
     * keys[i] at src[i] into bufs[i] + dst[i].  One int per fragment: a
     * list, or with @p packed (non-zero) bytes of native int64, one per
     * fragment (numpy.frombuffer(..., numpy.int64)).  With @p key_index
     * (ints, one per fragment) fragment i reads keys[key_index[i]]: each
     * key listed once.
     */
    PyObject *read_ranges(PyObject *keys, PyObject *bufs, PyObject *dst, PyObject *src,
                          PyObject *lens, int packed = 0, PyObject *key_index = NULL)
    {
        return mooncake_py_store_read_ranges($self->h, keys, bufs, dst, src, lens, packed,
                                             key_index);
    }

    /*
     * read_ranges of strided blocks (mc_store_read_blocks): block i reads
     * rows[i] rows of row_len[i] bytes of keys[key_index[i]], row j at
     * src[i] + j * src_stride[i] into bufs[i] + dst[i] + j * dst_stride[i].
     * Columns: 1-d 64-bit integer buffers (or lists of int), one item per
     * block.  Bytes of native int64, one result per block.
     */
    PyObject *read_blocks(PyObject *keys, PyObject *key_index, PyObject *bufs, PyObject *dst,
                          PyObject *dst_stride, PyObject *src, PyObject *src_stride,
                          PyObject *row_len, PyObject *rows)
    {
        return mooncake_py_store_read_blocks($self->h, keys, key_index, bufs, dst, dst_stride,
                                             src, src_stride, row_len, rows);
    }

    /* Per-key statuses of a call over keys only (MOONCAKE_SK_*). */
    PyObject *session_keys(int op, PyObject *keys)
    {
        return mooncake_py_store_session_keys($self->h, op, keys);
    }

    /* Reserve objects of sizes[i] bytes; per-key statuses. */
    PyObject *put_session_start(PyObject *keys, PyObject *sizes,
                                const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_put_session_start($self->h, keys, sizes, config);
    }

    /*
     * Replicas of each key: per key either a negative status (int) or a
     * list of (status, kind (mc_replica_kind_t), addr, size, segment,
     * protocol, file_path, shard_idx, aligned_size) tuples (file_path ""
     * for a memory replica;
     * the last two set for a DFS replica, protocol "dfs").
     */
    PyObject *replica_descs(PyObject *keys)
    {
        return mooncake_py_store_replica_descs($self->h, keys);
    }

    /* Per key a BufferHandle, or the negative status of the miss/failure. */
    PyObject *get_buffers(PyObject *keys)
    {
        return mooncake_py_store_get_buffers($self->h, keys);
    }
}

/* ======================================================================
 * Tensor objects (mooncake/tensor.h).  The torch side lives in
 * mooncake.store; swig/py_tensor.c only moves numbers across: a tensor
 * going in is a record of MOONCAKE_TENSOR_IN ints, a decoded header coming
 * out one of MOONCAKE_TENSOR_OUT ints (see mooncake_py_tensor_out()).
 * ====================================================================== */

%feature("nothread") mooncake_store::tensor_put;
%feature("nothread") mooncake_store::tensor_put_from;
%feature("nothread") mooncake_store::tensor_get_into;
%feature("nothread") mooncake_py_tensor_decode;
%feature("nothread") mooncake_py_tensor_wrap;

/* The header of the serialized tensor object @p data: one
 * MOONCAKE_TENSOR_OUT record whose result is the object length, or
 * MC_INVALID_PARAMS for anything the decoder refuses. */
%rename(tensor_decode) mooncake_py_tensor_decode;
PyObject *mooncake_py_tensor_decode(const void *data, size_t len);

/* The tensor in the bytearray @p buf (a whole serialized object): a DLPack
 * capsule keeping @p buf alive, else its record (tensor_decode()). */
%rename(tensor_wrap) mooncake_py_tensor_wrap;
PyObject *mooncake_py_tensor_wrap(PyObject *buf);

%extend mooncake_store {
    /*
     * mc_tensor_put_batch(): @p recs holds MOONCAKE_TENSOR_IN ints per key
     * (the data's size follows from dtype and shape).  A record the codec
     * refuses gives that key MC_INVALID_PARAMS.  One status per key.
     */
    PyObject *tensor_put(int upsert, PyObject *keys, PyObject *recs, int tp_size,
                         int split_dim, const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_tensor_put($self->h, upsert, keys, recs, tp_size, split_dim,
                                            config);
    }

    /* mc_tensor_put_from_batch(): buffer i is @p ptrs[i], @p sizes[i] bytes
     * of serialized tensor.  One status per key. */
    PyObject *tensor_put_from(int upsert, PyObject *keys, PyObject *ptrs, PyObject *sizes,
                              int tp_size, int split_dim,
                              const mc_replicate_config_t *config = NULL)
    {
        return mooncake_py_store_tensor_put_from($self->h, upsert, keys, ptrs, sizes, tp_size,
                                                 split_dim, config);
    }

    /* mc_tensor_batch_get_into() (mc_tensor_get_into() for one key): per
     * key a DLPack capsule viewing the caller's buffer, or the record (a
     * failed read, or a dtype DLPack cannot carry). */
    PyObject *tensor_get_into(PyObject *keys, PyObject *ptrs, PyObject *caps)
    {
        return mooncake_py_store_tensor_get_into($self->h, keys, ptrs, caps);
    }
}

/* ---- completion queue (mooncake.async_store) ------------------------------- *
 * AsyncQueue.reap(max) -> [(tag, result, payload), ...]: the typemaps turn
 * the reaped mc_store_aq_done_t records into tuples and release them.
 * payload is the object's bytes for a get (b"" when none), a list of
 * bytes for a get_batch (b"" where results[i] is not a size > 0), the
 * per-key results for the other batches, None otherwise. */

%typemap(in) (mc_store_aq_done_t *done, size_t max) (mc_store_aq_done_t *recs = NULL)
{
    unsigned long long m = PyLong_Check($input) ? PyLong_AsUnsignedLongLong($input) : 0;
    if (PyErr_Occurred())
        SWIG_fail;
    if ((m == 0) || (m > 65536)) {
        PyErr_SetString(PyExc_ValueError, "max must be an int in [1, 65536]");
        SWIG_fail;
    }
    recs = PyMem_Calloc((size_t)m, sizeof(*recs));
    if (recs == NULL) {
        PyErr_NoMemory();
        SWIG_fail;
    }
    $1 = recs;
    $2 = (size_t)m;
}
%typemap(argout) (mc_store_aq_done_t *done, size_t max)
{
    PyObject *list = mooncake_py_aq_done_list($1, (size_t)result);
    Py_XDECREF($result);
    $result = list;
    if (list == NULL)
        SWIG_fail;
}
%typemap(freearg) (mc_store_aq_done_t *done, size_t max)
{
    PyMem_Free(recs$argnum);
}
