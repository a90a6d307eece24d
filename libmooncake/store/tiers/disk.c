/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's SSD tier (docs/tiers.md): bucket files of checksummed
 * records, written by one offloader thread, read by anyone who has the
 * path.
 *
 * Writing.  A put or upsert that this client sealed queues its key
 * (mc_store_disk_enqueue: a copy of the key under the worker's lock, never
 * a wait).  The offloader thread takes keys in order and, for each, asks
 * the master where the value is (GET_REPLICA_LIST, which also leases it),
 * reads it from a memory replica with the transfer engine (memcpy when it
 * is in this process's segment), appends one record to the current bucket
 * with a single pwritev, and reports it (OFFLOAD_REPORT, naming the
 * replica it read, so the master refuses a copy the value has outgrown).
 * The put path pays one malloc and one signal.
 *
 * Files.  DIR/<id>.bucket, ids rising from 1, append only: a bucket is
 * never rewritten, only deleted whole.  DIR/LOCK is held (flock) for the
 * tier's life, so two clients never share a directory; at start the
 * bucket files of an earlier run are deleted, since the master dropped
 * their disk replicas when that client went (docs/tiers.md, "holder
 * departure").
 *
 * A record: a 24-byte header, the key, the value.
 *
 *   u32 magic "MCDR" | u16 version 1 | u16 key length | u64 value length |
 *   u32 CRC32C of the value | u32 CRC32C of header bytes 0..19 and the key
 *
 * all little-endian.  A reader checks both CRCs, the key, the length and
 * that the value's CRC is the one the master handed out; any mismatch
 * (a torn write after a crash, a truncated or corrupted file, a record
 * that is not the one asked for) is a miss, never bytes.
 *
 * Bounds.  A bucket closes at MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES or
 * MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT records; when the next record would
 * take the tier past MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES, the oldest
 * buckets go (unlinked, then DISK_REPLICA_DROP of their keys).  The queue
 * holds at most MC_DISK_QUEUE_MAX keys; more are dropped and counted.
 *
 * Retiring (mc_store_offload_stop, upstream unmount_local_disk_segment,
 * for a shutdown hook).  The queue takes no more keys and the offloader
 * parks once the record in hand is reported, so nothing is reported after
 * the next step: DISK_REPLICA_DROP of every record, bucket by bucket, so
 * the master stops naming this client as a holder and a reader gets a
 * clean miss rather than a peer about to go.  The index and the DISK_READ
 * server stay until close, so the reads handed out before that finish
 * while the caller holds for its grace period.
 *
 * May call: disk.h (this folder), ../threads/threads.h (the offloader is a
 * worker), ../calls.c, the master pool, the engine.  Called by: tiers.c
 * (the hooks), store.c (start, stop), ../threads/tasks.c and
 * ../read/query.c (a record's read).
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/crc32c.h"
#include "common/dfs_layout.h"
#include "common/log.h"
#include "store/store_internal.h"
#include "store/threads/threads.h"
#include "store/tiers/disk.h"
#include "store/tiers/tiers.h"
#include "transfer/engine.h"

#define MC_DISK_MAGIC      0x5244434Du /* "MCDR" little-endian */
#define MC_DISK_VERSION    1
#define MC_DISK_HDR        MC_STORE_DISK_HDR
#define MC_DISK_QUEUE_MAX  65536u
#define MC_DISK_BATCH      64u
#define MC_DISK_IDLE_MS    1000u

/* One record the tier wrote: what a DISK_READ must name exactly. */
typedef struct disk_rec {
    char *key;
    uint64_t off;  /* where the record starts */
    uint64_t len;  /* value bytes */
    uint32_t crc;  /* CRC32C of the value */
} disk_rec_t;

/* One bucket file: its id, bytes written and its records, by offset. */
typedef struct disk_bucket {
    uint64_t id;
    uint64_t bytes;
    disk_rec_t *recs;
    uint32_t nkeys;
    uint32_t cap;
} disk_bucket_t;

struct mc_store_disk {
    char dir[PATH_MAX];
    int lock_fd;
    /* limits */
    uint64_t bucket_bytes_max;
    uint64_t bucket_keys_max;
    uint64_t total_max;
    /* queue of keys to offload: a ring guarded by the worker's lock */
    char **queue;
    uint32_t qhead, qlen;
    /* buckets, oldest first; the last one is open (fd).  The offloader
     * alone changes them, under idx_lock (write); DISK_READs served for
     * other hosts look records up under it (read). */
    pthread_rwlock_t idx_lock;
    disk_bucket_t *buckets;
    size_t nbuckets, bcap;
    int fd;
    uint64_t next_id;
    uint64_t used;     /* bytes in every bucket file */
    /* scratch for values read from memory */
    uint8_t *buf;
    size_t buf_cap;
    mc_store_disk_stats_t st; /* guarded by the worker's lock */
    /* mc_store_offload_stop(), each set once under the worker's lock:
     * retired, no more keys are taken; parked, the offloader has stopped
     * for good; dropped, the master was told every record is gone */
    int retired;
    int parked;
    int dropped;
};

/* ---- records ------------------------------------------------------------- */

static uint32_t header_crc(const uint8_t *hdr, const char *key, size_t klen)
{
    return mc_crc32c(mc_crc32c(0, hdr, 20), key, klen);
}

/*
 * Open bucket files, shared by every read of this process (docs/tiers.md
 * §4): an open and a close cost as much as a tenth of a 1 MiB read.  A few
 * entries, keyed by path, each with the st_dev/st_ino it was opened as.  A
 * bucket is never rewritten, so an fd gives the right bytes for as long as
 * it is open, even after an unlink; but a path can come back as a new file
 * (a new client on the same directory), so an entry older than
 * MC_FDC_CHECK_MS is checked against stat() before use, a record that fails
 * its checks through a cached fd is read again through a fresh open, and the
 * holder forgets a bucket when it unlinks it.  Entries unused for
 * MC_FDC_IDLE_MS are closed, so a deleted bucket's space is not pinned for
 * long.
 */
#define MC_FDC_N        8
#define MC_FDC_CHECK_MS 1000u
#define MC_FDC_IDLE_MS  5000u

typedef struct fdc_entry {
    char path[PATH_MAX];
    int fd;            /* -1: free */
    unsigned refs;     /* reads using fd */
    int dead;          /* close when refs drop to 0 */
    dev_t dev;
    ino_t ino;
    uint64_t checked_ms;
    uint64_t used_ms;
} fdc_entry_t;

static pthread_mutex_t fdc_mu = PTHREAD_MUTEX_INITIALIZER;
static fdc_entry_t fdc[MC_FDC_N] = {[0 ... MC_FDC_N - 1] = {.fd = -1}};

/* Close @p e if nobody reads through it, else when the last read ends.
 * fdc_mu held. */
static void fdc_drop(fdc_entry_t *e)
{
    if (e->fd < 0)
        return;
    if (e->refs > 0) {
        e->dead = 1;
        return;
    }
    close(e->fd);
    e->fd   = -1;
    e->dead = 0;
}

/* An fd for @p path, from the cache or freshly opened (then cached when
 * there is room); *e_p is the entry to give back with fdc_put, or NULL
 * when the fd is the caller's to close.  -1 (errno) when it cannot be
 * opened. */
static int fdc_get(const char *path, fdc_entry_t **e_p)
{
    uint64_t now = mc_now_ms();
    fdc_entry_t *e = NULL, *slot = NULL;
    struct stat sb;
    size_t len = strlen(path);
    int fd;

    *e_p = NULL;
    if (len >= PATH_MAX)
        return open(path, O_RDONLY | O_CLOEXEC);
    pthread_mutex_lock(&fdc_mu);
    for (int i = 0; i < MC_FDC_N; i++) {
        fdc_entry_t *c = &fdc[i];
        if ((c->fd >= 0) && !c->dead && (c->refs == 0) && (now - c->used_ms > MC_FDC_IDLE_MS))
            fdc_drop(c);
        if ((c->fd >= 0) && !c->dead && (strcmp(c->path, path) == 0))
            e = c;
    }
    if ((e != NULL) && (now - e->checked_ms > MC_FDC_CHECK_MS)) {
        if ((stat(path, &sb) != 0) || (sb.st_dev != e->dev) || (sb.st_ino != e->ino)) {
            fdc_drop(e);
            e = NULL;
        } else {
            e->checked_ms = now;
        }
    }
    if (e != NULL) {
        e->refs++;
        e->used_ms = now;
        pthread_mutex_unlock(&fdc_mu);
        *e_p = e;
        return e->fd;
    }
    pthread_mutex_unlock(&fdc_mu);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if ((fd < 0) || (fstat(fd, &sb) != 0))
        return fd;
    pthread_mutex_lock(&fdc_mu);
    for (int i = 0; i < MC_FDC_N; i++) { /* a free slot, else the least recently used idle one */
        fdc_entry_t *c = &fdc[i];
        if (c->fd < 0) {
            slot = c;
            break;
        }
        if ((c->refs == 0) && ((slot == NULL) || (c->used_ms < slot->used_ms)))
            slot = c;
    }
    if (slot != NULL) {
        fdc_drop(slot);
        memcpy(slot->path, path, len + 1);
        slot->fd         = fd;
        slot->refs       = 1;
        slot->dead       = 0;
        slot->dev        = sb.st_dev;
        slot->ino        = sb.st_ino;
        slot->checked_ms = now;
        slot->used_ms    = now;
        *e_p             = slot;
    }
    pthread_mutex_unlock(&fdc_mu);
    return fd;
}

/* Give back an fd from fdc_get; @p bad drops the entry (its record failed
 * a check: the next read opens the path afresh). */
static void fdc_put(fdc_entry_t *e, int fd, int bad)
{
    if (e == NULL) {
        close(fd);
        return;
    }
    pthread_mutex_lock(&fdc_mu);
    e->refs--;
    if (bad || e->dead)
        fdc_drop(e);
    pthread_mutex_unlock(&fdc_mu);
}

/* The holder deleted @p path: close a cached fd of it. */
static void fdc_forget(const char *path)
{
    pthread_mutex_lock(&fdc_mu);
    for (int i = 0; i < MC_FDC_N; i++)
        if ((fdc[i].fd >= 0) && (strcmp(fdc[i].path, path) == 0))
            fdc_drop(&fdc[i]);
    pthread_mutex_unlock(&fdc_mu);
}

void mc_store_disk_record_header(uint8_t hdr[MC_STORE_DISK_HDR], mc_str_t key, uint64_t size,
                                 uint32_t crc)
{
    mc_store_le32(hdr, MC_DISK_MAGIC);
    mc_store_le16(hdr + 4, MC_DISK_VERSION);
    mc_store_le16(hdr + 6, (uint16_t)key.len);
    mc_store_le64(hdr + 8, size);
    mc_store_le32(hdr + 16, crc);
    mc_store_le32(hdr + 20, header_crc(hdr, key.ptr, key.len));
}

/*
 * A large value is read by two threads (docs/tiers.md §4).  After the
 * header, key and first chunk, the value's chunks go to whichever of the
 * reader and a helper thread claims them next; each reads its chunk
 * straight into the caller's buffer and checksums it while it is still in
 * that core's cache.  On the development VM the kernel's copy of a 1 MiB
 * value and its CRC32C pass took about 125 and 50 µs one after the other
 * on one core.  Nothing waits for the helper: the reader offers the job
 * and works through the chunks itself; when none is left it waits only
 * for the one the helper may be on.  A busy helper (another reader's job)
 * or one not scheduled in time leaves the reader to do it all, as without
 * it.  One helper per process, started at the first large read, never
 * stopped.  The per-chunk CRCs are joined in order (mc_crc32c_combine).
 */
#define MC_PIPE_MIN        (512u * 1024u)
#define MC_PIPE_CHUNK      (128u * 1024u)
#define MC_PIPE_MAX_CHUNKS 64u

typedef struct pipe_job {
    int fd;
    uint64_t at;        /* file offset of the value */
    uint8_t *buf;
    uint64_t len, chunk;
    unsigned nch;
    unsigned claimed;   /* atomic: chunks someone took (nch: none left) */
    int failed;         /* atomic: a chunk read short */
    int helper_in;      /* atomic: the helper holds this job */
    uint32_t crc[MC_PIPE_MAX_CHUNKS];
} pipe_job_t;

static pthread_mutex_t pipe_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pipe_cond = PTHREAD_COND_INITIALIZER;
static pipe_job_t *pipe_offer; /* a job waiting for the helper */
static int pipe_busy;          /* the helper is on a job */
static int pipe_ok;            /* the helper runs */
static pthread_once_t pipe_once = PTHREAD_ONCE_INIT;

static uint64_t pipe_chunk_len(const pipe_job_t *j, unsigned c)
{
    uint64_t off = (uint64_t)c * j->chunk;
    return MC_MIN(j->chunk, j->len - off);
}

static ssize_t pread_full(int fd, void *buf, size_t len, uint64_t off)
{
    ssize_t n;
    do {
        n = pread(fd, buf, len, (off_t)off);
    } while ((n < 0) && (errno == EINTR));
    return n;
}

/* Read and checksum chunks nobody took, until none is left or one read
 * short (then nobody takes more). */
static void pipe_work(pipe_job_t *j)
{
    for (;;) {
        unsigned c = __atomic_fetch_add(&j->claimed, 1, __ATOMIC_ACQ_REL);
        uint64_t off;
        size_t len;
        if (c >= j->nch)
            return;
        off = (uint64_t)c * j->chunk;
        len = (size_t)pipe_chunk_len(j, c);
        if (pread_full(j->fd, j->buf + off, len, j->at + off) != (ssize_t)len) {
            __atomic_store_n(&j->failed, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&j->claimed, j->nch, __ATOMIC_RELEASE);
            return;
        }
        j->crc[c] = mc_crc32c(0, j->buf + off, len);
    }
}

static void *pipe_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&pipe_mu);
    for (;;) {
        pipe_job_t *j;
        while (pipe_offer == NULL)
            pthread_cond_wait(&pipe_cond, &pipe_mu);
        j          = pipe_offer;
        pipe_offer = NULL;
        pipe_busy  = 1;
        __atomic_store_n(&j->helper_in, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&pipe_mu);
        pipe_work(j);
        __atomic_store_n(&j->helper_in, 0, __ATOMIC_RELEASE); /* j is the reader's again */
        pthread_mutex_lock(&pipe_mu);
        pipe_busy = 0;
    }
    return NULL;
}

/* A child of fork() has no helper (and maybe a lock the helper held):
 * its reads go alone. */
static void pipe_forked(void)
{
    pthread_mutex_init(&pipe_mu, NULL);
    pthread_cond_init(&pipe_cond, NULL);
    pipe_offer = NULL;
    pipe_busy  = 0;
    pipe_ok    = 0;
}

static void pipe_start(void)
{
    pthread_attr_t attr;
    pthread_t tid;

    if (pthread_atfork(NULL, NULL, pipe_forked) != 0)
        return; /* no helper: a child could not tell */
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pipe_ok = pthread_create(&tid, &attr, pipe_main, NULL) == 0;
    pthread_attr_destroy(&attr);
    if (!pipe_ok)
        mc_debug("disk tier: no helper thread; large values are read by one thread");
}

/* Offer @p j to the helper; 1 when it was free to take it. */
static int pipe_offer_job(pipe_job_t *j)
{
    int offered = 0;

    pthread_once(&pipe_once, pipe_start);
    pthread_mutex_lock(&pipe_mu);
    if (pipe_ok && (pipe_offer == NULL) && !pipe_busy) {
        pipe_offer = j;
        offered    = 1;
        pthread_cond_signal(&pipe_cond);
    }
    pthread_mutex_unlock(&pipe_mu);
    return offered;
}

/* Take @p j back: withdrawn if the helper never took it, else wait for it
 * to let go.  Then no other thread touches j or the buffer. */
static void pipe_reclaim(pipe_job_t *j)
{
    pthread_mutex_lock(&pipe_mu);
    if (pipe_offer == j)
        pipe_offer = NULL;
    pthread_mutex_unlock(&pipe_mu);
    while (__atomic_load_n(&j->helper_in, __ATOMIC_ACQUIRE))
        sched_yield(); /* at most the chunk it is on */
}

/*
 * Read the record at @p offset into @p hdr, @p kbuf and @p buf (@p size
 * value bytes), the value by two threads with its CRC32C computed as it
 * comes in (above); *crc_p is written when every byte was read.  0, or -1
 * on a short read.
 */
static int pipe_read(int fd, uint64_t offset, uint8_t *hdr, char *kbuf, size_t klen, void *buf,
                     uint64_t size, uint32_t *crc_p)
{
    pipe_job_t j;
    struct iovec iov[3];
    int offered;
    ssize_t n;
    uint32_t crc;

    j.fd        = fd;
    j.at        = offset + MC_DISK_HDR + klen;
    j.buf       = buf;
    j.len       = size;
    j.chunk     = MC_MAX((uint64_t)MC_PIPE_CHUNK,
                         ((size + MC_PIPE_MAX_CHUNKS - 1) / MC_PIPE_MAX_CHUNKS + 4095) &
                             ~(uint64_t)4095);
    j.nch       = (unsigned)((size + j.chunk - 1) / j.chunk);
    j.claimed   = 1; /* chunk 0 comes with the header */
    j.failed    = 0;
    j.helper_in = 0;
    offered     = pipe_offer_job(&j);
    iov[0].iov_base = hdr;
    iov[0].iov_len  = MC_DISK_HDR;
    iov[1].iov_base = kbuf;
    iov[1].iov_len  = klen;
    iov[2].iov_base = buf;
    iov[2].iov_len  = (size_t)pipe_chunk_len(&j, 0);
    do {
        n = preadv(fd, iov, 3, (off_t)offset);
    } while ((n < 0) && (errno == EINTR));
    if (n == (ssize_t)(MC_DISK_HDR + klen + iov[2].iov_len)) {
        j.crc[0] = mc_crc32c(0, buf, iov[2].iov_len);
        pipe_work(&j);
    } else {
        __atomic_store_n(&j.failed, 1, __ATOMIC_RELEASE);
        __atomic_store_n(&j.claimed, j.nch, __ATOMIC_RELEASE); /* stop the helper */
    }
    if (offered)
        pipe_reclaim(&j);
    if (__atomic_load_n(&j.failed, __ATOMIC_ACQUIRE))
        return -1;
    crc = j.crc[0];
    for (unsigned c = 1; c < j.nch; c++)
        crc = mc_crc32c_combine(crc, j.crc[c], pipe_chunk_len(&j, c));
    *crc_p = crc;
    return 0;
}

/* The record at @p offset of @p fd -- one preadv of header, key and
 * value, or a pipe_read for a large value -- and every check (the value's
 * CRC against *crc unless NULL); MC_OBJECT_NOT_FOUND when anything is off. */
static mc_status_t record_read(int fd, uint64_t offset, mc_str_t key, uint64_t size,
                               const uint32_t *crc, void *buf)
{
    uint8_t hdr[MC_DISK_HDR];
    char kbuf[MC_WIRE_MAX_KEY];
    struct iovec iov[3];
    uint32_t vcrc = 0;
    int piped     = size >= MC_PIPE_MIN;
    ssize_t n;

    if (piped) {
        if (pipe_read(fd, offset, hdr, kbuf, key.len, buf, size, &vcrc) != 0)
            return MC_OBJECT_NOT_FOUND;
    } else {
        iov[0].iov_base = hdr;
        iov[0].iov_len  = sizeof(hdr);
        iov[1].iov_base = kbuf;
        iov[1].iov_len  = key.len;
        iov[2].iov_base = buf;
        iov[2].iov_len  = (size_t)size;
        do {
            n = preadv(fd, iov, 3, (off_t)offset);
        } while ((n < 0) && (errno == EINTR));
        if (n != (ssize_t)(MC_DISK_HDR + key.len + size))
            return MC_OBJECT_NOT_FOUND;
    }
    if ((mc_load_le32(hdr) != MC_DISK_MAGIC) || (mc_load_le16(hdr + 4) != MC_DISK_VERSION) ||
        (mc_load_le16(hdr + 6) != key.len) || (mc_load_le64(hdr + 8) != size) ||
        ((crc != NULL) && (mc_load_le32(hdr + 16) != *crc)) ||
        (memcmp(kbuf, key.ptr, key.len) != 0) ||
        (mc_load_le32(hdr + 20) != header_crc(hdr, kbuf, key.len)))
        return MC_OBJECT_NOT_FOUND;
    if (!piped)
        vcrc = mc_crc32c(0, buf, (size_t)size);
    return (vcrc == mc_load_le32(hdr + 16)) ? MC_OK : MC_OBJECT_NOT_FOUND;
}

mc_status_t mc_store_disk_read(const char *path, uint64_t offset, mc_str_t key, uint64_t size,
                               uint32_t crc, void *buf)
{
    return mc_store_disk_read_record(path, offset, key, size, &crc, buf);
}

mc_status_t mc_store_disk_read_record(const char *path, uint64_t offset, mc_str_t key,
                                      uint64_t size, const uint32_t *crc, void *buf)
{
    fdc_entry_t *e;
    mc_status_t st = MC_OBJECT_NOT_FOUND;
    int fd;

    if ((key.len == 0) || (key.len > MC_WIRE_MAX_KEY) || (offset > (uint64_t)INT64_MAX) ||
        (size > (uint64_t)SSIZE_MAX - MC_DISK_HDR - key.len)) {
        mc_set_error_detail("disk record of %.*s: bad request", (int)MC_MIN(key.len, 128u),
                            key.ptr);
        return MC_INVALID_PARAMS;
    }
    for (int attempt = 0; attempt < 2; attempt++) {
        fd = fdc_get(path, &e);
        if (fd < 0) {
            /* another host's disk, or a bucket deleted meanwhile */
            mc_set_error_detail("disk replica of %.*s: cannot open %s: %s",
                                (int)MC_MIN(key.len, 128u), key.ptr, path, strerror(errno));
            return MC_OBJECT_NOT_FOUND;
        }
        st = record_read(fd, offset, key, size, crc, buf);
        fdc_put(e, fd, st != MC_OK);
        if ((st == MC_OK) || (e == NULL))
            break; /* a fresh open failed the checks: the file is what it is */
    }
    if (st != MC_OK)
        mc_set_error_detail("disk record of %.*s at %s+%" PRIu64 " is missing or damaged",
                            (int)MC_MIN(key.len, 128u), key.ptr, path, offset);
    return st;
}

/*
 * Read a disk replica for this process: straight from the file when it can
 * be opened here and its record checks out (the same host, or a shared
 * file system), else through its holder's transfer engine (DISK_READ),
 * which serves it only from a record of its own.  MC_TEST_DISK_REMOTE_ONLY=1
 * (tests only, docs/tiers.md §4) skips the file, so one host can play the
 * reader on another.
 */
mc_status_t mc_store_disk_fetch(mc_store_h s, const char *path, const char *segment,
                                uint64_t offset, mc_str_t key, uint64_t size, uint32_t crc,
                                void *buf)
{
    const char *only_remote = getenv("MC_TEST_DISK_REMOTE_ONLY");
    mc_te_disk_req_t req;
    mc_status_t st = MC_OBJECT_NOT_FOUND;
    size_t plen    = strlen(path);

    if ((only_remote == NULL) || (strcmp(only_remote, "1") != 0)) {
        st = mc_store_disk_read(path, offset, key, size, crc, buf);
        if (st != MC_OBJECT_NOT_FOUND)
            return st;
    }
    if ((segment == NULL) || (*segment == '\0') || (size == 0) || (plen > MC_TE_DISK_PATH_MAX) ||
        (key.len > MC_TE_DISK_KEY_MAX))
        return st;
    memset(&req, 0, sizeof(req));
    req.offset   = offset;
    req.length   = size;
    req.crc      = crc;
    req.key      = key.ptr;
    req.key_len  = key.len;
    req.path     = path;
    req.path_len = plen;
    st           = mc_te_disk_read(s->te, segment, &req, buf);
    if (st == MC_OK)
        return MC_OK;
    mc_set_error_detail("disk replica of %.*s at %s+%" PRIu64 ": not readable here, and its "
                        "holder %s answered %s",
                        (int)MC_MIN(key.len, 128u), key.ptr, path, offset, segment,
                        mc_status_name(st));
    return MC_OBJECT_NOT_FOUND;
}

/* ---- buckets ------------------------------------------------------------- */

static void bucket_path(const mc_store_disk_t *d, uint64_t id, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%" PRIu64 ".bucket", d->dir, id);
}

static void bucket_free_keys(disk_bucket_t *b)
{
    for (uint32_t i = 0; i < b->nkeys; i++)
        free(b->recs[i].key);
    free(b->recs);
    b->recs  = NULL;
    b->nkeys = b->cap = 0;
}

/* Open a new bucket as the current one. */
static mc_status_t bucket_open(mc_store_disk_t *d)
{
    char path[PATH_MAX + 32];
    disk_bucket_t *b;

    if (d->nbuckets == d->bcap) {
        size_t cap = d->bcap ? d->bcap * 2 : 16;
        disk_bucket_t *nb;
        pthread_rwlock_wrlock(&d->idx_lock);
        nb = realloc(d->buckets, cap * sizeof(*nb));
        if (nb != NULL) {
            d->buckets = nb;
            d->bcap    = cap;
        }
        pthread_rwlock_unlock(&d->idx_lock);
        if (nb == NULL)
            return MC_INTERNAL_ERROR;
    }
    bucket_path(d, d->next_id, path, sizeof(path));
    d->fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (d->fd < 0) {
        mc_warn("disk tier: cannot create %s: %m", path);
        return MC_UNABLE_OFFLOAD;
    }
    pthread_rwlock_wrlock(&d->idx_lock);
    b = &d->buckets[d->nbuckets];
    memset(b, 0, sizeof(*b));
    b->id = d->next_id++;
    d->nbuckets++;
    pthread_rwlock_unlock(&d->idx_lock);
    return MC_OK;
}

/* Tell the master the records of @p b are gone (best effort: a holder
 * that cannot reach the master is dropped with all its disk replicas). */
static void bucket_report_drop(mc_store_h s, mc_mconn_t *conn, const mc_store_disk_t *d,
                               const disk_bucket_t *b)
{
    char path[PATH_MAX + 32];
    mc_str_t *keys;
    mc_wire_disk_replica_drop_req_t req;
    mc_wire_disk_replica_drop_resp_t resp;
    mc_status_t st;

    if ((conn == NULL) || (b->nkeys == 0))
        return;
    keys = malloc(b->nkeys * sizeof(*keys));
    if (keys == NULL)
        return;
    for (uint32_t i = 0; i < b->nkeys; i++)
        keys[i] = mc_str_from_cstr(b->recs[i].key);
    bucket_path(d, b->id, path, sizeof(path));
    memset(&req, 0, sizeof(req));
    req.client_id = s->client_id;
    req.file_path = mc_str_from_cstr(path);
    req.keys.n    = b->nkeys;
    req.keys.v    = keys;
    st            = mc_master_call_disk_replica_drop(conn, &req, &resp);
    if (st != MC_OK)
        mc_warn("disk tier: DISK_REPLICA_DROP of %u keys failed: %s", b->nkeys,
                mc_status_name(st));
    free(keys);
}

/* Delete the oldest bucket (the open one too when it is the only one). */
static void bucket_evict_oldest(mc_store_h s, mc_mconn_t *conn, mc_store_disk_t *d,
                                mc_store_worker_t *w)
{
    char path[PATH_MAX + 32];
    disk_bucket_t b = d->buckets[0];

    if (d->nbuckets == 1) {
        close(d->fd);
        d->fd = -1;
    }
    bucket_path(d, b.id, path, sizeof(path));
    /* unlinked first: a reader with the file open keeps reading the old
     * bytes, a later open fails, and nothing is ever rewritten */
    if (unlink(path) != 0)
        mc_warn("disk tier: cannot delete %s: %m", path);
    fdc_forget(path);
    bucket_report_drop(s, conn, d, &b);
    d->used -= b.bytes;
    pthread_mutex_lock(&w->lock);
    d->st.evicted_buckets++;
    d->st.evicted_keys += b.nkeys;
    d->st.evicted_bytes += b.bytes;
    d->st.used_bytes = d->used;
    pthread_mutex_unlock(&w->lock);
    pthread_rwlock_wrlock(&d->idx_lock);
    memmove(&d->buckets[0], &d->buckets[1], (d->nbuckets - 1) * sizeof(d->buckets[0]));
    d->nbuckets--;
    pthread_rwlock_unlock(&d->idx_lock);
    bucket_free_keys(&b);
}

/*
 * Append the record (key, value) to the current bucket, making room first;
 * its offset and path go to @p off_p and @p path.  MC_UNABLE_OFFLOAD when
 * the record is larger than the whole tier or the write failed.
 */
static mc_status_t bucket_append(mc_store_h s, mc_mconn_t *conn, mc_store_disk_t *d,
                                 mc_store_worker_t *w, mc_str_t key, const uint8_t *val,
                                 uint64_t size, uint32_t crc, uint64_t *off_p, char *path,
                                 size_t cap)
{
    uint64_t rec = MC_DISK_HDR + key.len + size;
    uint8_t hdr[MC_DISK_HDR];
    struct iovec iov[3];
    disk_bucket_t *b;
    char *kcopy;
    ssize_t n;

    if (rec > d->total_max)
        return MC_UNABLE_OFFLOAD;
    while ((d->used + rec > d->total_max) && (d->nbuckets > 0))
        bucket_evict_oldest(s, conn, d, w);
    b = (d->nbuckets > 0) ? &d->buckets[d->nbuckets - 1] : NULL;
    if ((b != NULL) && (d->fd >= 0) && (b->nkeys > 0) &&
        ((b->bytes + rec > d->bucket_bytes_max) || (b->nkeys >= d->bucket_keys_max))) {
        close(d->fd);
        d->fd = -1;
    }
    if (d->fd < 0) {
        mc_status_t st = bucket_open(d);
        if (st != MC_OK)
            return st;
    }
    b = &d->buckets[d->nbuckets - 1];
    if ((b->nkeys == b->cap)) {
        uint32_t ncap = b->cap ? b->cap * 2 : 64;
        disk_rec_t *nr;
        pthread_rwlock_wrlock(&d->idx_lock);
        nr = realloc(b->recs, ncap * sizeof(*nr));
        if (nr != NULL) {
            b->recs = nr;
            b->cap  = ncap;
        }
        pthread_rwlock_unlock(&d->idx_lock);
        if (nr == NULL)
            return MC_INTERNAL_ERROR;
    }
    kcopy = mc_str_dup(key);
    if (kcopy == NULL)
        return MC_INTERNAL_ERROR;
    mc_store_disk_record_header(hdr, key, size, crc);
    iov[0].iov_base = hdr;
    iov[0].iov_len  = sizeof(hdr);
    iov[1].iov_base = (void *)key.ptr;
    iov[1].iov_len  = key.len;
    iov[2].iov_base = (void *)val;
    iov[2].iov_len  = (size_t)size;
    do {
        n = pwritev(d->fd, iov, 3, (off_t)b->bytes);
    } while ((n < 0) && (errno == EINTR));
    bucket_path(d, b->id, path, cap);
    if (n != (ssize_t)rec) {
        /* a full disk or an I/O error: the bytes written (if any) stay as
         * a torn record nobody is pointed at; the bucket is closed so the
         * next record starts a fresh file */
        mc_warn("disk tier: write of %" PRIu64 " bytes to %s failed: %s", rec, path,
                (n < 0) ? strerror(errno) : "short write");
        free(kcopy);
        if (n > 0) {
            b->bytes += (uint64_t)n;
            d->used += (uint64_t)n;
        }
        close(d->fd);
        d->fd = -1;
        return MC_UNABLE_OFFLOAD;
    }
    *off_p = b->bytes;
    pthread_rwlock_wrlock(&d->idx_lock);
    b->recs[b->nkeys].key = kcopy;
    b->recs[b->nkeys].off = b->bytes;
    b->recs[b->nkeys].len = size;
    b->recs[b->nkeys].crc = crc;
    b->nkeys++;
    b->bytes += rec;
    pthread_rwlock_unlock(&d->idx_lock);
    d->used += rec;
    return MC_OK;
}

/* ---- serving other hosts ------------------------------------------------- */

/* The bucket id of @p path when it names a bucket file of this tier
 * (exactly DIR/<digits>.bucket), else 0 (ids start at 1). */
static uint64_t bucket_id_of(const mc_store_disk_t *d, const char *path, size_t len)
{
    size_t dl = strlen(d->dir), i;
    uint64_t id = 0;

    if ((len <= dl + 1 + 7) || (memcmp(path, d->dir, dl) != 0) || (path[dl] != '/') ||
        (memcmp(path + len - 7, ".bucket", 7) != 0))
        return 0;
    for (i = dl + 1; i < len - 7; i++) {
        if ((path[i] < '0') || (path[i] > '9') || (id > (UINT64_MAX - 9) / 10))
            return 0;
        id = id * 10 + (uint64_t)(path[i] - '0');
    }
    return ((i == dl + 1) || ((path[dl + 1] == '0') && (i > dl + 2))) ? 0 : id;
}

/* 1 when @p req names one of the live records of @p d exactly. */
static int record_known(mc_store_disk_t *d, const mc_te_disk_req_t *req)
{
    uint64_t id = bucket_id_of(d, req->path, req->path_len);
    size_t lo = 0, hi;
    int ok = 0;

    if (id == 0)
        return 0;
    pthread_rwlock_rdlock(&d->idx_lock);
    hi = d->nbuckets;
    while (lo < hi) { /* buckets by rising id */
        size_t mid = lo + (hi - lo) / 2;
        if (d->buckets[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if ((lo < d->nbuckets) && (d->buckets[lo].id == id)) {
        const disk_bucket_t *b = &d->buckets[lo];
        uint32_t l = 0, h = b->nkeys;
        while (l < h) { /* records by rising offset */
            uint32_t mid = l + (h - l) / 2;
            if (b->recs[mid].off < req->offset)
                l = mid + 1;
            else
                h = mid;
        }
        if ((l < b->nkeys) && (b->recs[l].off == req->offset)) {
            const disk_rec_t *r = &b->recs[l];
            ok = (r->len == req->length) && (r->crc == req->crc) &&
                 (strlen(r->key) == req->key_len) &&
                 (memcmp(r->key, req->key, req->key_len) == 0);
        }
    }
    pthread_rwlock_unlock(&d->idx_lock);
    return ok;
}

/* The engine's DISK_READ server (mc_te_disk_serve_func_t): only a record
 * this tier wrote and still holds, named exactly, is read, with every
 * check of mc_store_disk_read; never another offset or file. */
static mc_status_t disk_serve(void *arg, const mc_te_disk_req_t *req, void **buf_p)
{
    mc_store_disk_t *d = arg;
    char path[MC_TE_DISK_PATH_MAX + 1];
    void *buf;
    mc_status_t st;

    if ((req->path_len > MC_TE_DISK_PATH_MAX) || !record_known(d, req)) {
        mc_set_error_detail("no such record in this disk tier");
        return MC_OBJECT_NOT_FOUND;
    }
    memcpy(path, req->path, req->path_len);
    path[req->path_len] = '\0';
    buf                 = malloc((size_t)req->length);
    if (buf == NULL) {
        mc_set_error_detail("out of memory for a %" PRIu64 "-byte disk read", req->length);
        return MC_INTERNAL_ERROR;
    }
    st = mc_store_disk_read(path, req->offset, (mc_str_t){req->key, req->key_len}, req->length,
                            req->crc, buf);
    if (st != MC_OK) {
        free(buf);
        return st;
    }
    *buf_p = buf;
    return MC_OK;
}

/* ---- the offloader ------------------------------------------------------- */

/* The memory replica to copy from: this process's segment first. */
static const mc_wire_replica_t *pick_source(mc_store_h s, const mc_wire_replica_list_t *l,
                                            uint64_t size, int *has_disk_p)
{
    const mc_wire_replica_t *best = NULL;

    *has_disk_p = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        const mc_wire_replica_t *r = &l->v[i];
        if (r->type == MC_WIRE_REPLICA_DISK) {
            *has_disk_p = 1;
            continue;
        }
        if ((r->type != MC_WIRE_REPLICA_MEMORY) || (r->status != MC_REPLICA_COMPLETE) ||
            (r->size < size) || (r->segment.len == 0) || (r->segment.len >= MC_STORE_NAME_MAX))
            continue;
        if ((best == NULL) || mc_str_eq(r->segment, mc_str_from_cstr(s->hostname)))
            best = r;
    }
    return best;
}

/* Copy one object to the tier and report it; the status of the attempt. */
static mc_status_t offload_one(mc_store_h s, mc_mconn_t *conn, mc_store_disk_t *d,
                               mc_store_worker_t *w, const char *key_c)
{
    mc_str_t key = mc_str_from_cstr(key_c);
    mc_wire_get_replica_list_req_t greq;
    mc_wire_get_replica_list_resp_t gresp;
    mc_wire_offload_report_req_t rreq;
    mc_wire_offload_report_resp_t rresp;
    const mc_wire_replica_t *src;
    char seg_name[MC_STORE_NAME_MAX];
    char path[PATH_MAX + 32];
    mc_te_segment_id_t seg;
    mc_te_request_t tr;
    uint64_t size, src_id, src_addr, off = 0, t0, deadline;
    uint32_t crc;
    int has_disk;
    mc_status_t st;

    memset(&greq, 0, sizeof(greq));
    greq.key = key;
    t0       = mc_now_ns();
    st       = mc_master_call_get_replica_list(conn, &greq, &gresp);
    if (st != MC_OK)
        return st; /* gone or not complete: nothing to copy */
    size = gresp.size;
    src  = pick_source(s, &gresp.replicas, size, &has_disk);
    if (has_disk || (src == NULL) || (size == 0))
        return MC_OK; /* already on a disk, or disk-only */
    deadline = t0 + gresp.lease_ttl_ms * 1000000u;
    /* the response lives in conn's memory until the next call */
    memcpy(seg_name, src->segment.ptr, src->segment.len);
    seg_name[src->segment.len] = '\0';
    src_id   = src->id;
    src_addr = src->addr;
    if (size > d->buf_cap) {
        uint8_t *nb = realloc(d->buf, (size_t)size);
        if (nb == NULL)
            return MC_INTERNAL_ERROR;
        d->buf     = nb;
        d->buf_cap = (size_t)size;
    }
    st = mc_te_segment_open(s->te, seg_name, &seg);
    if (st != MC_OK)
        return st;
    tr.op      = MC_TE_READ;
    tr.local   = d->buf;
    tr.remote  = src_addr;
    tr.length  = size;
    tr.segment = seg;
    st         = mc_te_transfer(s->te, &tr, 1, NULL);
    if (st != MC_OK)
        return st;
    if (mc_now_ns() > deadline)
        return MC_LEASE_EXPIRED; /* the memory may have been reused meanwhile */
    crc = mc_crc32c(0, d->buf, (size_t)size);
    st  = bucket_append(s, conn, d, w, key, d->buf, size, crc, &off, path, sizeof(path));
    if (st != MC_OK)
        return st;
    memset(&rreq, 0, sizeof(rreq));
    rreq.client_id      = s->client_id;
    rreq.key            = key;
    rreq.source_replica = src_id;
    rreq.file_path      = mc_str_from_cstr(path);
    rreq.offset         = off;
    rreq.length         = size;
    rreq.crc            = crc;
    st                  = mc_master_call_offload_report(conn, &rreq, &rresp);
    if (st == MC_OK) {
        pthread_mutex_lock(&w->lock);
        d->st.offloaded_keys++;
        d->st.offloaded_bytes += size;
        d->st.used_bytes = d->used;
        pthread_mutex_unlock(&w->lock);
    }
    /* refused (the value changed, the key went): the record stays unused
     * until its bucket goes */
    return st;
}

/* Whether mc_store_offload_stop() retired the tier. */
static int disk_retired(mc_store_worker_t *w, const mc_store_disk_t *d)
{
    int retired;

    pthread_mutex_lock(&w->lock);
    retired = d->retired;
    pthread_mutex_unlock(&w->lock);
    return retired;
}

/* Wait for keys; takes up to @p max of them.  0 when stopping or retired. */
static size_t queue_take(mc_store_worker_t *w, mc_store_disk_t *d, char **out, size_t max)
{
    size_t n = 0;
    struct timespec dl;

    pthread_mutex_lock(&w->lock);
    while (!w->stop && !d->retired && (d->qlen == 0)) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        mc_timespec_add_ms(&dl, MC_DISK_IDLE_MS);
        (void)pthread_cond_timedwait(&w->cond, &w->lock, &dl);
    }
    while (!w->stop && !d->retired && (d->qlen > 0) && (n < max)) {
        out[n++] = d->queue[d->qhead];
        d->qhead = (d->qhead + 1) % MC_DISK_QUEUE_MAX;
        d->qlen--;
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}

static void *disk_main(void *arg)
{
    mc_store_h s              = arg;
    mc_store_worker_t *w      = &s->offload;
    mc_store_disk_t *d        = s->disk;
    mc_master_target_t target = s->target;
    char *batch[MC_DISK_BATCH];
    size_t n;

    /* one look for the leader per round (etcd://): stopping stays prompt */
    target.failover_wait_ms = 0;
    /* background work: on a busy host the puts and gets go first (Linux
     * nice is per thread) */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0)
        mc_debug("disk tier: cannot lower the offloader's priority: %m");
    while ((n = queue_take(w, d, batch, MC_DISK_BATCH)) > 0) {
        mc_mconn_t *conn = mc_store_worker_conn(w, &target);
        for (size_t i = 0; i < n; i++) {
            mc_status_t st;
            if (disk_retired(w, d)) { /* the rest of the batch is not copied */
                free(batch[i]);
                continue;
            }
            st = (conn != NULL) ? offload_one(s, conn, d, w, batch[i]) : MC_RPC_FAIL;
            if (st != MC_OK) {
                mc_debug("disk tier: offload of %s: %s (%s)", batch[i], mc_status_name(st),
                         mc_last_error_detail());
                pthread_mutex_lock(&w->lock);
                d->st.failed_keys++;
                pthread_mutex_unlock(&w->lock);
                if ((conn != NULL) && conn->broken) {
                    mc_store_worker_drop_conn(w);
                    conn = NULL;
                }
            }
            free(batch[i]);
        }
    }
    /* nothing more is reported: mc_store_offload_stop() may go on */
    pthread_mutex_lock(&w->lock);
    d->parked = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    mc_store_worker_drop_conn(w);
    return NULL;
}

/* ---- life ------------------------------------------------------------------ */

static uint64_t env_u64(const char *name, uint64_t def)
{
    const char *v = getenv(name);
    uint64_t x;

    if ((v == NULL) || (*v == '\0'))
        return def;
    if ((mc_parse_size(v, &x) == 0) && (x > 0))
        return x;
    mc_warn("ignoring %s=\"%s\": expected a positive size", name, v);
    return def;
}

/* Delete the bucket files an earlier client left in @p d->dir. */
static void remove_stale(mc_store_disk_t *d)
{
    DIR *dir = opendir(d->dir);
    struct dirent *e;

    if (dir == NULL)
        return;
    while ((e = readdir(dir)) != NULL) {
        const char *dot = strrchr(e->d_name, '.');
        size_t i;
        if ((dot == NULL) || (strcmp(dot, ".bucket") != 0) || (dot == e->d_name))
            continue;
        for (i = 0; e->d_name + i < dot; i++)
            if ((e->d_name[i] < '0') || (e->d_name[i] > '9'))
                break;
        if (e->d_name + i != dot)
            continue;
        if (unlinkat(dirfd(dir), e->d_name, 0) != 0)
            mc_warn("disk tier: cannot delete stale %s/%s: %m", d->dir, e->d_name);
    }
    closedir(dir);
}

static void disk_free(mc_store_disk_t *d)
{
    if (d == NULL)
        return;
    while (d->qlen > 0) {
        free(d->queue[d->qhead]);
        d->qhead = (d->qhead + 1) % MC_DISK_QUEUE_MAX;
        d->qlen--;
    }
    free(d->queue);
    for (size_t i = 0; i < d->nbuckets; i++)
        bucket_free_keys(&d->buckets[i]);
    free(d->buckets);
    if (d->fd >= 0)
        close(d->fd);
    if (d->lock_fd >= 0)
        close(d->lock_fd); /* releases the flock */
    free(d->buf);
    pthread_rwlock_destroy(&d->idx_lock);
    free(d);
}

/*
 * MOONCAKE_OFFLOAD_USE_URING (upstream's fallback: MOONCAKE_USE_URING):
 * unset, empty, 0 or false keep pwritev/preadv.  io_uring is not built into
 * this library, so asking for it is refused rather than ignored.
 */
static mc_status_t check_uring_env(void)
{
    static const char *const names[] = {"MOONCAKE_OFFLOAD_USE_URING", "MOONCAKE_USE_URING"};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *v = getenv(names[i]);
        if (v == NULL)
            continue;
        if ((*v == '\0') || (strcmp(v, "0") == 0) || (strcasecmp(v, "false") == 0))
            return MC_OK;
        mc_set_error_detail("%s=\"%s\": io_uring is not built into this library; the disk "
                            "tier uses pwritev/preadv (unset it or set it to 0)",
                            names[i], v);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

static mc_status_t disk_open(const char *dir, mc_store_disk_t **d_p)
{
    char lock[PATH_MAX + 8];
    struct stat sb;
    mc_store_disk_t *d;
    size_t len = (dir != NULL) ? strlen(dir) : 0;

    if ((len == 0) || (dir[0] != '/') || (len >= PATH_MAX) || (strstr(dir, "/../") != NULL) ||
        ((len >= 3) && (strcmp(dir + len - 3, "/..") == 0))) {
        mc_set_error_detail("ssd_offload_path \"%s\" must be an absolute path without \"..\"",
                            (dir != NULL) ? dir : "");
        return MC_INVALID_PARAMS;
    }
    if (check_uring_env() != MC_OK)
        return MC_INVALID_PARAMS;
    if ((stat(dir, &sb) != 0) || !S_ISDIR(sb.st_mode)) {
        mc_set_error_detail("ssd_offload_path %s is not an existing directory", dir);
        return MC_INVALID_PARAMS;
    }
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        mc_set_error_detail("out of memory for the disk tier");
        return MC_INTERNAL_ERROR;
    }
    d->fd      = -1;
    d->lock_fd = -1;
    d->next_id = 1;
    pthread_rwlock_init(&d->idx_lock, NULL);
    memcpy(d->dir, dir, len + 1);
    while ((len > 1) && (d->dir[len - 1] == '/'))
        d->dir[--len] = '\0';
    d->bucket_bytes_max = env_u64("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", 256ull << 20);
    d->bucket_keys_max  = env_u64("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", 500);
    d->total_max        = env_u64("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", 2ull << 40);
    d->queue            = calloc(MC_DISK_QUEUE_MAX, sizeof(*d->queue));
    snprintf(lock, sizeof(lock), "%s/LOCK", d->dir);
    d->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if ((d->queue == NULL) || (d->lock_fd < 0)) {
        mc_set_error_detail("disk tier: cannot create %s: %s", lock, strerror(errno));
        disk_free(d);
        return MC_INVALID_PARAMS;
    }
    if (flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        mc_set_error_detail("ssd_offload_path %s is in use by another client", d->dir);
        disk_free(d);
        return MC_INVALID_PARAMS;
    }
    remove_stale(d);
    *d_p = d;
    return MC_OK;
}

/*
 * MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR, as upstream reads it: unset
 * or "bucket_storage_backend" is this file's SSD tier; with
 * "distributed_storage_backend", enable_ssd_offload only initialises the
 * DFS backend (dfs.c, docs/tiers.md §6): it needs MOONCAKE_DFS_ROOT_DIR,
 * still checks @p dir, and starts no SSD tier.  1 for the SSD tier, 0 for
 * DFS, -1 (detail set) for a backend this build does not have or a
 * DFS backend that is not configured.
 */
static int offload_backend(mc_store_h s, const char *dir)
{
    const char *b = getenv("MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR");
    struct stat sb;

    if ((b == NULL) || (*b == '\0') || (strcmp(b, "bucket_storage_backend") == 0))
        return 1;
    if (strcmp(b, "distributed_storage_backend") != 0) {
        mc_set_error_detail("MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=%s is not built "
                            "(bucket_storage_backend or distributed_storage_backend)", b);
        return -1;
    }
    if (s->dfs == NULL) {
        mc_set_error_detail("MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=distributed_storage_"
                            "backend needs MOONCAKE_DFS_ROOT_DIR (the master's --root_fs_dir)");
        return -1;
    }
    if ((dir == NULL) || (dir[0] != '/') || (stat(dir, &sb) != 0) || !S_ISDIR(sb.st_mode)) {
        mc_set_error_detail("ssd_offload_path \"%s\" must be an existing absolute directory",
                            dir ? dir : "");
        return -1;
    }
    mc_info("offload backend: distributed_storage_backend (DFS root %s); no SSD tier",
            s->dfs->root);
    return 0;
}

MC_API mc_status_t mc_store_offload_start(mc_store_h s, const char *dir)
{
    mc_store_disk_t *d = NULL;
    mc_status_t st;
    int backend;

    if (s == NULL) {
        mc_set_error_detail("store handle is NULL");
        return MC_INVALID_PARAMS;
    }
    backend = offload_backend(s, dir);
    if (backend <= 0)
        return (backend == 0) ? MC_OK : MC_INVALID_PARAMS;
    pthread_rwlock_wrlock(&s->life);
    if (!s->ready) {
        st = MC_UNAVAILABLE_IN_CURRENT_STATUS;
        mc_set_error_detail("set the store up before its disk tier");
    } else if (s->disk != NULL) {
        st = MC_INVALID_PARAMS;
        mc_set_error_detail("the disk tier is already on (%s)", s->disk->dir);
    } else if (s->nsegs == 0) {
        st = MC_INVALID_PARAMS;
        mc_set_error_detail("a disk tier needs a global segment: readers reach it through "
                            "this client's segment name");
    } else {
        st = disk_open(dir, &d);
    }
    if (st == MC_OK) {
        s->disk = d;
        st      = mc_store_worker_start(&s->offload, "offloader", MC_DISK_IDLE_MS, disk_main, s);
        if (st != MC_OK) {
            s->disk = NULL;
            disk_free(d);
        } else {
            mc_te_disk_serve_set(s->te, disk_serve, d);
            mc_info("disk tier on in %s (buckets of %" PRIu64 " bytes / %" PRIu64
                    " keys, %" PRIu64 " bytes in all)",
                    d->dir, d->bucket_bytes_max, d->bucket_keys_max, d->total_max);
        }
    }
    pthread_rwlock_unlock(&s->life);
    return st;
}

/* Take no more keys, fail the queued ones and wait until the offloader
 * has reported the record in hand and parked: from then on no
 * OFFLOAD_REPORT of this tier reaches the master.  Once per tier; a later
 * caller only waits for the park.  `life` held for reading, so teardown
 * cannot stop the offloader meanwhile. */
static void disk_retire(mc_store_worker_t *w, mc_store_disk_t *d)
{
    pthread_mutex_lock(&w->lock);
    if (!d->retired) {
        d->retired = 1;
        d->st.failed_keys += d->qlen;
        while (d->qlen > 0) {
            free(d->queue[d->qhead]);
            d->qhead = (d->qhead + 1) % MC_DISK_QUEUE_MAX;
            d->qlen--;
        }
        pthread_cond_broadcast(&w->cond);
    }
    while (!d->parked)
        pthread_cond_wait(&w->cond, &w->lock);
    pthread_mutex_unlock(&w->lock);
}

/* DISK_REPLICA_DROP every record of the retired tier @p d, one call per
 * bucket: the master forgets this client's disk replicas and erases the
 * objects left with none.  A key already gone, or whose newer copy is in
 * another bucket, is no error.  The first failure (the detail names the
 * bucket), or MC_OK; after MC_OK a later call sends nothing. */
static mc_status_t disk_deregister(mc_store_h s, mc_store_disk_t *d)
{
    mc_status_t st = MC_OK;
    size_t keys = 0;

    pthread_mutex_lock(&s->offload.lock);
    if (d->dropped) {
        pthread_mutex_unlock(&s->offload.lock);
        return MC_OK;
    }
    pthread_mutex_unlock(&s->offload.lock);
    /* the offloader is parked, so nothing changes the buckets; DISK_READs
     * served meanwhile only read them */
    pthread_rwlock_rdlock(&d->idx_lock);
    for (size_t i = 0; i < d->nbuckets; i++) {
        const disk_bucket_t *b = &d->buckets[i];
        char path[PATH_MAX + 32];
        mc_wire_disk_replica_drop_req_t req;
        mc_wire_disk_replica_drop_resp_t resp;
        mc_mconn_t *conn = NULL;
        mc_str_t *kv;
        mc_status_t one;

        if (b->nkeys == 0)
            continue;
        bucket_path(d, b->id, path, sizeof(path));
        kv = malloc(b->nkeys * sizeof(*kv));
        if (kv == NULL) {
            mc_set_error_detail("out of memory for the %u keys of %s", b->nkeys, path);
            st = MC_INTERNAL_ERROR;
            break;
        }
        for (uint32_t k = 0; k < b->nkeys; k++)
            kv[k] = mc_str_from_cstr(b->recs[k].key);
        memset(&req, 0, sizeof(req));
        req.client_id = s->client_id;
        req.file_path = mc_str_from_cstr(path);
        req.keys.n    = b->nkeys;
        req.keys.v    = kv;
        one = mc_master_pool_call_disk_replica_drop(&s->pool, &conn, &req, &resp);
        if (conn != NULL)
            mc_master_pool_put(&s->pool, conn);
        free(kv);
        if (one != MC_OK) {
            mc_set_error_detail("DISK_REPLICA_DROP of the %u records of %s failed: %s",
                                b->nkeys, path, mc_status_name(one));
            mc_warn("disk tier: %s", mc_last_error_detail());
            if (st == MC_OK)
                st = one;
            continue;
        }
        keys += b->nkeys;
    }
    pthread_rwlock_unlock(&d->idx_lock);
    if (st == MC_OK) {
        pthread_mutex_lock(&s->offload.lock);
        d->dropped = 1;
        pthread_mutex_unlock(&s->offload.lock);
        mc_info("disk tier in %s: off, %zu records deregistered from the master", d->dir, keys);
    }
    return st;
}

/* Hold the caller @p grace_s seconds while the tier serves the reads the
 * master handed out before the deregistration.  Over early when the store
 * is closed or its tier replaced (teardown ends the serving): @p d is only
 * compared, never used, since it may be freed by then. */
static void disk_hold(mc_store_h s, const mc_store_disk_t *d, uint64_t grace_s)
{
    uint64_t now = mc_now_ms();
    uint64_t end = (grace_s > (UINT64_MAX - now) / 1000) ? UINT64_MAX : now + grace_s * 1000;

    while ((now = mc_now_ms()) < end) {
        uint64_t ms = (end - now < 100) ? end - now : 100;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000L};
        int gone;

        (void)nanosleep(&ts, NULL); /* a signal only makes the slice shorter */
        if (mc_store_enter(s) != MC_OK)
            return;
        gone = (s->disk != d);
        mc_store_leave(s);
        if (gone)
            return;
    }
}

MC_API mc_status_t mc_store_offload_stop(mc_store_h s, uint64_t grace_seconds)
{
    mc_store_disk_t *d;
    mc_status_t st;

    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    d = s->disk;
    if (d == NULL) { /* no SSD tier (off, or the DFS backend): nothing to hold */
        mc_store_leave(s);
        return MC_OK;
    }
    disk_retire(&s->offload, d);
    st = disk_deregister(s, d);
    mc_store_leave(s);
    if (st == MC_OK)
        disk_hold(s, d, grace_seconds);
    return st;
}

void mc_store_disk_stop(mc_store_h s)
{
    if (s->disk == NULL)
        return;
    mc_te_disk_serve_set(s->te, NULL, NULL); /* waits for reads being served */
    mc_store_worker_stop(&s->offload);
    disk_free(s->disk);
    s->disk = NULL;
}

void mc_store_disk_enqueue(mc_store_h s, mc_str_t key)
{
    mc_store_disk_t *d   = s->disk;
    mc_store_worker_t *w = &s->offload;
    char *k;

    if (d == NULL)
        return;
    k = mc_str_dup(key);
    pthread_mutex_lock(&w->lock);
    if (d->retired) {
        free(k); /* mc_store_offload_stop(): the tier takes nothing more */
    } else if ((k == NULL) || (d->qlen >= MC_DISK_QUEUE_MAX)) {
        d->st.dropped_keys++;
        free(k);
    } else {
        d->queue[(d->qhead + d->qlen) % MC_DISK_QUEUE_MAX] = k;
        d->qlen++;
        pthread_cond_signal(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
}

MC_API mc_status_t mc_store_offload_stats(mc_store_h s, mc_store_disk_stats_t *stats)
{
    mc_status_t st;

    if (stats == NULL) {
        mc_set_error_detail("stats is NULL");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    if (s->disk == NULL) {
        mc_set_error_detail("the disk tier is off");
        st = MC_INVALID_PARAMS;
    } else {
        pthread_mutex_lock(&s->offload.lock);
        *stats         = s->disk->st;
        stats->queued  = s->disk->qlen;
        pthread_mutex_unlock(&s->offload.lock);
    }
    mc_store_leave(s);
    return st;
}
