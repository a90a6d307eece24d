/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A store handle in dummy mode (mc_store_setup_dummy): it owns no segment
 * and no engine; it creates two memfds (the zero-copy pool and the staging
 * buffer), hands them to the real client over a unix socket (SCM_RIGHTS)
 * and forwards each store call there as one frame of the dummy protocol
 * (dummy_wire.h, docs/protocol.md §8).  Bytes move through the shared
 * memory only.  Besides its two memfds a dummy shares the host-memory
 * blocks it registers (mc_host_mem_alloc: a worker's KV pool), each sent
 * once as REGISTER with its memfd and named by the region id the real
 * client answers; the real client then reads and writes those pages in
 * place, so a page moves with no staging copy.
 *
 * setup_dummy puts the dummy backend's ops table on the handle
 * (dummy_ops.c, ../ops.h), and each of its ops forwards through one
 * mc_dummy_ function here: they return 0 (and touch nothing) for a handle
 * that is not a dummy (any more).  They hold `life` for reading like any
 * call; setup_dummy and close hold it for writing.  Calls that do not
 * forward find ready == 0 and report MC_NOT_SUPPORTED (mc_store_enter).
 *
 * One connection per dummy, one request at a time (d->lock): the staging
 * allocator lives in the real client, so concurrent staged writes of many
 * threads still get disjoint blocks.  A connection that fails (the real
 * client died, or did not answer in time) marks the dummy dead: every
 * later call fails at once with MC_RPC_FAIL.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "store/dummy/dummy.h"
#include "store/dummy/wire.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"

#define DUMMY_SETUP_TIMEOUT_MS 5000
#define DUMMY_CALL_TIMEOUT_MS 60000
/* How long either end polls for the other's next frame before it sleeps
 * (mc_spin_readable); MC_DUMMY_SPIN_US overrides, 0 turns it off. */
#define DUMMY_SPIN_US 200

typedef struct pool_block {
    uint64_t off;
    uint64_t len;  /* as asked for: register_buffer wants exactly it */
    uint32_t handle;
} pool_block_t;

/* A host-memory block (mc_host_mem_alloc) registered with the real client:
 * region @p id of the dummy's memory from then on. */
typedef struct dummy_buf {
    uint8_t *base;
    uint64_t size;
    uint64_t serial; /* mc_host_mem_info_t.serial: which allocation it was */
    uint16_t id;
} dummy_buf_t;

struct mc_dummy {
    pthread_mutex_t lock;  /* one request at a time on fd */
    int fd;
    int dead;
    char path[108];
    uint8_t *base[MC_DUMMY_NREGIONS];
    uint64_t size[MC_DUMMY_NREGIONS];
    int mfd[MC_DUMMY_NREGIONS];
    pthread_mutex_t pool_lock;  /* pool_blocks */
    pool_block_t *pool_blocks;
    size_t npool, cappool;
    /* registered host memory: bufs[0..nbufs) under buf_lock (read by every
     * call that places a buffer, written by (un)register); reg_mu makes a
     * whole register or unregister, round trip included, one at a time */
    pthread_rwlock_t buf_lock;
    pthread_mutex_t reg_mu;
    dummy_buf_t bufs[MC_DUMMY_MAX_BUFS];
    unsigned nbufs;
    struct mc_dummy *live_next;  /* live_dummies (mc_dummy_host_mem_freed) */
    uint8_t *scratch;  /* request/response buffer, under lock */
    size_t scratch_cap;
    /* liveness: PING when no call is in flight (the real client drops a
     * dummy silent past its TTL); a library thread, never the GIL */
    mc_store_worker_t ping;
};

const char *mc_dummy_op_name(unsigned op)
{
    switch (op) {
#define MC_DUMMY_X_(name, num, req, resp) case num: return #name;
        MC_DUMMY_MESSAGES(MC_DUMMY_X_)
#undef MC_DUMMY_X_
    default:
        return "?";
    }
}

int mc_dummy_ipc_addr(const char *path, struct sockaddr_un *sa, socklen_t *len_p)
{
    size_t n = strlen(path);
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if ((n == 0) || (n >= sizeof(sa->sun_path)))
        return -1;
    memcpy(sa->sun_path, path, n);
    if (path[0] == '@') {
        sa->sun_path[0] = '\0'; /* Linux abstract namespace */
        *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    } else {
        *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
    }
    return 0;
}

/* ---- socket helpers ---------------------------------------------------------- */

int mc_dummy_send_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = send(fd, p, len, MSG_NOSIGNAL);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

int mc_dummy_send2(int fd, const void *a, size_t alen, const void *b, size_t blen)
{
    struct iovec iov[2] = {{(void *)a, alen}, {(void *)b, blen}};
    struct msghdr msg;
    ssize_t r;

    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = iov;
    msg.msg_iovlen = (blen > 0) ? 2 : 1;
    do {
        r = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while ((r < 0) && (errno == EINTR));
    if (r < 0)
        return -1;
    /* the rest, if the socket took only part */
    if ((size_t)r < alen)
        return ((mc_dummy_send_all(fd, (const uint8_t *)a + r, alen - (size_t)r) == 0) &&
                (mc_dummy_send_all(fd, b, blen) == 0)) ? 0 : -1;
    r -= (ssize_t)alen;
    return mc_dummy_send_all(fd, (const uint8_t *)b + r, blen - (size_t)r);
}

int mc_dummy_recv_all(int fd, void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = recv(fd, p, len, 0);
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

/*
 * The busy-poll window of both ends of a dummy connection: they answer
 * within tens of microseconds, and a thread that sleeps in recv() pays a
 * scheduler wake-up (measured 15-40 us each way on a loaded 2-vCPU host)
 * that a short busy poll (mc_spin_readable) avoids.
 */
unsigned mc_dummy_spin_us(void)
{
    static unsigned cached = UINT32_MAX;
    unsigned v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
    if (v == UINT32_MAX) {
        v = mc_store_env_interval_ms("MC_DUMMY_SPIN_US", DUMMY_SPIN_US, 0, 100000);
        __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
    }
    return v;
}

static void set_timeout(int fd, unsigned ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* How long a call waits for the real client: MC_DUMMY_TIMEOUT_MS (1 ms
 * to 1 h), else DUMMY_CALL_TIMEOUT_MS; MC_INVALID_PARAMS, naming it, for
 * any other value. */
static mc_status_t call_timeout_ms(unsigned *ms_p)
{
    uint64_t v = DUMMY_CALL_TIMEOUT_MS;
    if (mc_env_u64("MC_DUMMY_TIMEOUT_MS", 1, 3600000, &v) != 0)
        return MC_INVALID_PARAMS;
    *ms_p = (unsigned)v;
    return MC_OK;
}

static int scratch_reserve(mc_dummy_t *d, size_t n)
{
    if (n <= d->scratch_cap)
        return 0;
    uint8_t *p = realloc(d->scratch, n);
    if (p == NULL)
        return -1;
    d->scratch = p;
    d->scratch_cap = n;
    return 0;
}

/* A PUT's config on the wire, with its strings: the preferred segment
 * (w.plen bytes) and, per item of the frame, the group id its key carries
 * (igroups NULL, or NULL entries: none). */
typedef struct put_cfg {
    mc_dummy_cfg_t w;
    const char *pref;
    const char **igroups;
} put_cfg_t;

static uint32_t item_glen(const put_cfg_t *cfg, const mc_dummy_item_t *items, size_t i)
{
    if ((cfg == NULL) || (cfg->igroups == NULL) || (cfg->igroups[i] == NULL) ||
        (items[i].klen == 0))
        return 0;
    return (uint32_t)strlen(cfg->igroups[i]);
}

/*
 * One round trip: @p n items with keys (keys[i] NULL or "" for none) and,
 * when @p cfg is not NULL, a config; results[0..n) filled from the response.
 * Called with d->lock held.  MC_RPC_FAIL (and the dummy is dead) when the
 * connection fails.
 */
/* One sendmsg of @p iov with fds[0..nfds) (nfds <= MC_DUMMY_NREGIONS)
 * attached by SCM_RIGHTS: the bytes sent, or -1. */
static ssize_t sendmsg_fds(int fd, struct iovec *iov, size_t niov, const int *fds, size_t nfds)
{
    union {
        struct cmsghdr align;
        char buf[CMSG_SPACE(sizeof(int) * MC_DUMMY_NREGIONS)];
    } cbuf;
    struct msghdr msg;
    struct cmsghdr *cm;
    ssize_t r;

    memset(&msg, 0, sizeof(msg));
    memset(&cbuf, 0, sizeof(cbuf));
    msg.msg_iov = iov;
    msg.msg_iovlen = niov;
    msg.msg_control = cbuf.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * nfds);
    do {
        r = sendmsg(fd, &msg, MSG_NOSIGNAL);
    } while ((r < 0) && (errno == EINTR));
    return r;
}

/* The frame in @p buf, with @p sendfd attached (SCM_RIGHTS) when >= 0. */
static int send_frame(int fd, const uint8_t *buf, size_t len, int sendfd)
{
    struct iovec iov = {(void *)buf, len};
    ssize_t r;

    if (sendfd < 0)
        return mc_dummy_send_all(fd, buf, len);
    r = sendmsg_fds(fd, &iov, 1, &sendfd, 1);
    if (r < 0)
        return -1;
    return mc_dummy_send_all(fd, buf + r, len - (size_t)r); /* the rest, if any */
}

static mc_status_t do_call_fd(mc_dummy_t *d, unsigned op, unsigned hflags,
                              const mc_dummy_item_t *items, const char *const *keys, size_t n,
                              const put_cfg_t *cfg, mc_dummy_result_t *results, size_t nres,
                              int sendfd);

static mc_status_t do_call(mc_dummy_t *d, unsigned op, unsigned hflags,
                           const mc_dummy_item_t *items, const char *const *keys, size_t n,
                           const put_cfg_t *cfg, mc_dummy_result_t *results, size_t nres)
{
    return do_call_fd(d, op, hflags, items, keys, n, cfg, results, nres, -1);
}

/* do_call, with @p sendfd passed along (MOUNT). */
static mc_status_t do_call_fd(mc_dummy_t *d, unsigned op, unsigned hflags,
                              const mc_dummy_item_t *items, const char *const *keys, size_t n,
                              const put_cfg_t *cfg, mc_dummy_result_t *results, size_t nres,
                              int sendfd)
{
    size_t body = 0, off = sizeof(mc_dummy_hdr_t);
    mc_dummy_hdr_t h;

    if (d->dead) {
        mc_set_error_detail("the real client at %s is gone (an earlier call failed)", d->path);
        return MC_RPC_FAIL;
    }
    for (size_t i = 0; i < n; i++)
        body += sizeof(mc_dummy_item_t) + items[i].klen + item_glen(cfg, items, i);
    if (cfg != NULL)
        body += sizeof(cfg->w) + cfg->w.plen;
    if ((body > MC_DUMMY_MAX_FRAME) || (n > MC_DUMMY_MAX_ITEMS)) {
        mc_set_error_detail("request too large for the dummy protocol (%zu items, %zu bytes)",
                            n, body);
        return MC_INVALID_PARAMS;
    }
    if (scratch_reserve(d, MC_MAX(off + body, sizeof(h) + nres * sizeof(*results))) != 0) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    memset(&h, 0, sizeof(h));
    h.magic = MC_DUMMY_MAGIC;
    h.len = (uint32_t)body;
    h.op = (uint16_t)op;
    h.flags = (uint16_t)hflags;
    h.count = (uint32_t)n;
    memcpy(d->scratch, &h, sizeof(h));
    for (size_t i = 0; i < n; i++) {
        mc_dummy_item_t it = items[i];
        it.glen = item_glen(cfg, items, i);
        memcpy(d->scratch + off, &it, sizeof(it));
        off += sizeof(it);
        if (it.klen > 0) {
            memcpy(d->scratch + off, keys[i], it.klen);
            off += it.klen;
        }
        if (it.glen > 0) {
            memcpy(d->scratch + off, cfg->igroups[i], it.glen);
            off += it.glen;
        }
    }
    if (cfg != NULL) {
        memcpy(d->scratch + off, &cfg->w, sizeof(cfg->w));
        off += sizeof(cfg->w);
        if (cfg->w.plen > 0) {
            memcpy(d->scratch + off, cfg->pref, cfg->w.plen);
            off += cfg->w.plen;
        }
    }
    if (send_frame(d->fd, d->scratch, off, sendfd) != 0)
        goto dead;
    if (hflags & MC_DUMMY_F_NOREPLY)
        return MC_OK;
    /* the answer to a well-formed request is always the header and nres
     * results: read both at once */
    (void)mc_spin_readable(d->fd, mc_dummy_spin_us());
    if (mc_dummy_recv_all(d->fd, d->scratch, sizeof(h) + nres * sizeof(*results)) != 0)
        goto dead;
    memcpy(&h, d->scratch, sizeof(h));
    if ((h.magic != MC_DUMMY_MAGIC) || (h.op != op) || (h.count != nres) ||
        (h.len != (uint64_t)nres * sizeof(mc_dummy_result_t))) {
        errno = EPROTO;
        goto dead;
    }
    if (nres > 0)
        memcpy(results, d->scratch + sizeof(h), h.len);
    if (h.status != MC_OK)
        mc_set_error_detail("the real client answered %s with %d", mc_dummy_op_name(op),
                            h.status);
    return (mc_status_t)h.status;
dead:
    mc_set_error_detail("the real client at %s did not answer %s: %s", d->path,
                        mc_dummy_op_name(op),
                        (errno == EAGAIN) ? "timed out" : strerror(errno));
    mc_warn("dummy: %s", mc_last_error_detail());
    d->dead = 1;
    shutdown(d->fd, SHUT_RDWR);
    return MC_RPC_FAIL;
}

static mc_status_t call(mc_dummy_t *d, unsigned op, unsigned hflags,
                        const mc_dummy_item_t *items, const char *const *keys, size_t n,
                        const put_cfg_t *cfg, mc_dummy_result_t *results, size_t nres)
{
    mc_status_t st;
    pthread_mutex_lock(&d->lock);
    st = do_call(d, op, hflags, items, keys, n, cfg, results, nres);
    pthread_mutex_unlock(&d->lock);
    return st;
}

/* 1 when [p, p+len) lies in [base, base+size). */
static int inside(uintptr_t base, uint64_t size, const void *p, size_t len)
{
    uintptr_t a = (uintptr_t)p;
    return (base != 0) && (a >= base) && (a - base <= size) && (len <= size - (a - base));
}

/* Region and offset of [p, p+len) when it lies in the shared memory: the
 * pool, the staging buffer, or one registered host-memory block. */
static int locate(mc_dummy_t *d, const void *p, size_t len, uint16_t *region_p,
                  uint64_t *off_p)
{
    int found = 0;
    for (unsigned r = 0; r < MC_DUMMY_NREGIONS; r++) {
        if (inside((uintptr_t)d->base[r], d->size[r], p, len)) {
            *region_p = (uint16_t)r;
            *off_p = (uintptr_t)p - (uintptr_t)d->base[r];
            return 1;
        }
    }
    if (__atomic_load_n(&d->nbufs, __ATOMIC_ACQUIRE) == 0)
        return 0; /* the common case of a pool-only dummy takes no lock */
    pthread_rwlock_rdlock(&d->buf_lock);
    for (unsigned i = 0; !found && (i < d->nbufs); i++) {
        const dummy_buf_t *b = &d->bufs[i];
        if (inside((uintptr_t)b->base, b->size, p, len)) {
            *region_p = b->id;
            *off_p = (uintptr_t)p - (uintptr_t)b->base;
            found = 1;
        }
    }
    pthread_rwlock_unlock(&d->buf_lock);
    return found;
}

static void cfg_to_wire(const mc_replicate_config_t *cfg, put_cfg_t *pc)
{
    mc_dummy_cfg_t *w = &pc->w;
    memset(pc, 0, sizeof(*pc));
    if (cfg == NULL)
        return;
    if ((cfg->preferred_segment != NULL) && (cfg->preferred_segment[0] != '\0')) {
        pc->pref = cfg->preferred_segment;
        w->plen = (uint32_t)strlen(cfg->preferred_segment);
    }
    w->present = 1;
    w->field_mask = cfg->field_mask & ~(uint64_t)MC_RC_FIELD_PREFERRED_NOF;
    w->soft_pin_ttl_ms = cfg->soft_pin_ttl_ms;
    w->replica_num = cfg->replica_num;
    w->nof_replica_num = cfg->nof_replica_num;
    w->dfs_replica_num = cfg->dfs_replica_num;
    w->soft_pin_action = (int32_t)cfg->soft_pin_action;
    w->with_hard_pin = cfg->with_hard_pin;
    w->prefer_alloc_in_same_node = cfg->prefer_alloc_in_same_node;
}

/* What the real client checks of @p cfg for @p nkeys keys, before any
 * frame; and its strings must fit the frame's limit. */
static mc_status_t cfg_check(const mc_replicate_config_t *cfg, size_t nkeys)
{
    mc_status_t st = mc_store_config_check(cfg, nkeys, MC_WF_SAME_NODE);
    if ((st != MC_OK) || (cfg == NULL))
        return st;
    if ((cfg->field_mask & MC_RC_FIELD_PREFERRED_NOF) &&
        (cfg->preferred_nof_segments_count > 0)) {
        mc_set_error_detail("preferred_nof_segments is not carried by the dummy-client "
                            "protocol; ask the real client directly");
        return MC_NOT_SUPPORTED;
    }
    if ((cfg->preferred_segment != NULL) &&
        (strlen(cfg->preferred_segment) > MC_DUMMY_MAX_KEY)) {
        mc_set_error_detail("preferred_segment through a dummy client is at most %u bytes",
                            MC_DUMMY_MAX_KEY);
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; (cfg->field_mask & MC_RC_FIELD_GROUP_IDS) && (i < nkeys); i++)
        if (strlen(cfg->group_ids[i]) > MC_DUMMY_MAX_KEY) {
            mc_set_error_detail("group_ids[%zu] through a dummy client is at most %u bytes", i,
                                MC_DUMMY_MAX_KEY);
            return MC_INVALID_PARAMS;
        }
    return MC_OK;
}

/* The group id of key @p k of the call, or NULL. */
static const char *cfg_group(const mc_replicate_config_t *cfg, size_t k)
{
    if ((cfg == NULL) || !(cfg->field_mask & MC_RC_FIELD_GROUP_IDS))
        return NULL;
    return cfg->group_ids[k];
}

/* ---- entering ---------------------------------------------------------------- */

static mc_dummy_t *enter(mc_store_h s)
{
    if (s == NULL)
        return NULL;
    pthread_rwlock_rdlock(&s->life);
    if (s->dummy == NULL) {
        pthread_rwlock_unlock(&s->life);
        return NULL;
    }
    return s->dummy;
}

static void leave(mc_store_h s)
{
    pthread_rwlock_unlock(&s->life);
}

static uint32_t key_len(const char *key)
{
    size_t n;
    if (mc_store_check_key(key, &n) != MC_OK)
        return UINT32_MAX;
    return (uint32_t)n;
}

/* ---- lifecycle -------------------------------------------------------------- */

static mc_status_t map_region(mc_dummy_t *d, unsigned r, uint64_t size)
{
    static const char *const names[] = {"mooncake_dummy_pool", "mooncake_dummy_lbuf"};
    d->size[r] = size;
    d->mfd[r] = memfd_create(names[r], MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (d->mfd[r] < 0) {
        mc_set_error_detail("memfd_create: %s", strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    /* sealed at its size: the real client maps it and must be able to rely
     * on the pages never vanishing under it (it refuses an unsealed one) */
    if ((ftruncate(d->mfd[r], (off_t)size) != 0) ||
        (fcntl(d->mfd[r], F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)) {
        mc_set_error_detail("sizing %llu bytes of shared memory: %s", (unsigned long long)size,
                            strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    if (size == 0)
        return MC_OK;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, d->mfd[r], 0);
    if (p == MAP_FAILED) {
        mc_set_error_detail("mmap of %llu bytes of shared memory: %s",
                            (unsigned long long)size, strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    d->base[r] = p;
    mc_store_populate(p, size);
    return MC_OK;
}

/* The set-up dummies of this process, for mc_dummy_host_mem_freed().
 * Lock order: live_mu, then a dummy's reg_mu, then its lock. */
static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;
static mc_dummy_t *live_dummies;

static void live_add(mc_dummy_t *d)
{
    pthread_mutex_lock(&live_mu);
    d->live_next = live_dummies;
    live_dummies = d;
    pthread_mutex_unlock(&live_mu);
}

static void live_remove(mc_dummy_t *d)
{
    pthread_mutex_lock(&live_mu);
    for (mc_dummy_t **pp = &live_dummies; *pp != NULL; pp = &(*pp)->live_next)
        if (*pp == d) {
            *pp = d->live_next;
            break;
        }
    pthread_mutex_unlock(&live_mu);
}

static void dummy_free(mc_dummy_t *d)
{
    if (d == NULL)
        return;
    /* the real client drops every registered block with the connection */
    live_remove(d);
    if (d->fd >= 0)
        shutdown(d->fd, SHUT_RDWR); /* a PING in flight returns now */
    mc_store_worker_stop(&d->ping);
    if (d->fd >= 0)
        close(d->fd);
    for (unsigned r = 0; r < MC_DUMMY_NREGIONS; r++) {
        if (d->base[r] != NULL)
            munmap(d->base[r], d->size[r]);
        if (d->mfd[r] >= 0)
            close(d->mfd[r]);
    }
    pthread_mutex_destroy(&d->lock);
    pthread_mutex_destroy(&d->pool_lock);
    pthread_rwlock_destroy(&d->buf_lock);
    pthread_mutex_destroy(&d->reg_mu);
    free(d->pool_blocks);
    free(d->scratch);
    free(d);
}

/* "host:port" (or "unix:PATH") -> the real client's socket path. */
static mc_status_t ipc_path_of(const char *addr, char *path, size_t cap)
{
    const char *colon;
    char *end;
    long port;

    if (strncmp(addr, "unix:", 5) == 0) {
        if ((strlen(addr + 5) == 0) || (strlen(addr + 5) >= cap))
            goto bad;
        snprintf(path, cap, "%s", addr + 5);
        return MC_OK;
    }
    colon = strrchr(addr, ':');
    if (colon == NULL)
        goto bad;
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if ((errno != 0) || (end == colon + 1) || (*end != 0) || (port <= 0) || (port > 65535))
        goto bad;
    snprintf(path, cap, "@mooncake_client_%ld.sock", port);
    return MC_OK;
bad:
    mc_set_error_detail("server_address must be \"host:port\" of a mooncake_client (got \"%s\")",
                        addr);
    return MC_INVALID_PARAMS;
}

static mc_status_t do_setup_dummy(mc_dummy_t *d, uint64_t pool_size, uint64_t lbuf_size,
                                  const char *addr)
{
    struct sockaddr_un sa;
    socklen_t salen;
    mc_status_t st;
    mc_dummy_hdr_t h;
    mc_dummy_hello_t hello;
    struct iovec iov[2];
    mc_dummy_result_t res;
    unsigned call_ms;

    st = call_timeout_ms(&call_ms);
    if (st == MC_OK)
        st = mc_store_populate_config(NULL); /* refused before anything maps */
    if (st != MC_OK)
        return st;
    st = ipc_path_of(addr, d->path, sizeof(d->path));
    if (st != MC_OK)
        return st;
    if ((st = map_region(d, MC_DUMMY_REGION_POOL, pool_size)) != MC_OK ||
        (st = map_region(d, MC_DUMMY_REGION_LBUF, lbuf_size)) != MC_OK)
        return st;
    if (mc_dummy_ipc_addr(d->path, &sa, &salen) != 0) {
        mc_set_error_detail("bad socket path \"%s\"", d->path);
        return MC_INVALID_PARAMS;
    }
    d->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (d->fd < 0) {
        mc_set_error_detail("socket: %s", strerror(errno));
        return MC_INTERNAL_ERROR;
    }
    set_timeout(d->fd, DUMMY_SETUP_TIMEOUT_MS);
    if (connect(d->fd, (struct sockaddr *)&sa, salen) != 0) {
        mc_set_error_detail("no mooncake_client at %s (socket %s): %s", addr, d->path,
                            strerror(errno));
        return MC_RPC_FAIL;
    }
    memset(&h, 0, sizeof(h));
    h.magic = MC_DUMMY_MAGIC;
    h.op = MC_DUMMY_OP_HELLO;
    h.len = sizeof(hello);
    memset(&hello, 0, sizeof(hello));
    hello.version = MC_DUMMY_VERSION;
    hello.nfds = MC_DUMMY_NREGIONS;
    hello.size[0] = pool_size;
    hello.size[1] = lbuf_size;
    iov[0] = (struct iovec){&h, sizeof(h)};
    iov[1] = (struct iovec){&hello, sizeof(hello)};
    if (sendmsg_fds(d->fd, iov, 2, d->mfd, MC_DUMMY_NREGIONS) !=
        (ssize_t)(sizeof(h) + sizeof(hello))) {
        mc_set_error_detail("sending the shared memory to %s: %s", d->path, strerror(errno));
        return MC_RPC_FAIL;
    }
    if ((mc_dummy_recv_all(d->fd, &h, sizeof(h)) != 0) || (h.magic != MC_DUMMY_MAGIC) ||
        (h.op != MC_DUMMY_OP_HELLO) || (h.count != 1) || (h.len != sizeof(res)) ||
        (mc_dummy_recv_all(d->fd, &res, sizeof(res)) != 0)) {
        mc_set_error_detail("the mooncake_client at %s did not accept this dummy: %s", d->path,
                            (errno == EAGAIN) ? "timed out" : strerror(errno));
        return MC_RPC_FAIL;
    }
    if (h.status != MC_OK) {
        mc_set_error_detail("the mooncake_client at %s refused this dummy (%d)", d->path,
                            h.status);
        return (mc_status_t)h.status;
    }
    set_timeout(d->fd, call_ms);
    /* the real client holds its own references now */
    for (unsigned r = 0; r < MC_DUMMY_NREGIONS; r++) {
        close(d->mfd[r]);
        d->mfd[r] = -1;
    }
    return MC_OK;
}

/* The PING thread: a call in flight is proof of life enough, so a round
 * that finds the connection busy skips. */
static void *ping_main(void *arg)
{
    mc_dummy_t *d = arg;
    while (!mc_store_worker_wait_ms(&d->ping, d->ping.interval_ms)) {
        if (pthread_mutex_trylock(&d->lock) != 0)
            continue;
        if (!d->dead)
            (void)do_call(d, MC_DUMMY_OP_PING, 0, NULL, NULL, 0, NULL, NULL, 0);
        pthread_mutex_unlock(&d->lock);
    }
    return NULL;
}

MC_API mc_status_t mc_store_setup_dummy(mc_store_h s, uint64_t mem_pool_size,
                                        uint64_t local_buffer_size, const char *server_address)
{
    mc_dummy_t *d;
    mc_status_t st;

    if ((s == NULL) || (server_address == NULL)) {
        mc_set_error_detail("store handle and server_address are required");
        return MC_INVALID_PARAMS;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL)
        return MC_INTERNAL_ERROR;
    d->fd = -1;
    d->mfd[0] = d->mfd[1] = -1;
    pthread_mutex_init(&d->lock, NULL);
    pthread_mutex_init(&d->pool_lock, NULL);
    pthread_rwlock_init(&d->buf_lock, NULL);
    pthread_mutex_init(&d->reg_mu, NULL);
    pthread_rwlock_wrlock(&s->life);
    if (s->ready || (s->dummy != NULL)) {
        pthread_rwlock_unlock(&s->life);
        dummy_free(d);
        mc_set_error_detail("store is already set up; close it before setting it up again");
        return MC_INVALID_PARAMS;
    }
    st = do_setup_dummy(d, mem_pool_size, local_buffer_size, server_address);
    if (st == MC_OK)
        st = mc_store_worker_start(&d->ping, "dummy ping",
                                   mc_store_env_interval_ms("MC_DUMMY_PING_MS", 1000, 10, 600000),
                                   ping_main, d);
    if (st == MC_OK) {
        live_add(d);
        s->dummy = d;
        __atomic_store_n(&s->ops, &mc_store_dummy_ops, __ATOMIC_RELEASE);
        /* a dummy has no segment of its own: its name is its real client's */
        snprintf(s->hostname, sizeof(s->hostname), "%s", server_address);
    }
    pthread_rwlock_unlock(&s->life);
    if (st != MC_OK) {
        char detail[512];
        snprintf(detail, sizeof(detail), "%s", mc_last_error_detail());
        dummy_free(d);
        mc_set_error_detail("%s", detail);
    }
    return st;
}

void mc_dummy_close(mc_store_h s)
{
    /* `life` held for writing: no call in flight */
    dummy_free(s->dummy);
    s->dummy = NULL;
    __atomic_store_n(&s->ops, &mc_store_embedded_ops, __ATOMIC_RELEASE);
    s->hostname[0] = '\0';
}

MC_API int mc_store_is_dummy(mc_store_h s)
{
    int r;
    if (enter(s) == NULL)
        return 0;
    r = 1;
    leave(s);
    return r;
}

MC_API mc_status_t mc_store_dummy_stats(mc_store_h s, uint64_t *sessions_p, uint64_t *mapped_p,
                                        uint64_t *allocated_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_result_t res[3];
    mc_status_t st;
    if (d == NULL) {
        mc_set_error_detail("not a dummy client");
        return MC_INVALID_PARAMS;
    }
    st = call(d, MC_DUMMY_OP_STATS, 0, NULL, NULL, 0, NULL, res, 3);
    leave(s);
    if (st != MC_OK)
        return st;
    if (sessions_p != NULL)
        *sessions_p = (uint64_t)res[0].result;
    if (mapped_p != NULL)
        *mapped_p = (uint64_t)res[1].result;
    if (allocated_p != NULL)
        *allocated_p = (uint64_t)res[2].result;
    return MC_OK;
}

/* ---- staging ---------------------------------------------------------------- */

static void staged_free(mc_dummy_t *d, uint32_t handle)
{
    mc_dummy_item_t it;
    memset(&it, 0, sizeof(it));
    it.region = MC_DUMMY_REGION_LBUF;
    it.handle = handle;
    (void)call(d, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, &it, NULL, 1, NULL, NULL, 0);
}

/* ---- writes ----------------------------------------------------------------- */

static mc_status_t dummy_write(mc_dummy_t *d, const char *key, const mc_iov_t *parts, size_t n,
                               const mc_replicate_config_t *cfg, int upsert, int zero_copy)
{
    mc_dummy_item_t *items = NULL, one;
    const char **keys = NULL;
    mc_dummy_result_t *res = NULL, r1;
    put_cfg_t wcfg;
    const char *group, *groups1[1];
    const char **igroups = NULL;
    uint32_t klen = key_len(key);
    uint64_t total = 0;
    int in_shm = 1;
    mc_status_t st;

    if (klen == UINT32_MAX)
        return MC_INVALID_PARAMS;
    if ((st = cfg_check(cfg, 1)) != MC_OK)
        return st;
    group = groups1[0] = cfg_group(cfg, 0);
    if ((parts == NULL) && (n > 0)) {
        mc_set_error_detail("parts is NULL");
        return MC_INVALID_PARAMS;
    }
    for (size_t i = 0; i < n; i++) {
        uint16_t reg;
        uint64_t off;
        if ((parts[i].base == NULL) && (parts[i].len > 0)) {
            mc_set_error_detail("a buffer is NULL");
            return MC_INVALID_PARAMS;
        }
        total += parts[i].len;
        if ((parts[i].len > 0) && !locate(d, parts[i].base, parts[i].len, &reg, &off))
            in_shm = 0;
    }
    if (total == 0)
        return MC_OK; /* as the real client: an empty value stores nothing */
    cfg_to_wire(cfg, &wcfg);
    if (in_shm) {
        items = calloc(n, sizeof(*items));
        keys = calloc(n, sizeof(*keys));
        res = calloc(n, sizeof(*res));
        igroups = calloc(n, sizeof(*igroups));
        if ((items == NULL) || (keys == NULL) || (res == NULL) || (igroups == NULL)) {
            st = MC_INTERNAL_ERROR;
            goto out;
        }
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (parts[i].len == 0)
                continue;
            locate(d, parts[i].base, parts[i].len, &items[m].region, &items[m].off);
            items[m].len = parts[i].len;
            items[m].flags = (uint8_t)((upsert ? MC_DUMMY_IF_UPSERT : 0) | MC_DUMMY_IF_MORE);
            if (m == 0) {
                items[m].klen = klen;
                keys[m] = key;
                igroups[m] = group;
            }
            m++;
        }
        items[m - 1].flags &= (uint8_t)~MC_DUMMY_IF_MORE;
        wcfg.igroups = igroups;
        st = call(d, MC_DUMMY_OP_PUT, 0, items, keys, m, &wcfg, res, m);
        if (st == MC_OK)
            st = (mc_status_t)res[0].result;
        goto out;
    }
    if (zero_copy) {
        mc_set_error_detail("a dummy client's zero-copy buffers must lie in its shared memory "
                            "(alloc_from_mem_pool or the local buffer)");
        return MC_INVALID_PARAMS;
    }
    /* stage: a block of the local buffer from the real client's allocator */
    memset(&one, 0, sizeof(one));
    one.region = MC_DUMMY_REGION_LBUF;
    one.len = total;
    st = call(d, MC_DUMMY_OP_ALLOC, 0, &one, NULL, 1, NULL, &r1, 1);
    if (st == MC_OK)
        st = (r1.result < 0) ? (mc_status_t)r1.result : MC_OK;
    if (st != MC_OK) {
        if (st == MC_NO_AVAILABLE_HANDLE)
            mc_set_error_detail("the dummy's local buffer (%llu bytes) has no room for %llu",
                                (unsigned long long)d->size[MC_DUMMY_REGION_LBUF],
                                (unsigned long long)total);
        return st;
    }
    {
        uint8_t *dst = d->base[MC_DUMMY_REGION_LBUF] + r1.off;
        for (size_t i = 0; i < n; i++) {
            if (parts[i].len > 0)
                memcpy(dst, parts[i].base, parts[i].len);
            dst += parts[i].len;
        }
    }
    one.off = r1.off;
    one.handle = r1.handle;
    one.klen = klen;
    one.flags = (uint8_t)((upsert ? MC_DUMMY_IF_UPSERT : 0) | MC_DUMMY_IF_RELEASE);
    wcfg.igroups = groups1;
    st = call(d, MC_DUMMY_OP_PUT, 0, &one, &key, 1, &wcfg, &r1, 1);
    if (st == MC_OK)
        st = (mc_status_t)r1.result;
out:
    free(igroups);
    free(items);
    free(keys);
    free(res);
    return st;
}

int mc_dummy_write(mc_store_h s, const char *key, const mc_iov_t *parts, size_t n,
                   const mc_replicate_config_t *cfg, int upsert, int zero_copy, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    if (d == NULL)
        return 0;
    *st_p = dummy_write(d, key, parts, n, cfg, upsert, zero_copy);
    leave(s);
    return 1;
}

#define WRITE_BATCH 1024u

/* How each key of a batch write travels. */
enum { BW_DONE = 0, BW_DIRECT, BW_STAGED, BW_SENDING };

/*
 * Keys[0..n) (n <= WRITE_BATCH) in rounds: the staged keys ask for staging
 * blocks in one ALLOC frame, get their bytes copied in, and go with the
 * direct keys (every part inside the shared memory) in one PUT frame whose
 * staged items carry RELEASE.  A key refused a block for room is asked for
 * again in the next round, after that PUT freed the blocks; a round that
 * writes nothing fails the rest with MC_NO_AVAILABLE_HANDLE.
 */
static void batch_write_some(mc_dummy_t *d, const char *const *keys, const mc_iov_t *const *bufs,
                             const size_t *counts, size_t n, const put_cfg_t *wcfg,
                             const char *const *gids,
                             int upsert, int zero_copy, mc_status_t *statuses)
{
    size_t nitems = 0;
    unsigned char *how = calloc(n + 1, 1);
    uint64_t *total = calloc(n + 1, sizeof(*total));
    mc_dummy_result_t *blk = calloc(n + 1, sizeof(*blk));
    size_t *first = calloc(n + 1, sizeof(*first));
    mc_dummy_item_t *items = NULL;
    const char **ikeys = NULL;
    const char **igroups = NULL;
    put_cfg_t pc = *wcfg;
    mc_dummy_result_t *res = NULL;
    const uint8_t base_flags = (uint8_t)(upsert ? MC_DUMMY_IF_UPSERT : 0);

    for (size_t i = 0; i < n; i++)
        nitems += (counts[i] > 0) ? counts[i] : 1;
    items = calloc(nitems + 1, sizeof(*items));
    ikeys = calloc(nitems + 1, sizeof(*ikeys));
    res = calloc(nitems + 1, sizeof(*res));
    igroups = calloc(nitems + 1, sizeof(*igroups));
    if ((how == NULL) || (total == NULL) || (blk == NULL) || (first == NULL) ||
        (items == NULL) || (ikeys == NULL) || (res == NULL) || (igroups == NULL)) {
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        int in_shm = 1;
        statuses[i] = MC_OK;
        if (key_len(keys[i]) == UINT32_MAX) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        for (size_t j = 0; j < counts[i]; j++) {
            const mc_iov_t *v = &bufs[i][j];
            uint16_t reg;
            uint64_t off;
            if ((v->base == NULL) && (v->len > 0)) {
                mc_set_error_detail("a buffer of key %s is NULL", keys[i]);
                statuses[i] = MC_INVALID_PARAMS;
                break;
            }
            total[i] += v->len;
            if ((v->len > 0) && !locate(d, v->base, v->len, &reg, &off))
                in_shm = 0;
        }
        if (statuses[i] != MC_OK)
            continue;
        if (total[i] == 0) {
            if (zero_copy) {
                mc_set_error_detail("no buffer for key %s", keys[i]);
                statuses[i] = MC_INVALID_PARAMS;
            }
            continue; /* staged: an empty value stores nothing, as put() */
        }
        if (in_shm) {
            how[i] = BW_DIRECT;
        } else if (zero_copy) {
            mc_set_error_detail("a dummy client's zero-copy buffers must lie in its shared memory");
            statuses[i] = MC_INVALID_PARAMS;
        } else if (total[i] > d->size[MC_DUMMY_REGION_LBUF]) {
            mc_set_error_detail("a value of %llu bytes (key %s) is larger than the dummy's local "
                                "buffer (%llu bytes); write it from the memory pool (put_from)",
                                (unsigned long long)total[i], keys[i],
                                (unsigned long long)d->size[MC_DUMMY_REGION_LBUF]);
            statuses[i] = MC_NO_AVAILABLE_HANDLE;
        } else {
            how[i] = BW_STAGED;
        }
    }
    for (;;) {
        size_t na = 0, m = 0, nput = 0;
        mc_status_t st;

        /* staging blocks for the staged keys still waiting */
        for (size_t i = 0; i < n; i++) {
            blk[i].result = -1;
            if (how[i] != BW_STAGED)
                continue;
            memset(&items[na], 0, sizeof(items[na]));
            items[na].region = MC_DUMMY_REGION_LBUF;
            items[na].len = total[i];
            first[na++] = i;
        }
        if (na > 0) {
            st = call(d, MC_DUMMY_OP_ALLOC, 0, items, NULL, na, NULL, res, na);
            for (size_t k = 0; k < na; k++) {
                size_t i = first[k];
                if (st != MC_OK) {
                    statuses[i] = st;
                    how[i] = BW_DONE;
                } else if (res[k].result == 0) {
                    blk[i] = res[k];
                } else if (res[k].result != MC_NO_AVAILABLE_HANDLE) {
                    statuses[i] = (mc_status_t)res[k].result;
                    how[i] = BW_DONE;
                }
            }
            if (st != MC_OK) {
                for (size_t i = 0; i < n; i++)
                    if (how[i] != BW_DONE) {
                        statuses[i] = st;
                        how[i] = BW_DONE;
                    }
                break;
            }
        }
        /* one PUT: the direct keys, and the staged keys that have a block */
        for (size_t i = 0; i < n; i++) {
            size_t start = m;
            if (how[i] == BW_DIRECT) {
                for (size_t j = 0; j < counts[i]; j++) {
                    const mc_iov_t *v = &bufs[i][j];
                    if (v->len == 0)
                        continue;
                    memset(&items[m], 0, sizeof(items[m]));
                    locate(d, v->base, v->len, &items[m].region, &items[m].off);
                    items[m].len = v->len;
                    items[m].flags = (uint8_t)(base_flags | MC_DUMMY_IF_MORE);
                    m++;
                }
            } else if ((how[i] == BW_STAGED) && (blk[i].result == 0)) {
                uint8_t *dst = d->base[MC_DUMMY_REGION_LBUF] + blk[i].off;
                if ((total[i] > d->size[MC_DUMMY_REGION_LBUF]) ||
                    (blk[i].off > d->size[MC_DUMMY_REGION_LBUF] - total[i])) {
                    statuses[i] = MC_INTERNAL_ERROR; /* a block outside the buffer */
                    how[i] = BW_DONE;
                    continue;
                }
                for (size_t j = 0; j < counts[i]; j++) {
                    if (bufs[i][j].len > 0)
                        memcpy(dst, bufs[i][j].base, bufs[i][j].len);
                    dst += bufs[i][j].len;
                }
                memset(&items[m], 0, sizeof(items[m]));
                items[m].region = MC_DUMMY_REGION_LBUF;
                items[m].off = blk[i].off;
                items[m].len = total[i];
                items[m].handle = blk[i].handle;
                items[m].flags = (uint8_t)(base_flags | MC_DUMMY_IF_RELEASE);
                m++;
            } else {
                continue;
            }
            items[start].klen = key_len(keys[i]);
            ikeys[start] = keys[i];
            igroups[start] = (gids != NULL) ? gids[i] : NULL;
            items[m - 1].flags &= (uint8_t)~MC_DUMMY_IF_MORE;
            first[nput++] = start;
            how[i] = BW_SENDING;
        }
        if (m == 0) {
            for (size_t i = 0; i < n; i++)
                if (how[i] == BW_STAGED) {
                    mc_set_error_detail("the dummy's local buffer (%llu bytes) has no room for "
                                        "key %s (%llu bytes)",
                                        (unsigned long long)d->size[MC_DUMMY_REGION_LBUF],
                                        keys[i], (unsigned long long)total[i]);
                    statuses[i] = MC_NO_AVAILABLE_HANDLE;
                }
            break;
        }
        pc.igroups = igroups;
        st = call(d, MC_DUMMY_OP_PUT, 0, items, ikeys, m, &pc, res, m);
        nput = 0;
        for (size_t i = 0; i < n; i++) {
            if (how[i] != BW_SENDING)
                continue;
            statuses[i] = (st == MC_OK) ? (mc_status_t)res[first[nput]].result : st;
            nput++;
            how[i] = BW_DONE;
        }
        if (st != MC_OK) {
            for (size_t i = 0; i < n; i++)
                if (how[i] != BW_DONE) {
                    statuses[i] = st;
                    how[i] = BW_DONE;
                }
            break;
        }
    }
out:
    free(how);
    free(total);
    free(blk);
    free(first);
    free(items);
    free(ikeys);
    free(res);
    free(igroups);
}

int mc_dummy_batch_write(mc_store_h s, const char *const *keys, const mc_iov_t *const *bufs,
                         const size_t *counts, size_t n, const mc_replicate_config_t *cfg,
                         int upsert, int zero_copy, mc_status_t *statuses, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    put_cfg_t wcfg;
    mc_status_t st;

    if (d == NULL)
        return 0;
    if (((keys == NULL) || (bufs == NULL) || (counts == NULL) || (statuses == NULL)) && (n > 0)) {
        mc_set_error_detail("keys, buffers, counts and statuses are required");
        st = MC_INVALID_PARAMS;
        goto out;
    }
    if ((st = cfg_check(cfg, n)) != MC_OK) {
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
        goto out;
    }
    cfg_to_wire(cfg, &wcfg);
    for (size_t at = 0; at < n; at += WRITE_BATCH) {
        size_t m = (n - at < WRITE_BATCH) ? n - at : WRITE_BATCH;
        const char *const *gids = (cfg_group(cfg, 0) != NULL) ? cfg->group_ids + at : NULL;
        batch_write_some(d, keys + at, bufs + at, counts + at, m, &wcfg, gids, upsert, zero_copy,
                         statuses + at);
    }
    st = mc_store_first_error(statuses, n);
out:
    leave(s);
    *st_p = st;
    return 1;
}

int mc_dummy_values_write(mc_store_h s, const char *const *keys, const mc_iov_t *values,
                          size_t n, const mc_replicate_config_t *cfg, int upsert,
                          mc_status_t *statuses, mc_status_t *st_p)
{
    const mc_iov_t **bufs;
    size_t *counts;

    if (!mc_store_is_dummy(s))
        return 0;
    if ((n > 0) && (values == NULL)) {
        mc_set_error_detail("values is NULL");
        *st_p = MC_INVALID_PARAMS;
        return 1;
    }
    bufs = calloc(n + 1, sizeof(*bufs));
    counts = calloc(n + 1, sizeof(*counts));
    if ((bufs == NULL) || (counts == NULL)) {
        free(bufs);
        free(counts);
        mc_set_error_detail("out of memory for a batch of %zu keys", n);
        *st_p = MC_INTERNAL_ERROR;
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        bufs[i] = &values[i];
        counts[i] = 1;
    }
    if (!mc_dummy_batch_write(s, keys, bufs, counts, n, cfg, upsert, 0, statuses, st_p)) {
        mc_set_error_detail("the store was closed");
        *st_p = MC_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    free(bufs);
    free(counts);
    return 1;
}

/* ---- reads ------------------------------------------------------------------ */

/* The object through a staging block: size to *size_p; copied to buf when
 * it fits in cap (else MC_BUFFER_OVERFLOW, buf untouched). */
static mc_status_t staged_get(mc_dummy_t *d, const char *key, void *buf, size_t cap,
                              uint64_t *size_p)
{
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    uint32_t klen = key_len(key);

    if (klen == UINT32_MAX)
        return MC_INVALID_PARAMS;
    memset(&it, 0, sizeof(it));
    it.klen = klen;
    st = call(d, MC_DUMMY_OP_GET_STAGED, 0, &it, &key, 1, NULL, &r, 1);
    if (st != MC_OK)
        return st;
    if (r.result < 0)
        return (mc_status_t)r.result;
    *size_p = (uint64_t)r.result;
    if (r.result == 0)
        return MC_OK;
    if ((uint64_t)r.result > cap) {
        st = MC_BUFFER_OVERFLOW;
        mc_set_error_detail("the object has %lld bytes, the buffer %zu", (long long)r.result, cap);
    } else {
        memcpy(buf, d->base[MC_DUMMY_REGION_LBUF] + r.off, (size_t)r.result);
    }
    staged_free(d, r.handle);
    return st;
}

int mc_dummy_get(mc_store_h s, const char *key, void *buf, size_t cap, uint64_t *size_p,
                 mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    uint64_t size = 0;
    if (d == NULL)
        return 0;
    *st_p = staged_get(d, key, buf, cap, &size);
    if (((*st_p == MC_OK) || (*st_p == MC_BUFFER_OVERFLOW)) && (size_p != NULL))
        *size_p = size;
    leave(s);
    return 1;
}

int mc_dummy_get_into(mc_store_h s, const char *key, void *buf, size_t cap, int64_t *result_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    uint32_t klen;

    if (d == NULL)
        return 0;
    klen = key_len(key);
    if (klen == UINT32_MAX) {
        *result_p = MC_INVALID_PARAMS;
        goto out;
    }
    if (buf == NULL) {
        mc_set_error_detail("buffer is NULL");
        *result_p = MC_INVALID_PARAMS;
        goto out;
    }
    memset(&it, 0, sizeof(it));
    if (locate(d, buf, cap, &it.region, &it.off)) {
        it.klen = klen;
        it.len = cap;
        st = call(d, MC_DUMMY_OP_GET, 0, &it, &key, 1, NULL, &r, 1);
        *result_p = (st != MC_OK) ? st : r.result;
    } else {
        uint64_t size = 0;
        st = staged_get(d, key, buf, cap, &size);
        if (st == MC_BUFFER_OVERFLOW)
            st = MC_INVALID_PARAMS; /* get_into's code for a small buffer */
        *result_p = (st != MC_OK) ? st : (int64_t)size;
    }
out:
    leave(s);
    return 1;
}

int mc_dummy_batch_get_into(mc_store_h s, const char *const *keys, const mc_iov_t *const *bufs,
                            const size_t *counts, size_t n, int64_t *results, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_item_t *items = NULL;
    const char **ikeys = NULL;
    mc_dummy_result_t *res = NULL;
    size_t *first = NULL, nitems = 0, m = 0;
    mc_status_t st = MC_OK;

    if (d == NULL)
        return 0;
    if (((keys == NULL) || (bufs == NULL) || (counts == NULL) || (results == NULL)) && (n > 0)) {
        mc_set_error_detail("keys, buffers, counts and results are required");
        st = MC_INVALID_PARAMS;
        goto out;
    }
    for (size_t i = 0; i < n; i++)
        nitems += (counts[i] > 0) ? counts[i] : 1;
    items = calloc(nitems + 1, sizeof(*items));
    ikeys = calloc(nitems + 1, sizeof(*ikeys));
    res = calloc(nitems + 1, sizeof(*res));
    first = calloc(n + 1, sizeof(*first));
    if ((items == NULL) || (ikeys == NULL) || (res == NULL) || (first == NULL)) {
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t klen = key_len(keys[i]);
        size_t start = m;
        first[i] = SIZE_MAX;
        results[i] = 0;
        if (klen == UINT32_MAX) {
            results[i] = MC_INVALID_PARAMS;
            continue;
        }
        for (size_t j = 0; j < counts[i]; j++) {
            const mc_iov_t *v = &bufs[i][j];
            if ((v->base == NULL) ||
                !locate(d, v->base, v->len, &items[m].region, &items[m].off)) {
                mc_set_error_detail("a dummy client's zero-copy buffers must lie in its "
                                    "shared memory");
                results[i] = MC_INVALID_PARAMS;
                break;
            }
            items[m].len = v->len;
            items[m].flags = MC_DUMMY_IF_MORE;
            m++;
        }
        if ((results[i] != 0) || (m == start)) {
            if (results[i] == 0)
                results[i] = MC_INVALID_PARAMS;
            m = start;
            continue;
        }
        items[start].klen = klen;
        ikeys[start] = keys[i];
        items[m - 1].flags &= (uint8_t)~MC_DUMMY_IF_MORE;
        first[i] = start;
    }
    if (m > 0) {
        st = call(d, MC_DUMMY_OP_GET, 0, items, ikeys, m, NULL, res, m);
        for (size_t i = 0; i < n; i++)
            if (first[i] != SIZE_MAX)
                results[i] = (st == MC_OK) ? res[first[i]].result : st;
    }
    st = MC_OK;
    for (size_t i = 0; i < n; i++)
        if (results[i] < 0) {
            st = (mc_status_t)results[i];
            break;
        }
out:
    free(items);
    free(ikeys);
    free(res);
    free(first);
    leave(s);
    *st_p = st;
    return 1;
}

/* ---- keys ------------------------------------------------------------------- */

static int64_t key_call(mc_dummy_t *d, unsigned op, const char *key, unsigned flags)
{
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    uint32_t klen = key_len(key);
    if (klen == UINT32_MAX)
        return MC_INVALID_PARAMS;
    memset(&it, 0, sizeof(it));
    it.klen = klen;
    it.flags = (uint8_t)flags;
    st = call(d, op, 0, &it, &key, 1, NULL, &r, 1);
    return (st != MC_OK) ? st : r.result;
}

int mc_dummy_exist(mc_store_h s, const char *key, int *result_p)
{
    mc_dummy_t *d = enter(s);
    if (d == NULL)
        return 0;
    *result_p = (int)key_call(d, MC_DUMMY_OP_EXIST, key, 0);
    leave(s);
    return 1;
}

int mc_dummy_get_size(mc_store_h s, const char *key, uint64_t *size_p, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    int64_t r;
    if (d == NULL)
        return 0;
    r = key_call(d, MC_DUMMY_OP_SIZE, key, 0);
    leave(s);
    if (r < 0) {
        *st_p = (mc_status_t)r;
    } else {
        *st_p = MC_OK;
        if (size_p != NULL)
            *size_p = (uint64_t)r;
    }
    return 1;
}

int mc_dummy_remove(mc_store_h s, const char *key, int force, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    if (d == NULL)
        return 0;
    *st_p = (mc_status_t)key_call(d, MC_DUMMY_OP_REMOVE, key, force ? MC_DUMMY_IF_FORCE : 0);
    leave(s);
    return 1;
}

/* ---- memory ----------------------------------------------------------------- */

/*
 * A register_buffer a dummy refuses: MC_INVALID_PARAMS (-1 in Python, as
 * upstream) and a WARN line saying why, every time, as upstream logs each
 * refusal: the caller is this process, not a peer that could flood the log.
 */
static mc_status_t refuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static mc_status_t refuse(const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    mc_set_error_detail("%s", why);
    mc_warn("dummy: register_buffer: %s", why);
    return MC_INVALID_PARAMS;
}

/* The alloc_from_mem_pool block holding @p p: 1 with its start and length. */
static int pool_block_of(mc_dummy_t *d, const void *p, uintptr_t *start_p, uint64_t *len_p)
{
    uintptr_t a = (uintptr_t)p, pool = (uintptr_t)d->base[MC_DUMMY_REGION_POOL];
    int found = 0;
    if ((pool == 0) || !inside(pool, d->size[MC_DUMMY_REGION_POOL], p, 0))
        return 0;
    pthread_mutex_lock(&d->pool_lock);
    for (size_t i = 0; !found && (i < d->npool); i++) {
        uintptr_t b = pool + d->pool_blocks[i].off;
        if ((a >= b) && (a - b < d->pool_blocks[i].len)) {
            *start_p = b;
            *len_p = d->pool_blocks[i].len;
            found = 1;
        }
    }
    pthread_mutex_unlock(&d->pool_lock);
    return found;
}

/* Index in d->bufs of the registered block starting at @p base, or -1.
 * buf_lock held (or reg_mu: only it writes). */
static int buf_find(const mc_dummy_t *d, const void *base)
{
    for (unsigned i = 0; i < d->nbufs; i++)
        if (d->bufs[i].base == base)
            return (int)i;
    return -1;
}

/* Forget bufs[i] here (no call places a buffer in it any more), then tell
 * the real client.  reg_mu held. */
static mc_status_t buf_drop(mc_dummy_t *d, unsigned i)
{
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;

    memset(&it, 0, sizeof(it));
    it.region = d->bufs[i].id;
    pthread_rwlock_wrlock(&d->buf_lock);
    d->bufs[i] = d->bufs[d->nbufs - 1];
    __atomic_store_n(&d->nbufs, d->nbufs - 1, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&d->buf_lock);
    st = call(d, MC_DUMMY_OP_UNREGISTER, 0, &it, NULL, 1, NULL, &r, 1);
    return (st == MC_OK) ? (mc_status_t)r.result : st;
}

/* REGISTER of host-memory block @p info (its fd attached); reg_mu held. */
static mc_status_t buf_register(mc_dummy_t *d, const mc_host_mem_info_t *info)
{
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;

    if (d->nbufs == MC_DUMMY_MAX_BUFS)
        return refuse("this dummy has %u host-memory blocks registered already (the most "
                      "a real client maps for one dummy); unregister one first",
                      MC_DUMMY_MAX_BUFS);
    memset(&it, 0, sizeof(it));
    it.len = info->size;
    pthread_mutex_lock(&d->lock);
    st = do_call_fd(d, MC_DUMMY_OP_REGISTER, 0, &it, NULL, 1, NULL, &r, 1, info->fd);
    pthread_mutex_unlock(&d->lock);
    if ((st == MC_OK) && (r.result < 0)) {
        st = (mc_status_t)r.result;
        mc_set_error_detail("the real client at %s refused to map %zu bytes of host memory "
                            "(%s); its log says why", d->path, info->size, mc_status_string(st));
    }
    if ((st == MC_OK) && ((r.result < MC_DUMMY_NREGIONS) || (r.result >= MC_DUMMY_MAX_REGIONS))) {
        mc_set_error_detail("the real client answered REGISTER with region %lld",
                            (long long)r.result);
        st = MC_INTERNAL_ERROR;
    }
    if (st != MC_OK) {
        mc_warn("dummy: register_buffer: %s", mc_last_error_detail());
        return st;
    }
    pthread_rwlock_wrlock(&d->buf_lock);
    d->bufs[d->nbufs] = (dummy_buf_t){info->base, info->size, info->serial, (uint16_t)r.result};
    __atomic_store_n(&d->nbufs, d->nbufs + 1, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&d->buf_lock);
    return MC_OK;
}

/*
 * Upstream's rule (a ShmHelper segment, exactly): the range must be one
 * whole block of this dummy's pool (already shared: nothing to send) or
 * one whole mc_host_mem_alloc() block, whose size is rounded up to its huge
 * page first, as upstream rounds in huge-page mode.  Registering a block
 * twice is harmless.
 */
static mc_status_t dummy_register(mc_dummy_t *d, const void *addr, size_t len)
{
    mc_host_mem_info_t info;
    uintptr_t start;
    uint64_t blen;
    mc_status_t st;
    int i, found;

    if (addr == NULL)
        return refuse("the buffer is NULL");
    if (__atomic_load_n(&d->dead, __ATOMIC_RELAXED))
        return refuse("the real client at %s is gone (an earlier call failed); set the "
                      "dummy up again", d->path);
    if (pool_block_of(d, addr, &start, &blen)) {
        if ((start != (uintptr_t)addr) || (blen != len))
            return refuse("Invalid buffer address or size for registration: buffer %p size %zu, "
                          "its alloc_from_mem_pool block is %p size %llu", addr, len,
                          (void *)start, (unsigned long long)blen);
        return MC_OK;
    }
    found = mc_host_mem_find(addr, len, 1, &info);
    if (found < 0)
        return MC_INTERNAL_ERROR;
    if (found == 0)
        return refuse("Buffer is not in any registered shared memory: %p is neither in a "
                      "MooncakeHostMemAllocator block nor in an alloc_from_mem_pool block", addr);
    len = mc_host_mem_round(len, info.hugepage);
    if ((info.base != addr) || (info.size != len)) {
        close(info.fd);
        return refuse("Invalid buffer address or size for registration: buffer %p size %zu, "
                      "its host memory block is %p size %zu", addr, len, info.base, info.size);
    }
    pthread_mutex_lock(&d->reg_mu);
    i = buf_find(d, addr);
    if ((i >= 0) && (d->bufs[i].serial == info.serial)) {
        st = MC_OK; /* registered already */
    } else {
        /* a block freed without the hook having run yet cannot be here
         * (the registry hands its address out only after the hook): a
         * stale entry is dropped all the same rather than trusted */
        if (i >= 0)
            (void)buf_drop(d, (unsigned)i);
        st = buf_register(d, &info);
    }
    pthread_mutex_unlock(&d->reg_mu);
    close(info.fd);
    return st;
}

static mc_status_t dummy_unregister(mc_dummy_t *d, const void *addr)
{
    uintptr_t start;
    uint64_t blen;
    mc_status_t st;
    int i;

    if (addr == NULL)
        return refuse("unregister_buffer of a NULL buffer");
    pthread_mutex_lock(&d->reg_mu);
    i = buf_find(d, addr);
    st = (i >= 0) ? buf_drop(d, (unsigned)i) : MC_INVALID_PARAMS;
    pthread_mutex_unlock(&d->reg_mu);
    if (i >= 0)
        return st;
    if (pool_block_of(d, addr, &start, &blen) && (start == (uintptr_t)addr))
        return MC_OK; /* a pool block stays shared until it is freed */
    mc_set_error_detail("unregister_buffer: %p is not the start of a buffer this dummy "
                        "registered", addr);
    mc_warn("dummy: %s", mc_last_error_detail());
    return MC_INVALID_PARAMS;
}

int mc_dummy_register_buffer(mc_store_h s, const void *addr, size_t len, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    if (d == NULL)
        return 0;
    *st_p = dummy_register(d, addr, len);
    leave(s);
    return 1;
}

int mc_dummy_unregister_buffer(mc_store_h s, const void *addr, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    if (d == NULL)
        return 0;
    *st_p = dummy_unregister(d, addr);
    leave(s);
    return 1;
}

void mc_dummy_host_mem_freed(const void *base, uint64_t serial)
{
    pthread_mutex_lock(&live_mu);
    for (mc_dummy_t *d = live_dummies; d != NULL; d = d->live_next) {
        int i;
        pthread_mutex_lock(&d->reg_mu);
        i = buf_find(d, base);
        if ((i >= 0) && (d->bufs[i].serial == serial) &&
            (buf_drop(d, (unsigned)i) != MC_OK))
            mc_debug("dummy: the real client did not unregister freed host memory %p: %s",
                     base, mc_last_error_detail());
        pthread_mutex_unlock(&d->reg_mu);
    }
    pthread_mutex_unlock(&live_mu);
}

int mc_dummy_mem_pool_alloc(mc_store_h s, size_t size, void **ptr_p, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    if (d == NULL)
        return 0;
    memset(&it, 0, sizeof(it));
    it.region = MC_DUMMY_REGION_POOL;
    it.len = size;
    st = call(d, MC_DUMMY_OP_ALLOC, 0, &it, NULL, 1, NULL, &r, 1);
    if ((st == MC_OK) && (r.result < 0))
        st = (mc_status_t)r.result;
    if (st == MC_OK) {
        pthread_mutex_lock(&d->pool_lock);
        if (d->npool == d->cappool) {
            size_t cap = d->cappool ? d->cappool * 2 : 16;
            pool_block_t *nb = realloc(d->pool_blocks, cap * sizeof(*nb));
            if (nb == NULL) {
                st = MC_INTERNAL_ERROR;
            } else {
                d->pool_blocks = nb;
                d->cappool = cap;
            }
        }
        if (st == MC_OK) {
            d->pool_blocks[d->npool++] = (pool_block_t){r.off, size, r.handle};
            *ptr_p = d->base[MC_DUMMY_REGION_POOL] + r.off;
        }
        pthread_mutex_unlock(&d->pool_lock);
        if (st != MC_OK) {
            it.handle = r.handle;
            (void)call(d, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, &it, NULL, 1, NULL, NULL, 0);
        }
    }
    *st_p = st;
    leave(s);
    return 1;
}

int mc_dummy_mem_pool_free(mc_store_h s, void *ptr, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    uint16_t reg;
    uint64_t off;
    int found = 0;
    if (d == NULL)
        return 0;
    memset(&it, 0, sizeof(it));
    if ((ptr != NULL) && locate(d, ptr, 0, &reg, &off) && (reg == MC_DUMMY_REGION_POOL)) {
        pthread_mutex_lock(&d->pool_lock);
        for (size_t i = 0; i < d->npool; i++)
            if (d->pool_blocks[i].off == off) {
                it.handle = d->pool_blocks[i].handle;
                d->pool_blocks[i] = d->pool_blocks[--d->npool];
                found = 1;
                break;
            }
        pthread_mutex_unlock(&d->pool_lock);
    }
    if (!found) {
        mc_set_error_detail("not an allocation of this dummy's memory pool");
        *st_p = MC_INVALID_PARAMS;
    } else {
        it.region = MC_DUMMY_REGION_POOL;
        *st_p = call(d, MC_DUMMY_OP_FREE, 0, &it, NULL, 1, NULL, &r, 1);
        if (*st_p == MC_OK)
            *st_p = (mc_status_t)r.result;
    }
    leave(s);
    return 1;
}

/* ---- fetched copies: queries, get_buffer, ranged reads ------------------------ */

#define FETCH_BATCH 1024u

/* The objects of keys[0..m) (m <= FETCH_BATCH) through staging blocks:
 * one GET_STAGED frame, a copy of each into a fresh heap block, one FREE
 * frame.  A key refused for room while other keys of the frame held the
 * staging buffer is fetched again alone (@p retry). */
static void fetch_frame(mc_dummy_t *d, const char *const *keys, size_t m, size_t header,
                        void **mems, uint64_t *sizes, mc_status_t *statuses, int retry)
{
    mc_dummy_item_t *items = calloc(m + 1, sizeof(*items));
    mc_dummy_item_t *frees = calloc(m + 1, sizeof(*frees));
    const char **ikeys = calloc(m + 1, sizeof(*ikeys));
    mc_dummy_result_t *res = calloc(m + 1, sizeof(*res));
    size_t *idx = calloc(m + 1, sizeof(*idx));
    size_t k = 0, nf = 0;
    mc_status_t st;

    if ((items == NULL) || (frees == NULL) || (ikeys == NULL) || (res == NULL) || (idx == NULL)) {
        mc_set_error_detail("out of memory for %zu reads", m);
        for (size_t i = 0; i < m; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < m; i++) {
        uint32_t klen = key_len(keys[i]);
        if (klen == UINT32_MAX) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        items[k].klen = klen;
        ikeys[k] = keys[i];
        idx[k++] = i;
    }
    if (k == 0)
        goto out;
    st = call(d, MC_DUMMY_OP_GET_STAGED, 0, items, ikeys, k, NULL, res, k);
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        const mc_dummy_result_t *r = &res[j];
        if (st != MC_OK) {
            statuses[i] = st;
            continue;
        }
        if (r->result < 0) {
            statuses[i] = (mc_status_t)r->result;
            continue;
        }
        if (r->result > 0) {
            frees[nf].region = MC_DUMMY_REGION_LBUF;
            frees[nf++].handle = r->handle;
            /* the server granted [off, off + size) of the staging buffer */
            if (((uint64_t)r->result > d->size[MC_DUMMY_REGION_LBUF]) ||
                (r->off > d->size[MC_DUMMY_REGION_LBUF] - (uint64_t)r->result)) {
                mc_set_error_detail("the real client named a block outside the staging buffer");
                statuses[i] = MC_INTERNAL_ERROR;
                continue;
            }
        }
        mems[i] = malloc(header + (size_t)r->result + 1);
        if (mems[i] == NULL) {
            mc_set_error_detail("out of memory for a copy of %lld bytes", (long long)r->result);
            statuses[i] = MC_INTERNAL_ERROR;
            continue;
        }
        if (r->result > 0)
            memcpy((uint8_t *)mems[i] + header, d->base[MC_DUMMY_REGION_LBUF] + r->off,
                   (size_t)r->result);
        sizes[i] = (uint64_t)r->result;
        statuses[i] = MC_OK;
    }
    if (nf > 0)
        (void)call(d, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, frees, NULL, nf, NULL, NULL, 0);
    for (size_t j = 0; j < k; j++) {
        size_t i = idx[j];
        if (statuses[i] != MC_NO_AVAILABLE_HANDLE)
            continue;
        if (retry && (k > 1))
            fetch_frame(d, &keys[i], 1, header, &mems[i], &sizes[i], &statuses[i], 0);
        else
            mc_set_error_detail("the dummy's local buffer (%llu bytes) has no room for %s; "
                                "read it with get_into into the memory pool instead",
                                (unsigned long long)d->size[MC_DUMMY_REGION_LBUF], keys[i]);
    }
out:
    free(items);
    free(frees);
    free(ikeys);
    free(res);
    free(idx);
}

static void fetch_many(mc_dummy_t *d, const char *const *keys, size_t n, size_t header,
                       void **mems, uint64_t *sizes, mc_status_t *statuses)
{
    for (size_t i = 0; i < n; i++) {
        mems[i] = NULL;
        sizes[i] = 0;
        statuses[i] = MC_OK;
    }
    for (size_t at = 0; at < n; at += FETCH_BATCH) {
        size_t m = (n - at < FETCH_BATCH) ? n - at : FETCH_BATCH;
        fetch_frame(d, keys + at, m, header, mems + at, sizes + at, statuses + at, 1);
    }
}

int mc_dummy_batch_fetch(mc_store_h s, const char *const *keys, size_t n, size_t header,
                         void ***mems_p, uint64_t **sizes_p, mc_status_t *statuses)
{
    mc_dummy_t *d = enter(s);
    void **mems;
    uint64_t *sizes;

    *mems_p  = NULL;
    *sizes_p = NULL;
    if (d == NULL)
        return 0;
    mems  = calloc(n + 1, sizeof(*mems));
    sizes = calloc(n + 1, sizeof(*sizes));
    if ((mems == NULL) || (sizes == NULL)) {
        mc_set_error_detail("out of memory for %zu objects", n);
        for (size_t i = 0; i < n; i++)
            statuses[i] = MC_INTERNAL_ERROR;
        free(mems);
        free(sizes);
    } else {
        fetch_many(d, keys, n, header, mems, sizes, statuses);
        *mems_p  = mems;
        *sizes_p = sizes;
    }
    leave(s);
    return 1;
}

int mc_dummy_mem_is_registered(mc_store_h s, const void *p, size_t len, int *result_p)
{
    mc_dummy_t *d = enter(s);
    uint16_t reg;
    uint64_t off;
    if (d == NULL)
        return 0;
    *result_p = (p != NULL) && locate(d, p, len, &reg, &off);
    leave(s);
    return 1;
}

/*
 * The bytes from @p p to the end of the one shared allocation holding it -
 * an alloc_from_mem_pool block or a registered host-memory block, as
 * upstream measures in the single shm segment holding a buffer: 1 with
 * *room_p, or 0 when @p p is in no mapped allocation.
 */
static int shm_room(mc_dummy_t *d, const void *p, uint64_t *room_p)
{
    uintptr_t start;
    uint64_t len;
    int found = 0;

    if (p == NULL)
        return 0;
    if (pool_block_of(d, p, &start, &len)) {
        *room_p = len - ((uintptr_t)p - start);
        return 1;
    }
    pthread_rwlock_rdlock(&d->buf_lock);
    for (unsigned i = 0; !found && (i < d->nbufs); i++) {
        const dummy_buf_t *b = &d->bufs[i];
        if (((uintptr_t)p >= (uintptr_t)b->base) &&
            ((uintptr_t)p - (uintptr_t)b->base < b->size)) {
            *room_p = b->size - ((uintptr_t)p - (uintptr_t)b->base);
            found = 1;
        }
    }
    pthread_rwlock_unlock(&d->buf_lock);
    return found;
}

int mc_dummy_read_ranges(mc_store_h s, mc_store_range_t *ranges, size_t n, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    const char **dkeys = NULL;
    size_t *owner = NULL, nd = 0;
    void **mems = NULL;
    uint64_t *sizes = NULL;
    mc_status_t *ks = NULL, st = MC_OK;

    if (d == NULL)
        return 0;
    if ((n > 0) && (ranges == NULL)) {
        mc_set_error_detail("ranges is NULL");
        st = MC_INVALID_PARAMS;
        goto done;
    }
    /* upstream's dummy places every buffer before it asks for anything: one
     * outside its mapped memory fails every range of the call */
    for (size_t i = 0; i < n; i++) {
        uint64_t room;
        if (!shm_room(d, ranges[i].buffer, &room)) {
            mc_set_error_detail("buffer %p is in none of the dummy's shared memory (an "
                                "alloc_from_mem_pool block or a registered host-memory block)",
                                ranges[i].buffer);
            st = MC_INVALID_PARAMS;
            for (size_t j = 0; j < n; j++)
                ranges[j].result = st;
            goto done;
        }
    }
    dkeys = calloc(n + 1, sizeof(*dkeys));
    owner = calloc(n + 1, sizeof(*owner));
    mems = calloc(n + 1, sizeof(*mems));
    sizes = calloc(n + 1, sizeof(*sizes));
    ks = calloc(n + 1, sizeof(*ks));
    if ((dkeys == NULL) || (owner == NULL) || (mems == NULL) || (sizes == NULL) || (ks == NULL)) {
        mc_set_error_detail("out of memory for %zu ranges", n);
        st = MC_INTERNAL_ERROR;
        for (size_t i = 0; i < n; i++)
            ranges[i].result = st;
        goto done;
    }
    /* each distinct key is fetched once (the whole object), then sliced */
    for (size_t i = 0; i < n; i++) {
        size_t k;
        ranges[i].result = mc_store_check_key(ranges[i].key, NULL);
        if (ranges[i].result != MC_OK)
            continue;
        for (k = 0; k < nd; k++)
            if (strcmp(dkeys[k], ranges[i].key) == 0)
                break;
        if (k == nd)
            dkeys[nd++] = ranges[i].key;
        owner[i] = k;
    }
    fetch_many(d, dkeys, nd, 0, mems, sizes, ks);
    for (size_t i = 0; i < n; i++) {
        mc_store_range_t *r = &ranges[i];
        size_t o = owner[i];
        uint64_t room = 0;
        if (r->result != MC_OK)
            continue;
        if (ks[o] != MC_OK) {
            r->result = ks[o];
            continue;
        }
        /* the room is that of the allocation holding the buffer, not the
         * whole pool: a neighbour's block is not this buffer's to fill */
        if (!shm_room(d, r->buffer, &room) || (r->dst_offset > room) ||
            (r->length > room - r->dst_offset)) {
            mc_set_error_detail("destination [+%llu, +%llu) of buffer %p overruns the %llu "
                                "bytes left in its shared allocation",
                                (unsigned long long)r->dst_offset,
                                (unsigned long long)r->length, r->buffer,
                                (unsigned long long)room);
            r->result = MC_INVALID_PARAMS;
            continue;
        }
        if ((r->src_offset > sizes[o]) || (r->length > sizes[o] - r->src_offset) ||
            (r->length > (uint64_t)INT64_MAX)) {
            mc_set_error_detail("source [%llu, +%llu) is outside the %llu-byte object",
                                (unsigned long long)r->src_offset, (unsigned long long)r->length,
                                (unsigned long long)sizes[o]);
            r->result = MC_INVALID_PARAMS;
            continue;
        }
        if (r->length > 0)
            memcpy((uint8_t *)r->buffer + r->dst_offset, (uint8_t *)mems[o] + r->src_offset,
                   (size_t)r->length);
        r->result = (int64_t)r->length;
    }
    for (size_t i = 0; i < n; i++)
        if (ranges[i].result < 0) {
            st = (mc_status_t)ranges[i].result;
            break;
        }
done:
    if (mems != NULL)
        for (size_t k = 0; k < nd; k++)
            free(mems[k]);
    free(dkeys);
    free(owner);
    free(mems);
    free(sizes);
    free(ks);
    leave(s);
    *st_p = st;
    return 1;
}

/* ---- calls on keys and names: removal, replicas, tasks ------------------------ */

/*
 * One frame of @p op: the object keys keys[0..nk) (@p flags0 on item 0),
 * then the names args[0..na) as IF_ARG items; res[0..nk+na) from the
 * answer (an op with neither sends one empty item).  Keys and names were
 * checked by the caller.
 */
static mc_status_t named_call_fd(mc_dummy_t *d, unsigned op, const char *const *keys, size_t nk,
                                 unsigned flags0, const char *const *args, size_t na,
                                 mc_dummy_result_t *res, uint64_t off0, uint64_t len0, int sendfd);

static mc_status_t named_call(mc_dummy_t *d, unsigned op, const char *const *keys, size_t nk,
                              unsigned flags0, const char *const *args, size_t na,
                              mc_dummy_result_t *res)
{
    return named_call_fd(d, op, keys, nk, flags0, args, na, res, 0, 0, -1);
}

/* named_call with item 0's off and len, and @p sendfd passed along. */
static mc_status_t named_call_fd(mc_dummy_t *d, unsigned op, const char *const *keys, size_t nk,
                                 unsigned flags0, const char *const *args, size_t na,
                                 mc_dummy_result_t *res, uint64_t off0, uint64_t len0, int sendfd)
{
    size_t n = (nk + na > 0) ? nk + na : 1;
    mc_dummy_item_t *items = calloc(n, sizeof(*items));
    const char **ikeys = calloc(n, sizeof(*ikeys));
    mc_status_t st;

    if ((items == NULL) || (ikeys == NULL)) {
        free(items);
        free(ikeys);
        mc_set_error_detail("out of memory for %zu keys", n);
        return MC_INTERNAL_ERROR;
    }
    for (size_t i = 0; i < nk + na; i++) {
        const char *k = (i < nk) ? keys[i] : args[i - nk];
        ikeys[i] = k;
        items[i].klen = (uint32_t)strlen(k);
        if (i >= nk)
            items[i].flags = MC_DUMMY_IF_ARG;
    }
    items[0].flags |= (uint8_t)flags0;
    items[0].off = off0;
    items[0].len = len0;
    pthread_mutex_lock(&d->lock);
    st = do_call_fd(d, op, 0, items, ikeys, n, NULL, res, n, sendfd);
    pthread_mutex_unlock(&d->lock);
    free(items);
    free(ikeys);
    return st;
}

/* A name the daemon's call takes: non-NULL, non-empty, within the frame's
 * limit for a string. */
static mc_status_t name_check(const char *what, const char *name)
{
    if ((name == NULL) || (name[0] == '\0') || (strlen(name) > MC_DUMMY_MAX_KEY)) {
        mc_set_error_detail("%s is NULL, empty or longer than %u bytes (a dummy client's limit)",
                            what, MC_DUMMY_MAX_KEY);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

/* Copy the staged record the real client answered with, then FREE it. */
static mc_status_t take_staged(mc_dummy_t *d, const mc_dummy_result_t *r, void *dst, size_t len)
{
    mc_status_t st = MC_OK;
    uint64_t lsize = d->size[MC_DUMMY_REGION_LBUF];
    if ((len > lsize) || (r->off > lsize - len)) {
        mc_set_error_detail("the real client named a block outside the staging buffer");
        st = MC_INTERNAL_ERROR;
    } else if (len > 0) {
        memcpy(dst, d->base[MC_DUMMY_REGION_LBUF] + r->off, len);
    }
    staged_free(d, r->handle);
    return st;
}

/*
 * The per-key ops (BATCH_REMOVE, EXIST, REPLICA_CLEAR): invalid keys get
 * MC_INVALID_PARAMS here, the others go in one frame, @p arg (if any) as
 * a trailing name.  out[i] = each key's answer; the call's own status.
 */
static mc_status_t per_key_call(mc_dummy_t *d, unsigned op, const char *const *keys, size_t n,
                                unsigned flags0, const char *arg, int64_t *out)
{
    const char **sel = calloc(n + 1, sizeof(*sel));
    size_t *idx = calloc(n + 1, sizeof(*idx));
    mc_dummy_result_t *res = calloc(n + 2, sizeof(*res));
    size_t m = 0;
    mc_status_t st = MC_OK;

    if ((sel == NULL) || (idx == NULL) || (res == NULL)) {
        mc_set_error_detail("out of memory for %zu keys", n);
        st = MC_INTERNAL_ERROR;
        for (size_t i = 0; i < n; i++)
            out[i] = st;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (key_len(keys[i]) == UINT32_MAX) {
            out[i] = MC_INVALID_PARAMS;
            continue;
        }
        sel[m] = keys[i];
        idx[m++] = i;
    }
    if ((m > 0) || (arg != NULL)) {
        st = named_call(d, op, sel, m, flags0, &arg, (arg != NULL) ? 1 : 0, res);
        for (size_t j = 0; j < m; j++)
            out[idx[j]] = (st == MC_OK) ? res[j].result : st;
        if ((st == MC_OK) && (arg != NULL))
            st = (mc_status_t)res[m].result;
    }
out:
    free(sel);
    free(idx);
    free(res);
    return st;
}

int mc_dummy_batch_remove(mc_store_h s, const char *const *keys, size_t n, int force,
                          mc_status_t *statuses, mc_status_t *st_p)
{
    return mc_dummy_keys_call(s, MC_DUMMY_OP_BATCH_REMOVE, force ? MC_DUMMY_IF_FORCE : 0, keys, n,
                              statuses, st_p);
}

int mc_dummy_batch_exist(mc_store_h s, const char *const *keys, size_t n, int *results,
                         mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    int64_t *out;

    if (d == NULL)
        return 0;
    out = calloc(n + 1, sizeof(*out));
    if (out == NULL) {
        mc_set_error_detail("out of memory");
        *st_p = MC_INTERNAL_ERROR;
        for (size_t i = 0; i < n; i++)
            results[i] = MC_INTERNAL_ERROR;
    } else {
        *st_p = per_key_call(d, MC_DUMMY_OP_EXIST, keys, n, 0, NULL, out);
        for (size_t i = 0; i < n; i++)
            results[i] = (int)out[i];
    }
    free(out);
    leave(s);
    return 1;
}

int mc_dummy_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                 const char *segment, mc_status_t *statuses, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    int64_t *out;

    if (d == NULL)
        return 0;
    out = calloc(n + 1, sizeof(*out));
    if ((segment != NULL) && (segment[0] == '\0'))
        segment = NULL; /* "" and NULL both mean every segment */
    if (((keys == NULL) && (n > 0)) || (out == NULL)) {
        mc_set_error_detail((out == NULL) ? "out of memory" : "keys is NULL");
        *st_p = (out == NULL) ? MC_INTERNAL_ERROR : MC_INVALID_PARAMS;
    } else if ((segment != NULL) && (name_check("segment_name", segment) != MC_OK)) {
        *st_p = MC_INVALID_PARAMS;
    } else {
        *st_p = per_key_call(d, MC_DUMMY_OP_REPLICA_CLEAR, keys, n, 0, segment, out);
        for (size_t i = 0; (*st_p == MC_OK) && (statuses != NULL) && (i < n); i++)
            statuses[i] = (mc_status_t)out[i];
    }
    /* the call's own error: every status gets it too */
    for (size_t i = 0; (*st_p != MC_OK) && (statuses != NULL) && (i < n); i++)
        statuses[i] = *st_p;
    free(out);
    leave(s);
    return 1;
}

/* REMOVE_REGEX (@p regex) or REMOVE_ALL (NULL). */
int mc_dummy_remove_many(mc_store_h s, const char *regex, int force, int64_t *count_p,
                         mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_result_t r;

    if (d == NULL)
        return 0;
    if ((regex != NULL) && (strlen(regex) > MC_DUMMY_MAX_KEY)) {
        mc_set_error_detail("a pattern through a dummy client is at most %u bytes",
                            MC_DUMMY_MAX_KEY);
        *st_p = MC_INVALID_PARAMS;
    } else if (regex == NULL) {
        *st_p = named_call(d, MC_DUMMY_OP_REMOVE_ALL, NULL, 0, force ? MC_DUMMY_IF_FORCE : 0,
                           NULL, 0, &r);
    } else {
        *st_p = named_call(d, MC_DUMMY_OP_REMOVE_REGEX, NULL, 0, force ? MC_DUMMY_IF_FORCE : 0,
                           &regex, 1, &r);
    }
    if (*st_p == MC_OK) {
        if (r.result < 0)
            *st_p = (mc_status_t)r.result;
        else if (count_p != NULL)
            *count_p = r.result;
    }
    leave(s);
    return 1;
}

/* COPY_TASK (targets[0..n)) or MOVE_TASK (targets = {source, target}). */
int mc_dummy_create_task(mc_store_h s, unsigned op, const char *key, const char *const *targets,
                         size_t n, mc_task_id_t *id_out, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_result_t *res;
    mc_status_t st = MC_OK;

    if (d == NULL)
        return 0;
    res = calloc(n + 2, sizeof(*res));
    if (res == NULL) {
        st = MC_INTERNAL_ERROR;
    } else if ((key_len(key) == UINT32_MAX) || (id_out == NULL) || (n == 0) ||
               (targets == NULL)) {
        if (key_len(key) != UINT32_MAX)
            mc_set_error_detail("targets and id_out are required");
        st = MC_INVALID_PARAMS;
    }
    for (size_t i = 0; (st == MC_OK) && (i < n); i++)
        st = name_check("a segment name", targets[i]);
    if (st == MC_OK)
        st = named_call(d, op, &key, 1, 0, targets, n, res);
    if (st == MC_OK)
        st = (mc_status_t)res[0].result;
    if (st == MC_OK) {
        st = take_staged(d, &res[0], id_out, sizeof(*id_out));
        id_out->id[sizeof(id_out->id) - 1] = '\0';
    }
    free(res);
    *st_p = st;
    leave(s);
    return 1;
}

int mc_dummy_query_task(mc_store_h s, const char *task_id, mc_store_task_info_t *out,
                        mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_result_t r;
    mc_status_t st;

    if (d == NULL)
        return 0;
    st = name_check("task_id", task_id);
    if ((st == MC_OK) && (out == NULL)) {
        mc_set_error_detail("out is NULL");
        st = MC_INVALID_PARAMS;
    }
    if (st == MC_OK)
        st = named_call(d, MC_DUMMY_OP_QUERY_TASK, NULL, 0, 0, &task_id, 1, &r);
    if (st == MC_OK)
        st = (mc_status_t)r.result;
    if (st == MC_OK) {
        st = take_staged(d, &r, out, sizeof(*out));
        out->id.id[sizeof(out->id.id) - 1] = '\0';
        out->assigned_client[sizeof(out->assigned_client) - 1] = '\0';
        out->message[sizeof(out->message) - 1] = '\0';
    }
    *st_p = st;
    leave(s);
    return 1;
}

mc_status_t mc_dummy_replicas(mc_store_h s, const char *key, mc_replica_desc_t **descs_p,
                              size_t *n_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_result_t r;
    mc_replica_desc_t *v = NULL;
    mc_status_t st;

    *descs_p = NULL;
    *n_p = 0;
    if (d == NULL)
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    st = MC_INVALID_PARAMS;
    if (key_len(key) != UINT32_MAX)
        st = named_call(d, MC_DUMMY_OP_REPLICAS, &key, 1, 0, NULL, 0, &r);
    if ((st == MC_OK) && (r.result < 0))
        st = (mc_status_t)r.result;
    if ((st == MC_OK) && ((uint64_t)r.result > d->size[MC_DUMMY_REGION_LBUF] / sizeof(*v))) {
        mc_set_error_detail("the real client answered %lld replicas", (long long)r.result);
        st = MC_INTERNAL_ERROR;
        staged_free(d, r.handle);
    }
    if (st == MC_OK) {
        v = calloc((size_t)r.result + 1, sizeof(*v));
        if (v == NULL) {
            staged_free(d, r.handle);
            st = MC_INTERNAL_ERROR;
        } else {
            st = take_staged(d, &r, v, (size_t)r.result * sizeof(*v));
        }
    }
    if (st == MC_OK) {
        for (int64_t i = 0; i < r.result; i++) {
            v[i].segment[sizeof(v[i].segment) - 1] = '\0';
            v[i].protocol[sizeof(v[i].protocol) - 1] = '\0';
        }
        *descs_p = v;
        *n_p = (size_t)r.result;
    } else {
        free(v);
    }
    leave(s);
    return st;
}

/* ---- segments: mounted by the real client for this dummy ---------------------- */

/* @p path NULL: allocate_and_mount_segment; else mount_segment of that
 * file, which this process opens (so a dummy can mount only a file it may
 * open for writing itself) and passes along. */
int mc_dummy_mount(mc_store_h s, const char *path, uint64_t size, uint64_t offset,
                   const char *protocol, const char *location, mc_segment_id_t *id_out,
                   uint64_t *allocated_p, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    const char *args[2] = {(protocol != NULL) ? protocol : "", (location != NULL) ? location : ""};
    mc_dummy_mounted_t m;
    mc_dummy_result_t res[2];
    mc_status_t st = MC_OK;
    int fd = -1;

    if (d == NULL)
        return 0;
    if (id_out == NULL) {
        mc_set_error_detail("id_out is NULL");
        st = MC_INVALID_PARAMS;
    } else if ((strlen(args[0]) > MC_DUMMY_MAX_KEY) || (strlen(args[1]) > MC_DUMMY_MAX_KEY)) {
        mc_set_error_detail("protocol or location is longer than %u bytes", MC_DUMMY_MAX_KEY);
        st = MC_INVALID_PARAMS;
    } else if ((path != NULL) && (path[0] == '\0')) {
        mc_set_error_detail("mount_segment needs a path");
        st = MC_INVALID_PARAMS;
    } else if (path != NULL) {
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
            mc_set_error_detail("cannot open %s: %s", path, strerror(errno));
            st = MC_INVALID_PARAMS;
        }
    }
    if (id_out != NULL)
        memset(id_out, 0, sizeof(*id_out));
    if (allocated_p != NULL)
        *allocated_p = 0;
    if (st == MC_OK)
        st = named_call_fd(d, (path != NULL) ? MC_DUMMY_OP_MOUNT : MC_DUMMY_OP_ALLOC_MOUNT, NULL,
                           0, 0, args, 2, res, offset, size, fd);
    if (fd >= 0)
        close(fd);
    if (st == MC_OK)
        st = (mc_status_t)res[0].result;
    if (st == MC_OK)
        st = take_staged(d, &res[0], &m, sizeof(m));
    if (st == MC_OK) {
        memcpy(id_out->id, m.id, sizeof(id_out->id) - 1);
        id_out->id[sizeof(id_out->id) - 1] = '\0';
        if (allocated_p != NULL)
            *allocated_p = m.allocated;
    }
    *st_p = st;
    leave(s);
    return 1;
}

int mc_dummy_unmount(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                     int and_free, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_result_t *res;
    mc_status_t st = MC_OK;

    if (d == NULL)
        return 0;
    res = calloc(n + 1, sizeof(*res));
    if ((ids == NULL) && (n > 0)) {
        mc_set_error_detail("ids is NULL");
        st = MC_INVALID_PARAMS;
    } else if (res == NULL) {
        st = MC_INTERNAL_ERROR;
    }
    for (size_t i = 0; (st == MC_OK) && (i < n); i++)
        if ((ids[i] == NULL) || (strlen(ids[i]) > MC_DUMMY_MAX_KEY)) {
            mc_set_error_detail("\"%s\" is not a segment id", ids[i] ? "(too long)" : "(null)");
            st = MC_INVALID_PARAMS;
        }
    if ((st == MC_OK) && (n > 0)) {
        st = named_call_fd(d, MC_DUMMY_OP_UNMOUNT, NULL, 0, and_free ? MC_DUMMY_IF_RELEASE : 0,
                           ids, n, res, grace_s, 0, -1);
        if (st == MC_OK)
            st = (mc_status_t)res[0].result;
    }
    free(res);
    *st_p = st;
    leave(s);
    return 1;
}

/* ---- ranged sessions: held in the real client, per dummy ---------------------- */

int mc_dummy_session_keys(mc_store_h s, unsigned op, const char *const *keys, size_t n,
                          mc_status_t *statuses, mc_status_t *st_p)
{
    return mc_dummy_keys_call(s, op, 0, keys, n, statuses, st_p);
}

int mc_dummy_keys_call(mc_store_h s, unsigned op, unsigned flags0, const char *const *keys,
                       size_t n, mc_status_t *statuses, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    int64_t *out;

    if (d == NULL)
        return 0;
    out = calloc(n + 1, sizeof(*out));
    if (((keys == NULL) && (n > 0)) || (out == NULL)) {
        mc_set_error_detail((out == NULL) ? "out of memory" : "keys is NULL");
        *st_p = (out == NULL) ? MC_INTERNAL_ERROR : MC_INVALID_PARAMS;
        for (size_t i = 0; (statuses != NULL) && (i < n); i++)
            statuses[i] = *st_p;
    } else {
        mc_status_t st = per_key_call(d, op, keys, n, flags0, NULL, out);
        *st_p = st;
        /* get_session_end has no per-key answer: a key without a session
         * is simply not there to end */
        for (size_t i = 0; (op != MC_DUMMY_OP_GET_SESSION_END) && (i < n); i++) {
            if (statuses != NULL)
                statuses[i] = (mc_status_t)out[i];
            if ((*st_p == MC_OK) && (out[i] != MC_OK))
                *st_p = (mc_status_t)out[i];
        }
    }
    free(out);
    leave(s);
    return 1;
}

int mc_dummy_put_session_start(mc_store_h s, const char *const *keys, const uint64_t *sizes,
                               size_t n, const mc_replicate_config_t *cfg, mc_status_t *statuses,
                               mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    mc_dummy_item_t *items = NULL;
    mc_dummy_result_t *res = NULL;
    const char **ikeys = NULL, **igroups = NULL;
    size_t *idx = NULL, m = 0;
    put_cfg_t wcfg;
    mc_status_t st;

    if (d == NULL)
        return 0;
    st = cfg_check(cfg, n);
    if ((st == MC_OK) && (n > 0) && ((keys == NULL) || (sizes == NULL) || (statuses == NULL))) {
        mc_set_error_detail("keys, sizes and statuses are required");
        st = MC_INVALID_PARAMS;
    }
    if ((st == MC_OK) && (n > 0)) {
        items = calloc(n, sizeof(*items));
        res = calloc(n, sizeof(*res));
        ikeys = calloc(n, sizeof(*ikeys));
        igroups = calloc(n, sizeof(*igroups));
        idx = calloc(n, sizeof(*idx));
        if (!items || !res || !ikeys || !igroups || !idx)
            st = MC_INTERNAL_ERROR;
    }
    for (size_t i = 0; (st == MC_OK) && (i < n); i++) {
        statuses[i] = MC_OK;
        if (key_len(keys[i]) == UINT32_MAX) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        items[m].klen = key_len(keys[i]);
        items[m].len = sizes[i];
        ikeys[m] = keys[i];
        igroups[m] = cfg_group(cfg, i);
        idx[m++] = i;
    }
    if ((st == MC_OK) && (m > 0)) {
        cfg_to_wire(cfg, &wcfg); /* always sent: present 0 for NULL */
        wcfg.igroups = igroups;
        st = call(d, MC_DUMMY_OP_PUT_SESSION_START, 0, items, ikeys, m, &wcfg, res, m);
        for (size_t j = 0; j < m; j++)
            statuses[idx[j]] = (st == MC_OK) ? (mc_status_t)res[j].result : st;
    }
    if ((st != MC_OK) && (statuses != NULL))
        for (size_t i = 0; i < n; i++)
            statuses[i] = st;
    *st_p = (st == MC_OK) ? mc_store_first_error(statuses, n) : st;
    free(items);
    free(res);
    free(ikeys);
    free(igroups);
    free(idx);
    leave(s);
    return 1;
}

/* GET_SESSION_READ / PUT_SESSION_WRITE: every buffer must lie in the
 * shared memory (a key with one outside gets MC_INVALID_PARAMS). */
int mc_dummy_session_io(mc_store_h s, unsigned op, const char *const *keys,
                        const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                        const size_t *counts, size_t n, int64_t *results, mc_status_t *st_p)
{
    mc_dummy_t *d = enter(s);
    size_t nitems = 0, m = 0, nk = 0;
    mc_dummy_item_t *items = NULL;
    mc_dummy_result_t *res = NULL;
    const char **ikeys = NULL;
    size_t *first = NULL, *idx = NULL;
    mc_status_t st = MC_OK;

    if (d == NULL)
        return 0;
    if ((n > 0) && ((keys == NULL) || (bufs == NULL) || (offsets == NULL) || (counts == NULL) ||
                    (results == NULL))) {
        mc_set_error_detail("keys, buffers, offsets, counts and results are required");
        st = MC_INVALID_PARAMS;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (counts[i] > (MC_DUMMY_MAX_ITEMS - nitems) / 2) {
            mc_set_error_detail("too many ranges for one dummy request");
            st = MC_INVALID_PARAMS;
            goto out;
        }
        nitems += 1 + 2 * counts[i];
    }
    items = calloc(nitems + 1, sizeof(*items));
    res = calloc(nitems + 1, sizeof(*res));
    ikeys = calloc(nitems + 1, sizeof(*ikeys));
    first = calloc(n + 1, sizeof(*first));
    idx = calloc(n + 1, sizeof(*idx));
    if (!items || !res || !ikeys || !first || !idx) {
        st = MC_INTERNAL_ERROR;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        size_t start = m;
        int ok = (key_len(keys[i]) != UINT32_MAX) &&
                 ((counts[i] == 0) || ((bufs[i] != NULL) && (offsets[i] != NULL)));
        results[i] = MC_INVALID_PARAMS;
        if (!ok)
            continue;
        items[m].klen = key_len(keys[i]);
        ikeys[m++] = keys[i];
        for (size_t j = 0; ok && (j < counts[i]); j++) {
            if (!locate(d, bufs[i][j].base, bufs[i][j].len, &items[m].region, &items[m].off)) {
                mc_set_error_detail("a dummy client's session buffers must lie in its shared "
                                    "memory (alloc_from_mem_pool)");
                ok = 0;
                break;
            }
            items[m].len = bufs[i][j].len;
            items[m - 1].flags = MC_DUMMY_IF_MORE;
            items[m++].flags = MC_DUMMY_IF_MORE;
            items[m++].off = offsets[i][j];
        }
        if (!ok) {
            memset(&items[start], 0, (m - start) * sizeof(*items));
            m = start;
            continue;
        }
        first[nk] = start;
        idx[nk++] = i;
    }
    if (nk > 0) {
        st = call(d, op, 0, items, ikeys, m, NULL, res, m);
        for (size_t k = 0; k < nk; k++)
            results[idx[k]] = (st == MC_OK) ? res[first[k]].result : st;
    }
out:
    if ((st != MC_OK) && (results != NULL))
        for (size_t i = 0; i < n; i++)
            results[i] = st;
    for (size_t i = 0; (st == MC_OK) && (results != NULL) && (i < n); i++)
        if (results[i] < 0)
            st = (mc_status_t)results[i];
    *st_p = st;
    free(items);
    free(res);
    free(ikeys);
    free(first);
    free(idx);
    leave(s);
    return 1;
}
