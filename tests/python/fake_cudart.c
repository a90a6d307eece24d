/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A stand-in for libcudart.so for tests on hosts without a GPU: the few
 * runtime calls the store loads (common/cuda.h), with "device memory"
 * from fake_cuda_malloc mapped PROT_NONE, so that any CPU access of it
 * outside cudaMemcpy crashes the process.  Built by tests/python/test_cuda.py.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAXR 64

typedef struct {
    int type, device;
    void *dp, *hp;
} attr_t;

typedef struct {
    uintptr_t base;
    size_t len;
} range_t;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static range_t dev[MAXR], reg[MAXR];
static int ndev, nreg;
static size_t registered;

void *fake_cuda_malloc(size_t len);
size_t fake_cuda_host_registered(void);
int cudaGetDeviceCount(int *n);
const char *cudaGetErrorString(int e);
int cudaGetLastError(void);
int cudaPointerGetAttributes(attr_t *a, const void *p);
int cudaHostRegister(void *p, size_t len, unsigned flags);
int cudaHostUnregister(void *p);
int cudaMemcpy(void *dst, const void *src, size_t len, int kind);
int cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream);
int cudaStreamSynchronize(void *stream);

void *fake_cuda_malloc(size_t len)
{
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&mu);
    dev[ndev++] = (range_t){(uintptr_t)p, len};
    pthread_mutex_unlock(&mu);
    return p;
}

size_t fake_cuda_host_registered(void)
{
    return registered;
}

static range_t *dev_of(const void *p)
{
    for (int i = 0; i < ndev; i++)
        if ((uintptr_t)p - dev[i].base < dev[i].len)
            return &dev[i];
    return NULL;
}

int cudaGetDeviceCount(int *n)
{
    const char *e = getenv("FAKE_CUDA_DEVICES");
    *n            = (e != NULL) ? atoi(e) : 1;
    return 0;
}

const char *cudaGetErrorString(int e)
{
    return (e != 0) ? "fake cuda error" : "no error";
}

int cudaGetLastError(void)
{
    return 0;
}

int cudaPointerGetAttributes(attr_t *a, const void *p)
{
    pthread_mutex_lock(&mu);
    memset(a, 0, sizeof(*a));
    if (dev_of(p) != NULL) {
        a->type = 2;
        a->dp   = (void *)p;
    }
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaHostRegister(void *p, size_t len, unsigned flags)
{
    (void)flags;
    if (getenv("FAKE_CUDA_REGISTER_FAIL") != NULL)
        return 1;
    pthread_mutex_lock(&mu);
    reg[nreg++] = (range_t){(uintptr_t)p, len};
    registered += len;
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaHostUnregister(void *p)
{
    int rc = 1;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < nreg; i++) {
        if (reg[i].base == (uintptr_t)p) {
            registered -= reg[i].len;
            reg[i] = reg[--nreg];
            rc     = 0;
            break;
        }
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

int cudaMemcpy(void *dst, const void *src, size_t len, int kind)
{
    range_t *d, *s;
    (void)kind;
    pthread_mutex_lock(&mu);
    d = dev_of(dst);
    s = dev_of(src);
    if (d != NULL)
        mprotect((void *)d->base, d->len, PROT_READ | PROT_WRITE);
    if (s != NULL)
        mprotect((void *)s->base, s->len, PROT_READ);
    memcpy(dst, src, len);
    if (d != NULL)
        mprotect((void *)d->base, d->len, PROT_NONE);
    if (s != NULL)
        mprotect((void *)s->base, s->len, PROT_NONE);
    pthread_mutex_unlock(&mu);
    return 0;
}

int cudaMemcpyAsync(void *dst, const void *src, size_t len, int kind, void *stream)
{
    (void)stream;
    return cudaMemcpy(dst, src, len, kind);
}

int cudaStreamSynchronize(void *stream)
{
    (void)stream;
    return 0;
}
