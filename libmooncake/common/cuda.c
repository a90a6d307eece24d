/* SPDX-License-Identifier: Apache-2.0 */
/* The CUDA runtime through dlopen (cuda.h). */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cuda.h"
#include "common/log.h"
#include "common/util.h"

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static mc_cuda_t cuda_fns;
static const mc_cuda_t *cuda_ready;
static char cuda_reason[512];
static uint64_t pinned_bytes; /* atomic */
static int pin_warned;        /* atomic */

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if ((p == NULL) && (cuda_reason[0] == '\0'))
        snprintf(cuda_reason, sizeof(cuda_reason), "the CUDA runtime has no %s", name);
    return p;
}

static void cuda_load(void)
{
    static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "libcudart.so.11.0"};
    const char *path = getenv("MC_CUDART_PATH");
    void *lib        = NULL;
    int count        = 0, err;

#ifndef MC_HAVE_CUDA
    snprintf(cuda_reason, sizeof(cuda_reason), "this build was configured --without-cuda");
    (void)names;
    (void)path;
    (void)lib;
    (void)count;
    (void)err;
    return;
#endif
    if ((path != NULL) && (*path != '\0')) {
        lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            snprintf(cuda_reason, sizeof(cuda_reason), "MC_CUDART_PATH=%s: %s", path,
                     dlerror());
            return;
        }
    } else {
        for (size_t i = 0; (i < sizeof(names) / sizeof(names[0])) && (lib == NULL); i++)
            lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            snprintf(cuda_reason, sizeof(cuda_reason),
                     "libcudart.so is not installed (or not on the library path)");
            return;
        }
    }
    *(void **)&cuda_fns.pointer_get_attributes = sym(lib, "cudaPointerGetAttributes");
    *(void **)&cuda_fns.host_register          = sym(lib, "cudaHostRegister");
    *(void **)&cuda_fns.host_unregister        = sym(lib, "cudaHostUnregister");
    *(void **)&cuda_fns.memcpy                 = sym(lib, "cudaMemcpy");
    *(void **)&cuda_fns.memcpy_async           = sym(lib, "cudaMemcpyAsync");
    *(void **)&cuda_fns.stream_synchronize     = sym(lib, "cudaStreamSynchronize");
    *(void **)&cuda_fns.get_last_error         = sym(lib, "cudaGetLastError");
    *(void **)&cuda_fns.get_device_count       = sym(lib, "cudaGetDeviceCount");
    *(void **)&cuda_fns.get_error_string       = sym(lib, "cudaGetErrorString");
    if (cuda_reason[0] != '\0') {
        dlclose(lib);
        return;
    }
    err = cuda_fns.get_device_count(&count);
    if ((err != 0) || (count <= 0)) {
        snprintf(cuda_reason, sizeof(cuda_reason), "the CUDA runtime sees no GPU (%s)",
                 (err != 0) ? cuda_fns.get_error_string(err) : "0 devices");
        cuda_fns.get_last_error();
        dlclose(lib);
        return;
    }
    mc_debug("cuda: runtime loaded, %d GPU(s)", count);
    cuda_ready = &cuda_fns; /* the library stays loaded for the process */
}

const mc_cuda_t *mc_cuda_get(void)
{
    pthread_once(&cuda_once, cuda_load);
    return cuda_ready;
}

const char *mc_cuda_unavailable_reason(void)
{
    return (mc_cuda_get() == NULL) ? cuda_reason : "";
}

int mc_cuda_ptr_type(const void *ptr, int *device_p)
{
    const mc_cuda_t *c = mc_cuda_get();
    mc_cuda_ptr_attr_t a;
    if ((c == NULL) || (ptr == NULL))
        return 0;
    memset(&a, 0, sizeof(a));
    if (c->pointer_get_attributes(&a, ptr) != 0) {
        c->get_last_error(); /* clear: plain host memory can report an error */
        return 0;
    }
    if ((a.type != MC_CUDA_MEMORY_DEVICE) && (a.type != 3))
        return 0;
    if (device_p != NULL)
        *device_p = a.device;
    return a.type;
}

int mc_cuda_is_device_ptr(const void *ptr)
{
    return mc_cuda_ptr_type(ptr, NULL) != 0;
}

mc_status_t mc_cuda_copy(void *dst, const void *src, size_t len)
{
    const mc_cuda_t *c = mc_cuda_get();
    int err;
    if (c == NULL) {
        mc_set_error_detail("CUDA runtime not available: %s", cuda_reason);
        return MC_INTERNAL_ERROR;
    }
    if (len == 0)
        return MC_OK;
    err = c->memcpy(dst, src, len, MC_CUDA_MEMCPY_DEFAULT);
    if (err != 0) {
        mc_set_error_detail("cudaMemcpy of %zu bytes: %s", len, c->get_error_string(err));
        c->get_last_error();
        return MC_INTERNAL_ERROR;
    }
    return MC_OK;
}

/* 1 for the first pinning warning of the process, 0 after. */
static int pin_warn_first(void)
{
    return __atomic_exchange_n(&pin_warned, 1, __ATOMIC_ACQ_REL) == 0;
}

int mc_cuda_pin_segment(void *base, size_t len)
{
    const char *env = getenv("MC_STORE_PIN_MEMORY_MAX_BYTES");
    const mc_cuda_t *c;
    uint64_t quota = 0, cur;
    int err;

    if ((env == NULL) || (*env == '\0') || (base == NULL) || (len == 0))
        return 0;
    if ((mc_parse_size(env, &quota) != 0) || (quota == 0)) {
        if ((strcmp(env, "0") != 0) && pin_warn_first())
            mc_warn("MC_STORE_PIN_MEMORY_MAX_BYTES=%s is not a size; store segments stay "
                    "pageable", env);
        return 0;
    }
    c = mc_cuda_get();
    if (c == NULL) {
        if (pin_warn_first())
            mc_warn("MC_STORE_PIN_MEMORY_MAX_BYTES is set but %s; store segments stay "
                    "pageable", cuda_reason);
        return 0;
    }
    cur = __atomic_load_n(&pinned_bytes, __ATOMIC_ACQUIRE);
    do {
        if ((len > quota) || (cur > quota - len)) {
            mc_info("cuda: pin quota MC_STORE_PIN_MEMORY_MAX_BYTES=%s spent; segment of %zu "
                    "bytes stays pageable", env, len);
            return 0;
        }
    } while (!__atomic_compare_exchange_n(&pinned_bytes, &cur, cur + len, 0, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE));
    err = c->host_register(base, len, 0 /* cudaHostRegisterDefault */);
    if (err != 0) {
        __atomic_sub_fetch(&pinned_bytes, len, __ATOMIC_ACQ_REL);
        if (pin_warn_first())
            mc_warn("cudaHostRegister of a store segment failed (%s); store segments stay "
                    "pageable", c->get_error_string(err));
        c->get_last_error();
        return 0;
    }
    return 1;
}

void mc_cuda_unpin_segment(void *base, size_t len)
{
    const mc_cuda_t *c = mc_cuda_get();
    if (c == NULL)
        return;
    if (c->host_unregister(base) != 0)
        c->get_last_error();
    __atomic_sub_fetch(&pinned_bytes, len, __ATOMIC_ACQ_REL);
}

uint64_t mc_cuda_pinned_bytes(void)
{
    return __atomic_load_n(&pinned_bytes, __ATOMIC_ACQUIRE);
}
