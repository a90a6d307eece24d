/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A dummy's calls on keys and names (docs/protocol.md §8): batch removal,
 * exist and replica clear, remove_by_regex and remove_all, the replica
 * descriptors of a query, copy and move tasks, the segments its real
 * client mounts for it, and the ranged sessions held in the real client
 * per dummy.  Each mc_dummy_ function returns 0 and touches nothing when
 * the handle is not a dummy.
 *
 * May call: dummy_client.h (the connection, this folder), the store's
 * checks (../store_internal.h).
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
#include "store/store_internal.h"

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
    st = mc_dummy_call_fd(d, op, 0, items, ikeys, n, NULL, res, n, sendfd);
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
    mc_dummy_staged_free(d, r->handle);
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
        if (mc_dummy_key_len(keys[i]) == UINT32_MAX) {
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
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_batch_replica_clear(mc_store_h s, const char *const *keys, size_t n,
                                 const char *segment, mc_status_t *statuses, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
    return 1;
}

/* REMOVE_REGEX (@p regex) or REMOVE_ALL (NULL). */
int mc_dummy_remove_many(mc_store_h s, const char *regex, int force, int64_t *count_p,
                         mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
    return 1;
}

/* COPY_TASK (targets[0..n)) or MOVE_TASK (targets = {source, target}). */
int mc_dummy_create_task(mc_store_h s, unsigned op, const char *key, const char *const *targets,
                         size_t n, mc_task_id_t *id_out, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_result_t *res;
    mc_status_t st = MC_OK;

    if (d == NULL)
        return 0;
    res = calloc(n + 2, sizeof(*res));
    if (res == NULL) {
        st = MC_INTERNAL_ERROR;
    } else if ((mc_dummy_key_len(key) == UINT32_MAX) || (id_out == NULL) || (n == 0) ||
               (targets == NULL)) {
        if (mc_dummy_key_len(key) != UINT32_MAX)
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
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_query_task(mc_store_h s, const char *task_id, mc_store_task_info_t *out,
                        mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
    return 1;
}

mc_status_t mc_dummy_replicas(mc_store_h s, const char *key, mc_replica_desc_t **descs_p,
                              size_t *n_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_result_t r;
    mc_replica_desc_t *v = NULL;
    mc_status_t st;

    *descs_p = NULL;
    *n_p = 0;
    if (d == NULL)
        return MC_UNAVAILABLE_IN_CURRENT_STATUS;
    st = MC_INVALID_PARAMS;
    if (mc_dummy_key_len(key) != UINT32_MAX)
        st = named_call(d, MC_DUMMY_OP_REPLICAS, &key, 1, 0, NULL, 0, &r);
    if ((st == MC_OK) && (r.result < 0))
        st = (mc_status_t)r.result;
    if ((st == MC_OK) && ((uint64_t)r.result > d->size[MC_DUMMY_REGION_LBUF] / sizeof(*v))) {
        mc_set_error_detail("the real client answered %lld replicas", (long long)r.result);
        st = MC_INTERNAL_ERROR;
        mc_dummy_staged_free(d, r.handle);
    }
    if (st == MC_OK) {
        v = calloc((size_t)r.result + 1, sizeof(*v));
        if (v == NULL) {
            mc_dummy_staged_free(d, r.handle);
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
    mc_dummy_leave(s);
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
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_unmount(mc_store_h s, const char *const *ids, size_t n, uint64_t grace_s,
                     int and_free, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
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
    mc_dummy_t *d = mc_dummy_enter(s);
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
    mc_dummy_leave(s);
    return 1;
}

int mc_dummy_put_session_start(mc_store_h s, const char *const *keys, const uint64_t *sizes,
                               size_t n, const mc_replicate_config_t *cfg, mc_status_t *statuses,
                               mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
    mc_dummy_item_t *items = NULL;
    mc_dummy_result_t *res = NULL;
    const char **ikeys = NULL, **igroups = NULL;
    size_t *idx = NULL, m = 0;
    put_cfg_t wcfg;
    mc_status_t st;

    if (d == NULL)
        return 0;
    st = mc_dummy_cfg_check(cfg, n);
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
        if (mc_dummy_key_len(keys[i]) == UINT32_MAX) {
            statuses[i] = MC_INVALID_PARAMS;
            continue;
        }
        items[m].klen = mc_dummy_key_len(keys[i]);
        items[m].len = sizes[i];
        ikeys[m] = keys[i];
        igroups[m] = mc_dummy_cfg_group(cfg, i);
        idx[m++] = i;
    }
    if ((st == MC_OK) && (m > 0)) {
        mc_dummy_cfg_to_wire(cfg, &wcfg); /* always sent: present 0 for NULL */
        wcfg.igroups = igroups;
        st = mc_dummy_call(d, MC_DUMMY_OP_PUT_SESSION_START, 0, items, ikeys, m, &wcfg, res, m);
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
    mc_dummy_leave(s);
    return 1;
}

/* GET_SESSION_READ / PUT_SESSION_WRITE: every buffer must lie in the
 * shared memory (a key with one outside gets MC_INVALID_PARAMS). */
int mc_dummy_session_io(mc_store_h s, unsigned op, const char *const *keys,
                        const mc_iov_t *const *bufs, const uint64_t *const *offsets,
                        const size_t *counts, size_t n, int64_t *results, mc_status_t *st_p)
{
    mc_dummy_t *d = mc_dummy_enter(s);
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
        int ok = (mc_dummy_key_len(keys[i]) != UINT32_MAX) &&
                 ((counts[i] == 0) || ((bufs[i] != NULL) && (offsets[i] != NULL)));
        results[i] = MC_INVALID_PARAMS;
        if (!ok)
            continue;
        items[m].klen = mc_dummy_key_len(keys[i]);
        ikeys[m++] = keys[i];
        for (size_t j = 0; ok && (j < counts[i]); j++) {
            if (!mc_dummy_locate(d, bufs[i][j].base, bufs[i][j].len, &items[m].region, &items[m].off)) {
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
        st = mc_dummy_call(d, op, 0, items, ikeys, m, NULL, res, m);
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
    mc_dummy_leave(s);
    return 1;
}
