/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Same-host shared memory: the holder's socket server and the reader's
 * mappings (shm.h, docs/transfer.md "Same-host shared memory").
 *
 * Holder: one thread polls the listening socket, a wake-up eventfd and at
 * most SERVER_MAX_CONNS connections.  Requests are fixed-size datagrams
 * (SOCK_SEQPACKET keeps their boundaries); anything of another size, magic
 * or version closes the connection.  A MAP answer pins the region
 * (mc_te_region_acquire) while its memfd is sent, so dereg cannot close the
 * fd under the reply.
 *
 * Writes in progress (docs/transfer.md, "Same-host writes and fences"):
 * each connection that asks (WRITERS) gets a memfd of its own with one
 * count per slot, which the peer raises around every direct write and the
 * holder reads; the control memfd's gate words close a slot to direct
 * writes.  Before a region's word takes a later generation, the holder
 * closes the gate and waits until no connection counts a write there
 * (mc_te_shm_slot_fence): a direct write that saw the earlier word is done
 * before any byte of the memory's next owner lands.  A connection that
 * hangs up counts nothing: its process has ended or closed its engine,
 * which it does only once its copies are done.
 *
 * Reader: the granted regions of one holder live in a sorted array under
 * map_lock.  Copies run under the read lock, so a stale mapping is only
 * unmapped (write lock) once no copy uses it.  Exchanges with the holder
 * are serialised by io_mu and bounded by the open timeout.
 */
#define _GNU_SOURCE 1
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "common/copy.h"
#include "common/log.h"
#include "common/util.h"
#include "transfer/engine.h"
#include "transfer/shm/shm.h"

#define SERVER_MAX_CONNS 256
#define PEER_MAX_MAPS    4096
/* How long a "not shared" answer is believed: the holder may unregister
 * that region and register shared memory at the same address. */
#define PEER_UNSHARED_MS 1000
/* The control memfd: MC_TE_SHM_SLOTS generation words, then as many gate
 * words (nonzero: the slot is closed to direct writes).  A holder older
 * than the gates sends only the first half: its peers read through it but
 * never write directly. */
#define CTL_GEN_LEN      ((size_t)MC_TE_SHM_SLOTS * sizeof(uint64_t))
#define CTL_GATES_LEN    (2 * CTL_GEN_LEN)
/* Then one page holding the life lock: a robust process-shared mutex that
 * the server thread holds while it serves.  When that thread is killed the
 * kernel marks the lock's word FUTEX_OWNER_DIED as the thread starts to
 * exit, before the process's memory is torn down and long before its
 * sockets close (docs/transfer.md §10, "A holder that dies"). */
#define CTL_LIFE_LEN     ((size_t)4096)
#define CTL_LEN          (CTL_GATES_LEN + CTL_LIFE_LEN)
/* A peer's writer counts: one 32-bit count per slot of the direct writes it
 * has in progress there. */
#define WRITERS_LEN      ((size_t)MC_TE_SHM_SLOTS * sizeof(uint32_t))

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef FUTEX_OWNER_DIED
#define FUTEX_OWNER_DIED 0x40000000u
#endif
#ifndef FUTEX_TID_MASK
#define FUTEX_TID_MASK 0x3fffffffu
#endif
/* A task's flags (/proc/<pid>/task/<tid>/stat, field 9): it has begun to
 * exit. */
#define TASK_PF_EXITING 0x4u

/* ---- shared helpers ------------------------------------------------------- */

/* Fill a sockaddr_un for "@name" (abstract namespace); its length in *len_p. */
static int abstract_addr(const char *name, struct sockaddr_un *sa, socklen_t *len_p)
{
    size_t n;
    if ((name == NULL) || (name[0] != '@'))
        return -1;
    n = strlen(name + 1);
    if ((n == 0) || (n + 1 > sizeof(sa->sun_path)) || (n + 1 >= MC_TE_SHM_NAME_MAX))
        return -1;
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path + 1, name + 1, n); /* sun_path[0] = 0: abstract */
    *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    return 0;
}

/* 1 when the process at the other end of @p fd runs as our user; its pid
 * as seen here (0: not visible in our pid namespace) in *pid_p. */
static int same_user(int fd, pid_t *pid_p)
{
    struct ucred cr;
    socklen_t l = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) != 0)
        return 0;
    if (pid_p != NULL)
        *pid_p = cr.pid;
    return cr.uid == geteuid();
}

int mc_te_shm_fd_shareable(int fd, uint64_t len)
{
    struct stat sb;
    int seals;
    if (fd < 0)
        return 0;
    seals = fcntl(fd, F_GET_SEALS);
    if ((seals < 0) || !(seals & F_SEAL_SHRINK))
        return 0;
    if ((fstat(fd, &sb) != 0) || !S_ISREG(sb.st_mode) || (sb.st_size < 0) ||
        ((uint64_t)sb.st_size < len))
        return 0;
    return 1;
}

/* ---- holder ----------------------------------------------------------------- */

struct mc_te_shm_server {
    mc_te_t *te;
    char name[MC_TE_SHM_NAME_MAX];
    int lfd;                 /* listening socket */
    int wake_fd;             /* eventfd: stop */
    int ctl_fd;              /* control memfd */
    uint64_t *ctl;           /* its mapping: MC_TE_SHM_SLOTS words, then the gates */
    pthread_mutex_t *life;   /* the life lock, in the control memfd's last page */
    uint32_t life_off;       /* its futex word's offset in that page; set by the thread */
    pid_t life_tid;          /* the thread holding it */
    pthread_mutex_t conn_mu; /* conns */
    /* per connection of server_main's poll array (same index, less 2):
     * its writer counts, mapped, or NULL until it asked */
    uint32_t *conns[SERVER_MAX_CONNS];
    pthread_mutex_t slot_mu; /* free slots, next generation */
    uint32_t *free_slots;    /* stack */
    uint32_t nfree;
    uint64_t next_gen;
    pthread_t thread;
    int running;
};

const char *mc_te_shm_server_name(const mc_te_shm_server_t *srv)
{
    return srv->name;
}

int mc_te_shm_slot_open(mc_te_shm_server_t *srv, uint64_t want, uint32_t *slot_p,
                        uint64_t *gen_p)
{
    uint32_t slot;
    uint64_t gen;
    pthread_mutex_lock(&srv->slot_mu);
    if (srv->nfree == 0) {
        pthread_mutex_unlock(&srv->slot_mu);
        return -1;
    }
    slot = srv->free_slots[--srv->nfree];
    gen  = (want != 0) ? want : srv->next_gen++;
    pthread_mutex_unlock(&srv->slot_mu);
    __atomic_store_n(&srv->ctl[MC_TE_SHM_SLOTS + slot], 0, __ATOMIC_SEQ_CST); /* gate open */
    __atomic_store_n(&srv->ctl[slot], gen, __ATOMIC_RELEASE);
    *slot_p = slot;
    *gen_p  = gen;
    return 0;
}

/* 1 when some connection counts a direct write in progress in @p slot. */
static int slot_written(mc_te_shm_server_t *srv, uint32_t slot)
{
    int busy = 0;
    pthread_mutex_lock(&srv->conn_mu);
    for (size_t i = 0; (i < SERVER_MAX_CONNS) && !busy; i++)
        if (srv->conns[i] != NULL)
            busy = __atomic_load_n(&srv->conns[i][slot], __ATOMIC_SEQ_CST) != 0;
    pthread_mutex_unlock(&srv->conn_mu);
    return busy;
}

int mc_te_shm_slot_fence(mc_te_shm_server_t *srv, uint32_t slot, uint64_t gen,
                         uint64_t deadline_ms)
{
    uint64_t *gate;
    unsigned spins = 0;

    if (slot >= MC_TE_SHM_SLOTS)
        return 0;
    gate = &srv->ctl[MC_TE_SHM_SLOTS + slot];
    /* Dekker with the writer (peer_write_enter): it counts itself, then
     * reads the gate and the word; we close the gate, then read the
     * counts.  A writer we do not see counted reads the gate closed. */
    __atomic_store_n(gate, 1, __ATOMIC_SEQ_CST);
    while (slot_written(srv, slot)) {
        if (mc_now_ms() > deadline_ms)
            return -1; /* the gate stays closed until a later fence gets through */
        if (++spins < 64)
            sched_yield();
        else
            (void)poll(NULL, 0, 1);
    }
    __atomic_store_n(&srv->ctl[slot], gen, __ATOMIC_SEQ_CST);
    __atomic_store_n(gate, 0, __ATOMIC_SEQ_CST);
    return 0;
}

void mc_te_shm_slot_close(mc_te_shm_server_t *srv, uint32_t slot)
{
    if (slot >= MC_TE_SHM_SLOTS)
        return;
    /* seq_cst: the zero is visible before dereg goes on to touch or free
     * the memory (pairs with the reader's fence after its copy) */
    __atomic_store_n(&srv->ctl[slot], 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&srv->slot_mu);
    srv->free_slots[srv->nfree++] = slot;
    pthread_mutex_unlock(&srv->slot_mu);
}

static int send_answer(int fd, const mc_te_shm_resp_t *r, int pass_fd)
{
    struct msghdr mh;
    struct iovec iov;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } cm;

    memset(&mh, 0, sizeof(mh));
    iov.iov_base  = (void *)r;
    iov.iov_len   = sizeof(*r);
    mh.msg_iov    = &iov;
    mh.msg_iovlen = 1;
    if (pass_fd >= 0) {
        struct cmsghdr *c;
        memset(&cm, 0, sizeof(cm));
        mh.msg_control    = cm.buf;
        mh.msg_controllen = sizeof(cm.buf);
        c                 = CMSG_FIRSTHDR(&mh);
        c->cmsg_level     = SOL_SOCKET;
        c->cmsg_type      = SCM_RIGHTS;
        c->cmsg_len       = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    /* never block on a reader that does not read its answers */
    return (sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) == (ssize_t)sizeof(*r)) ? 0 : -1;
}

/* A connection's writer counts: a sealed memfd of WRITERS_LEN bytes, the
 * holder's mapping in srv->conns[@p ci]; its fd in *fd_p.  -1 when the
 * kernel refuses (the peer then never writes directly). */
static int writers_open(mc_te_shm_server_t *srv, size_t ci, int *fd_p)
{
    int fd = memfd_create("mooncake-shm-writers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *w;

    if ((fd < 0) || (ftruncate(fd, (off_t)WRITERS_LEN) != 0) ||
        (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0))
        goto fail;
    w = mmap(NULL, WRITERS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w == MAP_FAILED)
        goto fail;
    pthread_mutex_lock(&srv->conn_mu);
    srv->conns[ci] = w;
    pthread_mutex_unlock(&srv->conn_mu);
    *fd_p = fd;
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Forget connection @p ci's writer counts (it hung up or was closed). */
static void writers_close(mc_te_shm_server_t *srv, size_t ci)
{
    uint32_t *w;
    pthread_mutex_lock(&srv->conn_mu);
    w              = srv->conns[ci];
    srv->conns[ci] = NULL;
    pthread_mutex_unlock(&srv->conn_mu);
    if (w != NULL)
        munmap(w, WRITERS_LEN);
}

/* Answer one request on connection @p fd, the @p ci-th; -1 closes it. */
static int serve_one(mc_te_shm_server_t *srv, int fd, size_t ci)
{
    mc_te_shm_req_t q;
    mc_te_shm_resp_t a;
    mc_te_region_t *r;
    ssize_t n;
    int rc;

    n = recv(fd, &q, sizeof(q), MSG_DONTWAIT | MSG_TRUNC);
    if ((n < 0) && ((errno == EAGAIN) || (errno == EINTR)))
        return 0;
    if (n != (ssize_t)sizeof(q))
        return -1; /* closed, error, or a datagram of the wrong size */
    if ((q.magic != MC_TE_SHM_MAGIC) || (q.version != MC_TE_SHM_VERSION))
        return -1;
    memset(&a, 0, sizeof(a));
    a.magic = MC_TE_SHM_MAGIC;
    if (q.op == MC_TE_SHM_HELLO) {
        a.answer = MC_TE_SHM_OK;
        a.nslots = MC_TE_SHM_SLOTS;
        if (srv->life_tid > 0) { /* this process and the thread holding the life lock */
            a.gen         = MC_TE_SHM_HELLO_LIFE;
            a.slot        = srv->life_off;
            a.region_addr = (uint64_t)getpid();
            a.region_len  = (uint64_t)srv->life_tid;
        }
        return send_answer(fd, &a, srv->ctl_fd);
    }
    if (q.op == MC_TE_SHM_WRITERS) {
        int wfd;
        if ((srv->conns[ci] != NULL) || (writers_open(srv, ci, &wfd) != 0)) {
            a.answer = MC_TE_SHM_BAD; /* asked twice, or no memory: no direct writes */
            return send_answer(fd, &a, -1);
        }
        a.answer = MC_TE_SHM_OK;
        rc       = send_answer(fd, &a, wfd);
        close(wfd);
        return rc;
    }
    if ((q.op != MC_TE_SHM_MAP) || (q.len == 0) || (q.len > UINT64_MAX - q.addr)) {
        a.answer = MC_TE_SHM_BAD;
        return send_answer(fd, &a, -1);
    }
    r = mc_te_region_acquire(srv->te, q.addr, q.len, MC_TE_MEM_REMOTE_ACCESS);
    if (r == NULL) {
        a.answer = MC_TE_SHM_NO_REGION;
        return send_answer(fd, &a, -1);
    }
    a.region_addr = r->addr;
    a.region_len  = r->len;
    if ((r->fd < 0) || (r->shm_slot >= MC_TE_SHM_SLOTS)) {
        a.answer = MC_TE_SHM_NOT_SHARED;
        rc       = send_answer(fd, &a, -1);
    } else {
        a.answer = MC_TE_SHM_OK;
        a.gen    = __atomic_load_n(&r->shm_gen, __ATOMIC_ACQUIRE);
        a.slot   = r->shm_slot;
        rc       = send_answer(fd, &a, r->fd);
    }
    mc_te_region_release(srv->te, r);
    return rc;
}

/* Take the life lock on the serving thread and find its futex word (the
 * word that now holds this thread's id): readers watch it. */
static void life_take(mc_te_shm_server_t *srv)
{
    pid_t tid = (pid_t)syscall(SYS_gettid);
    const uint8_t *b = (const uint8_t *)srv->life;

    if ((srv->life == NULL) || (pthread_mutex_lock(srv->life) != 0))
        return;
    for (size_t off = 0; off + sizeof(uint32_t) <= sizeof(*srv->life); off += sizeof(uint32_t)) {
        uint32_t w;
        memcpy(&w, b + off, sizeof(w));
        if ((w & FUTEX_TID_MASK) == (uint32_t)tid) {
            srv->life_off = (uint32_t)off; /* the lock begins the life page */
            srv->life_tid = tid;
            return;
        }
    }
    (void)pthread_mutex_unlock(srv->life); /* a layout we do not know: no life word */
}

static void *server_main(void *arg)
{
    mc_te_shm_server_t *srv = arg;
    struct pollfd pf[SERVER_MAX_CONNS + 2];
    nfds_t n = 2;

    life_take(srv);

    pf[0].fd     = srv->wake_fd;
    pf[0].events = POLLIN;
    pf[1].fd     = srv->lfd;
    pf[1].events = POLLIN;
    for (;;) {
        if (poll(pf, n, -1) < 0) {
            if (errno == EINTR)
                continue;
            mc_error("shared-memory server: poll failed: %m");
            break;
        }
        if (pf[0].revents)
            break;
        /* connections first: accepting may move the array */
        for (nfds_t i = 2; i < n;) {
            if ((pf[i].revents != 0) && ((pf[i].revents & (POLLHUP | POLLERR | POLLNVAL)) ||
                                         (serve_one(srv, pf[i].fd, i - 2) != 0))) {
                writers_close(srv, i - 2);
                close(pf[i].fd);
                pf[i] = pf[--n];
                pthread_mutex_lock(&srv->conn_mu);
                srv->conns[i - 2] = srv->conns[n - 2];
                srv->conns[n - 2] = NULL;
                pthread_mutex_unlock(&srv->conn_mu);
                continue;
            }
            i++;
        }
        if (pf[1].revents & POLLIN) {
            int c = accept4(srv->lfd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0) {
                if ((n >= SERVER_MAX_CONNS + 2) || !same_user(c, NULL)) {
                    mc_debug("shared-memory server: refusing a connection (%s)",
                             (n >= SERVER_MAX_CONNS + 2) ? "too many" : "another user");
                    close(c);
                } else {
                    pf[n].fd      = c;
                    pf[n].events  = POLLIN;
                    pf[n].revents = 0;
                    n++;
                }
            } else if ((errno == EMFILE) || (errno == ENFILE) || (errno == ENOBUFS) ||
                       (errno == ENOMEM)) {
                /* The connection stays queued and the socket readable:
                 * back off instead of spinning until a descriptor frees. */
                mc_warn("shared-memory server: cannot accept: %m");
                poll(&pf[0], 1, 100);
            }
        }
    }
    for (nfds_t i = 2; i < n; i++) {
        writers_close(srv, i - 2);
        close(pf[i].fd);
    }
    if (srv->life_tid > 0)
        (void)pthread_mutex_unlock(srv->life);
    return NULL;
}

/* The life lock, robust and shared with the readers (who only read its
 * word); left NULL where the C library cannot make one. */
static void life_init(mc_te_shm_server_t *srv)
{
    pthread_mutexattr_t at;
    pthread_mutex_t *m = (pthread_mutex_t *)((uint8_t *)srv->ctl + CTL_GATES_LEN);

    if (pthread_mutexattr_init(&at) != 0)
        return;
    if ((pthread_mutexattr_setpshared(&at, PTHREAD_PROCESS_SHARED) == 0) &&
        (pthread_mutexattr_setrobust(&at, PTHREAD_MUTEX_ROBUST) == 0) &&
        (pthread_mutex_init(m, &at) == 0))
        srv->life = m;
    pthread_mutexattr_destroy(&at);
}

static void server_free(mc_te_shm_server_t *srv)
{
    if (srv->lfd >= 0)
        close(srv->lfd);
    if (srv->wake_fd >= 0)
        close(srv->wake_fd);
    if (srv->life != NULL)
        pthread_mutex_destroy(srv->life);
    if (srv->ctl != NULL)
        munmap(srv->ctl, CTL_LEN);
    if (srv->ctl_fd >= 0)
        close(srv->ctl_fd);
    pthread_mutex_destroy(&srv->slot_mu);
    pthread_mutex_destroy(&srv->conn_mu);
    free(srv->free_slots);
    free(srv);
}

mc_status_t mc_te_shm_server_start(mc_te_t *te, mc_te_shm_server_t **srv_p)
{
    mc_te_shm_server_t *srv;
    struct sockaddr_un sa;
    socklen_t salen;
    mc_uuid_t u;
    void *ctl;
    int rc;

    *srv_p = NULL;
    srv    = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    srv->te      = te;
    srv->lfd     = -1;
    srv->wake_fd = -1;
    srv->ctl_fd  = -1;
    srv->next_gen = 1;
    pthread_mutex_init(&srv->slot_mu, NULL);
    pthread_mutex_init(&srv->conn_mu, NULL);
    srv->free_slots = malloc(MC_TE_SHM_SLOTS * sizeof(*srv->free_slots));
    if (srv->free_slots == NULL) {
        server_free(srv);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    for (uint32_t i = 0; i < MC_TE_SHM_SLOTS; i++)
        srv->free_slots[i] = MC_TE_SHM_SLOTS - 1 - i; /* slot 0 first */
    srv->nfree = MC_TE_SHM_SLOTS;

    /* The control words: readers map them read-only; the holder's own
     * mapping is made before F_SEAL_FUTURE_WRITE forbids new writable
     * ones (where the kernel knows that seal). */
    srv->ctl_fd = memfd_create("mooncake-shm-control", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if ((srv->ctl_fd < 0) || (ftruncate(srv->ctl_fd, (off_t)CTL_LEN) != 0))
        goto unavailable;
    ctl = mmap(NULL, CTL_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, srv->ctl_fd, 0);
    if (ctl == MAP_FAILED)
        goto unavailable;
    srv->ctl = ctl;
    life_init(srv);
    if (fcntl(srv->ctl_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        goto unavailable;
    (void)fcntl(srv->ctl_fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE);
    (void)fcntl(srv->ctl_fd, F_ADD_SEALS, F_SEAL_SEAL);

    mc_uuid_generate(&u);
    snprintf(srv->name, sizeof(srv->name), "@mooncake-te-%016llx%016llx",
             (unsigned long long)u.hi, (unsigned long long)u.lo);
    if (abstract_addr(srv->name, &sa, &salen) != 0)
        goto unavailable;
    srv->lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if ((srv->lfd < 0) || (bind(srv->lfd, (struct sockaddr *)&sa, salen) != 0) ||
        (listen(srv->lfd, 64) != 0))
        goto unavailable;
    srv->wake_fd = eventfd(0, EFD_CLOEXEC);
    if (srv->wake_fd < 0)
        goto unavailable;
    rc = pthread_create(&srv->thread, NULL, server_main, srv);
    if (rc != 0) {
        errno = rc;
        goto unavailable;
    }
    srv->running = 1;
    *srv_p       = srv;
    return MC_OK;

unavailable:
    mc_info("same-host shared memory is unavailable (%m); peers on this host use TCP");
    server_free(srv);
    return MC_OK;
}

void mc_te_shm_server_stop(mc_te_shm_server_t *srv)
{
    uint64_t one = 1;
    if (srv == NULL)
        return;
    if (srv->running) {
        if (write(srv->wake_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
            mc_warn("shared-memory server: cannot wake the thread: %m");
        pthread_join(srv->thread, NULL);
    }
    server_free(srv);
}

/* ---- reader ------------------------------------------------------------------- */

typedef struct peer_map {
    uint64_t addr;  /* the holder's region */
    uint64_t len;
    uint8_t *base;  /* our mapping of it; NULL: the region is not shared */
    uint32_t slot;
    uint64_t gen;
    uint64_t recheck_ms; /* not shared: ask again from then on */
    uint64_t *warm; /* atomic bits, one per WARM_BLOCK of our address space over base:
                     * its pages are mapped here (map_warm); NULL: not tracked */
} peer_map_t;

/*
 * The first write into a page of a fresh mapping of the holder's memfd
 * takes a write fault for that one page: 3.5 us a page on the development
 * VM, 14.5 ms for 16 MiB that copy in 2.7 ms once mapped.  A read fault
 * maps the whole aligned block of pages around it that the holder's memory
 * already has (the kernel's fault-around, 64 KiB by default), writable on
 * a shared mapping of a memfd (no write notification): one read of a byte
 * per block before a write into it (map_warm) mapped the same 16 MiB in
 * 1.5 ms.  Where fault-around maps less, the write faults for the rest as
 * it would have.
 */
#define WARM_SHIFT 16u
#define WARM_BLOCK ((uint64_t)1 << WARM_SHIFT)

/* The number of blocks of our address space that [base, base+len) meets. */
static size_t warm_blocks(const uint8_t *base, uint64_t len)
{
    uintptr_t b = (uintptr_t)base;
    return (size_t)(((b + len - 1) >> WARM_SHIFT) - (b >> WARM_SHIFT) + 1);
}

/* Map the pages of [at, at+len) (inside @p m) before a write into them:
 * a read of a byte of every block not mapped yet (by an earlier write through
 * this mapping), which the kernel answers by mapping the block. */
static void map_warm(const peer_map_t *m, uint8_t *at, uint64_t len)
{
    uintptr_t first, last, origin;

    if ((m->warm == NULL) || (len == 0))
        return;
    origin = (uintptr_t)m->base >> WARM_SHIFT;
    first  = (uintptr_t)at >> WARM_SHIFT;
    last   = ((uintptr_t)at + len - 1) >> WARM_SHIFT;
    for (uintptr_t blk = first; blk <= last; blk++) {
        uint64_t *word = &m->warm[(blk - origin) / 64];
        uint64_t bit   = (uint64_t)1 << ((blk - origin) % 64);
        const uint8_t *touch;

        if ((__atomic_load_n(word, __ATOMIC_RELAXED) & bit) != 0)
            continue;
        /* the block's first byte inside the mapping */
        touch = (blk == origin) ? m->base : (const uint8_t *)(blk << WARM_SHIFT);
        (void)__atomic_load_n(touch, __ATOMIC_RELAXED);
        __atomic_fetch_or(word, bit, __ATOMIC_RELAXED);
    }
}

/* Unmap what map_ask() mapped. */
static void map_unmap(peer_map_t *m)
{
    if (m->base != NULL)
        munmap(m->base, m->len);
    free(m->warm);
    m->base = NULL;
    m->warm = NULL;
}

struct mc_te_shm_peer {
    char name[MC_TE_SHM_NAME_MAX];
    int fd;
    int timeout_ms;
    int dead;                  /* atomic: the holder hung up */
    pthread_mutex_t io_mu;     /* one exchange at a time */
    pthread_rwlock_t map_lock; /* maps; copies hold it for reading */
    const uint64_t *ctl;       /* control words, read-only */
    size_t ctl_len;            /* its mapping's length */
    const uint64_t *gates;     /* the gate words after them, or NULL */
    const uint32_t *life;      /* the holder's life lock's word, or NULL */
    int stat_fd;               /* /proc stat of the thread holding it, or -1 */
    uint64_t stat_live_ns;     /* atomic: when the last read of it that found the
                                * holder live began (mc_now_ns) */
    uint32_t *writers;         /* our writer counts, or NULL: no direct writes */
    peer_map_t *maps;          /* sorted by addr, disjoint */
    size_t nmaps;
};

const char *mc_te_shm_peer_name(const mc_te_shm_peer_t *p)
{
    return p->name;
}

/* One request and its answer; the received fd (or -1) in *fd_p.  -1 on
 * any failure, after which the connection is unusable. */
static int exchange(mc_te_shm_peer_t *p, uint16_t op, uint64_t addr, uint64_t len,
                    mc_te_shm_resp_t *a, int *fd_p)
{
    mc_te_shm_req_t q;
    struct msghdr mh;
    struct iovec iov;
    struct pollfd pf;
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int) * 4)];
    } cm;
    ssize_t n;

    *fd_p = -1;
    memset(&q, 0, sizeof(q));
    q.magic   = MC_TE_SHM_MAGIC;
    q.version = MC_TE_SHM_VERSION;
    q.op      = op;
    q.addr    = addr;
    q.len     = len;
    if (send(p->fd, &q, sizeof(q), MSG_NOSIGNAL) != (ssize_t)sizeof(q))
        return -1;
    pf.fd     = p->fd;
    pf.events = POLLIN;
    do {
        n = poll(&pf, 1, p->timeout_ms);
    } while ((n < 0) && (errno == EINTR));
    if (n <= 0)
        return -1; /* holder stuck or poll failed */
    memset(&mh, 0, sizeof(mh));
    memset(&cm, 0, sizeof(cm));
    iov.iov_base      = a;
    iov.iov_len       = sizeof(*a);
    mh.msg_iov        = &iov;
    mh.msg_iovlen     = 1;
    mh.msg_control    = cm.buf;
    mh.msg_controllen = sizeof(cm.buf);
    n = recvmsg(p->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    /* take every passed descriptor so none leaks, whatever else is wrong */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
        if ((c->cmsg_level != SOL_SOCKET) || (c->cmsg_type != SCM_RIGHTS))
            continue;
        for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
            int f;
            memcpy(&f, CMSG_DATA(c) + k * sizeof(int), sizeof(int));
            if (*fd_p < 0)
                *fd_p = f;
            else
                close(f);
        }
    }
    if ((n != (ssize_t)sizeof(*a)) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
        (a->magic != MC_TE_SHM_MAGIC)) {
        if (*fd_p >= 0)
            close(*fd_p);
        *fd_p = -1;
        return -1;
    }
    return 0;
}

/* Ask the holder for our writer counts (a holder with gates only): without
 * them, every write goes over the network, where the holder sees it.  -1
 * when the exchange itself failed: the connection is then out of step and
 * unusable (a late answer would be taken for the next one's). */
static int peer_writers_open(mc_te_shm_peer_t *p)
{
    mc_te_shm_resp_t a;
    int wfd = -1;
    void *w;

    if (p->gates == NULL)
        return 0;
    if (exchange(p, MC_TE_SHM_WRITERS, 0, 0, &a, &wfd) != 0)
        return -1;
    if ((a.answer != MC_TE_SHM_OK) || !mc_te_shm_fd_shareable(wfd, WRITERS_LEN)) {
        mc_debug("same-host peer %s: no writer counts; writes go over the network", p->name);
        if (wfd >= 0)
            close(wfd);
        return 0;
    }
    w = mmap(NULL, WRITERS_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0);
    close(wfd);
    if (w != MAP_FAILED)
        p->writers = w;
    return 0;
}

mc_te_shm_peer_t *mc_te_shm_peer_open(const char *name, int timeout_ms)
{
    mc_te_shm_peer_t *p;
    struct sockaddr_un sa;
    socklen_t salen;
    mc_te_shm_resp_t a;
    int cfd = -1;
    pid_t pid = 0;
    void *ctl;

    if (abstract_addr(name, &sa, &salen) != 0)
        return NULL;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    p->stat_fd = -1;
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->timeout_ms = (timeout_ms > 0) ? timeout_ms : 3000;
    pthread_mutex_init(&p->io_mu, NULL);
    pthread_rwlock_init(&p->map_lock, NULL);
    p->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (p->fd >= 0) {
        /* bounds connect() too, should the holder's backlog be full */
        struct timeval tv = {p->timeout_ms / 1000, (p->timeout_ms % 1000) * 1000};
        (void)setsockopt(p->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    }
    if ((p->fd < 0) || (connect(p->fd, (struct sockaddr *)&sa, salen) != 0)) {
        mc_debug("no same-host path to %s: %m", name);
        goto fail;
    }
    if (!same_user(p->fd, &pid)) {
        mc_debug("no same-host path to %s: it runs as another user", name);
        goto fail;
    }
    if ((exchange(p, MC_TE_SHM_HELLO, 0, 0, &a, &cfd) != 0) || (a.answer != MC_TE_SHM_OK) ||
        (a.nslots != MC_TE_SHM_SLOTS) || !mc_te_shm_fd_shareable(cfd, CTL_GEN_LEN)) {
        mc_debug("no same-host path to %s: bad greeting", name);
        goto fail;
    }
    /* the gates and the life page too where the holder has them (sealed:
     * the length holds) */
    p->ctl_len = mc_te_shm_fd_shareable(cfd, CTL_LEN)         ? CTL_LEN
                 : mc_te_shm_fd_shareable(cfd, CTL_GATES_LEN) ? CTL_GATES_LEN
                                                              : CTL_GEN_LEN;
    ctl        = mmap(NULL, p->ctl_len, PROT_READ, MAP_SHARED, cfd, 0);
    close(cfd);
    cfd = -1;
    if (ctl == MAP_FAILED)
        goto fail;
    p->ctl = ctl;
    if (p->ctl_len >= CTL_GATES_LEN)
        p->gates = p->ctl + MC_TE_SHM_SLOTS;
    if ((p->ctl_len == CTL_LEN) && (a.gen & MC_TE_SHM_HELLO_LIFE) &&
        (a.slot <= CTL_LIFE_LEN - sizeof(uint32_t)) && (a.slot % sizeof(uint32_t) == 0))
        p->life = (const uint32_t *)((const uint8_t *)ctl + CTL_GATES_LEN + a.slot);
    if ((a.gen & MC_TE_SHM_HELLO_LIFE) && (pid > 0) && ((uint64_t)pid == a.region_addr) &&
        (a.region_len > 0) && (a.region_len <= INT32_MAX)) {
        /* the holder sees itself under the pid we see: its thread ids are ours too */
        char path[64];
        snprintf(path, sizeof(path), "/proc/%d/task/%llu/stat", (int)pid,
                 (unsigned long long)a.region_len);
        p->stat_fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    if (!mc_te_shm_holder_confirm(p)) {
        mc_debug("no same-host path to %s: it is exiting", name);
        goto fail;
    }
    if (peer_writers_open(p) != 0) {
        mc_debug("no same-host path to %s: no answer for the writer counts", name);
        goto fail;
    }
    return p;

fail:
    if (cfd >= 0)
        close(cfd);
    mc_te_shm_peer_close(p);
    return NULL;
}

static void maps_drop_all(mc_te_shm_peer_t *p)
{
    for (size_t i = 0; i < p->nmaps; i++)
        map_unmap(&p->maps[i]);
    free(p->maps);
    p->maps  = NULL;
    p->nmaps = 0;
}

void mc_te_shm_peer_close(mc_te_shm_peer_t *p)
{
    if (p == NULL)
        return;
    maps_drop_all(p);
    if (p->ctl != NULL)
        munmap((void *)p->ctl, p->ctl_len);
    if (p->writers != NULL)
        munmap(p->writers, WRITERS_LEN);
    if (p->stat_fd >= 0)
        close(p->stat_fd);
    if (p->fd >= 0)
        close(p->fd);
    pthread_mutex_destroy(&p->io_mu);
    pthread_rwlock_destroy(&p->map_lock);
    free(p);
}

/* Stop using the holder (it hung up, or an exchange went wrong) and
 * release its memory now rather than at engine teardown. */
static void peer_give_up(mc_te_shm_peer_t *p)
{
    __atomic_store_n(&p->dead, 1, __ATOMIC_RELEASE);
    pthread_rwlock_wrlock(&p->map_lock);
    maps_drop_all(p);
    pthread_rwlock_unlock(&p->map_lock);
}

int mc_te_shm_peer_alive(mc_te_shm_peer_t *p)
{
    struct pollfd pf;
    if (__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
        return 0;
    /* Only a hang-up counts: an answer in flight to another thread makes
     * the socket readable without meaning anything. */
    pf.fd     = p->fd;
    pf.events = 0;
    if ((poll(&pf, 1, 0) > 0) && (pf.revents & (POLLHUP | POLLERR | POLLNVAL))) {
        peer_give_up(p);
        mc_debug("same-host peer %s hung up; using TCP", p->name);
        return 0;
    }
    return 1;
}

/* How long a /proc stat read that found the holder live stands for later
 * writes: a kill is seen by every confirmation this long after it. */
#define PEER_STAT_FRESH_NS 250000u

/* Why the task whose /proc stat is open at @p fd is exiting, or NULL when
 * it is not: SIGKILL pending (sent, not yet taken: from the kill on),
 * exiting, a zombie, or gone (the read fails once it was reaped). */
static const char *stat_exiting(int fd)
{
    char buf[1024];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    const char *c;
    unsigned long long flags = 0, sig = 0;
    char state = 0;

    if (n <= 0)
        return "its process is gone";
    buf[n] = 0;
    c      = strrchr(buf, ')'); /* the command name may hold anything */
    if (c == NULL)
        return NULL;
    /* fields from 3 on: state, ..., flags (9), ..., signal (31) */
    for (int field = 3; (*c != 0) && (field <= 31); field++) {
        while (*c == ')' || *c == ' ')
            c++;
        if (field == 3)
            state = *c;
        else if (field == 9)
            flags = strtoull(c, NULL, 10);
        else if (field == 31)
            sig = strtoull(c, NULL, 10);
        while ((*c != 0) && (*c != ' '))
            c++;
    }
    if ((state == 'Z') || (state == 'X') || (state == 'x'))
        return "its serving thread has exited";
    if (flags & TASK_PF_EXITING)
        return "it is exiting";
    if (sig & (1ull << (SIGKILL - 1)))
        return "it was sent SIGKILL";
    return NULL;
}

int mc_te_shm_holder_confirm(mc_te_shm_peer_t *p)
{
    const char *why = NULL;

    if (__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
        return 0;
    /* the copies before are done before what follows is read */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (p->life != NULL) {
        uint32_t w = __atomic_load_n(p->life, __ATOMIC_SEQ_CST);
        if (((w & FUTEX_TID_MASK) == 0) || (w & FUTEX_OWNER_DIED))
            why = "its serving thread ended";
    }
    if ((why == NULL) && (p->stat_fd >= 0)) {
        /* a read begun less than PEER_STAT_FRESH_NS ago stands (a read
         * costs microseconds, a small put tens of them) */
        uint64_t now = mc_now_ns();
        if (now - __atomic_load_n(&p->stat_live_ns, __ATOMIC_ACQUIRE) >= PEER_STAT_FRESH_NS) {
            why = stat_exiting(p->stat_fd);
            if (why == NULL)
                __atomic_store_n(&p->stat_live_ns, now, __ATOMIC_RELEASE);
        }
    }
    if (why == NULL)
        return 1;
    peer_give_up(p);
    mc_debug("same-host peer %s: %s; using TCP", p->name, why);
    return 0;
}

/* The status of direct writes into @p p's memory, just copied: MC_OK while
 * the holder is not exiting, else MC_TRANSFER_FAIL, as the network path
 * fails a write to a process that never answers. */
static mc_status_t write_confirmed(mc_te_shm_peer_t *p)
{
    if (mc_te_shm_holder_confirm(p))
        return MC_OK;
    mc_set_error_detail("write to same-host peer %s failed: the holder is exiting", p->name);
    return MC_TRANSFER_FAIL;
}

/* Index of the first map ending above addr; map_lock held. */
static size_t map_lower(const mc_te_shm_peer_t *p, uint64_t addr)
{
    size_t lo = 0, hi = p->nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->maps[mid].addr + p->maps[mid].len <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The map holding [addr, addr+len), or NULL; map_lock held. */
static peer_map_t *map_find(mc_te_shm_peer_t *p, uint64_t addr, uint64_t len)
{
    size_t i = map_lower(p, addr);
    if (i == p->nmaps)
        return NULL;
    if ((p->maps[i].addr <= addr) && (len <= p->maps[i].len) &&
        (addr - p->maps[i].addr <= p->maps[i].len - len))
        return &p->maps[i];
    return NULL;
}

/* The control word of @p m while the region is the one mapped: its
 * generation, or a later counter of it (engine.h, mc_te_gen_enter), which
 * then becomes the map's.  0 once it was unregistered (or registered
 * again: another base). */
static uint64_t map_word(const mc_te_shm_peer_t *p, peer_map_t *m)
{
    uint64_t w = __atomic_load_n(&p->ctl[m->slot], __ATOMIC_ACQUIRE);
    uint64_t g = __atomic_load_n(&m->gen, __ATOMIC_RELAXED);
    if (w == g)
        return w;
    if (mc_gen_newer(w, g)) {
        __atomic_store_n(&m->gen, w, __ATOMIC_RELAXED);
        return w;
    }
    return 0;
}

static int map_live(const mc_te_shm_peer_t *p, peer_map_t *m)
{
    return map_word(p, m) != 0;
}

/* Did the word stay @p w through a copy (a seqlock's second read)? */
static int map_same(const mc_te_shm_peer_t *p, const peer_map_t *m, uint64_t w)
{
    return __atomic_load_n(&p->ctl[m->slot], __ATOMIC_ACQUIRE) == w;
}

/* Count a direct write into @p m, whose word was @p w, and check that the
 * gate is open and the word unchanged (seq_cst: the other half of
 * mc_te_shm_slot_fence's Dekker).  0, counting nothing, when the write must
 * go over the network instead: no writer counts, a fence under way, or a
 * later generation. */
static int peer_write_enter(mc_te_shm_peer_t *p, const peer_map_t *m, uint64_t w)
{
    if (p->writers == NULL)
        return 0;
    __atomic_add_fetch(&p->writers[m->slot], 1, __ATOMIC_SEQ_CST);
    if ((__atomic_load_n(&p->gates[m->slot], __ATOMIC_SEQ_CST) == 0) &&
        (__atomic_load_n(&p->ctl[m->slot], __ATOMIC_SEQ_CST) == w))
        return 1;
    __atomic_sub_fetch(&p->writers[m->slot], 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* The direct write counted by peer_write_enter is done (its stores came
 * before: release). */
static void peer_write_exit(mc_te_shm_peer_t *p, const peer_map_t *m)
{
    __atomic_sub_fetch(&p->writers[m->slot], 1, __ATOMIC_RELEASE);
}

/* Insert @p m, dropping every map it overlaps (holder regions never
 * overlap, so those are stale).  Write lock held.  -1: no room. */
static int map_insert(mc_te_shm_peer_t *p, const peer_map_t *m)
{
    size_t i = map_lower(p, m->addr), j = i;
    peer_map_t *grown;
    while ((j < p->nmaps) && (p->maps[j].addr < m->addr + m->len)) {
        map_unmap(&p->maps[j]);
        j++;
    }
    if (j > i) { /* (maps is NULL while empty: memmove must not see it) */
        memmove(&p->maps[i], &p->maps[j], (p->nmaps - j) * sizeof(*p->maps));
        p->nmaps -= j - i;
    }
    if (p->nmaps >= PEER_MAX_MAPS)
        return -1;
    grown = realloc(p->maps, (p->nmaps + 1) * sizeof(*p->maps));
    if (grown == NULL)
        return -1;
    p->maps = grown;
    memmove(&p->maps[i + 1], &p->maps[i], (p->nmaps - i) * sizeof(*p->maps));
    p->maps[i] = *m;
    p->nmaps++;
    return 0;
}

/* Drop the map at addr if it is still the stale one we saw; write lock. */
static void map_drop_stale(mc_te_shm_peer_t *p, uint64_t addr, uint64_t gen)
{
    size_t i = map_lower(p, addr);
    if ((i < p->nmaps) && (p->maps[i].addr == addr) &&
        (__atomic_load_n(&p->maps[i].gen, __ATOMIC_RELAXED) == gen) &&
        (p->maps[i].base != NULL) && !map_live(p, &p->maps[i])) {
        map_unmap(&p->maps[i]);
        memmove(&p->maps[i], &p->maps[i + 1], (p->nmaps - i - 1) * sizeof(*p->maps));
        p->nmaps--;
    }
}

/* Ask the holder for the region holding [addr, addr+len) and record the
 * answer.  0 when something was recorded, -1 otherwise. */
static int map_ask(mc_te_shm_peer_t *p, uint64_t addr, uint64_t len)
{
    mc_te_shm_resp_t a;
    peer_map_t m;
    int fd = -1, rc;

    pthread_mutex_lock(&p->io_mu);
    rc = __atomic_load_n(&p->dead, __ATOMIC_ACQUIRE) ? -1
                                                       : exchange(p, MC_TE_SHM_MAP, addr, len, &a, &fd);
    if (rc != 0)
        __atomic_store_n(&p->dead, 1, __ATOMIC_RELEASE); /* out of step: stop using it */
    pthread_mutex_unlock(&p->io_mu);
    if (rc != 0) {
        peer_give_up(p);
        return -1;
    }

    memset(&m, 0, sizeof(m));
    m.addr = a.region_addr;
    m.len  = a.region_len;
    /* the answer must describe a region that holds what we asked for */
    if (((a.answer != MC_TE_SHM_OK) && (a.answer != MC_TE_SHM_NOT_SHARED)) || (m.len == 0) ||
        (m.len > UINT64_MAX - m.addr) || (m.addr > addr) || (m.addr + m.len < addr + len) ||
        (m.len > (uint64_t)SIZE_MAX)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    if (a.answer == MC_TE_SHM_OK) {
        void *base;
        if ((a.slot >= MC_TE_SHM_SLOTS) || (a.gen == 0) || !mc_te_shm_fd_shareable(fd, m.len)) {
            mc_warn("same-host peer %s granted an unusable region at 0x%llx; using TCP", p->name,
                    (unsigned long long)m.addr);
            if (fd >= 0)
                close(fd);
            return -1;
        }
        base = mmap(NULL, (size_t)m.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (base == MAP_FAILED) {
            mc_debug("cannot map %llu bytes of same-host peer %s: %m",
                     (unsigned long long)m.len, p->name);
            return -1;
        }
        m.base = base;
        m.slot = a.slot;
        m.gen  = a.gen;
        /* (no bits: writes fault page by page, as before) */
        m.warm = calloc((warm_blocks(base, m.len) + 63) / 64, sizeof(uint64_t));
    } else {
        if (fd >= 0)
            close(fd);
        m.recheck_ms = mc_now_ms() + PEER_UNSHARED_MS;
    }
    pthread_rwlock_wrlock(&p->map_lock);
    rc = __atomic_load_n(&p->dead, __ATOMIC_ACQUIRE) ? -1 : map_insert(p, &m);
    pthread_rwlock_unlock(&p->map_lock);
    if (rc != 0)
        map_unmap(&m);
    return rc;
}

/* The word of the live mapping holding [remote, remote+len), 0 when there
 * is none (not mapped, served over the network only, or gone); with
 * @p gate_p, its slot's gate word too (read under the same lock).  A hint
 * for the three questions below: a fence may begin right after. */
static uint64_t map_probe(mc_te_shm_peer_t *p, uint64_t remote, uint64_t len, uint64_t *gate_p)
{
    peer_map_t *m;
    uint64_t w = 0;
    if ((len == 0) || (len > UINT64_MAX - remote) || __atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
        return 0;
    pthread_rwlock_rdlock(&p->map_lock);
    m = map_find(p, remote, len);
    if ((m != NULL) && (m->base != NULL))
        w = map_word(p, m);
    if ((w != 0) && (gate_p != NULL))
        *gate_p = __atomic_load_n(&p->gates[m->slot], __ATOMIC_ACQUIRE);
    pthread_rwlock_unlock(&p->map_lock);
    return w;
}

int mc_te_shm_mapped(mc_te_shm_peer_t *p, uint64_t remote, uint64_t len)
{
    return map_probe(p, remote, len, NULL) != 0;
}

int mc_te_shm_write_ready(mc_te_shm_peer_t *p, uint64_t lo, uint64_t hi, uint64_t gen)
{
    uint64_t w, gate = 1;
    if ((hi <= lo) || (p->writers == NULL))
        return 0;
    w = map_probe(p, lo, hi - lo, &gate);
    return (w != 0) && ((gen == 0) || (w == gen)) && (gate == 0);
}

int mc_te_shm_gen_unadopted(mc_te_shm_peer_t *p, uint64_t remote, uint64_t len, uint64_t gen)
{
    uint64_t w = (gen != 0) ? map_probe(p, remote, len, NULL) : 0;
    return (w != 0) && mc_gen_newer(gen, w);
}

/*
 * A request naming generation @p gen on the mapping whose word is @p w:
 * 0 to go ahead (@p gen is 0 or w), 1 when it is refused as the holder's
 * engine would refuse it (*st_p written), -1 when the network path must
 * take it: @p gen is a later counter that the holder has not adopted yet,
 * or a write names an earlier one, which the holder may still take.
 */
static int gen_mismatch(const mc_te_shm_peer_t *p, uint64_t w, mc_te_op_t op, uint64_t gen,
                        uint64_t remote, uint64_t len, mc_status_t *st_p)
{
    if ((gen == 0) || (w == gen))
        return 0;
    /* a later counter, or a write naming an earlier one that the holder
     * may still take (down to its last fence, which only it knows) */
    if (mc_gen_newer(gen, w) || ((op == MC_TE_WRITE) && (mc_gen_base(gen) == mc_gen_base(w))))
        return -1;
    mc_set_error_detail("%s of [0x%llx, +%llu) refused: same-host peer %s holds no region of "
                        "generation %016llx there (unregistered, registered again or reused)",
                        (op == MC_TE_READ) ? "read" : "write", (unsigned long long)remote,
                        (unsigned long long)len, p->name, (unsigned long long)gen);
    *st_p = (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
    return 1;
}

/* mc_te_shm_read_many and mc_te_shm_write_many: one lock, one lookup and
 * one check that the region stayed the same for the whole batch. */
static int shm_many(mc_te_shm_peer_t *p, mc_te_op_t op, const mc_te_request_t *reqs, size_t n,
                    uint64_t lo, uint64_t hi, uint64_t gen, mc_status_t *st_p)
{
    peer_map_t *m;
    uint64_t w;

    if ((n == 0) || (hi <= lo) || __atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
        return 0;
    pthread_rwlock_rdlock(&p->map_lock);
    m = map_find(p, lo, hi - lo);
    if ((m == NULL) || (m->base == NULL) || ((w = map_word(p, m)) == 0)) {
        pthread_rwlock_unlock(&p->map_lock);
        return 0;
    }
    if (op == MC_TE_READ) {
        int mis = gen_mismatch(p, w, MC_TE_READ, gen, lo, hi - lo, st_p);
        if (mis != 0) {
            pthread_rwlock_unlock(&p->map_lock);
            return mis > 0;
        }
    } else if (((gen != 0) && (w != gen)) || !peer_write_enter(p, m, w)) {
        /* a generation the holder may still adopt, or a fence under way:
         * the one-by-one path takes it to the network, which decides each */
        pthread_rwlock_unlock(&p->map_lock);
        return 0;
    }
    if (op == MC_TE_READ) {
        for (size_t j = 0; j < n; j++)
            mc_copy_stream(reqs[j].local, m->base + (reqs[j].remote - m->addr),
                           (size_t)reqs[j].length);
    } else {
        mc_te_sent_hook_run(); /* copies: nothing to send first */
        for (size_t j = 0; j < n; j++) {
            uint8_t *at = m->base + (reqs[j].remote - m->addr);
            map_warm(m, at, reqs[j].length);
            mc_copy_stream(at, reqs[j].local, (size_t)reqs[j].length);
        }
    }
    mc_copy_stream_fence();
    /* as in mc_te_shm_xfer: the copies are done before the word is read */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (op == MC_TE_WRITE)
        peer_write_exit(p, m);
    if (!map_same(p, m, w)) {
        pthread_rwlock_unlock(&p->map_lock);
        mc_set_error_detail("%s of %zu pieces in [0x%llx, 0x%llx) on same-host peer %s failed: "
                            "the region was unregistered or reused during the copy",
                            (op == MC_TE_READ) ? "read" : "write", n, (unsigned long long)lo,
                            (unsigned long long)hi, p->name);
        *st_p = (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
        return 1;
    }
    pthread_rwlock_unlock(&p->map_lock);
    *st_p = (op == MC_TE_WRITE) ? write_confirmed(p) : MC_OK;
    return 1;
}

int mc_te_shm_read_many(mc_te_shm_peer_t *p, const mc_te_request_t *reqs, size_t n, uint64_t lo,
                        uint64_t hi, uint64_t gen, mc_status_t *st_p)
{
    return shm_many(p, MC_TE_READ, reqs, n, lo, hi, gen, st_p);
}

/* streaming stores, as mc_te_shm_read_many: a row-sized memcpy would first
 * read every line of the holder's memory it fills */
int mc_te_shm_write_many(mc_te_shm_peer_t *p, const mc_te_request_t *reqs, size_t n,
                         uint64_t lo, uint64_t hi, uint64_t gen, mc_status_t *st_p)
{
    return shm_many(p, MC_TE_WRITE, reqs, n, lo, hi, gen, st_p);
}

int mc_te_shm_xfer(mc_te_shm_peer_t *p, mc_te_op_t op, void *local, uint64_t remote,
                   uint64_t len, uint64_t gen, mc_status_t *st_p)
{
    if ((len == 0) || (len > UINT64_MAX - remote))
        return 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        peer_map_t *m;
        uint64_t mgen, at, w;

        if (__atomic_load_n(&p->dead, __ATOMIC_ACQUIRE))
            return 0;
        pthread_rwlock_rdlock(&p->map_lock);
        m = map_find(p, remote, len);
        if ((m != NULL) && (m->base == NULL)) {
            int fresh = mc_now_ms() < m->recheck_ms;
            pthread_rwlock_unlock(&p->map_lock);
            /* the holder serves this region over the network only; once the
             * answer is old, ask again (a new answer replaces it) */
            if (fresh || (attempt > 0) || (map_ask(p, remote, len) != 0))
                return 0;
            continue;
        }
        if ((m != NULL) && ((w = map_word(p, m)) != 0)) {
            uint8_t *at_p = m->base + (remote - m->addr);
            int mis       = gen_mismatch(p, w, op, gen, remote, len, st_p);
            if (mis != 0) {
                pthread_rwlock_unlock(&p->map_lock);
                return mis > 0;
            }
            if ((op == MC_TE_WRITE) && !peer_write_enter(p, m, w)) {
                pthread_rwlock_unlock(&p->map_lock);
                return 0; /* over the network, where the holder sees it */
            }
            mc_te_sent_hook_run(); /* a copy: nothing to send first */
            if (op == MC_TE_READ) {
                memcpy(local, at_p, (size_t)len);
            } else {
                map_warm(m, at_p, len);
                memcpy(at_p, local, (size_t)len);
            }
            /* The copy's loads and stores must be done before the word is
             * read again (a seqlock's reader): an acquire load alone lets
             * earlier loads (weak CPUs) and stores (x86 too) pass it. */
            __atomic_thread_fence(__ATOMIC_SEQ_CST);
            if (op == MC_TE_WRITE)
                peer_write_exit(p, m);
            if (!map_same(p, m, w)) {
                pthread_rwlock_unlock(&p->map_lock);
                mc_set_error_detail("%s of [0x%llx, +%llu) on same-host peer %s failed: the "
                                    "region was unregistered or reused during the copy",
                                    (op == MC_TE_READ) ? "read" : "write",
                                    (unsigned long long)remote, (unsigned long long)len,
                                    p->name);
                *st_p = (op == MC_TE_READ) ? MC_INVALID_READ : MC_INVALID_WRITE;
                return 1;
            }
            pthread_rwlock_unlock(&p->map_lock);
            *st_p = (op == MC_TE_WRITE) ? write_confirmed(p) : MC_OK;
            return 1;
        }
        at  = (m != NULL) ? m->addr : 0;
        mgen = (m != NULL) ? __atomic_load_n(&m->gen, __ATOMIC_RELAXED) : 0;
        pthread_rwlock_unlock(&p->map_lock);
        if (m != NULL) {
            /* unregistered since we mapped it: drop it, then ask again */
            pthread_rwlock_wrlock(&p->map_lock);
            map_drop_stale(p, at, mgen);
            pthread_rwlock_unlock(&p->map_lock);
        }
        if ((attempt > 0) || (map_ask(p, remote, len) != 0))
            return 0;
    }
    return 0;
}
