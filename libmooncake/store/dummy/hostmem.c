/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Host memory helpers of the Python API: MooncakeHostMemAllocator
 * (mc_host_mem_alloc/free, and the same allocator behind the addresses
 * torch's pluggable allocator takes: mc_host_mem_pluggable_alloc/free) and
 * bind_to_numa_node (mc_numa_bind).
 *
 * Every allocation is its own memfd ("mooncake_shm", upstream's name),
 * sized, sealed against shrinking and growing, and mapped MAP_SHARED |
 * MAP_POPULATE (mc_host_mem_alloc_lazy: without MAP_POPULATE, so a large
 * block that is used a little at a time, such as the transfer engine's
 * 2 GiB managed-buffer chunks, commits only the pages touched): page
 * aligned (what register_buffer and the transports like), given back to
 * the kernel whole by free, and - the reason for the memfd - shareable:
 * a dummy client's register_buffer hands the descriptor to its real
 * client (SCM_RIGHTS), which maps the same pages and moves a worker's KV
 * pages with no staging copy (docs/protocol.md §8).  The seals
 * are what let the real client trust the size it maps: a block that could
 * shrink under it would fault there (SIGBUS).
 *
 * MC_STORE_USE_HUGEPAGE (present: on, whatever its value) asks for
 * hugetlbfs pages of MC_STORE_HUGEPAGE_SIZE ("2MB", the default, or "1GB";
 * another value is warned about and taken as 2MB), and rounds each size up
 * to that page size - as upstream does.
 *
 * A Python caller hands back only an integer address, and register_buffer
 * asks which block holds an address, so every live block is recorded in a
 * process-wide registry, an array sorted by address under a mutex (blocks
 * are few: a host KV pool, some overflow buffers).  mc_host_mem_free() of
 * an address the registry does not hold is refused instead of unmapping
 * somebody else's memory.
 *
 * NUMA binding is per calling thread (numa_run_on_node pins the CPUs,
 * numa_set_preferred steers later page faults); with no libnuma at build
 * time, or no NUMA support in the running kernel, it says so with
 * MC_NOT_SUPPORTED rather than pretending.
 *
 * May call: dummy_client.c (mc_dummy_host_mem_freed: the dummies that
 * registered a freed block).  Called by: the public API, dummy_client.c
 * (register_buffer).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifdef MC_HAVE_NUMA
#include <numa.h>
#endif

#include <mooncake/store.h>

#include "common/log.h"
#include "store/dummy/dummy.h"

/* linux/memfd.h's huge page size encodings, for older C libraries */
#ifndef MFD_HUGE_SHIFT
#define MFD_HUGE_SHIFT 26
#endif
#ifndef MFD_HUGE_2MB
#define MFD_HUGE_2MB (21u << MFD_HUGE_SHIFT)
#endif
#ifndef MFD_HUGE_1GB
#define MFD_HUGE_1GB (30u << MFD_HUGE_SHIFT)
#endif

#define HOSTMEM_NAME "mooncake_shm"
#define HUGE_HINT " (Check /proc/sys/vm/nr_hugepages?)"

typedef struct hostmem_entry {
    void *addr;
    size_t size;     /* as registered (mc_host_mem_info_t.size) */
    size_t map_len;
    size_t hugepage;
    uint64_t serial;
    int fd;
} hostmem_entry_t;

/* The registry: entries sorted by address. */
static pthread_mutex_t hostmem_lock = PTHREAD_MUTEX_INITIALIZER;
static hostmem_entry_t *hostmem_v;
static size_t hostmem_n, hostmem_cap;
static uint64_t hostmem_serial;

/* Index of the first entry whose address is above @p a.  Lock held. */
static size_t upper(uintptr_t a)
{
    size_t lo = 0, hi = hostmem_n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if ((uintptr_t)hostmem_v[mid].addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

size_t mc_host_mem_round(size_t size, size_t hugepage)
{
    if ((hugepage == 0) || (size > SIZE_MAX - (hugepage - 1)))
        return size;
    return (size + hugepage - 1) & ~(hugepage - 1);
}

/* The huge page size MC_STORE_USE_HUGEPAGE asks for (0: none) and its
 * memfd flags. */
static size_t hugepage_setting(unsigned *flags_p)
{
    static int warned;
    const char *v;

    *flags_p = 0;
    if (getenv("MC_STORE_USE_HUGEPAGE") == NULL)
        return 0;
    v = getenv("MC_STORE_HUGEPAGE_SIZE");
    if ((v != NULL) && (strcmp(v, "1GB") == 0)) {
        *flags_p = MFD_HUGETLB | MFD_HUGE_1GB;
        return (size_t)1 << 30;
    }
    if ((v != NULL) && (strcmp(v, "2MB") != 0) &&
        !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
        mc_warn("MC_STORE_HUGEPAGE_SIZE=\"%s\" is neither 2MB nor 1GB; using 2MB huge pages",
                v);
    *flags_p = MFD_HUGETLB | MFD_HUGE_2MB;
    return (size_t)2 << 20;
}

/* Record a mapped block; MC_INTERNAL_ERROR when the registry cannot grow. */
static mc_status_t record(const hostmem_entry_t *e, uint64_t *serial_p)
{
    size_t k;

    pthread_mutex_lock(&hostmem_lock);
    if (hostmem_n == hostmem_cap) {
        size_t cap = hostmem_cap ? hostmem_cap * 2 : 16;
        hostmem_entry_t *v = realloc(hostmem_v, cap * sizeof(*v));
        if (v == NULL) {
            pthread_mutex_unlock(&hostmem_lock);
            mc_set_error_detail("out of memory for the host memory registry");
            return MC_INTERNAL_ERROR;
        }
        hostmem_v = v;
        hostmem_cap = cap;
    }
    k = upper((uintptr_t)e->addr);
    memmove(&hostmem_v[k + 1], &hostmem_v[k], (hostmem_n - k) * sizeof(*hostmem_v));
    hostmem_v[k] = *e;
    hostmem_v[k].serial = *serial_p = ++hostmem_serial;
    hostmem_n++;
    pthread_mutex_unlock(&hostmem_lock);
    return MC_OK;
}

/*
 * The failure texts are upstream's (ShmHelper), which callers match on;
 * a huge-page failure adds where to look.
 */
static mc_status_t host_mem_map(size_t size, int populate, void **ptr_p)
{
    long page = sysconf(_SC_PAGESIZE);
    size_t pg = (page > 0) ? (size_t)page : 4096u;
    const char *hint = "";
    hostmem_entry_t e;
    unsigned flags;
    uint64_t serial;
    mc_status_t st;
    void *p;

    if (ptr_p == NULL) {
        mc_set_error_detail("ptr_p is NULL");
        return MC_INVALID_PARAMS;
    }
    memset(&e, 0, sizeof(e));
    e.hugepage = hugepage_setting(&flags);
    if (e.hugepage > 0) {
        hint = HUGE_HINT;
        pg = e.hugepage;
    }
    if (size == 0) { /* mmap of 0 bytes: upstream's text for it */
        mc_set_error_detail("Failed to map shared memory: %s%s", strerror(EINVAL), hint);
        return MC_INVALID_PARAMS;
    }
    if (size > ((SIZE_MAX >> 2) & ~(pg - 1))) {
        mc_set_error_detail("Failed to set shared memory size: %zu bytes is more than the "
                            "address space", size);
        return MC_INVALID_PARAMS;
    }
    e.map_len = (size + pg - 1) & ~(pg - 1);
    e.size = (e.hugepage > 0) ? e.map_len : size;
    e.fd = memfd_create(HOSTMEM_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
    if (e.fd < 0) {
        mc_set_error_detail("Failed to create anonymous shared memory: %s%s", strerror(errno),
                            hint);
        return MC_NO_AVAILABLE_HANDLE;
    }
    /* the whole last page belongs to the block (the memfd is page-rounded),
     * and the seals let a real client map it without fearing a shrink */
    if (ftruncate(e.fd, (off_t)e.map_len) != 0) {
        mc_set_error_detail("Failed to set shared memory size: %s%s", strerror(errno), hint);
        st = MC_NO_AVAILABLE_HANDLE;
        goto fail_fd;
    }
    if (fcntl(e.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        mc_set_error_detail("Failed to seal shared memory: %s", strerror(errno));
        st = MC_INTERNAL_ERROR;
        goto fail_fd;
    }
    p = mmap(NULL, e.map_len, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0),
             e.fd, 0);
    if (p == MAP_FAILED) {
        mc_set_error_detail("Failed to map shared memory: %s%s", strerror(errno), hint);
        st = MC_NO_AVAILABLE_HANDLE;
        goto fail_fd;
    }
    e.addr = p;
    st = record(&e, &serial);
    if (st != MC_OK) {
        munmap(p, e.map_len);
        goto fail_fd;
    }
    *ptr_p = p;
    return MC_OK;
fail_fd:
    close(e.fd);
    return st;
}

MC_API mc_status_t mc_host_mem_alloc(size_t size, void **ptr_p)
{
    return host_mem_map(size, 1, ptr_p);
}

MC_API mc_status_t mc_host_mem_alloc_lazy(size_t size, void **ptr_p)
{
    return host_mem_map(size, 0, ptr_p);
}

MC_API mc_status_t mc_host_mem_free(void *ptr)
{
    hostmem_entry_t e;
    size_t k;

    if (ptr == NULL) {
        mc_set_error_detail("cannot free a NULL host memory pointer");
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&hostmem_lock);
    k = upper((uintptr_t)ptr);
    if ((k == 0) || (hostmem_v[k - 1].addr != ptr)) {
        pthread_mutex_unlock(&hostmem_lock);
        mc_set_error_detail("%p was not returned by the host memory allocator "
                            "(or was freed already)", ptr);
        return MC_INVALID_PARAMS;
    }
    e = hostmem_v[k - 1];
    memmove(&hostmem_v[k - 1], &hostmem_v[k], (hostmem_n - k) * sizeof(*hostmem_v));
    hostmem_n--;
    pthread_mutex_unlock(&hostmem_lock);
    /* out of the registry, still mapped: the address cannot be handed out
     * again while dummies that registered it forget it */
    mc_dummy_host_mem_freed(e.addr, e.serial);
    if (munmap(e.addr, e.map_len) != 0)
        mc_warn("munmap of %zu bytes of host memory at %p failed: %m", e.map_len, e.addr);
    close(e.fd);
    return MC_OK;
}

int mc_host_mem_find(const void *addr, size_t len, int want_fd, mc_host_mem_info_t *info)
{
    uintptr_t a = (uintptr_t)addr;
    int found = 0;
    size_t k;

    (void)len; /* the caller compares the range: see the declaration */
    pthread_mutex_lock(&hostmem_lock);
    k = upper(a);
    if ((k > 0) && (a - (uintptr_t)hostmem_v[k - 1].addr < hostmem_v[k - 1].map_len)) {
        const hostmem_entry_t *e = &hostmem_v[k - 1];
        info->base = e->addr;
        info->size = e->size;
        info->map_len = e->map_len;
        info->hugepage = e->hugepage;
        info->serial = e->serial;
        info->fd = -1;
        found = 1;
        /* duplicated under the lock: a concurrent free closes the original */
        if (want_fd && ((info->fd = fcntl(e->fd, F_DUPFD_CLOEXEC, 0)) < 0)) {
            mc_set_error_detail("cannot duplicate the descriptor of host memory %p: %s",
                                e->addr, strerror(errno));
            found = -1;
        }
    }
    pthread_mutex_unlock(&hostmem_lock);
    return found;
}

/* Torch's pluggable allocator calls alloc(size, device, stream) and
 * free(ptr, size, device, stream); only the pointer and size matter here,
 * so a caller that passes fewer arguments is served the same. */
MC_API void *mc_host_mem_pluggable_alloc(size_t size, int device, void *stream)
{
    void *p = NULL;
    (void)device;
    (void)stream;
    if (mc_host_mem_alloc(size, &p) != MC_OK) {
        mc_warn("host memory allocation of %zu bytes failed: %s", size, mc_last_error_detail());
        return NULL;
    }
    return p;
}

MC_API void mc_host_mem_pluggable_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size;
    (void)device;
    (void)stream;
    if ((ptr != NULL) && (mc_host_mem_free(ptr) != MC_OK))
        mc_warn("host memory free of %p: %s", ptr, mc_last_error_detail());
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
