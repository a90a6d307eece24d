/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host memory helpers of the Python API: MooncakeHostMemAllocator
 * (mc_host_mem_alloc/free) and bind_to_numa_node (mc_numa_bind).
 *
 * Allocations are anonymous private mappings, so they are page aligned
 * (what register_buffer and the transports like) and freeing one gives the
 * pages straight back to the kernel.  munmap needs the length, and a
 * Python caller hands back only an integer address, so every live mapping
 * is recorded in a process-wide registry (a hash map under a mutex);
 * mc_host_mem_free() of an address the registry does not hold is refused
 * instead of unmapping somebody else's memory.
 *
 * NUMA binding is per calling thread (numa_run_on_node pins the CPUs,
 * numa_set_preferred steers later page faults); with no libnuma at build
 * time, or no NUMA support in the running kernel, it says so with
 * MC_NOT_SUPPORTED rather than pretending.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef MC_HAVE_NUMA
#include <numa.h>
#endif

#include <mooncake/store.h>

#include "common/hashmap.h"
#include "common/log.h"

typedef struct hostmem_entry {
    mc_hnode_t node;
    void *addr;
    size_t map_len;
} hostmem_entry_t;

/* The registry; buckets are allocated by the first alloc. */
static pthread_mutex_t hostmem_lock = PTHREAD_MUTEX_INITIALIZER;
static mc_hmap_t hostmem_map;

static uint64_t addr_hash(const void *addr)
{
    uintptr_t a = (uintptr_t)addr;
    return mc_hash_bytes(&a, sizeof(a), 0);
}

static int addr_eq(const mc_hnode_t *node, const void *key)
{
    return mc_container_of(node, hostmem_entry_t, node)->addr == key;
}

MC_API mc_status_t mc_host_mem_alloc(size_t size, void **ptr_p)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = (page > 0) ? (size_t)page : 4096u;
    size_t map_len;
    hostmem_entry_t *e;
    void *p;

    if (ptr_p == NULL) {
        mc_set_error_detail("ptr_p is NULL");
        return MC_INVALID_PARAMS;
    }
    if (size == 0) {
        mc_set_error_detail("cannot allocate 0 bytes of host memory");
        return MC_INVALID_PARAMS;
    }
    if (size > SIZE_MAX - (pg - 1)) {
        mc_set_error_detail("%zu bytes of host memory is more than the address space", size);
        return MC_INVALID_PARAMS;
    }
    map_len = (size + pg - 1) & ~(pg - 1);

    e = malloc(sizeof(*e));
    if (e == NULL) {
        mc_set_error_detail("out of memory for a host memory record");
        return MC_INTERNAL_ERROR;
    }
    p = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        mc_set_error_detail("cannot map %zu bytes of host memory: %m", map_len);
        free(e);
        return MC_NO_AVAILABLE_HANDLE;
    }
    e->addr    = p;
    e->map_len = map_len;

    pthread_mutex_lock(&hostmem_lock);
    if ((hostmem_map.nbuckets == 0) && (mc_hmap_init(&hostmem_map, 64) != 0)) {
        pthread_mutex_unlock(&hostmem_lock);
        munmap(p, map_len);
        free(e);
        mc_set_error_detail("out of memory for the host memory registry");
        return MC_INTERNAL_ERROR;
    }
    /* a failed grow still inserts the node; only the load factor suffers */
    (void)mc_hmap_insert(&hostmem_map, &e->node, addr_hash(p));
    pthread_mutex_unlock(&hostmem_lock);

    *ptr_p = p;
    return MC_OK;
}

MC_API mc_status_t mc_host_mem_free(void *ptr)
{
    mc_hnode_t *n = NULL;
    hostmem_entry_t *e;

    if (ptr == NULL) {
        mc_set_error_detail("cannot free a NULL host memory pointer");
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&hostmem_lock);
    if (hostmem_map.nbuckets > 0) {
        n = mc_hmap_find(&hostmem_map, addr_hash(ptr), ptr, addr_eq);
        if (n != NULL)
            mc_hmap_remove(&hostmem_map, n);
    }
    pthread_mutex_unlock(&hostmem_lock);
    if (n == NULL) {
        mc_set_error_detail("%p was not returned by the host memory allocator "
                            "(or was freed already)", ptr);
        return MC_INVALID_PARAMS;
    }
    e = mc_container_of(n, hostmem_entry_t, node);
    if (munmap(e->addr, e->map_len) != 0)
        mc_warn("munmap of %zu bytes of host memory at %p failed: %m", e->map_len, e->addr);
    free(e);
    return MC_OK;
}

MC_API mc_status_t mc_numa_bind(int node)
{
#ifdef MC_HAVE_NUMA
    int max;

    if (numa_available() < 0) {
        mc_set_error_detail("NUMA is not available on this machine");
        return MC_NOT_SUPPORTED;
    }
    max = numa_max_node();
    if ((node < 0) || (node > max)) {
        mc_set_error_detail("NUMA node %d does not exist (nodes are 0 to %d)", node, max);
        return MC_INVALID_PARAMS;
    }
    if (numa_run_on_node(node) != 0) {
        int err = errno;
        mc_set_error_detail("cannot run on NUMA node %d: %s", node, strerror(err));
        return (err == EINVAL) ? MC_INVALID_PARAMS : MC_INTERNAL_ERROR;
    }
    numa_set_preferred(node);
    return MC_OK;
#else
    (void)node;
    mc_set_error_detail("NUMA is not available: libmooncake was built without libnuma");
    return MC_NOT_SUPPORTED;
#endif
}
