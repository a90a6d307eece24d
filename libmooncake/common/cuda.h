/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUDA runtime, loaded with dlopen (docs/cuda.md), so that one build
 * runs with or without a GPU and without CUDA at build time.  Only the few
 * runtime calls the store needs are declared, with our own prototypes of
 * their stable C ABI (CUDA 11 and later).  Not installed.
 */
#ifndef MC_COMMON_CUDA_H
#define MC_COMMON_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>

/* cudaPointerAttributes of CUDA >= 11: type, device, devicePointer,
 * hostPointer.  Padded in case a later runtime grows it. */
typedef struct mc_cuda_ptr_attr {
    int type; /* 0 unregistered, 1 host, 2 device, 3 managed */
    int device;
    void *device_pointer;
    void *host_pointer;
    char pad[64];
} mc_cuda_ptr_attr_t;

#define MC_CUDA_MEMORY_DEVICE  2
#define MC_CUDA_MEMCPY_DEFAULT 4 /* cudaMemcpyDefault: direction from the pointers */

typedef struct mc_cuda {
    int (*pointer_get_attributes)(mc_cuda_ptr_attr_t *attr, const void *ptr);
    int (*host_register)(void *ptr, size_t len, unsigned flags);
    int (*host_unregister)(void *ptr);
    int (*memcpy)(void *dst, const void *src, size_t len, int kind);
    int (*memcpy_async)(void *dst, const void *src, size_t len, int kind, void *stream);
    int (*stream_synchronize)(void *stream);
    int (*get_last_error)(void);
    int (*get_device_count)(int *n);
    const char *(*get_error_string)(int err);
} mc_cuda_t;

/* The runtime, or NULL when it cannot be loaded or sees no GPU; the first
 * call loads it (MC_CUDART_PATH names the library, else libcudart.so and
 * its versioned names are tried).  Thread-safe. */
const mc_cuda_t *mc_cuda_get(void);
/* Why mc_cuda_get returned NULL (empty when it did not). */
const char *mc_cuda_unavailable_reason(void);

/* 1 when @p ptr is CUDA device (or managed) memory; 0 without a runtime. */
int mc_cuda_is_device_ptr(const void *ptr);

/* The device of CUDA device (type 2) or managed (type 3) memory @p ptr in
 * *device_p; returns that type, or 0 for anything else (no runtime). */
int mc_cuda_ptr_type(const void *ptr, int *device_p);

/* Copy len bytes between host and device memory (cudaMemcpyDefault) and
 * wait for it.  MC_INTERNAL_ERROR with a detail on failure. */
mc_status_t mc_cuda_copy(void *dst, const void *src, size_t len);

/*
 * MC_STORE_PIN_MEMORY_MAX_BYTES: pin a store segment [base, base+len) with
 * cudaHostRegister while the process-wide quota allows.  Returns 1 when
 * pinned (mc_cuda_unpin_segment then releases it), 0 when left pageable:
 * the variable unset, empty, 0 or invalid, the quota spent, or no runtime
 * or a failed registration (one warning per process for those).
 */
int mc_cuda_pin_segment(void *base, size_t len);
void mc_cuda_unpin_segment(void *base, size_t len);
/* Bytes pinned now (tests). */
uint64_t mc_cuda_pinned_bytes(void);

#endif /* MC_COMMON_CUDA_H */
