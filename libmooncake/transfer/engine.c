/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The transfer engine: registered regions, the segment cache, and the
 * execution of transfer requests (docs/transfer.md).
 *
 * An engine serves its REMOTE_ACCESS regions through one transport (tcp,
 * or rdma or efa/cxi (libfabric), which keep tcp's port for descriptors
 * and handshakes; the ops table is in engine.h) and reaches
 * other engines' segments through the same transport.  Beside it, regions
 * backed by a sealed memfd are offered to engines on the same host, which
 * map them and copy with memcpy (shm/shm.h); every request tries that path
 * first and falls back to the transport.  This file owns everything that
 * is not transport-specific:
 *
 *  - creation: protocol and metadata service validation, hostname and
 *    bind-address resolution, environment overrides, publication;
 *  - regions: a sorted array, looked up by binary search under a rwlock,
 *    with a per-region reference count so that mc_te_mem_dereg waits for
 *    requests in flight (the count and a "dying" bit share one atomic word,
 *    so the last releaser never touches a region that dereg may already
 *    have freed);
 *  - segments: opened once, cached by name, never freed before the engine;
 *    a descriptor is re-fetched once when a request misses its buffer list
 *    (the target's own check remains the authority);
 *  - transfers: one request runs on the calling thread (no hand-off); so
 *    does a long READ cut into no more slices than lanes, which the caller
 *    sends on several connections at once (exec_spread); otherwise a
 *    batch is cut into items, large requests into slices, and items are
 *    claimed by the calling thread and a small lazily started worker pool,
 *    each item on its own pooled connection.  A request aimed at this
 *    engine itself is a memcpy after the same range check a peer gets.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/copy.h"
#include "common/log.h"
#include "common/util.h"
#include "coord/etcd.h"
#include "coord/redis.h"
#include "transfer/engine.h"
#include "transfer/fabric/fabric.h"
#include "transfer/file/file.h"
#include "transfer/rdma/nic.h"
#include "transfer/rdma/rdma.h"
#include "transfer/rdma/verbs.h"
#include "transfer/tcp/tcp.h"

/* High bit of mc_te_region_t.refs: the region was unlinked by dereg. */
#define REGION_DYING 0x80000000u

/* ---- configuration --------------------------------------------------------- */

static mc_status_t config_resolve(const mc_te_params_t *p, mc_te_config_t *cfg)
{
    uint64_t pmin = MC_TE_DEFAULT_PORT_MIN, pmax = MC_TE_DEFAULT_PORT_MAX;
    uint64_t lanes = MC_TE_DEFAULT_LANES, tmo = MC_TE_DEFAULT_IO_TIMEOUT_S;
    uint64_t workers = UINT64_MAX, slice = MC_TE_DEFAULT_SLICE_SIZE;
    uint64_t conns = MC_TE_DEFAULT_MAX_CONNS, conns_peer = MC_TE_DEFAULT_MAX_CONNS_PEER;
    uint64_t idle = MC_TE_DEFAULT_IDLE_TIMEOUT_S, handshake = MC_TE_DEFAULT_HANDSHAKE_MS;

    if ((mc_env_u64("MC_STORE_CLIENT_MIN_PORT", 1, 65535, &pmin) != 0) ||
        (mc_env_u64("MC_STORE_CLIENT_MAX_PORT", 1, 65535, &pmax) != 0) ||
        (mc_env_u64("MC_TCP_LANES_PER_PEER", 1, MC_TE_MAX_LANES, &lanes) != 0) ||
        (mc_env_u64("MC_TCP_STATUS_TIMEOUT_SEC", 1, 3600, &tmo) != 0) ||
        (mc_env_u64("MC_TE_WORKERS", 0, MC_TE_MAX_WORKERS, &workers) != 0) ||
        (mc_env_u64("MC_TE_MAX_CONNECTIONS", 1, 65536, &conns) != 0) ||
        (mc_env_u64("MC_TE_MAX_CONNECTIONS_PER_PEER", 1, 65536, &conns_peer) != 0) ||
        (mc_env_u64("MC_TE_IDLE_TIMEOUT_SEC", 0, 86400, &idle) != 0) ||
        (mc_env_u64("MC_TE_HANDSHAKE_TIMEOUT_MS", 100, 600000, &handshake) != 0))
        return MC_INVALID_PARAMS;
    if (mc_env_size("MC_TE_SLICE_SIZE", 65536, UINT64_MAX, &slice) != 0)
        return MC_INVALID_PARAMS;
    if ((p != NULL) && (p->field_mask & MC_TE_PARAM_PORT_RANGE)) {
        pmin = p->port_min;
        pmax = p->port_max;
    }
    if ((p != NULL) && (p->field_mask & MC_TE_PARAM_LANES))
        lanes = p->lanes_per_peer;
    if (mc_busy_poll_check() != 0)
        return MC_INVALID_PARAMS;
    if ((pmin == 0) || (pmin > pmax)) {
        mc_set_error_detail("invalid port range [%llu, %llu]", (unsigned long long)pmin,
                            (unsigned long long)pmax);
        return MC_INVALID_PARAMS;
    }
    if ((lanes == 0) || (lanes > MC_TE_MAX_LANES)) {
        mc_set_error_detail("lanes_per_peer must be in [1, %d]", MC_TE_MAX_LANES);
        return MC_INVALID_PARAMS;
    }
    /* Default: the caller plus lanes-1 workers keep one peer's lanes busy;
     * more threads than lanes only queue for lanes (measured on loopback). */
    if (workers == UINT64_MAX)
        workers = lanes - 1;
    cfg->port_min           = (uint16_t)pmin;
    cfg->port_max           = (uint16_t)pmax;
    cfg->lanes              = (unsigned)lanes;
    cfg->workers            = (unsigned)workers;
    cfg->max_conns          = (unsigned)conns;
    cfg->max_conns_peer     = (unsigned)conns_peer;
    cfg->idle_timeout_s     = (int)idle;
    cfg->handshake_ms       = (unsigned)handshake;
    cfg->io_timeout_s       = (int)tmo;
    cfg->connect_timeout_ms = MC_TE_DEFAULT_CONNECT_MS;
    cfg->slice_size         = slice;
    cfg->busy_poll_us       = mc_busy_poll_us();
    cfg->serve_poll_us      = mc_serve_poll_us();
    return MC_OK;
}

/* protocol "rdma": the NICs are selected (rdma/nic.h) and checked with
 * libibverbs, so a missing or misnamed NIC is named in the refusal before
 * anything starts; the transport (rdma/rdma.h) opens them at install. */
static mc_status_t rdma_select(const char *devices, const mc_te_transport_ops_t **ops_p,
                               mc_rdma_nic_t *nics, size_t *n_p)
{
    size_t n = 0;
    mc_status_t st;

    st = mc_rdma_nic_select(getenv("MC_RDMA_SYSFS_ROOT"), devices, getenv("MC_MS_AUTO_DISC"),
                            getenv("MC_MS_FILTERS"), nics, &n);
    if (st != MC_OK)
        return st;
#ifdef MC_HAVE_RDMA
    st = mc_rdma_verbs_check(nics, n, NULL);
    if (st != MC_OK)
        return st;
    *ops_p = &mc_rdma_transport_ops;
    *n_p   = n;
    return MC_OK;
#else
    (void)ops_p;
    (void)n_p;
    mc_set_error_detail("rdma transport not built (libibverbs was not found at configure "
                        "time; %zu NIC(s) found, first %s); use tcp", n, nics[0].name);
    return MC_NOT_SUPPORTED;
#endif
}

/* protocol "efa" / "cxi": the libfabric transport (fabric/fabric.h); the
 * provider is chosen, and libfabric loaded, when it is installed. */
static mc_status_t fabric_select(const char *proto, const mc_te_transport_ops_t **ops_p)
{
#ifdef MC_HAVE_FABRIC
    *ops_p = (strcasecmp(proto, "cxi") == 0) ? &mc_fabric_cxi_transport_ops
                                             : &mc_fabric_efa_transport_ops;
    return MC_OK;
#else
    (void)ops_p;
    mc_set_error_detail("%s transport is not built in this version (libfabric-dev was not "
                        "found at configure time, or --without-fabric); use tcp", proto);
    return MC_NOT_SUPPORTED;
#endif
}

MC_API int mc_te_protocol_built(const char *protocol)
{
    static const struct {
        const char *name;
        int built;
    } table[] = {
        {"tcp", 1},
#ifdef MC_HAVE_RDMA
        {"rdma", 1},
#endif
#ifdef MC_HAVE_FABRIC
        {"efa", 1},
        {"cxi", 1},
#endif
    };
    if (protocol == NULL)
        return 0;
    for (size_t i = 0; i < MC_ARRAY_SIZE(table); i++)
        if (strcasecmp(protocol, table[i].name) == 0)
            return table[i].built;
    return 0;
}

/* Which transport serves @p proto.  Recognised-but-absent transports get
 * NOT_SUPPORTED, unknown names INVALID_PARAMS. */
static mc_status_t protocol_select(const char *proto, const char *devices,
                                   const mc_te_transport_ops_t **ops_p, mc_rdma_nic_t *nics,
                                   size_t *nnics_p)
{
    static const char *const absent[] = {"cxl", "ascend", "nvlink", "hip",
                                         "nvmeof", "barex", "ubshmem"};
    if ((proto == NULL) || (*proto == '\0') || (strcasecmp(proto, "tcp") == 0)) {
        *ops_p = &mc_tcp_transport_ops;
        return MC_OK;
    }
    if (strcasecmp(proto, "rdma") == 0)
        return rdma_select(devices, ops_p, nics, nnics_p);
    if ((strcasecmp(proto, "efa") == 0) || (strcasecmp(proto, "cxi") == 0))
        return fabric_select(proto, ops_p);
    for (size_t i = 0; i < MC_ARRAY_SIZE(absent); i++) {
        if (strcasecmp(proto, absent[i]) == 0) {
            mc_set_error_detail("%s transport is not built in this version; use tcp",
                                absent[i]);
            return MC_NOT_SUPPORTED;
        }
    }
    mc_set_error_detail("unknown transfer protocol \"%s\"; use tcp", proto);
    return MC_INVALID_PARAMS;
}

/* Numeric address for the data port: MC_TCP_BIND_ADDRESS, else what the
 * local hostname resolves to ("localhost" is 127.0.0.1, never ::1). */
static mc_status_t bind_addr_resolve(const char *host, char *out, size_t cap)
{
    const char *env = getenv("MC_TCP_BIND_ADDRESS");
    struct addrinfo hints, *res = NULL, *ai, *pick = NULL;
    const char *name = host;
    int rc;

    if ((env != NULL) && (*env != '\0'))
        name = env;
    else if (strcasecmp(host, "localhost") == 0)
        name = "127.0.0.1";
    memset(&hints, 0, sizeof(hints));
    hints.ai_family   = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc                = getaddrinfo(name, NULL, &hints, &res);
    if (rc != 0) {
        mc_set_error_detail("cannot resolve %s \"%s\": %s",
                            (name == env) ? "MC_TCP_BIND_ADDRESS" : "local hostname", name,
                            gai_strerror(rc));
        return MC_INVALID_PARAMS;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
        if ((pick == NULL) && (ai->ai_family == AF_INET6))
            pick = ai;
    }
    if ((pick == NULL) ||
        (getnameinfo(pick->ai_addr, pick->ai_addrlen, out, (socklen_t)cap, NULL, 0,
                     NI_NUMERICHOST) != 0)) {
        freeaddrinfo(res);
        mc_set_error_detail("local hostname \"%s\" has no IPv4/IPv6 address", name);
        return MC_INVALID_PARAMS;
    }
    freeaddrinfo(res);
    return MC_OK;
}

/* ---- regions ----------------------------------------------------------------- */

/* Index of the last region starting at or below addr, or nregions when
 * there is none.  regions_lock held. */
static size_t region_floor(const mc_te_t *te, uintptr_t addr)
{
    size_t lo = 0, hi = te->nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (te->regions[mid]->addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo == 0) ? te->nregions : lo - 1;
}

/* The region wholly containing [addr, addr+len), or NULL.  Lock held. */
static mc_te_region_t *region_find(const mc_te_t *te, uint64_t addr, uint64_t len)
{
    size_t i;
    mc_te_region_t *r;
    if ((addr > UINTPTR_MAX) || (te->nregions == 0))
        return NULL;
    i = region_floor(te, (uintptr_t)addr);
    if (i == te->nregions)
        return NULL;
    r = te->regions[i];
    if ((uintptr_t)addr - r->addr >= r->len) /* start outside */
        return NULL;
    if (len > r->len - ((uintptr_t)addr - r->addr)) /* end outside, no overflow */
        return NULL;
    return r;
}

mc_te_region_t *mc_te_region_acquire(mc_te_t *te, uint64_t addr, uint64_t len,
                                     unsigned need_flags)
{
    mc_te_region_t *r;
    if (len == 0)
        return NULL;
    pthread_rwlock_rdlock(&te->regions_lock);
    r = region_find(te, addr, len);
    if ((r != NULL) && ((r->flags & need_flags) == need_flags))
        __atomic_add_fetch(&r->refs, 1, __ATOMIC_SEQ_CST);
    else
        r = NULL;
    pthread_rwlock_unlock(&te->regions_lock);
    return r;
}

int mc_te_gen_wait_ms(const mc_te_t *te)
{
    int io = (te->cfg.io_timeout_s > 0) ? te->cfg.io_timeout_s : MC_TE_DEFAULT_IO_TIMEOUT_S;
    return io * 1000 + 1000;
}

/* Wait, at most until @p deadline_ms, for the requests that named the
 * generation before the one @p seq counts.  With te->gen_mu held.  0 once
 * they are done, -1 on timeout. */
static int gen_drain(mc_te_region_t *r, uint32_t seq, uint64_t deadline_ms)
{
    unsigned *users = &r->gen_users[(seq - 1u) & 1u];
    unsigned spins  = 0;

    while (__atomic_load_n(users, __ATOMIC_SEQ_CST) != 0) {
        if (mc_now_ms() > deadline_ms)
            return -1;
        if (++spins < 64)
            sched_yield();
        else
            (void)poll(NULL, 0, 1);
    }
    return 0;
}

/*
 * Adopt @p want, a later counter of @p r's generation (a fence also
 * becomes its floor), or (@p want 0) drain what an earlier adoption left
 * running: one at a time (te->gen_mu), so the
 * requests of two generations back are always done and the two counters
 * of gen_users never mix three generations.  Without @p drain (a READ,
 * which changes no byte and may itself hold tickets of the older one in a
 * pipelined run) it only adopts.  The same-host control word (shm.h)
 * takes the new value only once the older requests are done: a same-host
 * writer that sees it may write at once.  Returns 0 when @p want is the
 * generation (and, with @p drain, drained), -1 otherwise.
 */
static int gen_adopt(mc_te_t *te, mc_te_region_t *r, uint64_t want, int drain, int wait_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)(wait_ms > 0 ? wait_ms : 0);
    uint64_t cur;
    uint32_t seq;
    int rc = 0;

    pthread_mutex_lock(&te->gen_mu);
    cur = __atomic_load_n(&r->gen, __ATOMIC_SEQ_CST);
    if (want == 0) /* only wait out what an earlier adoption left */
        want = cur;
    if ((cur != want) && !mc_gen_newer(want, cur)) {
        /* another adopted a later one meanwhile: the caller looks again */
        pthread_mutex_unlock(&te->gen_mu);
        return mc_gen_newer(cur, want) ? 0 : -1;
    }
    seq = __atomic_load_n(&r->gen_seq, __ATOMIC_SEQ_CST);
    if (cur != want) {
        __atomic_store_n(&r->gen, want, __ATOMIC_SEQ_CST);
#ifdef MC_HAVE_RDMA
        /* at once, before any byte of the new counter lands: a one-sided
         * reader of the earlier one then sees its word change (§3.6) */
        mc_rdma_gen_word_set(te, r, want);
#endif
        if (mc_gen_is_fence(want))
            __atomic_store_n(&r->gen_floor, want, __ATOMIC_SEQ_CST);
        seq++;
        __atomic_store_n(&r->gen_seq, seq, __ATOMIC_SEQ_CST);
        mc_debug("region [0x%llx, +%zu): generation %016llx adopted (was %016llx)",
                 (unsigned long long)r->addr, r->len, (unsigned long long)want,
                 (unsigned long long)cur);
    }
    if (!drain) { /* a READ: it writes nothing, and may hold older tickets itself */
        pthread_mutex_unlock(&te->gen_mu);
        return 0;
    }
    if (__atomic_load_n(&r->gen_drained, __ATOMIC_SEQ_CST) != seq) {
        rc = gen_drain(r, seq, deadline);
        /* and the same-host writes that saw the earlier control word */
        if ((rc == 0) && (r->shm_slot != UINT32_MAX) && (te->shm != NULL)) {
            rc = mc_te_shm_slot_fence(te->shm, r->shm_slot, want, deadline);
            if (rc == 0)
                __atomic_store_n(&r->shm_gen, want, __ATOMIC_RELEASE);
        }
        if (rc == 0)
            __atomic_store_n(&r->gen_drained, seq, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_unlock(&te->gen_mu);
    if (rc != 0)
        mc_warn("region [0x%llx, +%zu): requests of an older generation still running after "
                "%d ms; refusing one of generation %016llx",
                (unsigned long long)r->addr, r->len, wait_ms, (unsigned long long)want);
    return rc;
}

int mc_te_gen_enter(mc_te_t *te, mc_te_region_t *r, uint64_t want, int write, int wait_ms)
{
    if (want == 0)
        return MC_TE_GEN_NONE;
    for (;;) {
        /* the sequence first: an adoption stores gen and floor, then moves
         * it (gen_adopt), so a request that finds it unchanged after being
         * counted below was either judged on the new state or is counted
         * where that adoption waits */
        uint32_t s = __atomic_load_n(&r->gen_seq, __ATOMIC_SEQ_CST);
        uint64_t g = __atomic_load_n(&r->gen, __ATOMIC_SEQ_CST);
        uint64_t f = __atomic_load_n(&r->gen_floor, __ATOMIC_SEQ_CST);
        int t;

        if (mc_gen_newer(want, g)) {
            /* a later counter: adopt it (a WRITE waits the older ones out) */
            if (gen_adopt(te, r, want, write, wait_ms) != 0)
                return -1;
            continue;
        }
        /* a READ must name the counter now; a WRITE may name an earlier
         * one down to the last fence (its own placement, common/gen.h) */
        if (write ? !mc_gen_write_ok(want, g, f) : (want != g))
            return -1;
        if (write && (__atomic_load_n(&r->gen_drained, __ATOMIC_SEQ_CST) != s)) {
            /* adopted by a READ, which did not wait the older ones out */
            if (gen_adopt(te, r, 0, 1, wait_ms) != 0)
                return -1;
            continue;
        }
        t = (int)(s & 1u);
        __atomic_add_fetch(&r->gen_users[t], 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&r->gen_seq, __ATOMIC_SEQ_CST) == s)
            return t;
        __atomic_sub_fetch(&r->gen_users[t], 1, __ATOMIC_SEQ_CST);
    }
}

int mc_te_gen_fence(mc_te_t *te, uint64_t addr, uint64_t *gen_p)
{
    mc_te_region_t *r = mc_te_region_acquire(te, addr, 1, 0);
    uint64_t g;
    int rc;

    if (r == NULL)
        return -1;
    g = mc_te_region_gen(r);
    if ((g >> 63) == 0) { /* no counter: nothing to move */
        mc_te_region_release(te, r);
        *gen_p = g;
        return 0;
    }
    g  = mc_gen_fence_after(g, MC_GEN_REMOUNT_STEP);
    rc = gen_adopt(te, r, g, 1, mc_te_gen_wait_ms(te));
    mc_te_region_release(te, r);
    *gen_p = mc_te_gen_at(te, addr);
    return rc;
}

void mc_te_gen_exit(mc_te_region_t *r, int ticket)
{
    if ((ticket == 0) || (ticket == 1))
        __atomic_sub_fetch(&r->gen_users[ticket], 1, __ATOMIC_SEQ_CST);
}

uint64_t mc_te_gen_at(mc_te_t *te, uint64_t addr)
{
    mc_te_region_t *r = mc_te_region_acquire(te, addr, 1, 0);
    uint64_t g;
    if (r == NULL)
        return 0;
    g = mc_te_region_gen(r);
    mc_te_region_release(te, r);
    return g;
}

mc_te_region_t *mc_te_region_acquire_gen(mc_te_t *te, uint64_t addr, uint64_t len,
                                         unsigned need_flags, uint64_t gen, int write,
                                         int *ticket_p)
{
    mc_te_region_t *r = mc_te_region_acquire(te, addr, len, need_flags);
    if (r == NULL)
        return NULL;
    *ticket_p = mc_te_gen_enter(te, r, gen, write, mc_te_gen_wait_ms(te));
    if (*ticket_p < 0) {
        mc_te_region_release(te, r);
        return NULL;
    }
    return r;
}

void mc_te_region_release_gen(mc_te_t *te, mc_te_region_t *r, int ticket)
{
    mc_te_gen_exit(r, ticket);
    mc_te_region_release(te, r);
}

void mc_te_region_release(mc_te_t *te, mc_te_region_t *r)
{
    /* After this decrement r may be freed by a waiting dereg: only the
     * engine's own mutex and condition are touched afterwards. */
    if (__atomic_sub_fetch(&r->refs, 1, __ATOMIC_SEQ_CST) == REGION_DYING) {
        pthread_mutex_lock(&te->region_mu);
        pthread_cond_broadcast(&te->region_cond);
        pthread_mutex_unlock(&te->region_mu);
    }
}

/* Unlink the region starting exactly at addr; NULL when there is none.
 * Caller holds the write lock. */
static mc_te_region_t *region_unlink(mc_te_t *te, uintptr_t addr)
{
    size_t i = region_floor(te, addr);
    mc_te_region_t *r;
    if ((i == te->nregions) || (te->regions[i]->addr != addr))
        return NULL;
    r = te->regions[i];
    memmove(&te->regions[i], &te->regions[i + 1], (te->nregions - i - 1) * sizeof(*te->regions));
    te->nregions--;
    __atomic_or_fetch(&r->refs, REGION_DYING, __ATOMIC_SEQ_CST);
    return r;
}

static void region_free(mc_te_region_t *r)
{
    if (r->fd >= 0)
        close(r->fd);
    if (r->fops != NULL) {
        r->fops->close(r->fpriv);
        munmap((void *)r->addr, r->len); /* the address range it reserved */
    }
    free(r);
}

/* Revoke same-host mappings of r (an unlinked region: no new ones can be
 * granted), wait until no request holds r, then free it. */
static void region_drain_free(mc_te_t *te, mc_te_region_t *r)
{
#ifdef MC_HAVE_RDMA
    mc_rdma_gen_word_set(te, r, 0); /* one-sided generation reads now fail (§3.6) */
#endif
    if ((te->shm != NULL) && (r->shm_slot < MC_TE_SHM_SLOTS))
        mc_te_shm_slot_close(te->shm, r->shm_slot);
    pthread_mutex_lock(&te->region_mu);
    while ((__atomic_load_n(&r->refs, __ATOMIC_SEQ_CST) & ~REGION_DYING) != 0)
        pthread_cond_wait(&te->region_cond, &te->region_mu);
    pthread_mutex_unlock(&te->region_mu);
    mc_te_tp_mem_dereg(te, r);
    region_free(r);
}

static mc_status_t region_add(mc_te_t *te, mc_te_region_t *r);

mc_status_t mc_te_mem_reg_shared(mc_te_t *te, void *addr, size_t len, const char *location,
                                 unsigned flags, int fd)
{
    return mc_te_mem_reg_gen(te, addr, len, location, flags, fd, 0);
}

mc_status_t mc_te_mem_reg_gen(mc_te_t *te, void *addr, size_t len, const char *location,
                              unsigned flags, int fd, uint64_t gen)
{
    mc_te_region_t *r;
    uintptr_t a = (uintptr_t)addr;
    mc_status_t st;

    if ((te == NULL) || (addr == NULL) || (len == 0)) {
        mc_set_error_detail("mem_reg needs an engine, an address and a non-zero length");
        return MC_INVALID_PARAMS;
    }
    if ((flags & ~(unsigned)MC_TE_MEM_REMOTE_ACCESS) != 0) {
        mc_set_error_detail("mem_reg: unknown flags 0x%x", flags);
        return MC_INVALID_PARAMS;
    }
    if (a > UINTPTR_MAX - len) {
        mc_set_error_detail("mem_reg: region [%p, +%zu) wraps around the address space", addr,
                            len);
        return MC_INVALID_PARAMS;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    r->addr     = a;
    r->len      = len;
    r->flags    = flags;
    r->fd       = -1;
    r->shm_slot  = UINT32_MAX;
    r->gen       = gen;
    r->gen_floor = gen;
    if ((fd >= 0) && (flags & MC_TE_MEM_REMOTE_ACCESS) && (te->shm != NULL) &&
        mc_te_shm_fd_shareable(fd, len)) {
        r->fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        /* a region with a generation uses it as its control word's value,
         * so same-host readers learn it with the mapping (shm.h) */
        if ((r->fd >= 0) &&
            (mc_te_shm_slot_open(te->shm, gen, &r->shm_slot, &r->shm_gen) != 0)) {
            mc_debug("mem_reg: every shared-memory slot is taken; [%p, +%zu) is served over "
                     "the network only", addr, len);
            close(r->fd);
            r->fd = -1;
        }
    }
    snprintf(r->location, sizeof(r->location), "%s",
             ((location != NULL) && (*location != '\0') && (strcmp(location, "*") != 0))
                 ? location
                 : "cpu:0");
    /* with the transport's devices before anyone can see the region */
    st = mc_te_tp_mem_reg(te, r);
    if (st != MC_OK) {
        region_drain_free(te, r);
        return st;
    }
    return region_add(te, r);
}

/* Insert @p r (its addr, len and flags set) and publish it; on failure r
 * is freed and the detail says why. */
static mc_status_t region_add(mc_te_t *te, mc_te_region_t *r)
{
    uintptr_t a     = r->addr;
    size_t len      = r->len;
    void *addr      = (void *)a;
    unsigned flags  = r->flags;
    mc_status_t st;
    size_t i;

    pthread_rwlock_wrlock(&te->regions_lock);
    if (te->nregions >= MC_TE_DESC_MAX_BUFFERS) {
        pthread_rwlock_unlock(&te->regions_lock);
        region_drain_free(te, r);
        mc_set_error_detail("mem_reg: at most %u regions per engine", MC_TE_DESC_MAX_BUFFERS);
        return MC_INVALID_PARAMS;
    }
    /* insertion point: first region starting above a */
    i = region_floor(te, a);
    i = (i == te->nregions) ? 0 : i + 1;
    if (((i > 0) && (te->regions[i - 1]->addr + te->regions[i - 1]->len > a)) ||
        ((i < te->nregions) && (a + len > te->regions[i]->addr))) {
        pthread_rwlock_unlock(&te->regions_lock);
        region_drain_free(te, r);
        mc_set_error_detail("mem_reg: [%p, +%zu) overlaps a registered region", addr, len);
        return MC_INVALID_PARAMS;
    }
    if (te->nregions == te->regions_cap) {
        size_t cap             = te->regions_cap ? te->regions_cap * 2 : 16;
        mc_te_region_t **grown = realloc(te->regions, cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_rwlock_unlock(&te->regions_lock);
            region_drain_free(te, r);
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
        te->regions     = grown;
        te->regions_cap = cap;
    }
    memmove(&te->regions[i + 1], &te->regions[i], (te->nregions - i) * sizeof(*te->regions));
    te->regions[i] = r;
    te->nregions++;
    pthread_rwlock_unlock(&te->regions_lock);

    if (flags & MC_TE_MEM_REMOTE_ACCESS) {
        st = mc_te_meta_publish(te, 0);
        if (st != MC_OK) {
            /* upstream fails the registration when the update fails */
            char detail[512];
            snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
            pthread_rwlock_wrlock(&te->regions_lock);
            r = region_unlink(te, a);
            pthread_rwlock_unlock(&te->regions_lock);
            if (r != NULL)
                region_drain_free(te, r);
            mc_set_error_detail("mem_reg: publishing the segment descriptor failed: %s", detail);
            return st;
        }
    }
    return MC_OK;
}

MC_API mc_status_t mc_te_mem_reg(mc_te_h te, void *addr, size_t len, const char *location,
                                 unsigned flags)
{
    return mc_te_mem_reg_shared(te, addr, len, location, flags, -1);
}

/*
 * File segments (transfer/file/file.h).  The region's addresses are a
 * PROT_NONE reservation of the process's address space: nothing is ever
 * mapped there, so no memory region can overlap it, and a path that would
 * touch it as memory instead of going through the backend faults at once
 * rather than reading someone else's bytes.
 */
MC_API mc_status_t mc_te_file_reg(mc_te_h te, const char *path, uint64_t size,
                                  const char *backend, uint64_t *addr_p)
{
    return mc_te_file_reg_gen(te, path, size, backend, 0, addr_p);
}

mc_status_t mc_te_file_reg_gen(mc_te_t *te, const char *path, uint64_t size, const char *backend,
                               uint64_t gen, uint64_t *addr_p)
{
    const mc_te_file_ops_t *ops = mc_te_file_ops_find(backend);
    mc_te_region_t *r;
    void *priv = NULL, *base;
    mc_status_t st;

    if ((te == NULL) || (path == NULL) || (addr_p == NULL)) {
        mc_set_error_detail("file_reg needs an engine, a path and an address out-parameter");
        return MC_INVALID_PARAMS;
    }
    if (ops == NULL) {
        mc_set_error_detail("file_reg: unknown backend \"%s\" (built: \"file\"; an NVMe-oF "
                            "initiator is not built)", backend);
        return MC_NOT_SUPPORTED;
    }
    if ((size == 0) || (size > SIZE_MAX / 2)) {
        mc_set_error_detail("file_reg: size must be between 1 and %zu bytes", SIZE_MAX / 2);
        return MC_INVALID_PARAMS;
    }
    st = ops->open(path, size, &priv);
    if (st != MC_OK)
        return st;
    base = mmap(NULL, (size_t)size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                0);
    if (base == MAP_FAILED) {
        mc_set_error_detail("file_reg: cannot reserve %llu bytes of address space: %s",
                            (unsigned long long)size, strerror(errno));
        ops->close(priv);
        return MC_INVALID_PARAMS;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        munmap(base, (size_t)size);
        ops->close(priv);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    r->addr     = (uintptr_t)base;
    r->len      = (size_t)size;
    r->flags    = MC_TE_MEM_REMOTE_ACCESS;
    r->fd       = -1;
    r->shm_slot = UINT32_MAX;
    r->fops     = ops;
    r->fpriv    = priv;
    r->gen       = gen;
    r->gen_floor = gen;
    snprintf(r->location, sizeof(r->location), "%s", "file");
    st = region_add(te, r); /* frees r (closing the backend) on failure */
    if (st == MC_OK)
        *addr_p = (uint64_t)(uintptr_t)base;
    return st;
}

MC_API mc_status_t mc_te_file_dereg(mc_te_h te, uint64_t addr)
{
    mc_te_region_t *r;
    int is_file;

    if (te == NULL) {
        mc_set_error_detail("file_dereg needs an engine");
        return MC_INVALID_PARAMS;
    }
    pthread_rwlock_rdlock(&te->regions_lock);
    r       = (addr <= UINTPTR_MAX) ? region_find(te, addr, 1) : NULL;
    is_file = (r != NULL) && (r->addr == addr) && (r->fops != NULL);
    pthread_rwlock_unlock(&te->regions_lock);
    if (!is_file) {
        mc_set_error_detail("file_dereg: no file segment starts at 0x%llx",
                            (unsigned long long)addr);
        return MC_INVALID_PARAMS;
    }
    return mc_te_mem_dereg(te, (void *)(uintptr_t)addr);
}

mc_status_t mc_te_region_file_io(mc_te_region_t *r, int to_region, void *buf, uint64_t addr,
                                 size_t len)
{
    uint64_t off = addr - r->addr; /* the caller holds r, acquired for [addr, +len) */
    return to_region ? r->fops->write(r->fpriv, buf, len, off)
                     : r->fops->read(r->fpriv, buf, len, off);
}

MC_API mc_status_t mc_te_mem_dereg(mc_te_h te, void *addr)
{
    mc_te_region_t *r;
    if (te == NULL) {
        mc_set_error_detail("mem_dereg needs an engine");
        return MC_INVALID_PARAMS;
    }
    pthread_rwlock_wrlock(&te->regions_lock);
    r = region_unlink(te, (uintptr_t)addr);
    pthread_rwlock_unlock(&te->regions_lock);
    if (r == NULL) {
        mc_set_error_detail("mem_dereg: no region starts at %p", addr);
        return MC_INVALID_PARAMS;
    }
    if (r->flags & MC_TE_MEM_REMOTE_ACCESS)
        (void)mc_te_meta_publish(te, 0); /* logged; the target check still refuses */
    region_drain_free(te, r);
    return MC_OK;
}

MC_API int mc_te_mem_is_registered(mc_te_h te, const void *addr, size_t len)
{
    int found;
    if ((te == NULL) || (addr == NULL))
        return 0;
    pthread_rwlock_rdlock(&te->regions_lock);
    found = region_find(te, (uintptr_t)addr, len ? len : 1) != NULL;
    pthread_rwlock_unlock(&te->regions_lock);
    return found;
}

mc_status_t mc_te_describe_local(mc_te_t *te, char **json_p, size_t *len_p)
{
    mc_te_desc_t d;
    mc_te_region_t **regs = NULL;
    mc_status_t st;
    size_t n = 0;

    mc_te_desc_init(&d);
    snprintf(d.protocol, sizeof(d.protocol), "%s", te->tp_ops->name);
    d.tcp_data_port = te->port;
    if (te->shm != NULL)
        snprintf(d.shm_name, sizeof(d.shm_name), "%s", mc_te_shm_server_name(te->shm));
    d.tcp_readv = te->readv_enabled;
    d.tcp_readv_strided = te->readv_enabled && te->readvs_enabled;
    pthread_rwlock_rdlock(&te->regions_lock);
    if (te->nregions > 0) {
        d.buffers = calloc(te->nregions, sizeof(*d.buffers));
        regs      = calloc(te->nregions, sizeof(*regs));
        if ((d.buffers == NULL) || (regs == NULL)) {
            pthread_rwlock_unlock(&te->regions_lock);
            free(regs);
            mc_te_desc_cleanup(&d);
            mc_set_error_detail("out of memory");
            return MC_INTERNAL_ERROR;
        }
    }
    for (size_t i = 0; i < te->nregions; i++) {
        const mc_te_region_t *r = te->regions[i];
        if (!(r->flags & MC_TE_MEM_REMOTE_ACCESS))
            continue;
        d.buffers[n].addr   = r->addr;
        d.buffers[n].length = r->len;
        memcpy(d.buffers[n].name, r->location, sizeof(d.buffers[n].name));
        regs[n] = te->regions[i];
        n++;
    }
    d.nbuffers = n;
    /* under the read lock: no region of the list can be deregistered */
    st = mc_te_tp_desc_fill(te, &d, regs);
    pthread_rwlock_unlock(&te->regions_lock);
    free(regs);
    if (st != MC_OK) {
        mc_te_desc_cleanup(&d);
        return st;
    }
    d.name     = te->local_name; /* borrowed */
    st         = mc_te_desc_encode(&d, json_p, len_p);
    d.name     = NULL;
    mc_te_desc_cleanup(&d);
    return st;
}

/* ---- segments ----------------------------------------------------------------- */

static int seg_eq(const mc_hnode_t *node, const void *key)
{
    const mc_te_segment_t *s = mc_container_of(node, mc_te_segment_t, hnode);
    return strcmp(s->name, (const char *)key) == 0;
}

static uint64_t seg_hash(const char *name)
{
    return mc_hash_bytes(name, strlen(name), 0);
}

static mc_te_segment_t *segment_new(const char *name)
{
    mc_te_segment_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    s->name = strdup(name);
    if (s->name == NULL) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->desc_mu, NULL);
    mc_te_desc_init(&s->desc);
    return s;
}

/* A same-host path replaced after the holder restarted: other threads may
 * still be inside it, so it lives until the segment does. */
struct mc_te_shm_retired {
    mc_te_shm_peer_t *peer;
    struct mc_te_shm_retired *next;
};

static void segment_free(mc_te_t *te, mc_te_segment_t *s)
{
    if (s == NULL)
        return;
    mc_te_shm_peer_close(s->shm);
    while (s->shm_retired != NULL) {
        struct mc_te_shm_retired *n = s->shm_retired;
        s->shm_retired              = n->next;
        mc_te_shm_peer_close(n->peer);
        free(n);
    }
    mc_te_tp_peer_close(te, s->peer);
    mc_te_desc_cleanup(&s->desc);
    pthread_mutex_destroy(&s->desc_mu);
    free(s->name);
    free(s);
}

/* Append a READY segment to the id table.  seg_lock held. */
static int segment_assign_id(mc_te_t *te, mc_te_segment_t *s)
{
    if (te->nsegs == te->segs_cap) {
        size_t cap              = te->segs_cap ? te->segs_cap * 2 : 16;
        mc_te_segment_t **grown = realloc(te->segs, cap * sizeof(*grown));
        if (grown == NULL)
            return -1;
        te->segs     = grown;
        te->segs_cap = cap;
    }
    s->id                 = te->nsegs;
    te->segs[te->nsegs++] = s;
    s->state              = MC_TE_SEG_READY;
    return 0;
}

static mc_te_segment_t *segment_by_id(mc_te_t *te, mc_te_segment_id_t id)
{
    mc_te_segment_t *s = NULL;
    pthread_mutex_lock(&te->seg_lock);
    if (id < te->nsegs)
        s = te->segs[id];
    pthread_mutex_unlock(&te->seg_lock);
    return s;
}

/* ---- disk reads (docs/tiers.md §4) ------------------------------------------- */

void mc_te_disk_serve_set(mc_te_t *te, mc_te_disk_serve_func_t fn, void *arg)
{
    pthread_rwlock_wrlock(&te->disk_lock);
    te->disk_fn  = fn;
    te->disk_arg = arg;
    pthread_rwlock_unlock(&te->disk_lock);
}

mc_status_t mc_te_disk_serve(mc_te_t *te, const mc_te_disk_req_t *req, void **buf_p)
{
    struct timespec dl;
    mc_status_t st = MC_OBJECT_NOT_FOUND;
    int admitted   = 1;

    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += (te->cfg.io_timeout_s > 0) ? te->cfg.io_timeout_s : MC_TE_DEFAULT_IO_TIMEOUT_S;
    pthread_mutex_lock(&te->disk_mu);
    while (admitted && (te->disk_busy >= MC_TE_DISK_SERVE_MAX))
        if (pthread_cond_timedwait(&te->disk_cond, &te->disk_mu, &dl) == ETIMEDOUT)
            admitted = te->disk_busy < MC_TE_DISK_SERVE_MAX;
    if (admitted)
        te->disk_busy++;
    pthread_mutex_unlock(&te->disk_mu);
    if (!admitted) {
        mc_set_error_detail("%u disk reads are being served already", MC_TE_DISK_SERVE_MAX);
        return MC_NO_AVAILABLE_HANDLE;
    }
    pthread_rwlock_rdlock(&te->disk_lock);
    if (te->disk_fn != NULL)
        st = te->disk_fn(te->disk_arg, req, buf_p);
    else
        mc_set_error_detail("this client has no disk tier");
    pthread_rwlock_unlock(&te->disk_lock);
    pthread_mutex_lock(&te->disk_mu);
    te->disk_busy--;
    pthread_cond_signal(&te->disk_cond);
    pthread_mutex_unlock(&te->disk_mu);
    return st;
}

mc_status_t mc_te_disk_read(mc_te_t *te, const char *segment, const mc_te_disk_req_t *req,
                            void *buf)
{
    mc_te_segment_id_t id;
    mc_te_segment_t *seg;
    void *vbuf = NULL;
    mc_status_t st;

    st = mc_te_segment_open(te, segment, &id);
    if (st != MC_OK)
        return st;
    seg = segment_by_id(te, id);
    if (seg == NULL)
        return MC_INVALID_PARAMS;
    if (!seg->is_self) {
        if (seg->peer == NULL) {
            mc_set_error_detail("segment %s has no transport peer", segment);
            return MC_TRANSFER_FAIL;
        }
        return mc_te_tp_disk_read(te, seg->peer, req, buf);
    }
    st = mc_te_disk_serve(te, req, &vbuf);
    if (st == MC_OK)
        memcpy(buf, vbuf, (size_t)req->length);
    free(vbuf);
    return st;
}

MC_API mc_status_t mc_te_segment_open(mc_te_h te, const char *name, mc_te_segment_id_t *seg_p)
{
    mc_te_segment_t *s;
    mc_hnode_t *n;
    mc_te_desc_t d;
    uint64_t h;
    mc_status_t st;

    if ((te == NULL) || (name == NULL) || (*name == '\0') || (seg_p == NULL) ||
        (strlen(name) > 1024)) {
        mc_set_error_detail("segment_open needs an engine and a segment name");
        return MC_INVALID_PARAMS;
    }
    h = seg_hash(name);
    pthread_mutex_lock(&te->seg_lock);
    for (;;) {
        n = mc_hmap_find(&te->seg_by_name, h, name, seg_eq);
        if (n == NULL)
            break;
        s = mc_container_of(n, mc_te_segment_t, hnode);
        if (s->state == MC_TE_SEG_READY) {
            *seg_p = s->id;
            pthread_mutex_unlock(&te->seg_lock);
            return MC_OK;
        }
        /* another thread is opening it: wait for its verdict */
        pthread_cond_wait(&te->seg_cond, &te->seg_lock);
    }
    s = segment_new(name);
    if (s == NULL) {
        pthread_mutex_unlock(&te->seg_lock);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    s->state = MC_TE_SEG_OPENING;
    (void)mc_hmap_insert(&te->seg_by_name, &s->hnode, h);
    pthread_mutex_unlock(&te->seg_lock);

    mc_te_desc_init(&d);
    st = mc_te_meta_fetch(te, s, &d);
    if (st == MC_OK) {
        s->desc = d;
        if (te->shm_enabled && (d.shm_name[0] != '\0'))
            s->shm = mc_te_shm_peer_open(d.shm_name, te->cfg.connect_timeout_ms);
    }

    pthread_mutex_lock(&te->seg_lock);
    if ((st == MC_OK) && (segment_assign_id(te, s) != 0)) {
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("out of memory");
    }
    if (st != MC_OK)
        mc_hmap_remove(&te->seg_by_name, &s->hnode);
    pthread_cond_broadcast(&te->seg_cond);
    pthread_mutex_unlock(&te->seg_lock);
    if (st != MC_OK) {
        mc_debug("opening segment %s failed: %s", name, mc_last_error_detail());
        segment_free(te, s);
        return st;
    }
    mc_debug("opened segment %s as id %llu (%zu buffers)", name, (unsigned long long)s->id,
             s->desc.nbuffers);
    *seg_p = s->id;
    return MC_OK;
}

/* 1 when the cached descriptor lists [addr, addr+len). */
static int segment_has_range(mc_te_segment_t *s, uint64_t addr, uint64_t len)
{
    int ok;
    pthread_mutex_lock(&s->desc_mu);
    ok = mc_te_desc_contains(&s->desc, addr, len);
    pthread_mutex_unlock(&s->desc_mu);
    return ok;
}

/*
 * A descriptor naming another same-host server than the one we use (the
 * holder restarted, or gained shared memory) replaces the path; the old
 * one is retired, not freed, since other threads may be inside it.
 * desc_mu held.
 */
static void segment_shm_update(mc_te_t *te, mc_te_segment_t *s, const char *name)
{
    mc_te_shm_peer_t *cur = __atomic_load_n(&s->shm, __ATOMIC_ACQUIRE), *p;
    struct mc_te_shm_retired *r;
    if (!te->shm_enabled || (name[0] == '\0') ||
        ((cur != NULL) && (strcmp(mc_te_shm_peer_name(cur), name) == 0)))
        return;
    r = malloc(sizeof(*r));
    if (r == NULL)
        return;
    p = mc_te_shm_peer_open(name, te->cfg.connect_timeout_ms);
    if (p == NULL) {
        free(r);
        return;
    }
    __atomic_store_n(&s->shm, p, __ATOMIC_RELEASE);
    if (cur == NULL) {
        free(r);
        return;
    }
    r->peer         = cur;
    r->next         = s->shm_retired;
    s->shm_retired  = r;
}

static mc_status_t segment_refresh(mc_te_t *te, mc_te_segment_t *s)
{
    mc_te_desc_t d;
    mc_status_t st;
    mc_te_desc_init(&d);
    st = mc_te_meta_fetch(te, s, &d);
    if (st != MC_OK)
        return st;
    pthread_mutex_lock(&s->desc_mu);
    mc_te_desc_move(&s->desc, &d);
    segment_shm_update(te, s, s->desc.shm_name);
    pthread_mutex_unlock(&s->desc_mu);
    return MC_OK;
}

/* The segment's same-host path when it is usable, else NULL. */
static mc_te_shm_peer_t *segment_shm(mc_te_segment_t *s)
{
    mc_te_shm_peer_t *p = __atomic_load_n(&s->shm, __ATOMIC_ACQUIRE);
    return ((p != NULL) && mc_te_shm_peer_alive(p)) ? p : NULL;
}

int mc_te_segment_same_host(mc_te_t *te, mc_te_segment_id_t seg)
{
    mc_te_segment_t *s = segment_by_id(te, seg);
    return (s != NULL) && (s->is_self || (segment_shm(s) != NULL));
}

void mc_te_segment_revive(mc_te_t *te, mc_te_segment_id_t seg, uint64_t before_ns)
{
    mc_te_segment_t *s = segment_by_id(te, seg);
    if ((s != NULL) && !s->is_self)
        mc_te_tp_peer_revive(te, s->peer, before_ns);
}

/* The hook of mc_te_transfer_gen_sent, armed on the calling thread. */
static __thread void (*sent_hook_fn)(void *);
static __thread void *sent_hook_arg;

void mc_te_sent_hook_run(void)
{
    void (*fn)(void *) = sent_hook_fn;
    if (fn != NULL) {
        sent_hook_fn = NULL;
        fn(sent_hook_arg);
    }
}

/* Move one request through shared memory; 1 when done (*st_p written). */
static int shm_try(mc_te_t *te, mc_te_shm_peer_t *p, mc_te_op_t op, void *local,
                   uint64_t remote, uint64_t len, uint64_t gen, mc_status_t *st_p)
{
    if ((p == NULL) ||
        !mc_te_shm_xfer(p, op, local, remote, len, gen, st_p))
        return 0;
    if (*st_p == MC_OK) {
        __atomic_add_fetch(&te->shm_ops, 1, __ATOMIC_RELAXED);
        __atomic_add_fetch(&te->shm_bytes, len, __ATOMIC_RELAXED);
    }
    return 1;
}

void mc_te_shm_sweep(mc_te_t *te)
{
    /* Segments are never freed before the engine, and neither are their
     * paths (current or retired): only the id table needs the lock. */
    for (size_t i = 0;; i++) {
        mc_te_segment_t *s;
        mc_te_shm_peer_t *p;
        int end;
        pthread_mutex_lock(&te->seg_lock);
        end = i >= te->nsegs;
        s   = end ? NULL : te->segs[i];
        pthread_mutex_unlock(&te->seg_lock);
        if (end)
            break;
        if ((s == NULL) || s->is_self)
            continue;
        p = __atomic_load_n(&s->shm, __ATOMIC_ACQUIRE);
        if (p != NULL)
            (void)mc_te_shm_peer_alive(p);
        pthread_mutex_lock(&s->desc_mu);
        for (struct mc_te_shm_retired *r = s->shm_retired; r != NULL; r = r->next)
            (void)mc_te_shm_peer_alive(r->peer);
        pthread_mutex_unlock(&s->desc_mu);
    }
}

void mc_te_shm_stats(mc_te_t *te, uint64_t *ops_p, uint64_t *bytes_p)
{
    *ops_p   = __atomic_load_n(&te->shm_ops, __ATOMIC_RELAXED);
    *bytes_p = __atomic_load_n(&te->shm_bytes, __ATOMIC_RELAXED);
}

/* ---- executing requests --------------------------------------------------------- */

typedef struct mc_te_item {
    mc_te_segment_t *seg;
    mc_te_op_t op;
    uint8_t *local;
    uint64_t remote;
    uint64_t len;
    uint64_t gen; /* expected region generation, or 0 */
    size_t req; /* index of the request it belongs to */
    const mc_te_scatter_t *sc; /* a scattered READ, run whole (of the fields
                                * above only op and req are set); NULL for others */
    struct direct_piece *dp; /* a piece of a spread direct write, run whole
                              * (write_direct_spread; of the fields above only
                              * op and req are set); NULL for others */
    int shared;              /* a piece of a shared read: copied with streaming
                              * stores when the holder's region is mapped */
} mc_te_item_t;

static mc_status_t range_refused(mc_te_op_t op, const char *seg, uint64_t addr, uint64_t len)
{
    mc_set_error_detail("%s of [0x%llx, +%llu) refused: not inside one region of segment %s "
                        "registered for remote access",
                        (op == MC_TE_READ) ? "read" : "write", (unsigned long long)addr,
                        (unsigned long long)len, seg);
    return (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
}

/* The same-process path: the range check a peer would get, then memcpy. */
static mc_status_t gen_refused(mc_te_op_t op, const char *seg, uint64_t addr, uint64_t len,
                               uint64_t gen)
{
    mc_set_error_detail("%s of [0x%llx, +%llu) refused: segment %s holds no region of "
                        "generation %016llx there (unregistered or registered again)",
                        (op == MC_TE_READ) ? "read" : "write", (unsigned long long)addr,
                        (unsigned long long)len, seg, (unsigned long long)gen);
    return (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
}

static mc_status_t exec_self(mc_te_t *te, const mc_te_item_t *it)
{
    mc_te_region_t *r;
    int ticket;

    mc_te_sent_hook_run(); /* a copy, no request to send first */
    r = mc_te_region_acquire(te, it->remote, it->len, MC_TE_MEM_REMOTE_ACCESS);
    if (r == NULL)
        return range_refused(it->op, te->local_name, it->remote, it->len);
    ticket = mc_te_gen_enter(te, r, it->gen, it->op == MC_TE_WRITE, mc_te_gen_wait_ms(te));
    if (ticket < 0) {
        mc_status_t st = gen_refused(it->op, te->local_name, it->remote, it->len, it->gen);
        mc_debug("%s (it holds %016llx, last fence %016llx)", mc_last_error_detail(),
                 (unsigned long long)mc_te_region_gen(r),
                 (unsigned long long)__atomic_load_n(&r->gen_floor, __ATOMIC_RELAXED));
        mc_te_region_release(te, r);
        return st;
    }
    if (r->fops != NULL) { /* our own file segment: the backend moves it */
        mc_status_t st = mc_te_region_file_io(r, it->op == MC_TE_WRITE, it->local, it->remote,
                                              it->len);
        mc_te_region_release_gen(te, r, ticket);
        return st;
    }
    /* memmove: a caller may legitimately copy within its own segment */
    if (it->op == MC_TE_READ)
        memmove(it->local, (void *)(uintptr_t)it->remote, it->len);
    else
        memmove((void *)(uintptr_t)it->remote, it->local, it->len);
    mc_te_region_release_gen(te, r, ticket);
    return MC_OK;
}

static mc_status_t direct_piece_run(struct direct_piece *dp);

/*
 * A large same-host write naming a generation the holder has not adopted
 * (the master moved the segment's counter: memory freed under a lease, a
 * fence): only the holder adopts a counter, from the first request over
 * the network that names it, so the write would go there whole.  Its
 * first MC_TE_ADOPT_HEAD bytes go that way instead, the rest straight
 * into the holder's memory once it took the counter.  The rest is a write
 * of its own under the same generation (writer counts, gate, word), so a
 * fence between the two parts refuses it as it would refuse the whole.
 * 1 when done (*st_p written); 0 to send the whole write over the network.
 */
static int adopt_split(mc_te_t *te, mc_te_segment_t *s, const mc_te_item_t *it,
                       mc_status_t *st_p)
{
    mc_te_shm_peer_t *shm = segment_shm(s);
    uint64_t head         = MC_TE_ADOPT_HEAD;
    uint8_t *local        = it->local;

    if ((it->op != MC_TE_WRITE) || (it->len < MC_TE_ADOPT_SPLIT_MIN) || (shm == NULL) ||
        !mc_te_shm_gen_unadopted(shm, it->remote, it->len, it->gen))
        return 0;
    *st_p = mc_te_tp_xfer(te, s->peer, MC_TE_WRITE, local, it->remote, head, it->gen);
    if (*st_p != MC_OK)
        return 1;
    if (shm_try(te, shm, MC_TE_WRITE, local + head, it->remote + head, it->len - head, it->gen,
                st_p))
        return 1;
    /* a fence under way, or the mapping went: the network decides */
    *st_p = mc_te_tp_xfer(te, s->peer, MC_TE_WRITE, local + head, it->remote + head,
                          it->len - head, it->gen);
    return 1;
}

static mc_status_t exec_item(mc_te_t *te, const mc_te_item_t *it)
{
    mc_te_segment_t *s = it->seg;
    mc_status_t st;

    if (it->dp != NULL)
        return direct_piece_run(it->dp);

    if ((it->sc != NULL) && (it->sc->strided != NULL))
        return mc_te_read_gather_strided_gen(te, it->sc->segment, it->sc->gen, it->sc->strided,
                                             it->sc->nstrided, it->sc->runs, it->sc->nruns);
    if ((it->sc != NULL) && (it->sc->ranges != NULL))
        return mc_te_read_gather_gen(te, it->sc->segment, it->sc->gen, it->sc->ranges,
                                     it->sc->nranges, it->sc->runs, it->sc->nruns);
    if (it->sc != NULL)
        return mc_te_read_scatter_gen(te, it->sc->segment, it->sc->remote, it->sc->gen,
                                      it->sc->runs, it->sc->nruns);
    if (it->len == 0)
        return MC_OK;
    if (it->shared) { /* as the whole read would have been copied */
        mc_te_request_t r = {MC_TE_READ, it->local, it->remote, it->len, s->id};
        if (mc_te_read_direct_gen(te, &r, &it->gen, 1, &st))
            return st;
    }
    if (s->is_self)
        return exec_self(te, it);
    if (shm_try(te, segment_shm(s), it->op, it->local, it->remote, it->len, it->gen, &st))
        return st;
    if (!segment_has_range(s, it->remote, it->len)) {
        /* The peer may have registered more since we looked: ask once. */
        st = segment_refresh(te, s);
        if (st != MC_OK)
            return st;
        if (!segment_has_range(s, it->remote, it->len))
            return range_refused(it->op, s->name, it->remote, it->len);
    }
    if (adopt_split(te, s, it, &st))
        return st;
    st = mc_te_tp_xfer(te, s->peer, it->op, it->local, it->remote, it->len, it->gen);
    if (st != MC_OK)
        mc_debug("%s of %llu bytes at 0x%llx on %s failed: %s",
                 (it->op == MC_TE_READ) ? "read" : "write", (unsigned long long)it->len,
                 (unsigned long long)it->remote, s->name, mc_last_error_detail());
    return st;
}

/*
 * Items [i, i+k) form a run when they go to the same remote segment in the
 * same direction and each is small: the transport may then pipeline them
 * on one connection, which for small requests is worth far more than
 * spreading them over threads (no wake-up per request on either side).
 */
static size_t run_length(const mc_te_item_t *items, size_t i, size_t nitems)
{
    const mc_te_item_t *a = &items[i];
    uint64_t bytes        = a->len;
    size_t k              = 1;
    if ((a->sc != NULL) || (a->dp != NULL) || (a->len == 0) ||
        (a->len > MC_TE_RUN_MAX_ITEM_LEN))
        return 1;
    while ((i + k < nitems) && (k < MC_TE_RUN_MAX_ITEMS)) {
        const mc_te_item_t *b = &items[i + k];
        if ((b->sc != NULL) || (b->dp != NULL) || (b->seg != a->seg) || (b->op != a->op) ||
            (b->len == 0) || (b->len > MC_TE_RUN_MAX_ITEM_LEN) ||
            (bytes + b->len > MC_TE_RUN_MAX_BYTES))
            break;
        bytes += b->len;
        k++;
    }
    return k;
}

/* Execute a run (see run_length); one status per item. */
static void exec_run(mc_te_t *te, const mc_te_item_t *items, size_t k, mc_status_t *st)
{
    mc_te_xfer_t v[MC_TE_RUN_MAX_ITEMS];
    mc_status_t vst[MC_TE_RUN_MAX_ITEMS];
    size_t map[MC_TE_RUN_MAX_ITEMS];
    mc_te_segment_t *s      = items[0].seg;
    mc_te_shm_peer_t *shm;
    mc_status_t refresh_st  = MC_OK;
    int refreshed           = 0;
    size_t m                = 0;

    if ((k == 1) || s->is_self) {
        /* this engine's own memory: a memcpy each, on the calling thread */
        for (size_t j = 0; j < k; j++)
            st[j] = exec_item(te, &items[j]);
        return;
    }
    shm = segment_shm(s);
    for (size_t j = 0; j < k; j++) {
        const mc_te_item_t *it = &items[j];
        if (shm_try(te, shm, it->op, it->local, it->remote, it->len, it->gen, &st[j]))
            continue;
        if (!segment_has_range(s, it->remote, it->len)) {
            if (!refreshed) {
                refreshed  = 1;
                refresh_st = segment_refresh(te, s);
            }
            if (refresh_st != MC_OK) {
                st[j] = refresh_st;
                continue;
            }
            if (!segment_has_range(s, it->remote, it->len)) {
                st[j] = range_refused(it->op, s->name, it->remote, it->len);
                continue;
            }
        }
        v[m].local  = it->local;
        v[m].remote = it->remote;
        v[m].len    = it->len;
        v[m].gen    = it->gen;
        map[m++]    = j;
    }
    if (m == 0)
        return;
    mc_te_tp_xfer_run(te, s->peer, items[0].op, v, m, vst);
    for (size_t q = 0; q < m; q++)
        st[map[q]] = vst[q];
}

/*
 * A batch being executed.  Runs of items are claimed in order under
 * pool_mu by the calling thread and by workers; the batch sits in the
 * engine queue while unclaimed items remain, and lives on the caller's
 * stack until every item is done.
 */
struct mc_te_batch {
    mc_te_item_t *items;
    size_t nitems;
    size_t next;             /* next unclaimed item */
    size_t done;             /* finished items */
    mc_status_t *req_status; /* first error per request */
    size_t detail_req;       /* request whose error detail is kept */
    char detail[256];        /* detail of the lowest failing request */
    pthread_cond_t done_cond;
    mc_te_batch_t *qprev;
    mc_te_batch_t *qnext;
    struct mc_te_job *job;   /* background job owning the batch, or NULL */
    int shared;              /* a shared read (mc_te_read_shared_gen): no worker is
                              * woken for it; mc_te_assist takes its runs */
};

/*
 * A background job (mc_te_transfer_submit): a batch nobody waits on while
 * it runs.  It owns its items and statuses; the worker that finishes its
 * last run completes it (job_complete, under pool_mu and then mu).  Its
 * own mutex and condition, not pool_mu, guard done/detached, so waiting on
 * a job never touches the engine.  Whoever sees the other side gone frees
 * it: mc_te_job_release of a finished job, or job_complete of a detached
 * one.
 */
struct mc_te_job {
    mc_te_batch_t b;
    size_t nreq;
    pthread_mutex_t mu;
    pthread_cond_t cond;     /* CLOCK_MONOTONIC; signalled at completion */
    int done;                /* under mu */
    int detached;            /* under mu: released while running */
    mc_status_t result;      /* first failing request's status, set once done */
    mc_te_scatter_t *pieces; /* the scattered reads cut at slice_size (scatter_cut) */
};

/* pool_mu held. */
static void batch_dequeue(mc_te_t *te, mc_te_batch_t *b)
{
    if (b->qprev != NULL)
        b->qprev->qnext = b->qnext;
    else
        te->queue_head = b->qnext;
    if (b->qnext != NULL)
        b->qnext->qprev = b->qprev;
    else
        te->queue_tail = b->qprev;
    b->qprev = b->qnext = NULL;
}

/* Claim the next run of b; pool_mu held, b->next < b->nitems. */
static size_t batch_claim(mc_te_t *te, mc_te_batch_t *b, size_t *k_p)
{
    size_t i = b->next;
    *k_p     = run_length(b->items, i, b->nitems);
    b->next += *k_p;
    if (b->next == b->nitems)
        batch_dequeue(te, b);
    return i;
}

static mc_status_t job_first_status(const mc_status_t *st, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (st[i] != MC_OK)
            return st[i];
    return MC_OK;
}

static void job_free(struct mc_te_job *job)
{
    if (job == NULL)
        return;
    pthread_mutex_destroy(&job->mu);
    pthread_cond_destroy(&job->cond);
    free(job->b.items);
    free(job->b.req_status);
    free(job->pieces);
    free(job);
}

/* Every item of the job has run: settle its result and wake waiters, or
 * free it when it was released while running.  Frees nothing else may
 * touch: the batch left the queue when its last run was claimed. */
static void job_complete(struct mc_te_job *job)
{
    int detached;
    job->result = job_first_status(job->b.req_status, job->nreq);
    pthread_mutex_lock(&job->mu);
    job->done = 1;
    detached  = job->detached;
    pthread_cond_broadcast(&job->cond);
    pthread_mutex_unlock(&job->mu);
    if (detached)
        job_free(job);
}

/* pool_mu held.  Called on the thread that ran the items, so its
 * thread-local error detail describes them: keep the one of the lowest
 * failing request, which is the status mc_te_transfer returns. */
static void batch_finish(mc_te_batch_t *b, size_t i, size_t k, const mc_status_t *st)
{
    for (size_t j = 0; j < k; j++) {
        size_t req = b->items[i + j].req;
        if ((st[j] != MC_OK) && (b->req_status[req] == MC_OK))
            b->req_status[req] = st[j];
        if ((st[j] != MC_OK) && (req < b->detail_req)) {
            b->detail_req = req;
            snprintf(b->detail, sizeof(b->detail), "%s", mc_last_error_detail());
        }
    }
    b->done += k;
    if (b->done == b->nitems) {
        if (b->job != NULL)
            job_complete(b->job);
        else
            pthread_cond_signal(&b->done_cond);
    }
}

/* Claim, execute and record one run of b; pool_mu held on entry and
 * exit, released while the run executes. */
static void batch_step(mc_te_t *te, mc_te_batch_t *b)
{
    mc_status_t st[MC_TE_RUN_MAX_ITEMS];
    size_t k, i = batch_claim(te, b, &k);
    pthread_mutex_unlock(&te->pool_mu);
    exec_run(te, &b->items[i], k, st);
    pthread_mutex_lock(&te->pool_mu);
    batch_finish(b, i, k, st);
}

static void *worker_main(void *arg)
{
    mc_te_t *te = arg;
    pthread_mutex_lock(&te->pool_mu);
    for (;;) {
        while (!te->pool_stopping && (te->queue_head == NULL))
            pthread_cond_wait(&te->pool_cond, &te->pool_mu);
        if (te->queue_head == NULL)
            break; /* stopping and nothing left */
        batch_step(te, te->queue_head);
    }
    pthread_mutex_unlock(&te->pool_mu);
    return NULL;
}

/* Start the workers the first time a batch needs them.  pool_mu held.
 * Failing to start some is not an error: the caller runs what is left. */
static void pool_start(mc_te_t *te)
{
    pthread_attr_t attr;
    if ((te->workers != NULL) || (te->cfg.workers == 0) || te->pool_stopping)
        return;
    te->workers = calloc(te->cfg.workers, sizeof(*te->workers));
    if (te->workers == NULL)
        return;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (unsigned i = 0; i < te->cfg.workers; i++) {
        int rc = pthread_create(&te->workers[te->nworkers], &attr, worker_main, te);
        if (rc != 0) {
            errno = rc;
            mc_warn("starting transfer worker %u failed: %m", i);
            break;
        }
        te->nworkers++;
    }
    pthread_attr_destroy(&attr);
}

static void pool_stop(mc_te_t *te)
{
    pthread_mutex_lock(&te->pool_mu);
    te->pool_stopping = 1;
    pthread_cond_broadcast(&te->pool_cond);
    pthread_mutex_unlock(&te->pool_mu);
    for (unsigned i = 0; i < te->nworkers; i++)
        pthread_join(te->workers[i], NULL);
    free(te->workers);
    te->workers  = NULL;
    te->nworkers = 0;
}

/* Run the items to completion; req_status[] gets the first error of each
 * request.  On failure the caller's error detail describes the lowest
 * failing request. */
static void run_batch_as(mc_te_t *te, mc_te_item_t *items, size_t nitems,
                         mc_status_t *req_status, int shared)
{
    mc_te_batch_t b;

    if ((nitems <= MC_TE_RUN_MAX_ITEMS) && (run_length(items, 0, nitems) == nitems)) {
        /* One pipelined run (e.g. a batch of small reads from one peer):
         * the caller does it alone; waking workers would only cost
         * context switches. */
        mc_status_t st[MC_TE_RUN_MAX_ITEMS];
        exec_run(te, items, nitems, st);
        for (size_t j = 0; j < nitems; j++)
            if ((st[j] != MC_OK) && (req_status[items[j].req] == MC_OK))
                req_status[items[j].req] = st[j];
        return;
    }
    memset(&b, 0, sizeof(b));
    b.items      = items;
    b.nitems     = nitems;
    b.req_status = req_status;
    b.detail_req = SIZE_MAX;
    pthread_cond_init(&b.done_cond, NULL);

    pthread_mutex_lock(&te->pool_mu);
    pool_start(te);
    b.qprev = te->queue_tail;
    if (te->queue_tail != NULL)
        te->queue_tail->qnext = &b;
    else
        te->queue_head = &b;
    te->queue_tail = &b;
    /* Wake only the workers there is work for: the caller takes the first
     * run, so a request cut in two slices wakes one worker, not the whole
     * pool (each needless wake-up is two context switches, which on a
     * small VM cost more than the slice itself).  A worker that is busy
     * elsewhere re-checks the queue before it sleeps, so a signal that
     * finds nobody waiting loses nothing.  A shared read wakes none: its
     * caller copies it, helped by whoever calls mc_te_assist. */
    b.shared = shared;
    if (!shared) {
        size_t runs = 0;
        for (size_t i = 0; (i < nitems) && (runs <= te->nworkers); runs++)
            i += run_length(items, i, nitems);
        for (size_t w = 1; w < runs; w++)
            pthread_cond_signal(&te->pool_cond);
    }
    /* the workers send on their own threads */
    mc_te_sent_hook_run();
    /* The caller works too, and only on its own batch. */
    while (b.next < b.nitems)
        batch_step(te, &b);
    while (b.done < b.nitems)
        pthread_cond_wait(&b.done_cond, &te->pool_mu);
    pthread_mutex_unlock(&te->pool_mu);
    pthread_cond_destroy(&b.done_cond);
    if (b.detail_req != SIZE_MAX)
        mc_set_error_detail("%s", b.detail);
}

static void run_batch(mc_te_t *te, mc_te_item_t *items, size_t nitems, mc_status_t *req_status)
{
    run_batch_as(te, items, nitems, req_status, 0);
}

/*
 * The slices of one long READ from a peer, when there are no more of them
 * than lanes: the calling thread sends them all on separate connections
 * and then drains each (mc_te_tp_xfer_spread), so the peer's connection
 * threads send in parallel and no worker is woken here.  On the 2-vCPU
 * development VM a 1 MiB read in two slices this way cost about half the
 * context switches of the worker hand-off.
 * WRITE slices stay with the workers: each thread then pushes its own
 * payload.  The slices come from request_slices, so their range is
 * known to be valid.  Returns 0 when this does not apply.
 */
static int exec_spread(mc_te_t *te, const mc_te_item_t *items, size_t n, mc_status_t *st_p)
{
    mc_te_xfer_t v[MC_TE_SPREAD_MAX];
    mc_status_t vst[MC_TE_SPREAD_MAX];
    mc_te_segment_t *s = items[0].seg;
    mc_te_shm_peer_t *shm;
    size_t m = 0;

    if ((n < 2) || (items[0].op != MC_TE_READ) || s->is_self || (n > te->cfg.lanes) ||
        (n > MC_TE_SPREAD_MAX) || (te->tp_ops->xfer_spread == NULL))
        return 0;
    /* slices the same-host path takes (the first read of a region, which
     * is sliced before the region is mapped) need no connection */
    *st_p = MC_OK;
    shm   = segment_shm(s);
    for (size_t j = 0; j < n; j++) {
        mc_status_t sst;
        if (shm_try(te, shm, MC_TE_READ, items[j].local, items[j].remote, items[j].len,
                    items[j].gen, &sst)) {
            if ((sst != MC_OK) && (*st_p == MC_OK))
                *st_p = sst;
            continue;
        }
        v[m].local    = items[j].local;
        v[m].remote   = items[j].remote;
        v[m].gen      = items[j].gen;
        v[m++].len    = items[j].len;
    }
    if (m == 0)
        return 1;
    n = m;
    (void)mc_te_tp_xfer_spread(te, s->peer, MC_TE_READ, v, n, vst);
    for (size_t j = 0; j < n; j++) {
        if (vst[j] != MC_OK) {
            mc_debug("read of %llu bytes at 0x%llx on %s failed: %s",
                     (unsigned long long)v[j].len, (unsigned long long)v[j].remote, s->name,
                     mc_last_error_detail());
            if (*st_p == MC_OK)
                *st_p = vst[j];
        }
    }
    return 1;
}

/* Check one request and resolve its segment; MC_OK or INVALID_PARAMS. */
static mc_status_t request_check(mc_te_t *te, const mc_te_request_t *r, mc_te_segment_t **seg_p)
{
    mc_te_segment_t *s;
    if ((r->op != MC_TE_READ) && (r->op != MC_TE_WRITE)) {
        mc_set_error_detail("transfer: unknown op %d", (int)r->op);
        return MC_INVALID_PARAMS;
    }
    if (r->length > UINT64_MAX - r->remote) {
        mc_set_error_detail("transfer: remote range 0x%llx + %llu wraps around",
                            (unsigned long long)r->remote, (unsigned long long)r->length);
        return (r->op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
    }
    if ((r->length > 0) &&
        ((r->local == NULL) || (r->length > UINTPTR_MAX - (uintptr_t)r->local))) {
        mc_set_error_detail("transfer: local buffer %p of %llu bytes is invalid", r->local,
                            (unsigned long long)r->length);
        return MC_INVALID_PARAMS;
    }
    s = segment_by_id(te, r->segment);
    if (s == NULL) {
        mc_set_error_detail("transfer: segment id %llu was not opened",
                            (unsigned long long)r->segment);
        return MC_INVALID_PARAMS;
    }
    *seg_p = s;
    return MC_OK;
}

/*
 * Number of items request r becomes: slices of slice_size when it is long,
 * goes to a peer over the network, and its range is known to be valid (the
 * cached descriptor of the peer); otherwise one item, which the range check then
 * refuses or (after a descriptor refresh) runs whole.  This keeps a bogus
 * multi-terabyte request from being cut into billions of slices.
 */
static size_t request_slices(mc_te_t *te, const mc_te_request_t *r, mc_te_segment_t *s)
{
    uint64_t slice = te->cfg.slice_size;
    mc_te_shm_peer_t *shm = __atomic_load_n(&s->shm, __ATOMIC_ACQUIRE);
    if ((r->length <= slice) || (te->cfg.workers == 0))
        return 1;
    /* this engine's own memory, or a peer's already mapped: one memcpy on
     * the calling thread; slicing would only add hand-offs to workers */
    if (s->is_self || ((shm != NULL) && mc_te_shm_mapped(shm, r->remote, r->length)))
        return 1;
    return segment_has_range(s, r->remote, r->length) ? (size_t)((r->length + slice - 1) / slice)
                                                      : 1;
}

/* The generation request i names (mc_te_transfer_gen). */
#define GEN_OF(gens, i) (((gens) != NULL) ? (gens)[i] : 0)

/* Append the items of request i to items[*k_p...]. */
static void request_items(const mc_te_request_t *r, size_t i, mc_te_segment_t *s, size_t nslices,
                          uint64_t gen, mc_te_item_t *items, size_t *k_p)
{
    uint64_t step = (nslices > 1) ? (r->length + nslices - 1) / nslices : r->length;
    uint64_t off  = 0;
    do {
        mc_te_item_t *it = &items[(*k_p)++];
        it->seg          = s;
        it->op           = r->op;
        it->local        = (uint8_t *)r->local + off;
        it->remote       = r->remote + off;
        it->len          = MC_MIN(step, r->length - off);
        it->gen          = gen;
        it->req          = i;
        it->sc           = NULL;
        it->dp           = NULL;
        it->shared       = 0;
        off += it->len;
    } while (off < r->length);
}

int mc_te_read_direct(mc_te_t *te, const mc_te_request_t *reqs, size_t n, mc_status_t *st_p)
{
    return mc_te_read_direct_gen(te, reqs, NULL, n, st_p);
}

/* The generation all of gens[0..n) name (they must agree, 0 counting as
 * any), or UINT64_MAX when two differ. */
static uint64_t gens_common(const uint64_t *gens, size_t n)
{
    uint64_t g = 0;
    for (size_t j = 0; (gens != NULL) && (j < n); j++) {
        if (gens[j] == 0)
            continue;
        if ((g != 0) && (gens[j] != g))
            return UINT64_MAX;
        g = gens[j];
    }
    return g;
}

int mc_te_read_direct_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                          size_t n, mc_status_t *st_p)
{
    mc_te_segment_t *s;
    uint64_t lo = UINT64_MAX, hi = 0, bytes = 0;
    uint64_t gen = gens_common(gens, n);

    if ((te == NULL) || (n == 0) || (gen == UINT64_MAX) ||
        (request_check(te, &reqs[0], &s) != MC_OK))
        return 0;
    for (size_t j = 0; j < n; j++) {
        const mc_te_request_t *r = &reqs[j];
        if ((r->op != MC_TE_READ) || (r->segment != reqs[0].segment) || (r->length == 0) ||
            (r->local == NULL) || (r->length > UINT64_MAX - r->remote) ||
            (r->length > UINTPTR_MAX - (uintptr_t)r->local))
            return 0; /* mc_te_transfer says what is wrong */
        lo = MC_MIN(lo, r->remote);
        hi = MC_MAX(hi, r->remote + r->length);
        bytes += r->length;
    }
    if ((st_p == NULL) && !s->is_self) { /* only asking */
        mc_te_shm_peer_t *shm = segment_shm(s);
        return (shm != NULL) && mc_te_shm_mapped(shm, lo, hi - lo);
    }
    if (s->is_self) {
        mc_te_region_t *reg = mc_te_region_acquire(te, lo, hi - lo, MC_TE_MEM_REMOTE_ACCESS);
        int ticket          = MC_TE_GEN_NONE;
        if ((reg != NULL) && (reg->fops != NULL)) { /* a file segment: not by memcpy */
            mc_te_region_release(te, reg);
            reg = NULL;
        }
        if ((reg == NULL) || (st_p == NULL)) {
            if (reg != NULL)
                mc_te_region_release(te, reg);
            return reg != NULL;
        }
        ticket = mc_te_gen_enter(te, reg, gen, 0, mc_te_gen_wait_ms(te));
        if (ticket < 0) {
            mc_te_region_release(te, reg);
            *st_p = gen_refused(MC_TE_READ, te->local_name, lo, hi - lo, gen);
            return 1;
        }
        /* (a destination overlapping its source gets memmove, as exec_self) */
        for (size_t j = 0; j < n; j++) {
            const void *from = (const void *)(uintptr_t)reqs[j].remote;
            uintptr_t d = (uintptr_t)reqs[j].local, f = (uintptr_t)from;
            size_t len  = (size_t)reqs[j].length;
            if ((d < f + len) && (f < d + len))
                memmove(reqs[j].local, from, len);
            else
                mc_copy_stream(reqs[j].local, from, len);
        }
        mc_copy_stream_fence();
        mc_te_region_release_gen(te, reg, ticket);
        *st_p = MC_OK;
        return 1;
    }
    {
        mc_te_shm_peer_t *shm = segment_shm(s);
        if ((shm == NULL) || !mc_te_shm_read_many(shm, reqs, n, lo, hi, gen, st_p))
            return 0;
    }
    if (*st_p == MC_OK) {
        __atomic_add_fetch(&te->shm_ops, n, __ATOMIC_RELAXED);
        __atomic_add_fetch(&te->shm_bytes, bytes, __ATOMIC_RELAXED);
    }
    return 1;
}

/* One piece of a spread direct write: requests reqs[0..n), spanning
 * [lo, hi) of one same-host holder's mapped region. */
struct direct_piece {
    mc_te_shm_peer_t *shm;
    const mc_te_request_t *reqs;
    size_t n;
    uint64_t lo, hi, gen;
    int declined; /* mc_te_shm_write_many copied nothing */
};

/* A piece is a direct write of its own (mc_te_shm_write_many: the writer
 * count taken before its first copy and given back after its last, the
 * gate and the word checked around them), on whichever thread runs it. */
static mc_status_t direct_piece_run(struct direct_piece *dp)
{
    mc_status_t st = MC_OK;
    dp->declined   = !mc_te_shm_write_many(dp->shm, dp->reqs, dp->n, dp->lo, dp->hi, dp->gen, &st);
    return st;
}

/*
 * A direct write of MC_TE_DIRECT_SPREAD_MIN bytes or more, cut at request
 * boundaries into te->direct_pieces pieces of about equal bytes, run as
 * one batch: the calling thread copies the first and takes any piece no
 * worker has claimed yet (run_batch), so with no CPU free it copies them
 * all itself.  On one thread the store call of a DataProto put (the 2 048
 * rows of its token and mask columns, 16 MiB) stayed 0.2-0.4 ms behind
 * batch_put_from of the same bytes, whose two 8 MiB requests the workers
 * copy side by side (bench/README.md, seventh round).  Each piece keeps the
 * fence rules of a direct write (docs/transfer.md §10), counted under its
 * own writer count; a piece that finds a fence under way when it starts
 * copies nothing and is moved afterwards by mc_te_transfer_gen, where the
 * holder decides.  0 when it does not apply.
 */
static int write_direct_spread(mc_te_t *te, mc_te_segment_t *s, mc_te_shm_peer_t *shm,
                               const mc_te_request_t *reqs, const uint64_t *gens, size_t n,
                               uint64_t gen, uint64_t bytes, mc_status_t *st_p)
{
    struct direct_piece dps[MC_TE_DIRECT_PIECES_MAX];
    mc_te_item_t items[MC_TE_DIRECT_PIECES_MAX];
    mc_status_t sts[MC_TE_DIRECT_PIECES_MAX];
    size_t k = te->direct_pieces, c, j = 0;
    uint64_t acc = 0;

    if ((k < 2) || (bytes < MC_TE_DIRECT_SPREAD_MIN) || (n < k))
        return 0;
    for (c = 0; (c < k) && (j < n); c++) {
        uint64_t want = bytes / k * (c + 1), lo = UINT64_MAX, hi = 0;
        size_t first  = j;
        do {
            lo = MC_MIN(lo, reqs[j].remote);
            hi = MC_MAX(hi, reqs[j].remote + reqs[j].length);
            acc += reqs[j].length;
            j++;
        } while ((j < n) && ((c == k - 1) || (acc < want)));
        dps[c] = (struct direct_piece){shm, &reqs[first], j - first, lo, hi, gen, 0};
        memset(&items[c], 0, sizeof(items[c]));
        items[c].seg = s;
        items[c].op  = MC_TE_WRITE;
        items[c].req = c;
        items[c].dp  = &dps[c];
        sts[c]       = MC_OK;
    }
    run_batch(te, items, c, sts);
    *st_p = MC_OK;
    for (size_t q = 0; q < c; q++) {
        mc_status_t pst = sts[q];
        if (dps[q].declined) {
            size_t first = (size_t)(dps[q].reqs - reqs);
            pst = mc_te_transfer_gen(te, dps[q].reqs, (gens != NULL) ? &gens[first] : NULL,
                                     dps[q].n, NULL);
        } else if (pst == MC_OK) {
            uint64_t pb = 0;
            for (size_t r = 0; r < dps[q].n; r++)
                pb += dps[q].reqs[r].length;
            __atomic_add_fetch(&te->shm_ops, dps[q].n, __ATOMIC_RELAXED);
            __atomic_add_fetch(&te->shm_bytes, pb, __ATOMIC_RELAXED);
        }
        if ((pst != MC_OK) && (*st_p == MC_OK))
            *st_p = pst;
    }
    return 1;
}

/*
 * A batch of direct writes naming a generation the holder has not adopted
 * (the master moved the segment's counter: memory freed under a lease --
 * a DataProto's payloads removed while a read of them held it -- or a
 * fence).  Only the holder adopts a counter, from a request over the
 * network that names it, so each piece would go there: 2 048 rows of a
 * DataProto put one by one, 2-3 ms where the copy takes under one.  The
 * first piece goes that way instead (adopt_split's rule for one large
 * write); once the holder took the counter the rest are copied as usual,
 * each piece under the fence rules of a direct write.  1 when the first
 * piece was written (or there was nothing to adopt); 0 when it could not
 * be: the caller sends the batch the usual way.
 */
static int batch_adopt(mc_te_t *te, mc_te_segment_t *s, mc_te_shm_peer_t *shm,
                       const mc_te_request_t *first, uint64_t lo, uint64_t hi, uint64_t gen,
                       int *sent_p)
{
    *sent_p = 0;
    if (!mc_te_shm_gen_unadopted(shm, lo, hi - lo, gen))
        return 1;
    if (!segment_has_range(s, first->remote, first->length) ||
        (mc_te_tp_xfer(te, s->peer, MC_TE_WRITE, first->local, first->remote, first->length,
                       gen) != MC_OK))
        return 0;
    *sent_p = 1;
    return 1;
}

int mc_te_write_direct_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                           size_t n, mc_status_t *st_p)
{
    int sent;
    mc_te_segment_t *s;
    mc_te_shm_peer_t *shm;
    uint64_t lo = UINT64_MAX, hi = 0, bytes = 0;
    uint64_t gen = gens_common(gens, n);

    if ((te == NULL) || (n < 2) || (st_p == NULL) || (gen == UINT64_MAX) ||
        (request_check(te, &reqs[0], &s) != MC_OK) || s->is_self)
        return 0;
    for (size_t j = 0; j < n; j++) {
        const mc_te_request_t *r = &reqs[j];
        /* large pieces keep the engine's workers: they copy in parallel */
        if ((r->op != MC_TE_WRITE) || (r->segment != reqs[0].segment) || (r->length == 0) ||
            (r->length > MC_TE_RUN_MAX_ITEM_LEN) || (r->local == NULL) ||
            (r->length > UINT64_MAX - r->remote) ||
            (r->length > UINTPTR_MAX - (uintptr_t)r->local))
            return 0; /* mc_te_transfer says what is wrong */
        lo = MC_MIN(lo, r->remote);
        hi = MC_MAX(hi, r->remote + r->length);
        bytes += r->length;
    }
    shm = segment_shm(s);
    if ((shm == NULL) || !batch_adopt(te, s, shm, &reqs[0], lo, hi, gen, &sent))
        return 0;
    /* the first piece is in: the others as a batch of their own (a 0 below
     * still has the caller send the whole batch, the first piece's same
     * bytes again) */
    if (sent) {
        bytes -= reqs[0].length;
        reqs++;
        gens = (gens != NULL) ? gens + 1 : NULL;
        n--;
    }
    if ((bytes >= MC_TE_DIRECT_SPREAD_MIN) && mc_te_shm_write_ready(shm, lo, hi, gen) &&
        write_direct_spread(te, s, shm, reqs, gens, n, gen, bytes, st_p))
        return 1;
    if (!mc_te_shm_write_many(shm, reqs, n, lo, hi, gen, st_p))
        return 0;
    if (*st_p == MC_OK) {
        __atomic_add_fetch(&te->shm_ops, n, __ATOMIC_RELAXED);
        __atomic_add_fetch(&te->shm_bytes, bytes, __ATOMIC_RELAXED);
    }
    return 1;
}

/* ---- scattered reads (mc_te_read_scatter_gen) --------------------------------- */

/* The regions a scattered read's destinations lie in, pinned while it runs
 * (a run usually lies in the region of the run before it). */
typedef struct scatter_pins {
    mc_te_region_t **r;
    size_t n;
} scatter_pins_t;

static void scatter_unpin(mc_te_t *te, scatter_pins_t *p)
{
    for (size_t k = 0; k < p->n; k++)
        mc_te_region_release(te, p->r[k]);
    free(p->r);
    p->r = NULL;
    p->n = 0;
}

/* Run @p i lies in memory registered with this engine: pin its region
 * (once).  MC_INVALID_PARAMS, detail set, when it does not. */
static mc_status_t scatter_pin(mc_te_t *te, scatter_pins_t *p, size_t i, size_t nruns,
                               const struct iovec *run)
{
    uintptr_t a = (uintptr_t)run->iov_base;
    mc_te_region_t *r;

    for (size_t k = p->n; k-- > 0;) {
        r = p->r[k];
        if ((a >= r->addr) && (a - r->addr < r->len) && (run->iov_len <= r->len - (a - r->addr)))
            return MC_OK;
    }
    r = mc_te_region_acquire(te, a, run->iov_len, 0);
    if ((r != NULL) && (r->fops != NULL)) { /* a file segment is no destination */
        mc_te_region_release(te, r);
        r = NULL;
    }
    if (r == NULL) {
        mc_set_error_detail("scattered read: destination run %zu [%p, +%zu) is not inside "
                            "memory registered with this engine",
                            i, run->iov_base, run->iov_len);
        return MC_INVALID_PARAMS;
    }
    if (p->r == NULL) {
        p->r = malloc(nruns * sizeof(*p->r)); /* at most one region per run */
        if (p->r == NULL) {
            mc_te_region_release(te, r);
            mc_set_error_detail("scattered read: out of memory for %zu runs", nruns);
            return MC_INTERNAL_ERROR;
        }
    }
    p->r[p->n++] = r;
    return MC_OK;
}

/* Each piece of the ranges (a range's part in one run) as a request of
 * its own: a scattered read (one range) without read_scatter or to a
 * mapped or own segment, a gathered read to a holder without READV. */
static mc_status_t gather_as_requests(mc_te_t *te, mc_te_segment_id_t segment, uint64_t gen,
                                      const mc_te_range_t *ranges, size_t nranges,
                                      const struct iovec *runs, size_t nruns)
{
    size_t cap = nranges + nruns, k = 0, i = 0, j = 0;
    uint64_t ri = 0, rj = 0; /* bytes of ranges[i] and runs[j] taken */
    mc_te_request_t *reqs = malloc(cap * sizeof(*reqs));
    uint64_t *gens        = malloc(cap * sizeof(*gens));
    mc_status_t st;

    if ((reqs == NULL) || (gens == NULL)) {
        free(reqs);
        free(gens);
        mc_set_error_detail("out of memory for %zu ranges into %zu runs", nranges, nruns);
        return MC_INTERNAL_ERROR;
    }
    while ((i < nranges) && (j < nruns)) {
        uint64_t len = MC_MIN(ranges[i].len - ri, (uint64_t)runs[j].iov_len - rj);
        reqs[k]      = (mc_te_request_t){MC_TE_READ, (uint8_t *)runs[j].iov_base + rj,
                                         ranges[i].addr + ri, len, segment};
        gens[k++]    = gen;
        ri += len;
        rj += len;
        if (ri == ranges[i].len) {
            i++;
            ri = 0;
        }
        if (rj == runs[j].iov_len) {
            j++;
            rj = 0;
        }
    }
    st = mc_te_transfer_gen(te, reqs, gens, k, NULL);
    free(reqs);
    free(gens);
    return st;
}

/* The first of ranges[0..n) that the segment's descriptor does not hold
 * (one lock for all: a READV names up to 1024), or n. */
static size_t segment_lacks_range(mc_te_segment_t *s, const mc_te_range_t *ranges, size_t n)
{
    size_t i = 0;
    pthread_mutex_lock(&s->desc_mu);
    while ((i < n) && mc_te_desc_contains(&s->desc, ranges[i].addr, ranges[i].len))
        i++;
    pthread_mutex_unlock(&s->desc_mu);
    return i;
}

/* The opened segment a @p kind read names; NULL, detail set, when it was
 * never opened. */
static mc_te_segment_t *read_segment(mc_te_t *te, mc_te_segment_id_t segment, const char *kind)
{
    mc_te_segment_t *s = segment_by_id(te, segment);
    if (s == NULL)
        mc_set_error_detail("%s read: segment id %llu was not opened", kind,
                            (unsigned long long)segment);
    return s;
}

int mc_te_read_scatter_native(mc_te_t *te, mc_te_segment_id_t segment)
{
    mc_te_segment_t *s = (te != NULL) ? segment_by_id(te, segment) : NULL;
    return (s != NULL) && !s->is_self && (te->tp_ops->read_scatter != NULL);
}

mc_status_t mc_te_read_scatter_gen(mc_te_t *te, mc_te_segment_id_t segment, uint64_t remote,
                                   uint64_t gen, const struct iovec *runs, size_t nruns)
{
    scatter_pins_t pins = {NULL, 0};
    mc_te_segment_t *s;
    mc_te_shm_peer_t *shm;
    uint64_t total = 0;
    mc_status_t st = MC_OK;

    if ((te == NULL) || (runs == NULL) || (nruns == 0)) {
        mc_set_error_detail("scattered read needs an engine and at least one run");
        return MC_INVALID_PARAMS;
    }
    s = read_segment(te, segment, "scattered");
    if (s == NULL)
        return MC_INVALID_PARAMS;
    for (size_t i = 0; (i < nruns) && (st == MC_OK); i++) {
        if ((runs[i].iov_base == NULL) || (runs[i].iov_len == 0) ||
            (runs[i].iov_len > UINTPTR_MAX - (uintptr_t)runs[i].iov_base)) {
            mc_set_error_detail("scattered read: destination run %zu [%p, +%zu) is invalid", i,
                                runs[i].iov_base, runs[i].iov_len);
            st = MC_INVALID_PARAMS;
        } else if (runs[i].iov_len > UINT64_MAX - remote - total) {
            mc_set_error_detail("scattered read: remote range 0x%llx + %llu+ wraps around",
                                (unsigned long long)remote, (unsigned long long)total);
            st = MC_INVALID_READ;
        } else {
            total += runs[i].iov_len;
            st = scatter_pin(te, &pins, i, nruns, &runs[i]);
        }
    }
    if (st != MC_OK)
        goto out;
    shm = segment_shm(s);
    if (s->is_self || (te->tp_ops->read_scatter == NULL) ||
        ((shm != NULL) && mc_te_shm_mapped(shm, remote, total))) {
        mc_te_range_t whole = {remote, total};
        st = gather_as_requests(te, segment, gen, &whole, 1, runs, nruns);
        goto out;
    }
    if (!segment_has_range(s, remote, total)) {
        /* the peer may have registered more since we looked: ask once */
        st = segment_refresh(te, s);
        if ((st == MC_OK) && !segment_has_range(s, remote, total))
            st = range_refused(MC_TE_READ, s->name, remote, total);
        if (st != MC_OK)
            goto out;
    }
    st = te->tp_ops->read_scatter(te->tp, s->peer, remote, total, gen, runs, nruns);
    if (st != MC_OK)
        mc_debug("scattered read of %llu bytes at 0x%llx on %s into %zu runs failed: %s",
                 (unsigned long long)total, (unsigned long long)remote, s->name, nruns,
                 mc_last_error_detail());
out:
    scatter_unpin(te, &pins);
    return st;
}

/* ---- gathered reads (mc_te_read_gather_gen) ---------------------------------- */

int mc_te_read_gather_native(mc_te_t *te, mc_te_segment_id_t segment)
{
    mc_te_segment_t *s = (te != NULL) ? segment_by_id(te, segment) : NULL;
    int readv;

    if ((s == NULL) || s->is_self || !te->readv_enabled || (te->tp_ops->read_gather == NULL))
        return 0;
    pthread_mutex_lock(&s->desc_mu);
    readv = s->desc.tcp_readv;
    pthread_mutex_unlock(&s->desc_mu);
    return readv;
}

/* read_gather's flags towards @p s: MC_TE_GATHER_STRIDED when its
 * descriptor says it serves READV_STRIDED and MC_TE_READV_STRIDED is not 0
 * here. */
static unsigned gather_flags(mc_te_t *te, mc_te_segment_t *s)
{
    int strided;

    if (!te->readvs_enabled)
        return 0;
    pthread_mutex_lock(&s->desc_mu);
    strided = s->desc.tcp_readv && s->desc.tcp_readv_strided;
    pthread_mutex_unlock(&s->desc_mu);
    return strided ? MC_TE_GATHER_STRIDED : 0;
}

/* The destination runs of a gathered read of @p rtotal bytes: each valid,
 * adding up to rtotal, pinned in @p pins (released by the caller either
 * way). */
static mc_status_t gather_runs_pin(mc_te_t *te, const struct iovec *runs, size_t nruns,
                                   uint64_t rtotal, scatter_pins_t *pins)
{
    uint64_t total = 0;
    mc_status_t st = MC_OK;

    for (size_t i = 0; (i < nruns) && (st == MC_OK); i++) {
        if ((runs[i].iov_base == NULL) || (runs[i].iov_len == 0) ||
            (runs[i].iov_len > UINTPTR_MAX - (uintptr_t)runs[i].iov_base) ||
            (runs[i].iov_len > rtotal - total)) {
            mc_set_error_detail("gathered read: destination run %zu [%p, +%zu) is invalid or "
                                "passes the ranges' %llu bytes", i, runs[i].iov_base,
                                runs[i].iov_len, (unsigned long long)rtotal);
            st = MC_INVALID_PARAMS;
        } else {
            total += runs[i].iov_len;
            st = scatter_pin(te, pins, i, nruns, &runs[i]);
        }
    }
    if ((st == MC_OK) && (total != rtotal)) {
        mc_set_error_detail("gathered read: runs of %llu bytes for ranges of %llu",
                            (unsigned long long)total, (unsigned long long)rtotal);
        st = MC_INVALID_PARAMS;
    }
    return st;
}

mc_status_t mc_te_read_gather_gen(mc_te_t *te, mc_te_segment_id_t segment, uint64_t gen,
                                  const mc_te_range_t *ranges, size_t nranges,
                                  const struct iovec *runs, size_t nruns)
{
    scatter_pins_t pins = {NULL, 0};
    mc_te_segment_t *s;
    uint64_t total = 0, rtotal = 0;
    mc_status_t st = MC_OK;
    unsigned flags;

    if ((te == NULL) || (runs == NULL) || (nruns == 0) || (ranges == NULL) || (nranges == 0) ||
        (nranges > MC_TE_READV_MAX_RANGES)) {
        mc_set_error_detail("gathered read needs an engine, 1..%u ranges and at least one run",
                            MC_TE_READV_MAX_RANGES);
        return MC_INVALID_PARAMS;
    }
    s = read_segment(te, segment, "gathered");
    if (s == NULL)
        return MC_INVALID_PARAMS;
    for (size_t i = 0; (i < nranges) && (st == MC_OK); i++) {
        if ((ranges[i].len == 0) || (ranges[i].len > UINT64_MAX - ranges[i].addr) ||
            (ranges[i].len > MC_TE_READV_MAX_LEN - rtotal)) {
            mc_set_error_detail("gathered read: range %zu [0x%llx, +%llu) is empty, wraps or "
                                "passes %u bytes in all", i,
                                (unsigned long long)ranges[i].addr,
                                (unsigned long long)ranges[i].len, MC_TE_READV_MAX_LEN);
            st = MC_INVALID_PARAMS;
        } else {
            rtotal += ranges[i].len;
        }
    }
    if (st == MC_OK)
        st = gather_runs_pin(te, runs, nruns, rtotal, &pins);
    if (st != MC_OK)
        goto out;
    total = rtotal;
    if (!mc_te_read_gather_native(te, segment)) {
        st = gather_as_requests(te, segment, gen, ranges, nranges, runs, nruns);
        goto out;
    }
    if (segment_lacks_range(s, ranges, nranges) < nranges) {
        /* the peer may have registered more since we looked: ask once */
        size_t i;
        st = segment_refresh(te, s);
        if ((st == MC_OK) && ((i = segment_lacks_range(s, ranges, nranges)) < nranges))
            st = range_refused(MC_TE_READ, s->name, ranges[i].addr, ranges[i].len);
        if (st != MC_OK)
            goto out;
    }
    __atomic_add_fetch(&te->readv_ops, 1, __ATOMIC_RELAXED);
    flags = gather_flags(te, s);
    st    = te->tp_ops->read_gather(te->tp, s->peer, ranges, nranges, total, gen, flags, runs,
                                    nruns);
    if ((st == MC_TRANSFER_FAIL) && (segment_refresh(te, s) == MC_OK)) {
        if (!mc_te_read_gather_native(te, segment)) {
            /* The holder closed the connection unanswered and no longer
             * offers READV: it came back as a release without it (or with
             * MC_TE_READV=0) under the same name.  The ranges one by one;
             * the runs are written again whole. */
            mc_debug("%s no longer offers gathered reads: reading %zu ranges one by one",
                     s->name, nranges);
            st = gather_as_requests(te, segment, gen, ranges, nranges, runs, nruns);
        } else if (gather_flags(te, s) != flags) {
            /* ... or it came back without READV_STRIDED (a release before
             * it, or MC_TE_READV_STRIDED=0): the ranges as a READV */
            mc_debug("%s no longer offers strided gathered reads: reading %zu ranges as a "
                     "READV", s->name, nranges);
            flags = gather_flags(te, s);
            st    = te->tp_ops->read_gather(te->tp, s->peer, ranges, nranges, total, gen, flags,
                                            runs, nruns);
        }
    }
    if (st != MC_OK)
        mc_debug("gathered read of %llu bytes in %zu ranges from 0x%llx on %s failed: %s",
                 (unsigned long long)total, nranges, (unsigned long long)ranges[0].addr,
                 s->name, mc_last_error_detail());
out:
    scatter_unpin(te, &pins);
    return st;
}

int mc_te_read_gather_strided_native(mc_te_t *te, mc_te_segment_id_t segment)
{
    mc_te_segment_t *s = (te != NULL) ? segment_by_id(te, segment) : NULL;

    return (s != NULL) && mc_te_read_gather_native(te, segment) &&
           (te->tp_ops->read_gather_strided != NULL) &&
           (gather_flags(te, s) & MC_TE_GATHER_STRIDED);
}

/* Entries e[0..n) as a READV_STRIDED's list must be (mc_te_readvs_decode's
 * rules): their bytes in *total_p, their rows in *rows_p; else
 * MC_INVALID_PARAMS, detail set. */
static mc_status_t strided_check(const mc_te_strided_t *e, size_t n, uint64_t *total_p,
                                 size_t *rows_p)
{
    uint64_t total = 0, rows = 0;
    size_t in_group = 0;
    uint32_t count  = 0;

    if ((e == NULL) || (n == 0) || (n > MC_TE_READVS_MAX_ENTRIES)) {
        mc_set_error_detail("strided gathered read needs 1..%u entries",
                            MC_TE_READVS_MAX_ENTRIES);
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        const mc_te_strided_t *x = &e[i];
        uint64_t span;
        int bad = (x->len == 0) || (x->count == 0) || (x->stride < x->len) ||
                  (x->len > UINT64_MAX - x->addr);
        if (!bad) {
            span = UINT64_MAX - x->addr - x->len;
            bad  = (x->count > 1) && (x->stride > span / (x->count - 1));
        }
        if (!bad && (in_group == 0)) {
            bad      = (x->group == 0) || (x->group > n - i);
            in_group = x->group;
            count    = x->count;
        } else if (!bad) {
            bad = (x->group != 0) || (x->count != count);
        }
        if (!bad)
            bad = (x->count > MC_TE_READVS_MAX_ROWS - rows) ||
                  ((uint64_t)x->len * x->count > MC_TE_READV_MAX_LEN - total);
        if (bad) {
            mc_set_error_detail("strided gathered read: entry %zu (0x%llx, stride %llu, %u x %u "
                                "bytes, group %u) is malformed or passes the limits", i,
                                (unsigned long long)x->addr, (unsigned long long)x->stride,
                                (unsigned)x->count, (unsigned)x->len, (unsigned)x->group);
            return MC_INVALID_PARAMS;
        }
        in_group--;
        rows += x->count;
        total += (uint64_t)x->len * x->count;
    }
    if (in_group != 0) {
        mc_set_error_detail("strided gathered read: the last group lacks %zu entries", in_group);
        return MC_INVALID_PARAMS;
    }
    *total_p = total;
    *rows_p  = (size_t)rows;
    return MC_OK;
}

/* A strided gathered read (entries checked, runs pinned) towards a peer
 * without READV_STRIDED: its @p nrows rows as the ranges of a READV, or
 * past a READV's limit as requests of their own. */
static mc_status_t strided_as_ranges(mc_te_t *te, mc_te_segment_id_t segment, uint64_t gen,
                                     const mc_te_strided_t *e, size_t n, size_t nrows,
                                     const struct iovec *runs, size_t nruns)
{
    mc_te_range_t *rows = malloc(nrows * sizeof(*rows));
    mc_te_strided_walk_t w;
    mc_status_t st;

    if (rows == NULL) {
        mc_set_error_detail("strided gathered read: out of memory for %zu rows", nrows);
        return MC_INTERNAL_ERROR;
    }
    mc_te_strided_walk_init(&w, e, n);
    for (size_t i = 0; i < nrows; i++)
        (void)mc_te_strided_next(&w, &rows[i]);
    st = (nrows <= MC_TE_READV_MAX_RANGES)
             ? mc_te_read_gather_gen(te, segment, gen, rows, nrows, runs, nruns)
             : gather_as_requests(te, segment, gen, rows, nrows, runs, nruns);
    free(rows);
    return st;
}

mc_status_t mc_te_read_gather_strided_gen(mc_te_t *te, mc_te_segment_id_t segment, uint64_t gen,
                                          const mc_te_strided_t *e, size_t n,
                                          const struct iovec *runs, size_t nruns)
{
    scatter_pins_t pins  = {NULL, 0};
    mc_te_range_t *spans = NULL; /* each entry's [first row, end of last row) */
    mc_te_segment_t *s;
    uint64_t total = 0;
    size_t nrows   = 0;
    mc_status_t st;

    if ((te == NULL) || (runs == NULL) || (nruns == 0)) {
        mc_set_error_detail("strided gathered read needs an engine and at least one run");
        return MC_INVALID_PARAMS;
    }
    st = strided_check(e, n, &total, &nrows);
    if (st != MC_OK)
        return st;
    s = read_segment(te, segment, "strided gathered");
    if (s == NULL)
        return MC_INVALID_PARAMS;
    st = gather_runs_pin(te, runs, nruns, total, &pins);
    if (st != MC_OK)
        goto out;
    if (!mc_te_read_gather_strided_native(te, segment)) {
        st = strided_as_ranges(te, segment, gen, e, n, nrows, runs, nruns);
        goto out;
    }
    spans = malloc(n * sizeof(*spans));
    if (spans == NULL) {
        mc_set_error_detail("strided gathered read: out of memory for %zu entries", n);
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        spans[i] = (mc_te_range_t){e[i].addr,
                                   e[i].stride * (uint64_t)(e[i].count - 1) + e[i].len};
    if (segment_lacks_range(s, spans, n) < n) {
        size_t i;
        st = segment_refresh(te, s);
        if ((st == MC_OK) && ((i = segment_lacks_range(s, spans, n)) < n))
            st = range_refused(MC_TE_READ, s->name, spans[i].addr, spans[i].len);
        if (st != MC_OK)
            goto out;
    }
    __atomic_add_fetch(&te->readv_ops, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&te->readvs_ops, 1, __ATOMIC_RELAXED);
    st = te->tp_ops->read_gather_strided(te->tp, s->peer, e, n, total, gen, runs, nruns);
    if ((st == MC_TRANSFER_FAIL) && (segment_refresh(te, s) == MC_OK) &&
        !mc_te_read_gather_strided_native(te, segment)) {
        /* the holder came back without READV_STRIDED (or READV) under the
         * same name: the rows as ranges; the runs are written again whole */
        mc_debug("%s no longer offers strided gathered reads: reading %zu rows as ranges",
                 s->name, nrows);
        st = strided_as_ranges(te, segment, gen, e, n, nrows, runs, nruns);
    }
    if (st != MC_OK)
        mc_debug("strided gathered read of %llu bytes in %zu entries from 0x%llx on %s "
                 "failed: %s", (unsigned long long)total, n, (unsigned long long)e[0].addr,
                 s->name, mc_last_error_detail());
out:
    free(spans);
    scatter_unpin(te, &pins);
    return st;
}

MC_API mc_status_t mc_te_transfer(mc_te_h te, const mc_te_request_t *reqs, size_t n,
                                  mc_status_t *statuses)
{
    return mc_te_transfer_gen(te, reqs, NULL, n, statuses);
}

mc_status_t mc_te_transfer_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                               size_t n, mc_status_t *statuses)
{
    mc_status_t *st_arr = statuses, first = MC_OK;
    mc_te_segment_t **segs = NULL;
    mc_te_item_t *items    = NULL;
    size_t *nslices        = NULL;
    size_t nitems          = 0;

    if ((te == NULL) || ((reqs == NULL) && (n > 0))) {
        mc_set_error_detail("transfer needs an engine and requests");
        return MC_INVALID_PARAMS;
    }
    if (n == 0)
        return MC_OK;

    if (n == 1) {
        /* Fast path: validate and run on the calling thread, no hand-off
         * (unless the request is long enough to be worth spreading). */
        mc_te_segment_t *s;
        mc_status_t st = request_check(te, &reqs[0], &s);
        if (st == MC_OK) {
            size_t np           = request_slices(te, &reqs[0], s);
            mc_te_item_t one_it, *parts = (np > 1) ? calloc(np, sizeof(*parts)) : NULL;
            size_t k            = 0;
            if (parts == NULL) {
                request_items(&reqs[0], 0, s, 1, GEN_OF(gens, 0), &one_it, &k);
                st = exec_item(te, &one_it);
            } else {
                request_items(&reqs[0], 0, s, np, GEN_OF(gens, 0), parts, &k);
                if (!exec_spread(te, parts, np, &st))
                    run_batch(te, parts, np, &st);
                free(parts);
            }
        }
        if (statuses != NULL)
            statuses[0] = st;
        return st;
    }

    if (st_arr == NULL) {
        st_arr = malloc(n * sizeof(*st_arr));
        if (st_arr == NULL)
            goto oom;
    }
    segs = malloc(n * sizeof(*segs));
    if (segs == NULL)
        goto oom;
    nslices = malloc(n * sizeof(*nslices));
    if (nslices == NULL)
        goto oom;
    for (size_t i = 0; i < n; i++) {
        st_arr[i] = request_check(te, &reqs[i], &segs[i]);
        if (st_arr[i] != MC_OK)
            continue;
        nslices[i] = request_slices(te, &reqs[i], segs[i]);
        nitems += nslices[i];
    }
    if (nitems > 0) {
        size_t k = 0;
        items    = (nitems <= SIZE_MAX / sizeof(*items)) ? malloc(nitems * sizeof(*items)) : NULL;
        if (items == NULL)
            goto oom;
        for (size_t i = 0; i < n; i++)
            if (st_arr[i] == MC_OK)
                request_items(&reqs[i], i, segs[i], nslices[i], GEN_OF(gens, i), items, &k);
        run_batch(te, items, nitems, st_arr);
    }
    for (size_t i = 0; i < n; i++) {
        if (st_arr[i] != MC_OK) {
            mc_te_segment_t *unused;
            first = st_arr[i];
            /* A request refused before running gets its reason restated
             * (the batch may have overwritten it); for one that ran,
             * run_batch left the detail of exactly this request. */
            (void)request_check(te, &reqs[i], &unused);
            break;
        }
    }
    free(items);
    free(nslices);
    free(segs);
    if (st_arr != statuses)
        free(st_arr);
    return first;

oom:
    free(items);
    free(nslices);
    free(segs);
    if (st_arr != statuses)
        free(st_arr);
    else
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
    mc_set_error_detail("out of memory");
    return MC_INTERNAL_ERROR;
}

mc_status_t mc_te_transfer_gen_sent(mc_te_t *te, const mc_te_request_t *reqs,
                                    const uint64_t *gens, size_t n, mc_status_t *statuses,
                                    void (*sent)(void *), void *arg)
{
    mc_status_t st;

    if ((sent != NULL) && ((te == NULL) || !te->tp_ops->runs_sent_hook)) {
        sent(arg);
        sent = NULL;
    }
    sent_hook_fn  = sent;
    sent_hook_arg = arg;
    st            = mc_te_transfer_gen(te, reqs, gens, n, statuses);
    mc_te_sent_hook_run(); /* nothing was sent (or all refused first) */
    return st;
}

/* ---- shared reads (mc_te_read_shared_gen, mc_te_assist) ----------------------- */

/* The pieces of a shared read of @p len bytes (one for an empty one). */
static size_t shared_pieces(uint64_t len)
{
    return (size_t)MC_MAX((len + MC_TE_SHARED_PIECE - 1) / MC_TE_SHARED_PIECE, (uint64_t)1);
}

mc_status_t mc_te_read_shared_gen(mc_te_t *te, const mc_te_request_t *reqs, const uint64_t *gens,
                                  size_t n, mc_status_t *statuses)
{
    mc_te_segment_t **segs;
    mc_te_item_t *items = NULL;
    size_t nitems = 0, k = 0;
    mc_status_t first = MC_OK;

    if ((te == NULL) || (statuses == NULL) || ((reqs == NULL) && (n > 0))) {
        mc_set_error_detail("shared read needs an engine, requests and statuses");
        return MC_INVALID_PARAMS;
    }
    if (n == 0)
        return MC_OK;
    segs = malloc(n * sizeof(*segs));
    if (segs == NULL)
        return mc_te_transfer_gen(te, reqs, gens, n, statuses);
    for (size_t i = 0; i < n; i++) {
        statuses[i] = request_check(te, &reqs[i], &segs[i]);
        if ((statuses[i] == MC_OK) && (reqs[i].op != MC_TE_READ)) {
            mc_set_error_detail("shared read: request %zu is not a READ", i);
            statuses[i] = MC_INVALID_PARAMS;
        }
        if (statuses[i] == MC_OK)
            nitems += shared_pieces(reqs[i].length);
    }
    if (nitems > 0) {
        items = (nitems <= SIZE_MAX / sizeof(*items)) ? malloc(nitems * sizeof(*items)) : NULL;
        if (items == NULL) {
            free(segs);
            return mc_te_transfer_gen(te, reqs, gens, n, statuses);
        }
        for (size_t i = 0; i < n; i++) {
            if (statuses[i] == MC_OK)
                request_items(&reqs[i], i, segs[i], shared_pieces(reqs[i].length),
                              GEN_OF(gens, i), items, &k);
        }
        for (size_t j = 0; j < k; j++)
            items[j].shared = 1;
        run_batch_as(te, items, k, statuses, 1);
    }
    for (size_t i = 0; (i < n) && (first == MC_OK); i++)
        first = statuses[i];
    free(items);
    free(segs);
    return first;
}

size_t mc_te_assist(mc_te_t *te)
{
    size_t runs = 0;

    if (te == NULL)
        return 0;
    pthread_mutex_lock(&te->pool_mu);
    for (;;) {
        mc_te_batch_t *b = te->queue_head;
        while ((b != NULL) && !b->shared)
            b = b->qnext;
        if (b == NULL)
            break; /* a shared batch leaves the queue with its last run claimed */
        batch_step(te, b);
        runs++;
    }
    pthread_mutex_unlock(&te->pool_mu);
    return runs;
}

/* ---- background jobs ---------------------------------------------------------- */

/*
 * A job is the batch of mc_te_transfer without the calling thread: its
 * items go to the worker queue and the submitter returns.  Checks and
 * slicing are mc_te_transfer's (request_check, request_slices), so a job
 * and a synchronous call of the same requests move the same items.
 */
MC_API mc_status_t mc_te_transfer_submit(mc_te_h te, const mc_te_request_t *reqs, size_t n,
                                         mc_te_job_h *job_p)
{
    return mc_te_transfer_submit_gen(te, reqs, NULL, n, job_p);
}

static mc_status_t transfer_submit(mc_te_t *te, const mc_te_request_t *reqs,
                                   const uint64_t *gens, size_t n, const mc_te_scatter_t *sc,
                                   size_t nsc, mc_te_job_h *job_p);

mc_status_t mc_te_transfer_submit_gen(mc_te_t *te, const mc_te_request_t *reqs,
                                      const uint64_t *gens, size_t n, mc_te_job_h *job_p)
{
    if ((te == NULL) || (reqs == NULL) || (n == 0) || (job_p == NULL)) {
        mc_set_error_detail("transfer_submit needs an engine, requests and a job pointer");
        return MC_INVALID_PARAMS;
    }
    return transfer_submit(te, reqs, gens, n, NULL, 0, job_p);
}

mc_status_t mc_te_transfer_submit_scatter_gen(mc_te_t *te, const mc_te_request_t *reqs,
                                              const uint64_t *gens, size_t n,
                                              const mc_te_scatter_t *sc, size_t nsc,
                                              mc_te_job_h *job_p)
{
    if ((te == NULL) || ((reqs == NULL) && (n > 0)) || ((sc == NULL) && (nsc > 0)) ||
        (n + nsc == 0) || (job_p == NULL)) {
        mc_set_error_detail("transfer_submit needs an engine, requests and a job pointer");
        return MC_INVALID_PARAMS;
    }
    return transfer_submit(te, reqs, gens, n, sc, nsc, job_p);
}

/*
 * A scattered read of a job cut, at run boundaries, into pieces of about
 * slice_size (as a long request is cut into slices): they spread over the
 * workers and lanes like the slices of whole-object reads beside them,
 * instead of one worker streaming 8 MiB alone at the end of the job while
 * the others idle.  Each piece names the read's generation, so a refusal
 * of any piece fails the read (the job's status for it).  Writes the
 * pieces to @p out when it is not NULL; returns their number.  Not cut
 * without workers, nor a single run, nor a read without runs (which
 * mc_te_read_scatter_gen then refuses whole); a bad run refuses only
 * its piece, and so still fails the read.
 */
static size_t scatter_cut(const mc_te_t *te, const mc_te_scatter_t *sc, mc_te_scatter_t *out)
{
    uint64_t slice = te->cfg.slice_size, remote = sc->remote, bytes = 0;
    size_t first = 0, m = 0;

    if ((te->cfg.workers == 0) || (sc->runs == NULL) || (sc->nruns < 2) ||
        (sc->ranges != NULL) || (sc->strided != NULL)) {
        if (out != NULL)
            out[0] = *sc;
        return 1;
    }
    for (size_t i = 0; i < sc->nruns; i++) {
        bytes += sc->runs[i].iov_len;
        if ((bytes < slice) && (i + 1 < sc->nruns))
            continue;
        if (out != NULL)
            out[m] = (mc_te_scatter_t){sc->segment, remote,           sc->gen,
                                       &sc->runs[first], i + 1 - first, NULL, 0,
                                       NULL, 0};
        m++;
        remote += bytes; /* wraps only for a read mc_te_read_scatter_gen refuses */
        bytes = 0;
        first = i + 1;
    }
    return m;
}

/* mc_te_transfer_submit_scatter_gen, arguments checked.  The scattered
 * reads come first: they are the longest items, so they start first. */
static mc_status_t transfer_submit(mc_te_t *te, const mc_te_request_t *reqs,
                                   const uint64_t *gens, size_t n, const mc_te_scatter_t *sc,
                                   size_t nsc, mc_te_job_h *job_p)
{
    struct mc_te_job *job  = NULL;
    mc_te_segment_t **segs = NULL;
    size_t *nslices        = NULL;
    size_t nitems, npieces = 0, k = 0;
    pthread_condattr_t ca;

    for (size_t j = 0; j < nsc; j++)
        npieces += scatter_cut(te, &sc[j], NULL);
    nitems  = npieces; /* the pieces first, then the requests' slices */
    job     = calloc(1, sizeof(*job));
    segs    = malloc((n + 1) * sizeof(*segs));
    nslices = malloc((n + 1) * sizeof(*nslices));
    if ((job == NULL) || (segs == NULL) || (nslices == NULL) ||
        ((job->b.req_status = calloc(n + nsc, sizeof(mc_status_t))) == NULL) ||
        ((npieces > 0) && ((job->pieces = malloc(npieces * sizeof(*job->pieces))) == NULL)))
        goto oom;
    job->nreq         = n + nsc;
    job->b.detail_req = SIZE_MAX;
    job->b.job        = job;
    for (size_t i = 0; i < n; i++) {
        mc_status_t st = request_check(te, &reqs[i], &segs[i]);
        job->b.req_status[i] = st;
        if (st != MC_OK) {
            if (job->b.detail_req == SIZE_MAX) {
                job->b.detail_req = i;
                snprintf(job->b.detail, sizeof(job->b.detail), "%s", mc_last_error_detail());
            }
            continue;
        }
        nslices[i] = request_slices(te, &reqs[i], segs[i]);
        nitems += nslices[i];
    }
    if (nitems > 0) {
        job->b.items = (nitems <= SIZE_MAX / sizeof(mc_te_item_t))
                           ? malloc(nitems * sizeof(mc_te_item_t))
                           : NULL;
        if (job->b.items == NULL)
            goto oom;
        for (size_t j = 0; j < nsc; j++) {
            size_t m = scatter_cut(te, &sc[j], &job->pieces[k]);
            for (size_t q = 0; q < m; q++, k++) {
                memset(&job->b.items[k], 0, sizeof(job->b.items[k]));
                job->b.items[k].op  = MC_TE_READ;
                job->b.items[k].req = n + j;
                job->b.items[k].sc  = &job->pieces[k];
            }
        }
        for (size_t i = 0; i < n; i++)
            if (job->b.req_status[i] == MC_OK)
                request_items(&reqs[i], i, segs[i], nslices[i], GEN_OF(gens, i), job->b.items,
                              &k);
    }
    job->b.nitems = nitems;
    free(segs);
    free(nslices);
    segs    = NULL;
    nslices = NULL;

    pthread_mutex_init(&job->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&job->cond, &ca);
    pthread_condattr_destroy(&ca);

    if (nitems == 0) {
        /* every request was refused up front: finished already */
        job->result = job_first_status(job->b.req_status, n + nsc);
        job->done   = 1;
        *job_p      = job;
        return MC_OK;
    }
    pthread_mutex_lock(&te->pool_mu);
    pool_start(te);
    job->b.qprev = te->queue_tail;
    if (te->queue_tail != NULL)
        te->queue_tail->qnext = &job->b;
    else
        te->queue_head = &job->b;
    te->queue_tail = &job->b;
    if (te->nworkers == 0) {
        /* No worker threads (MC_TE_WORKERS=0, or none could start): the
         * submitter runs the job itself, as documented.  It is not
         * detached yet, so completion cannot free it under us. */
        while (job->b.next < job->b.nitems)
            batch_step(te, &job->b);
    } else {
        size_t runs = 0;
        for (size_t i = 0; (i < nitems) && (runs < te->nworkers); runs++)
            i += run_length(job->b.items, i, nitems);
        for (size_t w = 0; w < runs; w++)
            pthread_cond_signal(&te->pool_cond);
    }
    pthread_mutex_unlock(&te->pool_mu);
    *job_p = job;
    return MC_OK;

oom:
    if (job != NULL) {
        free(job->b.items);
        free(job->b.req_status);
        free(job->pieces);
        free(job);
    }
    free(segs);
    free(nslices);
    mc_set_error_detail("out of memory submitting %zu requests", n);
    return MC_INTERNAL_ERROR;
}

MC_API mc_status_t mc_te_job_wait(mc_te_job_h job, int timeout_ms, int *done_p,
                                  mc_status_t *statuses)
{
    struct timespec dl;
    int done;

    if (job == NULL) {
        mc_set_error_detail("job_wait needs a job");
        return MC_INVALID_PARAMS;
    }
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        mc_timespec_add_ms(&dl, (uint64_t)timeout_ms);
    }
    pthread_mutex_lock(&job->mu);
    while (!job->done && (timeout_ms != 0)) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&job->cond, &job->mu);
        } else if (pthread_cond_timedwait(&job->cond, &job->mu, &dl) == ETIMEDOUT) {
            break;
        }
    }
    done = job->done;
    pthread_mutex_unlock(&job->mu);
    if (done_p != NULL)
        *done_p = done;
    if (!done)
        return MC_OK;
    /* finished: nothing writes the job any more */
    if (statuses != NULL)
        memcpy(statuses, job->b.req_status, job->nreq * sizeof(*statuses));
    if (job->result != MC_OK)
        mc_set_error_detail("%s", job->b.detail);
    return job->result;
}

void mc_te_job_help(mc_te_t *te, mc_te_job_h job)
{
    if ((te == NULL) || (job == NULL))
        return;
    pthread_mutex_lock(&te->pool_mu);
    while (job->b.next < job->b.nitems)
        batch_step(te, &job->b);
    pthread_mutex_unlock(&te->pool_mu);
}

MC_API void mc_te_job_release(mc_te_job_h job)
{
    int done;
    if (job == NULL)
        return;
    pthread_mutex_lock(&job->mu);
    done = job->done;
    if (!done)
        job->detached = 1;
    pthread_mutex_unlock(&job->mu);
    if (done)
        job_free(job);
}

/* ---- segment queries ------------------------------------------------------------ */

MC_API mc_status_t mc_te_segment_refresh(mc_te_h te, mc_te_segment_id_t seg)
{
    mc_te_segment_t *s = (te != NULL) ? segment_by_id(te, seg) : NULL;
    if (s == NULL) {
        mc_set_error_detail("segment id %llu was not opened", (unsigned long long)seg);
        return MC_INVALID_PARAMS;
    }
    return s->is_self ? MC_OK : segment_refresh(te, s);
}

MC_API mc_status_t mc_te_segment_buffer_query(mc_te_h te, mc_te_segment_id_t seg, size_t index,
                                              uint64_t *addr_p, uint64_t *len_p)
{
    mc_te_segment_t *s = (te != NULL) ? segment_by_id(te, seg) : NULL;
    mc_status_t st     = MC_INVALID_PARAMS;
    size_t count       = 0;

    if ((s == NULL) || (addr_p == NULL)) {
        mc_set_error_detail("segment_buffer_query needs an opened segment id and addr_p");
        return MC_INVALID_PARAMS;
    }
    if (s->is_self) {
        pthread_rwlock_rdlock(&te->regions_lock);
        for (size_t i = 0; i < te->nregions; i++) {
            const mc_te_region_t *r = te->regions[i];
            if (!(r->flags & MC_TE_MEM_REMOTE_ACCESS))
                continue;
            if (count++ == index) {
                *addr_p = r->addr;
                if (len_p != NULL)
                    *len_p = r->len;
                st = MC_OK;
                break;
            }
        }
        pthread_rwlock_unlock(&te->regions_lock);
    } else {
        pthread_mutex_lock(&s->desc_mu);
        count = s->desc.nbuffers;
        if (index < count) {
            *addr_p = s->desc.buffers[index].addr;
            if (len_p != NULL)
                *len_p = s->desc.buffers[index].length;
            st = MC_OK;
        }
        pthread_mutex_unlock(&s->desc_mu);
    }
    if (st != MC_OK)
        mc_set_error_detail("segment %s serves no buffer number %zu", s->name, index);
    return st;
}

/* ---- lifecycle --------------------------------------------------------------- */

MC_API const char *mc_te_local_name(mc_te_h te)
{
    return ((te != NULL) && (te->local_name != NULL)) ? te->local_name : "";
}

static void engine_free(mc_te_t *te)
{
    mc_hmap_iter_t it;
    mc_hnode_t *n;

    if (te == NULL)
        return;

    pool_stop(te);
    /* No same-host request may look at regions past this point. */
    mc_te_shm_server_stop(te->shm);
    te->shm = NULL;
    /* Close peers before the transport goes: their sockets belong to it. */
    for (n = mc_hmap_first(&te->seg_by_name, &it); n != NULL; n = mc_hmap_next(&te->seg_by_name, &it)) {
        mc_te_segment_t *s = mc_container_of(n, mc_te_segment_t, hnode);
        mc_hmap_remove(&te->seg_by_name, n);
        segment_free(te, s);
    }
    mc_hmap_cleanup(&te->seg_by_name);
    free(te->segs);
    mc_te_meta_unpublish(te);
    /* memory registrations belong to the transport's devices */
    for (size_t i = 0; i < te->nregions; i++)
        mc_te_tp_mem_dereg(te, te->regions[i]);
    mc_te_tp_uninstall(te);
    for (size_t i = 0; i < te->nregions; i++)
        region_free(te->regions[i]);
    free(te->regions);
    pthread_rwlock_destroy(&te->regions_lock);
    pthread_rwlock_destroy(&te->disk_lock);
    pthread_mutex_destroy(&te->disk_mu);
    pthread_cond_destroy(&te->disk_cond);
    pthread_mutex_destroy(&te->region_mu);
    pthread_mutex_destroy(&te->gen_mu);
    pthread_cond_destroy(&te->region_cond);
    pthread_mutex_destroy(&te->seg_lock);
    pthread_cond_destroy(&te->seg_cond);
    pthread_mutex_destroy(&te->pool_mu);
    pthread_cond_destroy(&te->pool_cond);
    pthread_mutex_destroy(&te->publish_mu);
    free(te->local_name);
    free(te->meta_url);
    mc_etcd_destroy(te->meta_etcd);
    mc_redis_destroy(te->meta_redis);
    free(te->key_prefix);
    mc_auth_destroy(te->auth);
    free(te);
}

MC_API void mc_te_destroy(mc_te_h te)
{
    if (te != NULL)
        engine_free(te);
}

MC_API mc_status_t mc_te_create(const mc_te_params_t *params, mc_te_h *te_p)
{
    const mc_te_params_t empty = {0};
    const mc_te_params_t *p    = params ? params : &empty;
    const char *hostname       = "localhost";
    const char *meta           = NULL;
    const char *proto          = NULL;
    const mc_te_transport_ops_t *ops;
    mc_rdma_nic_t nics[MC_RDMA_MAX_NICS];
    size_t nnics       = 0;
    uint16_t want_port = 0;
    mc_te_segment_t *self;
    mc_te_t *te;
    mc_status_t st;
    size_t nlen;

    if (te_p == NULL) {
        mc_set_error_detail("te_create needs an output pointer");
        return MC_INVALID_PARAMS;
    }
    if ((p->field_mask & MC_TE_PARAM_LOCAL_HOSTNAME) && (p->local_hostname != NULL) &&
        (*p->local_hostname != '\0'))
        hostname = p->local_hostname;
    if (p->field_mask & MC_TE_PARAM_METADATA_SERVER)
        meta = p->metadata_server;
    if (p->field_mask & MC_TE_PARAM_PROTOCOL)
        proto = p->protocol;
    st = protocol_select(proto,
                         ((p->field_mask & MC_TE_PARAM_DEVICES) && (p->devices != NULL))
                             ? p->devices
                             : "",
                         &ops, nics, &nnics);
    if (st != MC_OK)
        return st;

    te = calloc(1, sizeof(*te));
    if (te == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    te->tp_ops = ops;
    memcpy(te->rdma_nics, nics, nnics * sizeof(*nics));
    te->rdma_nnics = nnics;
    pthread_rwlock_init(&te->regions_lock, NULL);
    pthread_rwlock_init(&te->disk_lock, NULL);
    pthread_mutex_init(&te->disk_mu, NULL);
    pthread_cond_init(&te->disk_cond, NULL);
    pthread_mutex_init(&te->region_mu, NULL);
    pthread_mutex_init(&te->gen_mu, NULL);
    pthread_cond_init(&te->region_cond, NULL);
    pthread_mutex_init(&te->seg_lock, NULL);
    pthread_cond_init(&te->seg_cond, NULL);
    pthread_mutex_init(&te->pool_mu, NULL);
    pthread_cond_init(&te->pool_cond, NULL);
    pthread_mutex_init(&te->publish_mu, NULL);
    if (mc_hmap_init(&te->seg_by_name, 16) != 0) {
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("out of memory");
        goto fail;
    }

    st = config_resolve(p, &te->cfg);
    if (st != MC_OK)
        goto fail;
    /* more threads than CPUs copying would only take turns */
    te->direct_pieces = MC_MIN(MC_MIN(te->cfg.workers + 1, mc_cpus_available()),
                               MC_TE_DIRECT_PIECES_MAX);
    {
        uint64_t on = 1;
        if (mc_env_u64("MC_TE_SHM", 0, 1, &on) != 0) {
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        te->shm_enabled = (int)on;
        on              = 1;
        if (mc_env_u64("MC_TE_READV", 0, 1, &on) != 0) {
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        te->readv_enabled = (int)on;
        on                = 1;
        if (mc_env_u64("MC_TE_READV_STRIDED", 0, 1, &on) != 0) {
            st = MC_INVALID_PARAMS;
            goto fail;
        }
        te->readvs_enabled = (int)on;
    }
    {
        /* cluster authentication (docs/security.md): the data port and the
         * metadata writes need the secret */
        const char *path = (p->field_mask & MC_TE_PARAM_AUTH_TOKEN_FILE) ? p->auth_token_file
                                                                         : NULL;
        if (path == NULL)
            path = getenv("MC_AUTH_TOKEN_FILE");
        if ((path != NULL) && (*path != '\0')) {
            st = mc_auth_load(path, &te->auth);
            if (st != MC_OK)
                goto fail;
            if (mc_auth_signing_key(te->auth, NULL) == NULL) {
                mc_set_error_detail("auth token file %s has no cluster secret (only tenant "
                                    "secrets): the transfer engine needs one", path);
                st = MC_INVALID_PARAMS;
                goto fail;
            }
        }
    }
    st = mc_te_meta_configure(te, meta);
    if (st != MC_OK)
        goto fail;
    if (mc_parse_host_port(hostname, te->host, sizeof(te->host), &want_port) != 0) {
        st = MC_INVALID_PARAMS;
        mc_set_error_detail("local hostname \"%s\" is not host or host:port", hostname);
        goto fail;
    }
    st = bind_addr_resolve(te->host, te->bind_addr, sizeof(te->bind_addr));
    if (st != MC_OK)
        goto fail;
    st = mc_te_tp_install(te, te->bind_addr, want_port, &te->port);
    if (st != MC_OK)
        goto fail;
    if (te->shm_enabled) {
        st = mc_te_shm_server_start(te, &te->shm);
        if (st != MC_OK)
            goto fail;
    }

    nlen           = strlen(te->host) + 10;
    te->local_name = malloc(nlen);
    self           = segment_new("");
    if ((te->local_name == NULL) || (self == NULL)) {
        segment_free(te, self);
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("out of memory");
        goto fail;
    }
    if (strchr(te->host, ':') != NULL)
        snprintf(te->local_name, nlen, "[%s]:%u", te->host, (unsigned)te->port);
    else
        snprintf(te->local_name, nlen, "%s:%u", te->host, (unsigned)te->port);
    free(self->name);
    self->name    = strdup(te->local_name);
    self->is_self = 1;
    if ((self->name == NULL) || (segment_assign_id(te, self) != 0)) {
        segment_free(te, self);
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("out of memory");
        goto fail;
    }
    (void)mc_hmap_insert(&te->seg_by_name, &self->hnode, seg_hash(self->name));

    st = mc_te_meta_publish(te, 1);
    if (st != MC_OK)
        goto fail;
    mc_info("transfer engine %s serving on %s:%u (%s, metadata %s)", te->local_name,
            te->bind_addr, (unsigned)te->port, ops->name,
            (te->meta_kind != MC_TE_META_P2P) ? te->meta_url : "P2PHANDSHAKE");
    *te_p = te;
    return MC_OK;

fail:
    {
        /* keep the detail of the first failure across the teardown */
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        engine_free(te);
        mc_set_error_detail("%s", detail);
    }
    return st;
}
