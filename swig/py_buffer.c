/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BufferHandle, the binding's one C type (swig/py_glue.h): memory
 * exported through the buffer protocol, and the module functions that
 * make one over memory the caller owns (region views) or hand out host
 * memory by address.
 *
 * Owns: the type object, added to the module by its %init
 * (mooncake_py_bufobj_type_add()).  May call: CPython and the public
 * libmooncake headers (mc_store_buffer_*, mc_host_mem_*).
 *
 * The lock: tp_dealloc releases it around mc_store_buffer_release(); the
 * region views run with it held; the host-memory calls never touch the
 * interpreter (the -threads wrapper calls them without the lock).
 */
#include "py_glue.h"

#include <stdint.h>
#include <string.h>


/*
 * One object type serves two purposes:
 *   - get_buffer() results: it owns an mc_store_buffer_h and releases it in
 *     tp_dealloc (the library keeps the memory valid after a store close);
 *   - BufferPool lease views: it only describes (ptr, size) memory the pool
 *     owns, and counts the buffers it exported so the pool can refuse to
 *     free memory a live memoryview still points into.
 */
typedef struct mooncake_py_bufobj {
    PyObject_HEAD
    mc_store_buffer_h handle; /* NULL for a plain region view */
    char *data;
    Py_ssize_t size;
    Py_ssize_t exports;
    const char *format; /* struct format of the exported buffer */
} mooncake_py_bufobj_t;

static void mooncake_py_bufobj_dealloc(PyObject *self)
{
    mooncake_py_bufobj_t *b = (mooncake_py_bufobj_t *)self;
    if (b->handle != NULL) {
        mc_store_buffer_h h = b->handle;
        b->handle = NULL;
        Py_BEGIN_ALLOW_THREADS
        mc_store_buffer_release(h);
        Py_END_ALLOW_THREADS
    }
    Py_TYPE(self)->tp_free(self);
}

static int mooncake_py_bufobj_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    mooncake_py_bufobj_t *b = (mooncake_py_bufobj_t *)self;
    if (PyBuffer_FillInfo(view, self, b->data, b->size, 0, flags) != 0)
        return -1;
    /* get_buffer(): format 'b' (signed char) as upstream's BufferHandle. */
    if ((flags & PyBUF_FORMAT) == PyBUF_FORMAT)
        view->format = (char *)b->format;
    b->exports++;
    return 0;
}

static void mooncake_py_bufobj_releasebuffer(PyObject *self, Py_buffer *view)
{
    (void)view;
    ((mooncake_py_bufobj_t *)self)->exports--;
}

static PyBufferProcs mooncake_py_bufobj_as_buffer = {
    mooncake_py_bufobj_getbuffer,
    mooncake_py_bufobj_releasebuffer,
};

static Py_ssize_t mooncake_py_bufobj_len(PyObject *self)
{
    return ((mooncake_py_bufobj_t *)self)->size;
}

static PySequenceMethods mooncake_py_bufobj_as_sequence = {
    mooncake_py_bufobj_len, /* sq_length */
    0, 0, 0, 0, 0, 0, 0, 0, 0,
};

static PyObject *mooncake_py_bufobj_ptr(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)
                                       ((mooncake_py_bufobj_t *)self)->data);
}

static PyObject *mooncake_py_bufobj_size(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(((mooncake_py_bufobj_t *)self)->size);
}

static PyObject *mooncake_py_bufobj_exports(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSsize_t(((mooncake_py_bufobj_t *)self)->exports);
}

static PyObject *mooncake_py_bufobj_repr(PyObject *self)
{
    mooncake_py_bufobj_t *b = (mooncake_py_bufobj_t *)self;
    return PyUnicode_FromFormat("<BufferHandle ptr=%p size=%zd>", (void *)b->data, b->size);
}

static PyMethodDef mooncake_py_bufobj_methods[] = {
    {"ptr", mooncake_py_bufobj_ptr, METH_NOARGS, "Address of the first byte."},
    {"size", mooncake_py_bufobj_size, METH_NOARGS, "Size in bytes."},
    {"exports", mooncake_py_bufobj_exports, METH_NOARGS,
     "Number of buffers (memoryviews, arrays) currently exported."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject mooncake_py_bufobj_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake.capi.BufferHandle",
    .tp_basicsize = sizeof(mooncake_py_bufobj_t),
    .tp_dealloc = mooncake_py_bufobj_dealloc,
    .tp_repr = mooncake_py_bufobj_repr,
    .tp_as_sequence = &mooncake_py_bufobj_as_sequence,
    .tp_as_buffer = &mooncake_py_bufobj_as_buffer,
    /* a base type: BufferPool's BufferLeaseView is a Python subclass */
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Memory exported through the buffer protocol (1-D, format 'b', writable).",
    .tp_methods = mooncake_py_bufobj_methods,
};

/* A new BufferHandle over @p data; owns @p handle (may be NULL). */
PyObject *mooncake_py_bufobj_new(mc_store_buffer_h handle, void *data, uint64_t size,
                                        const char *format)
{
    mooncake_py_bufobj_t *b;
    if (size > (uint64_t)PY_SSIZE_T_MAX) {
        PyErr_SetString(PyExc_OverflowError, "buffer too large");
        return NULL;
    }
    b = PyObject_New(mooncake_py_bufobj_t, &mooncake_py_bufobj_type);
    if (b == NULL)
        return NULL;
    b->handle = handle;
    b->data = data;
    b->size = (Py_ssize_t)size;
    b->exports = 0;
    b->format = format;
    return (PyObject *)b;
}

/* A BufferHandle over memory the caller owns (BufferPool leases).  The
 * caller must keep the memory valid while exports() > 0. */
PyObject *mooncake_region_view(uint64_t addr, uint64_t size)
{
    if ((addr == 0) && (size > 0)) {
        PyErr_SetString(PyExc_ValueError, "NULL address");
        return NULL;
    }
    /* Unsigned bytes, so `view[a:b] = b"..."` works on a lease. */
    return mooncake_py_bufobj_new(NULL, (void *)(uintptr_t)addr, size, "B");
}

/* mooncake_region_view() as an instance of @p cls, a Python subclass of
 * BufferHandle (BufferPool's BufferLeaseView), whose own attributes keep
 * the owner of the memory alive. */
PyObject *mooncake_region_view_as(PyObject *cls, uint64_t addr, uint64_t size)
{
    mooncake_py_bufobj_t *b;
    if (!PyType_Check(cls) ||
        !PyType_IsSubtype((PyTypeObject *)cls, &mooncake_py_bufobj_type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a subclass of BufferHandle");
        return NULL;
    }
    if (((addr == 0) && (size > 0)) || (size > (uint64_t)PY_SSIZE_T_MAX)) {
        PyErr_SetString(PyExc_ValueError, "NULL address or size too large");
        return NULL;
    }
    b = (mooncake_py_bufobj_t *)((PyTypeObject *)cls)->tp_alloc((PyTypeObject *)cls, 0);
    if (b == NULL)
        return NULL;
    b->handle = NULL;
    b->data = (char *)(uintptr_t)addr;
    b->size = (Py_ssize_t)size;
    b->exports = 0;
    b->format = "B";
    return (PyObject *)b;
}

/* mc_host_mem_alloc() (or, @p lazy, mc_host_mem_alloc_lazy()) as an
 * address, 0 on failure. */
static uint64_t host_mem_addr(uint64_t size, int lazy)
{
    void *p = NULL;
    if (size > (uint64_t)SIZE_MAX)
        return 0;
    /* 0 too: the library refuses it, with upstream's text as the detail */
    if ((lazy ? mc_host_mem_alloc_lazy : mc_host_mem_alloc)((size_t)size, &p) != MC_OK)
        return 0;
    return (uint64_t)(uintptr_t)p;
}

uint64_t mooncake_host_mem_alloc(uint64_t size)
{
    return host_mem_addr(size, 0);
}

uint64_t mooncake_host_mem_alloc_lazy(uint64_t size)
{
    return host_mem_addr(size, 1);
}

int mooncake_host_mem_free(uint64_t addr)
{
    return mc_host_mem_free((void *)(uintptr_t)addr);
}

/* The addresses of the pluggable allocator pair, for torch
 * (mooncake.store.get_alloc_func_addr / get_free_func_addr). */
uint64_t mooncake_host_mem_alloc_func_addr(void)
{
    return (uint64_t)(uintptr_t)&mc_host_mem_pluggable_alloc;
}

uint64_t mooncake_host_mem_free_func_addr(void)
{
    return (uint64_t)(uintptr_t)&mc_host_mem_pluggable_free;
}

int mooncake_py_bufobj_type_add(PyObject *m)
{
    if (PyType_Ready(&mooncake_py_bufobj_type) < 0)
        return -1;
    Py_INCREF(&mooncake_py_bufobj_type);
    if (PyModule_AddObject(m, "BufferHandle", (PyObject *)&mooncake_py_bufobj_type) < 0) {
        Py_DECREF(&mooncake_py_bufobj_type);
        return -1;
    }
    return 0;
}
