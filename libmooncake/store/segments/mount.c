/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Segments mounted after setup: mount_segment (a file or /dev/shm object
 * mapped MAP_SHARED), allocate_and_mount_segment (fresh shared memory) and
 * their unmounts, with an optional grace period.
 *
 * A mounted segment is exactly like the one setup creates (segment.c does
 * the registration, the MOUNT_SEGMENT and the bookkeeping): peers write
 * and read it through our transfer engine, the master places replicas in
 * it, and all segments of a client share its segment name "host:port".
 *
 * Graceful unmount.  With a grace period the segment is first marked
 * DRAINING on the master (SET_SEGMENT_DRAINING): no allocation lands there
 * any more but its objects stay readable.  The segment records its
 * deadline; the heartbeat thread (mc_store_segments_reap, every tick)
 * sends UNMOUNT_SEGMENT once it has passed and only then unregisters and
 * unmaps the memory.  Close unmaps whatever is still draining (the
 * master forgets it with CLIENT_CLOSE).  A draining segment is left out of
 * REMOUNT_SEGMENTS, so a restarted master never places objects in it.
 *
 * Whoever takes a segment out of s->segs (under seg_lock) owns its memory
 * and unmaps it, so an explicit unmount racing the reaper unmaps once.
 *
 * May call: segments.h (this folder), ../calls.c, the master pool, the
 * engine.  Called by: the public API, ../threads/heartbeat.c (reaping
 * drained segments), ../threads/http.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "store/segments/segments.h"
#include "store/store_internal.h"

static uint64_t page_size(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return (page > 0) ? (uint64_t)page : 4096u;
}

/* @p size rounded up to pages, or 0 when that overflows a size_t. */
static size_t page_round(uint64_t size)
{
    uint64_t p = page_size();
    if ((size > SIZE_MAX - (p - 1)) || (size > UINT64_MAX - (p - 1)))
        return 0;
    return (size_t)((size + p - 1) & ~(p - 1));
}

static mc_status_t check_protocol(mc_store_h s, const char *protocol)
{
    if ((protocol == NULL) || (*protocol == '\0') || (strcmp(protocol, s->protocol) == 0))
        return MC_OK;
    mc_set_error_detail("protocol \"%s\" is not this store's (\"%s\")", protocol, s->protocol);
    return MC_INVALID_PARAMS;
}

static mc_status_t check_location(const char *location)
{
    /* the engine keys registrations by address; location is a label */
    if ((location != NULL) && (strlen(location) > 255)) {
        mc_set_error_detail("location is longer than 255 bytes");
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

static mc_status_t map_file(const char *path, uint64_t size, uint64_t offset,
                            mc_store_segment_t *seg)
{
    struct stat sb;
    void *base;
    int fd;

    if ((path == NULL) || (*path == '\0')) {
        mc_set_error_detail("mount_segment needs a path");
        return MC_INVALID_PARAMS;
    }
    if (size == 0) {
        mc_set_error_detail("cannot mount a segment of 0 bytes");
        return MC_INVALID_PARAMS;
    }
    if ((offset % page_size()) != 0) {
        mc_set_error_detail("offset %llu is not a multiple of the page size %llu",
                            (unsigned long long)offset, (unsigned long long)page_size());
        return MC_INVALID_PARAMS;
    }
    seg->map_len = page_round(size);
    if ((seg->map_len == 0) || (offset > (uint64_t)INT64_MAX) ||
        (size > (uint64_t)INT64_MAX - offset)) {
        mc_set_error_detail("a segment of %llu bytes at offset %llu is not mappable",
                            (unsigned long long)size, (unsigned long long)offset);
        return MC_INVALID_PARAMS;
    }
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        mc_set_error_detail("cannot open %s: %s", path, strerror(errno));
        return MC_INVALID_PARAMS;
    }
    /* Only a regular file has a length to check; mapping past its end
     * would turn the first touch of those pages into SIGBUS. */
    if ((fstat(fd, &sb) != 0) || !S_ISREG(sb.st_mode)) {
        mc_set_error_detail("%s is not a regular file", path);
        close(fd);
        return MC_INVALID_PARAMS;
    }
    if ((uint64_t)sb.st_size < offset + size) {
        mc_set_error_detail("%s holds %lld bytes, fewer than offset %llu + size %llu", path,
                            (long long)sb.st_size, (unsigned long long)offset,
                            (unsigned long long)size);
        close(fd);
        return MC_INVALID_PARAMS;
    }
    base = mmap(NULL, seg->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)offset);
    close(fd); /* the mapping keeps the file */
    if (base == MAP_FAILED) {
        mc_set_error_detail("cannot map %s: %s", path, strerror(errno));
        return MC_INVALID_PARAMS;
    }
    seg->base = base;
    seg->fd   = -1;
    return MC_OK;
}

static mc_status_t map_fresh(uint64_t size, mc_store_segment_t *seg)
{
    if (size == 0) {
        mc_set_error_detail("cannot allocate a segment of 0 bytes");
        return MC_INVALID_PARAMS;
    }
    seg->map_len = page_round(size);
    if ((seg->map_len == 0) || ((uint64_t)seg->map_len > (uint64_t)INT64_MAX)) {
        mc_set_error_detail("a segment of %llu bytes is not mappable", (unsigned long long)size);
        return MC_INVALID_PARAMS;
    }
    if (mc_store_segment_size_check(size, "segment size") != MC_OK)
        return MC_INVALID_PARAMS;
    return mc_store_segment_map(seg, MC_NO_AVAILABLE_HANDLE);
}

static mc_status_t mount_common(mc_store_h s, mc_store_segment_t *seg, const char *location,
                                mc_segment_id_t *id_out)
{
    mc_status_t st;

    mc_uuid_generate(&seg->id);
    seg->drain_deadline_ms = 0;
    st = mc_store_segment_attach(s, seg, location);
    if (st != MC_OK)
        return st;
    mc_uuid_format(seg->id, id_out->id);
    return MC_OK;
}

mc_status_t mc_emb_mount_segment(mc_store_h s, const char *path, uint64_t size, uint64_t offset,
                                 const char *protocol, const char *location,
                                 mc_segment_id_t *id_out)
{
    mc_status_t st;
    mc_store_segment_t seg;

    if (id_out == NULL) {
        mc_set_error_detail("id_out is NULL");
        return MC_INVALID_PARAMS;
    }
    memset(id_out, 0, sizeof(*id_out));
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = check_protocol(s, protocol);
    if (st == MC_OK)
        st = check_location(location);
    if (st != MC_OK)
        goto out;
    memset(&seg, 0, sizeof(seg));
    seg.fd   = -1;
    seg.size = size;
    seg.kind = MC_STORE_SEG_FILE;
    st       = map_file(path, size, offset, &seg);
    if (st == MC_OK)
        st = mount_common(s, &seg, location, id_out);
out:
    mc_store_leave(s);
    return st;
}

mc_status_t mc_emb_allocate_and_mount(mc_store_h s, uint64_t size, const char *protocol,
                                      const char *location, mc_segment_id_t *id_out,
                                      uint64_t *allocated_size_p)
{
    mc_status_t st;
    mc_store_segment_t seg;

    if (id_out == NULL) {
        mc_set_error_detail("id_out is NULL");
        return MC_INVALID_PARAMS;
    }
    memset(id_out, 0, sizeof(*id_out));
    if (allocated_size_p != NULL)
        *allocated_size_p = 0;
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    st = check_protocol(s, protocol);
    if (st == MC_OK)
        st = check_location(location);
    if (st != MC_OK)
        goto out;
    memset(&seg, 0, sizeof(seg));
    seg.fd   = -1;
    seg.kind = MC_STORE_SEG_ALLOCATED;
    st       = map_fresh(size, &seg);
    if (st != MC_OK)
        goto out;
    seg.size = (uint64_t)seg.map_len; /* the whole allocation is usable */
    st       = mount_common(s, &seg, location, id_out);
    if ((st == MC_OK) && (allocated_size_p != NULL))
        *allocated_size_p = seg.size;
out:
    mc_store_leave(s);
    return st;
}

MC_API mc_status_t mc_store_mount_segment(mc_store_h s, const char *path, uint64_t size,
                                          uint64_t offset, const char *protocol,
                                          const char *location, mc_segment_id_t *id_out)
{
    return MC_STORE_DISPATCH(s, mount_segment, path, size, offset, protocol, location, id_out);
}

MC_API mc_status_t mc_store_allocate_and_mount_segment(mc_store_h s, uint64_t size,
                                                       const char *protocol,
                                                       const char *location,
                                                       mc_segment_id_t *id_out,
                                                       uint64_t *allocated_size_p)
{
    return MC_STORE_DISPATCH(s, allocate_and_mount, size, protocol, location, id_out,
                             allocated_size_p);
}

/* Index of segment @p id in s->segs, or -1.  Called with seg_lock held. */
static ssize_t seg_index(mc_store_h s, mc_uuid_t id)
{
    for (size_t i = 0; i < s->nsegs; i++) {
        if (mc_uuid_eq(s->segs[i].id, id))
            return (ssize_t)i;
    }
    return -1;
}

/* Take segment @p id out of the record into @p out; 0 when it was not
 * there (somebody else took it). */
static int seg_take(mc_store_h s, mc_uuid_t id, mc_store_segment_t *out)
{
    ssize_t i;

    pthread_mutex_lock(&s->seg_lock);
    i = seg_index(s, id);
    if (i >= 0) {
        *out       = s->segs[i];
        s->segs[i] = s->segs[s->nsegs - 1];
        s->nsegs--;
    }
    pthread_mutex_unlock(&s->seg_lock);
    return i >= 0;
}

/* UNMOUNT_SEGMENT, then unmap.  SEGMENT_NOT_FOUND from the master means it
 * is gone there already (a restarted master that never saw it again). */
static mc_status_t unmount_now(mc_store_h s, mc_mconn_t *hb_conn, mc_uuid_t id)
{
    mc_status_t st;
    mc_mconn_t *conn = NULL;
    mc_store_segment_t seg;
    mc_wire_unmount_segment_req_t req;
    mc_wire_unmount_segment_resp_t resp;

    req.client_id  = s->client_id;
    req.segment_id = id;
    if (hb_conn != NULL) {
        st = mc_master_call_unmount_segment(hb_conn, &req, &resp);
    } else {
        st = mc_master_pool_call_unmount_segment(&s->pool, &conn, &req, &resp);
        if (conn != NULL)
            mc_master_pool_put(&s->pool, conn);
    }
    if (st == MC_SEGMENT_NOT_FOUND)
        st = MC_OK;
    if (st != MC_OK)
        return st;
    if (seg_take(s, id, &seg))
        mc_store_segment_unmap(s, &seg);
    return MC_OK;
}

static mc_status_t unmount_one(mc_store_h s, const char *text, int want_allocated,
                               uint64_t grace_s, int check_only)
{
    mc_status_t st;
    mc_uuid_t id;
    ssize_t i;
    int kind;
    uint64_t deadline;
    mc_mconn_t *conn = NULL;
    mc_wire_set_segment_draining_req_t req;
    mc_wire_set_segment_draining_resp_t resp;

    if ((text == NULL) || (mc_uuid_parse(text, &id) != 0)) {
        mc_set_error_detail("\"%s\" is not a segment id", text ? text : "(null)");
        return MC_INVALID_PARAMS;
    }
    pthread_mutex_lock(&s->seg_lock);
    i        = seg_index(s, id);
    kind     = (i >= 0) ? s->segs[i].kind : -1;
    deadline = (i >= 0) ? s->segs[i].drain_deadline_ms : 0;
    pthread_mutex_unlock(&s->seg_lock);
    if (i < 0) {
        mc_set_error_detail("segment %s is not mounted by this client", text);
        return MC_SEGMENT_NOT_FOUND;
    }
    /* past its grace period a draining segment is unmounted: the
     * heartbeat's reaper may be between the master's unmount (its
     * objects already gone) and dropping it here */
    if ((deadline != 0) && (deadline <= mc_now_ms())) {
        mc_set_error_detail("segment %s was unmounted at the end of its grace period", text);
        return MC_SEGMENT_NOT_FOUND;
    }
    if (want_allocated && (kind != MC_STORE_SEG_ALLOCATED)) {
        mc_set_error_detail("segment %s was not made by allocate_and_mount_segment", text);
        return MC_INVALID_PARAMS;
    }
    if (check_only)
        return MC_OK;
    if (grace_s == 0)
        return unmount_now(s, NULL, id);

    req.client_id  = s->client_id;
    req.segment_id = id;
    st = mc_master_pool_call_set_segment_draining(&s->pool, &conn, &req, &resp);
    if (conn != NULL)
        mc_master_pool_put(&s->pool, conn);
    if (st != MC_OK)
        return st;
    deadline = (grace_s > (UINT64_MAX - mc_now_ms()) / 1000) ? UINT64_MAX
                                                              : mc_now_ms() + grace_s * 1000;
    pthread_mutex_lock(&s->seg_lock);
    i = seg_index(s, id);
    /* a second graceful unmount keeps the earlier deadline */
    if ((i >= 0) && ((s->segs[i].drain_deadline_ms == 0) ||
                     (s->segs[i].drain_deadline_ms > deadline)))
        s->segs[i].drain_deadline_ms = deadline;
    pthread_mutex_unlock(&s->seg_lock);
    mc_debug("segment %s draining for %llu s", text, (unsigned long long)grace_s);
    return MC_OK;
}

mc_status_t mc_emb_unmount(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                           int want_allocated)
{
    mc_status_t st;

    if ((ids == NULL) && (n > 0)) {
        mc_set_error_detail("ids is NULL");
        return MC_INVALID_PARAMS;
    }
    st = mc_store_enter(s);
    if (st != MC_OK)
        return st;
    /* unmount_and_free checks every id first: all or nothing on misuse */
    for (size_t i = 0; (i < n) && want_allocated && (st == MC_OK); i++)
        st = unmount_one(s, ids[i], 1, grace_s, 1);
    for (size_t i = 0; (i < n) && (st == MC_OK); i++)
        st = unmount_one(s, ids[i], want_allocated, grace_s, 0);
    mc_store_leave(s);
    return st;
}

static mc_status_t unmount_many(mc_store_h s, const char *const *ids, size_t n,
                                uint64_t grace_s, int want_allocated)
{
    return MC_STORE_DISPATCH(s, unmount, ids, n, grace_s, want_allocated);
}

MC_API mc_status_t mc_store_unmount_segments(mc_store_h s, const char *const *ids, size_t n,
                                             uint64_t grace_period_seconds)
{
    return unmount_many(s, ids, n, grace_period_seconds, 0);
}

MC_API mc_status_t mc_store_unmount_and_free_segments(mc_store_h s, const char *const *ids,
                                                      size_t n, uint64_t grace_period_seconds)
{
    return unmount_many(s, ids, n, grace_period_seconds, 1);
}

void mc_store_segments_reap(mc_store_h s, mc_mconn_t *conn)
{
    uint64_t now = mc_now_ms();

    for (;;) {
        mc_uuid_t id;
        int found = 0;
        mc_status_t st;

        pthread_mutex_lock(&s->seg_lock);
        for (size_t i = 0; i < s->nsegs; i++) {
            uint64_t d = s->segs[i].drain_deadline_ms;
            if ((d != 0) && (d <= now)) {
                id    = s->segs[i].id;
                found = 1;
                break;
            }
        }
        pthread_mutex_unlock(&s->seg_lock);
        if (!found)
            return;
        st = unmount_now(s, conn, id);
        if (st != MC_OK) {
            /* the next tick retries */
            mc_warn("unmounting a drained segment failed: %s (%s)", mc_status_name(st),
                    mc_last_error_detail());
            return;
        }
    }
}
