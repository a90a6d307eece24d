/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tensor objects in the Python binding (swig/py_glue.h): the Store
 * methods tensor_put, tensor_put_from and tensor_get_into, the module
 * functions tensor_decode() and tensor_wrap(), and the DLPack capsules a
 * decoded tensor leaves in.  The torch side lives in mooncake.store; this
 * file only moves numbers across: a tensor going in is a record of
 * MOONCAKE_TENSOR_IN ints, a decoded header coming out one of
 * MOONCAKE_TENSOR_OUT ints (see mooncake_py_tensor_out()).
 *
 * Owns: the DLPack boxes (freed by their deleter, on any thread).  May
 * call: libmooncake's public tensor API (mooncake/tensor.h) and
 * swig/py_conv.c.  Locking as in swig/py_store.c: called with the lock,
 * released around each tensor call that can block.
 */
#include "py_glue.h"

#include <stdint.h>
#include <string.h>

/* In: dtype, ndim, shape[8], address of the contiguous data. */
#define MOONCAKE_TENSOR_IN 11
/* Out: result, dtype, ndim, data_offset, data_bytes, local_shape[8]. */
#define MOONCAKE_TENSOR_OUT 13

/* Write the record of a read that returned @p result (bytes, or a
 * negative status: then only that is meaningful). */
static void mooncake_py_tensor_out(int64_t *rec, int64_t result, const mc_tensor_meta_t *m)
{
    int i;
    memset(rec, 0, MOONCAKE_TENSOR_OUT * sizeof(*rec));
    rec[0] = result;
    if (result < 0)
        return;
    rec[1] = m->dtype;
    rec[2] = m->ndim;
    rec[3] = (int64_t)m->data_offset;
    rec[4] = (int64_t)m->data_bytes;
    for (i = 0; i < MC_TENSOR_MAX_DIMS; i++)
        rec[5 + i] = m->local_shape[i];
}

static PyObject *mooncake_py_tensor_rec(int64_t result, const mc_tensor_meta_t *m)
{
    int64_t rec[MOONCAKE_TENSOR_OUT];
    mooncake_py_tensor_out(rec, result, m);
    return mooncake_py_list_i64(rec, MOONCAKE_TENSOR_OUT);
}

/*
 * Decoded tensors leave as DLPack capsules, the C tensor exchange ABI
 * every torch since 1.10 imports without a copy: one import call per
 * tensor instead of a frombuffer and a reshape.  The structs below are
 * DLPack's DLManagedTensor (v0.x layout), spelled out so the module needs
 * no framework header.  A capsule named "dltensor" owns its box until a
 * consumer renames it "used_dltensor" and takes over the deleter.
 */
typedef struct mooncake_dl_tensor {
    void *data;
    int32_t device_type; /* DLDevice: kDLCPU = 1 */
    int32_t device_id;
    int32_t ndim;
    uint8_t code;        /* DLDataType: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4 */
    uint8_t bits;
    uint16_t lanes;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} mooncake_dl_tensor_t;

typedef struct mooncake_dl_managed {
    mooncake_dl_tensor_t t;
    void *manager_ctx;
    void (*deleter)(struct mooncake_dl_managed *self);
} mooncake_dl_managed_t;

/* A managed tensor with its shape and the Python object owning the memory. */
typedef struct mooncake_dl_box {
    mooncake_dl_managed_t m;
    PyObject *owner; /* a reference, or NULL for the caller's memory */
    int64_t shape[MC_TENSOR_MAX_DIMS];
    int64_t strides[MC_TENSOR_MAX_DIMS];
} mooncake_dl_box_t;

/* The consumer may free a tensor on any thread, with or without the GIL. */
static void mooncake_dl_delete(mooncake_dl_managed_t *self)
{
    mooncake_dl_box_t *b = (mooncake_dl_box_t *)self;
    if ((b->owner != NULL) && Py_IsInitialized()) { /* else the interpreter is gone */
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF(b->owner);
        PyGILState_Release(g);
    }
    PyMem_RawFree(b);
}

static void mooncake_dl_capsule_free(PyObject *cap)
{
    if (PyCapsule_IsValid(cap, "dltensor")) /* never consumed */
        mooncake_dl_delete(PyCapsule_GetPointer(cap, "dltensor"));
}

/*
 * The tensor @p m describes, whose object starts at @p base, as a DLPack
 * capsule; @p owner (may be NULL) gets a new reference kept until the
 * tensor is freed.  NULL without an exception when DLPack cannot carry it
 * (bool, float8, empty tensors: the caller falls back to a record).
 */
static PyObject *mooncake_py_tensor_capsule(PyObject *owner, void *base,
                                            const mc_tensor_meta_t *m)
{
    static const struct { uint8_t code, bits; } dl[MC_TENSOR_DTYPE_COUNT] = {
        [MC_TENSOR_FLOAT32] = {2, 32}, [MC_TENSOR_FLOAT64] = {2, 64},
        [MC_TENSOR_INT8] = {0, 8},     [MC_TENSOR_UINT8] = {1, 8},
        [MC_TENSOR_INT16] = {0, 16},   [MC_TENSOR_INT32] = {0, 32},
        [MC_TENSOR_INT64] = {0, 64},   [MC_TENSOR_FLOAT16] = {2, 16},
        [MC_TENSOR_BFLOAT16] = {4, 16},
    };
    mooncake_dl_box_t *b;
    PyObject *cap;
    int64_t stride = 1;
    int i;

    if ((m->dtype < 0) || (m->dtype >= MC_TENSOR_DTYPE_COUNT) || (dl[m->dtype].bits == 0) ||
        (m->data_bytes == 0))
        return NULL;
    b = PyMem_RawCalloc(1, sizeof(*b));
    if (b == NULL)
        return PyErr_NoMemory();
    for (i = m->ndim - 1; i >= 0; i--) {
        b->shape[i] = m->local_shape[i];
        b->strides[i] = stride;
        stride *= m->local_shape[i];
    }
    b->m.t.data = (char *)base + m->data_offset;
    b->m.t.device_type = 1;
    if (owner == NULL) { /* the caller's memory: a CUDA buffer stays on its device */
        int managed = 0, dev = mc_cuda_pointer_device(base, &managed);
        if (dev >= 0) {
            b->m.t.device_type = managed ? 13 : 2; /* kDLCUDAManaged, kDLCUDA */
            b->m.t.device_id = dev;
        }
    }
    b->m.t.ndim = m->ndim;
    b->m.t.code = dl[m->dtype].code;
    b->m.t.bits = dl[m->dtype].bits;
    b->m.t.lanes = 1;
    b->m.t.shape = b->shape;
    b->m.t.strides = b->strides;
    b->m.manager_ctx = b;
    b->m.deleter = mooncake_dl_delete;
    b->owner = owner;
    Py_XINCREF(owner);
    cap = PyCapsule_New(b, "dltensor", mooncake_dl_capsule_free);
    if (cap == NULL)
        mooncake_dl_delete(&b->m);
    return cap;
}

/* What a tensor read hands to Python: a capsule, else the record. */
static PyObject *mooncake_py_tensor_result(PyObject *owner, void *base, int64_t result,
                                           const mc_tensor_meta_t *m)
{
    if (result >= 0) {
        PyObject *cap = mooncake_py_tensor_capsule(owner, base, m);
        if ((cap != NULL) || PyErr_Occurred())
            return cap;
        /* the record is read from memory by the CPU: never device memory */
        if ((owner == NULL) && (mc_cuda_pointer_device(base, NULL) >= 0))
            result = MC_NOT_SUPPORTED;
    }
    return mooncake_py_tensor_rec(result, m);
}

/* The header of the serialized tensor object @p data: one
 * MOONCAKE_TENSOR_OUT record whose result is the object length, or
 * MC_INVALID_PARAMS for anything the decoder refuses. */
PyObject *mooncake_py_tensor_decode(const void *data, size_t len)
{
    mc_tensor_meta_t m;
    mc_status_t st = mc_tensor_header_decode(data, len, &m);
    return mooncake_py_tensor_rec((st == MC_OK) ? (int64_t)len : (int64_t)st, &m);
}

/* The tensor in the bytearray @p buf (a whole serialized object): a DLPack
 * capsule keeping @p buf alive, else its record (tensor_decode()). */
PyObject *mooncake_py_tensor_wrap(PyObject *buf)
{
    mc_tensor_meta_t m;
    mc_status_t st;
    if (!PyByteArray_Check(buf)) {
        PyErr_SetString(PyExc_TypeError, "tensor_wrap takes a bytearray");
        return NULL;
    }
    st = mc_tensor_header_decode(PyByteArray_AS_STRING(buf), (uint64_t)PyByteArray_GET_SIZE(buf),
                                 &m);
    return mooncake_py_tensor_result(buf, PyByteArray_AS_STRING(buf),
                                     (st == MC_OK) ? PyByteArray_GET_SIZE(buf) : st, &m);
}

PyObject *mooncake_py_store_tensor_put(mc_store_h h, int upsert, PyObject *keys, PyObject *recs,
                                       int tp_size, int split_dim,
                                       const mc_replicate_config_t *config)
{
    mooncake_py_strv_t sv;
    uint64_t *v = NULL;
    mc_tensor_meta_t *metas = NULL;
    const void **data = NULL;
    mc_status_t *sts = NULL;
    mc_status_t st = MC_OK;
    PyObject *list = NULL;
    size_t i, n;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    if ((v = mooncake_py_u64v(recs, n * MOONCAKE_TENSOR_IN)) == NULL)
        goto cleanup;
    metas = PyMem_Calloc(n + 1, sizeof(*metas));
    data = PyMem_Calloc(n + 1, sizeof(*data));
    if ((metas == NULL) || (data == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    if ((sts = mooncake_py_status_array(n)) == NULL)
        goto cleanup;
    for (i = 0; i < n; i++) {
        const uint64_t *r = v + MOONCAKE_TENSOR_IN * i;
        if ((r[1] > MC_TENSOR_MAX_DIMS) ||
            (mc_tensor_meta_init(&metas[i], (int32_t)r[0], (const int64_t *)(r + 2),
                                 (int32_t)r[1]) != MC_OK)) {
            memset(&metas[i], 0, sizeof(metas[i]));
            metas[i].dtype = MC_TENSOR_DTYPE_UNKNOWN; /* refused by the call */
        }
        data[i] = (const void *)(uintptr_t)r[10];
    }
    Py_BEGIN_ALLOW_THREADS
    st = mc_tensor_put_batch(h, sv.v, metas, data, n, tp_size, split_dim, config,
                             upsert ? MC_TENSOR_WRITE_UPSERT : 0, sts);
    Py_END_ALLOW_THREADS
    list = mooncake_py_batch_statuses(sts, n, st);
cleanup:
    PyMem_Free(sts);
    PyMem_Free(data);
    PyMem_Free(metas);
    PyMem_Free(v);
    mooncake_py_strv_cleanup(&sv);
    return list;
}

/* What tensor_put_from() passes on beside its keys and columns. */
typedef struct mooncake_py_put_from_arg {
    int upsert, tp_size, split_dim;
    const mc_replicate_config_t *config;
} mooncake_py_put_from_arg_t;

/* cols[0]: the addresses of the tensors, cols[1]: their sizes. */
static mc_status_t mooncake_py_tensor_put_from_call(mc_store_h h, const char **keys, size_t n,
                                                    uint64_t *const *cols, const void *arg,
                                                    mc_status_t *sts)
{
    const mooncake_py_put_from_arg_t *a = arg;
    return mc_tensor_put_from_batch(h, keys, (const void *const *)cols[0], cols[1], n,
                                    a->tp_size, a->split_dim, a->config,
                                    a->upsert ? MC_TENSOR_WRITE_UPSERT : 0, sts);
}

/* The library is called with no keys too (it answers for itself). */
PyObject *mooncake_py_store_tensor_put_from(mc_store_h h, int upsert, PyObject *keys,
                                            PyObject *ptrs, PyObject *sizes, int tp_size,
                                            int split_dim, const mc_replicate_config_t *config)
{
    static const mooncake_py_batch_t b = {mooncake_py_tensor_put_from_call, 2, 1};
    const mooncake_py_put_from_arg_t a = {upsert, tp_size, split_dim, config};
    PyObject *const cols[2] = {ptrs, sizes};
    return mooncake_py_batch(h, &b, keys, cols, &a);
}

/* tensor_get_into(): the buffers, the results and the headers read. */
typedef struct mooncake_py_tensors {
    const uint64_t *ptrs;
    const int64_t *res;
    const mc_tensor_meta_t *metas;
} mooncake_py_tensors_t;

/* tensor_get_into(): the result record of key i (mooncake_py_tensor_result). */
static PyObject *mooncake_py_tensor_item(size_t i, void *arg)
{
    const mooncake_py_tensors_t *a = arg;
    return mooncake_py_tensor_result(NULL, (void *)(uintptr_t)a->ptrs[i], a->res[i],
                                     &a->metas[i]);
}

PyObject *mooncake_py_store_tensor_get_into(mc_store_h h, PyObject *keys, PyObject *ptrs,
                                            PyObject *caps)
{
    mooncake_py_strv_t sv;
    uint64_t *vp = NULL, *vc = NULL;
    mc_tensor_meta_t *metas = NULL;
    int64_t *res = NULL;
    PyObject *list = NULL;
    size_t n;

    if (mooncake_py_strv_init(&sv, keys) != 0)
        return NULL;
    n = sv.n;
    if (((vp = mooncake_py_u64v(ptrs, n)) == NULL) ||
        ((vc = mooncake_py_u64v(caps, n)) == NULL))
        goto cleanup;
    metas = PyMem_Calloc(n + 1, sizeof(*metas));
    res = PyMem_Calloc(n + 1, sizeof(*res));
    if ((metas == NULL) || (res == NULL)) {
        PyErr_NoMemory();
        goto cleanup;
    }
    Py_BEGIN_ALLOW_THREADS
    if (n == 1)
        res[0] = mc_tensor_get_into(h, sv.v[0], (void *)(uintptr_t)vp[0],
                                    (vc[0] > SIZE_MAX) ? SIZE_MAX : (size_t)vc[0],
                                    &metas[0]);
    else if (n > 1)
        (void)mc_tensor_batch_get_into(h, sv.v, (void *const *)vp, vc, n, metas,
                                       res);
    Py_END_ALLOW_THREADS
    {
        const mooncake_py_tensors_t a = {vp, res, metas};
        list = mooncake_py_list_of(n, mooncake_py_tensor_item, (void *)&a);
    }
cleanup:
    PyMem_Free(res);
    PyMem_Free(metas);
    PyMem_Free(vc);
    PyMem_Free(vp);
    mooncake_py_strv_cleanup(&sv);
    return list;
}
