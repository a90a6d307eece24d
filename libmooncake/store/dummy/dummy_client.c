/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A store handle in dummy mode (mc_store_setup_dummy): it owns no segment
 * and no engine; it creates two memfds (the zero-copy pool and the staging
 * buffer), hands them to the real client over a unix socket (SCM_RIGHTS)
 * and forwards each store call there as one frame of the dummy protocol
 * (wire.h, docs/protocol.md §8).  Bytes move through the shared
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
 *
 * May call: dummy_client.h (this folder), ../calls.c,
 * ../segments/segments.h (populating its shared memory),
 * ../threads/threads.h (the ping is a worker), store.c's embedded table
 * (close puts it back).  Called by: the public API (setup_dummy, is_dummy,
 * dummy_stats), dummy_ops.c, dummy_io.c, dummy_calls.c, hostmem.c.
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
#include "store/dummy/dummy_client.h"
#include "store/dummy/wire.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"

#define DUMMY_SETUP_TIMEOUT_MS 5000
#define DUMMY_CALL_TIMEOUT_MS 60000
/* How long either end polls for the other's next frame before it sleeps
 * (mc_spin_readable); MC_DUMMY_SPIN_US overrides, 0 turns it off. */
#define DUMMY_SPIN_US 200


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

static mc_status_t do_call(mc_dummy_t *d, unsigned op, unsigned hflags,
                           const mc_dummy_item_t *items, const char *const *keys, size_t n,
                           const put_cfg_t *cfg, mc_dummy_result_t *results, size_t nres)
{
    return mc_dummy_call_fd(d, op, hflags, items, keys, n, cfg, results, nres, -1);
}

/* do_call, with @p sendfd passed along (MOUNT). */
mc_status_t mc_dummy_call_fd(mc_dummy_t *d, unsigned op, unsigned hflags,
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

mc_status_t mc_dummy_call(mc_dummy_t *d, unsigned op, unsigned hflags,
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
int mc_dummy_locate(mc_dummy_t *d, const void *p, size_t len, uint16_t *region_p,
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

void mc_dummy_cfg_to_wire(const mc_replicate_config_t *cfg, put_cfg_t *pc)
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
mc_status_t mc_dummy_cfg_check(const mc_replicate_config_t *cfg, size_t nkeys)
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
const char *mc_dummy_cfg_group(const mc_replicate_config_t *cfg, size_t k)
{
    if ((cfg == NULL) || !(cfg->field_mask & MC_RC_FIELD_GROUP_IDS))
        return NULL;
    return cfg->group_ids[k];
}

/* ---- entering ---------------------------------------------------------------- */

mc_dummy_t *mc_dummy_enter(mc_store_h s)
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

void mc_dummy_leave(mc_store_h s)
{
    pthread_rwlock_unlock(&s->life);
}

uint32_t mc_dummy_key_len(const char *key)
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
    if (mc_dummy_enter(s) == NULL)
        return 0;
    r = 1;
    mc_dummy_leave(s);
    return r;
}

MC_API mc_status_t mc_store_dummy_stats(mc_store_h s, uint64_t *sessions_p, uint64_t *mapped_p,
                                        uint64_t *allocated_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_result_t res[3];
    mc_status_t st;
    if (d == NULL) {
        mc_set_error_detail("not a dummy client");
        return MC_INVALID_PARAMS;
    }
    st = mc_dummy_call(d, MC_DUMMY_OP_STATS, 0, NULL, NULL, 0, NULL, res, 3);
    mc_dummy_leave(s);
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

void mc_dummy_staged_free(mc_dummy_t *d, uint32_t handle)
{
    mc_dummy_item_t it;
    memset(&it, 0, sizeof(it));
    it.region = MC_DUMMY_REGION_LBUF;
    it.handle = handle;
    (void)mc_dummy_call(d, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, &it, NULL, 1, NULL, NULL, 0);
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
int mc_dummy_pool_block_of(mc_dummy_t *d, const void *p, uintptr_t *start_p, uint64_t *len_p)
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
    st = mc_dummy_call(d, MC_DUMMY_OP_UNREGISTER, 0, &it, NULL, 1, NULL, &r, 1);
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
    st = mc_dummy_call_fd(d, MC_DUMMY_OP_REGISTER, 0, &it, NULL, 1, NULL, &r, 1, info->fd);
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
    if (mc_dummy_pool_block_of(d, addr, &start, &blen)) {
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
    if (mc_dummy_pool_block_of(d, addr, &start, &blen) && (start == (uintptr_t)addr))
        return MC_OK; /* a pool block stays shared until it is freed */
    mc_set_error_detail("unregister_buffer: %p is not the start of a buffer this dummy "
                        "registered", addr);
    mc_warn("dummy: %s", mc_last_error_detail());
    return MC_INVALID_PARAMS;
}

int mc_dummy_register_buffer(mc_store_h s, const void *addr, size_t len, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    if (d == NULL)
        return 0;
    *st_p = dummy_register(d, addr, len);
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_unregister_buffer(mc_store_h s, const void *addr, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    if (d == NULL)
        return 0;
    *st_p = dummy_unregister(d, addr);
    mc_dummy_leave(s);
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
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    mc_status_t st;
    if (d == NULL)
        return 0;
    memset(&it, 0, sizeof(it));
    it.region = MC_DUMMY_REGION_POOL;
    it.len = size;
    st = mc_dummy_call(d, MC_DUMMY_OP_ALLOC, 0, &it, NULL, 1, NULL, &r, 1);
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
            (void)mc_dummy_call(d, MC_DUMMY_OP_FREE, MC_DUMMY_F_NOREPLY, &it, NULL, 1, NULL, NULL,
                                0);
        }
    }
    *st_p = st;
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_mem_pool_free(mc_store_h s, void *ptr, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_item_t it;
    mc_dummy_result_t r;
    uint16_t reg;
    uint64_t off;
    int found = 0;
    if (d == NULL)
        return 0;
    memset(&it, 0, sizeof(it));
    if ((ptr != NULL) && mc_dummy_locate(d, ptr, 0, &reg, &off) && (reg == MC_DUMMY_REGION_POOL)) {
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
        *st_p = mc_dummy_call(d, MC_DUMMY_OP_FREE, 0, &it, NULL, 1, NULL, &r, 1);
        if (*st_p == MC_OK)
            *st_p = (mc_status_t)r.result;
    }
    mc_dummy_leave(s);
    return 1;
}
