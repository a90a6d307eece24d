/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Dynamic replication of hot objects (dynrep.h).
 *
 * The heat table maps (tenant, key) to the reads of the current window.
 * It holds only keys read in the last window or acted on in the last
 * minute: a key read once a day never costs an entry for longer, so the
 * table stays the size of the hot set.  It is pruned whenever a new window
 * starts.  The table is per master, found through heat_of(): mc_master_t
 * has no slot for it yet.
 *
 * Owns: the heat table and the copy tasks it asks for hot objects.
 * May call: index/ (tasks, segments).
 */
#include "config.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "dynrep.h"
#include "index.h"

#define DYNREP_ACTION_COOLDOWN_MS   30000u
#define DYNREP_RECREATE_COOLDOWN_MS 60000u
#define DYNREP_MAX_USED_RATIO       0.85
#define DYNREP_BUCKETS              4096u

typedef struct heat {
    struct heat *next;
    uint64_t window;      /* index of the window of @c hits */
    uint64_t hits;
    uint64_t acted_ms;    /* last proposal (monotonic), 0 = none */
    uint64_t hash;
    uint32_t tenant_len, key_len;
    char bytes[];         /* tenant then key */
} heat_t;

typedef struct heat_table {
    mc_master_t *m;
    heat_t *b[DYNREP_BUCKETS];
    uint64_t window;      /* the window pruned last */
} heat_table_t;

static uint64_t fnv(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static heat_table_t *heat_of(mc_master_t *m)
{
    if (m->heat == NULL) {
        m->heat = calloc(1, sizeof(*m->heat));
        if (m->heat != NULL)
            m->heat->m = m;
    }
    return m->heat;
}

/* Drop entries neither read in window @p w nor acted on within a minute. */
static void heat_prune(heat_table_t *t, uint64_t w, uint64_t now_ms)
{
    for (uint32_t i = 0; i < DYNREP_BUCKETS; i++) {
        heat_t **pp = &t->b[i];
        while (*pp != NULL) {
            heat_t *h = *pp;
            if ((h->window != w) &&
                ((h->acted_ms == 0) || (now_ms > h->acted_ms + DYNREP_RECREATE_COOLDOWN_MS))) {
                *pp = h->next;
                free(h);
            } else {
                pp = &h->next;
            }
        }
    }
    t->window = w;
}

static heat_t *heat_get(heat_table_t *t, mc_str_t tenant, mc_str_t key)
{
    uint64_t hash = fnv(fnv(1469598103934665603ull, tenant.ptr, tenant.len), key.ptr, key.len);
    heat_t **head = &t->b[hash % DYNREP_BUCKETS];
    heat_t *h;

    for (h = *head; h != NULL; h = h->next) {
        if ((h->hash == hash) && (h->tenant_len == tenant.len) && (h->key_len == key.len) &&
            (memcmp(h->bytes, tenant.ptr, tenant.len) == 0) &&
            (memcmp(h->bytes + tenant.len, key.ptr, key.len) == 0))
            return h;
    }
    h = calloc(1, sizeof(*h) + tenant.len + key.len);
    if (h == NULL)
        return NULL;
    h->hash       = hash;
    h->tenant_len = tenant.len;
    h->key_len    = key.len;
    memcpy(h->bytes, tenant.ptr, tenant.len);
    memcpy(h->bytes + tenant.len, key.ptr, key.len);
    h->next = *head;
    *head   = h;
    return h;
}

/* Memory replicas of @p o (NoF ones are another pool), and how many are
 * readable (their segment takes reads). */
static uint32_t memory_replicas(const mc_object_t *o, uint32_t *readable_p)
{
    const mc_replica_t *r;
    uint32_t n = 0, ok = 0;
    mc_object_for_each_replica(r, o)
    {
        if (r->seg->nof)
            continue;
        n++;
        ok += (r->seg->state == MC_SEG_OK) || (r->seg->state == MC_SEG_DRAINING);
    }
    *readable_p = ok;
    return n;
}

static int holds_replica(const mc_object_t *o, const mc_segment_t *seg)
{
    const mc_replica_t *r;
    mc_object_for_each_replica(r, o)
        if (r->seg == seg)
            return 1;
    return 0;
}

static int host_holds_replica(const mc_object_t *o, mc_str_t host)
{
    const mc_replica_t *r;
    mc_object_for_each_replica(r, o)
        if (!r->seg->nof && mc_str_eq(mc_master_segment_host(r->seg->name), host))
            return 1;
    return 0;
}

/* The segment a new replica of @p o goes to, or NULL when none fits. */
static mc_segment_t *pick_target(mc_master_t *m, const mc_object_t *o)
{
    mc_str_t key       = mc_object_key(o);
    mc_segment_t *best = NULL;
    int best_other     = 0;
    double best_used   = 0;
    uint64_t best_hash = 0;

    for (uint32_t i = 0; i < m->nseg; i++) {
        mc_segment_t *seg = m->segv[i];
        mc_alloc_stats_t st;
        double used;
        int other;
        uint64_t h;

        if ((seg->state != MC_SEG_OK) || seg->nof || holds_replica(o, seg))
            continue;
        mc_alloc_get_stats(seg->alloc, &st);
        if ((st.capacity == 0) || (st.largest_free < o->size))
            continue;
        used = (double)(st.allocated + o->size) / (double)st.capacity;
        if (used >= DYNREP_MAX_USED_RATIO)
            continue;
        other = !host_holds_replica(o, mc_master_segment_host(seg->name));
        h     = fnv(fnv(1469598103934665603ull, key.ptr, key.len), seg->name, strlen(seg->name));
        if ((best == NULL) || (other > best_other) ||
            ((other == best_other) &&
             ((used < best_used) || ((used == best_used) && (h < best_hash))))) {
            best       = seg;
            best_other = other;
            best_used  = used;
            best_hash  = h;
        }
    }
    return best;
}

static void propose(mc_req_ctx_t *x, mc_object_t *o, uint64_t hits, uint64_t window_s)
{
    mc_str_t key         = mc_object_key(o);
    mc_segment_t *target = pick_target(x->m, o);
    mc_wire_create_copy_task_req_t req;
    mc_wire_create_copy_task_resp_t resp;
    mc_str_t name;
    char id[37];
    int32_t st;

    if (target == NULL) {
        mc_info("dynamic replication: key '%.*s' is hot (%" PRIu64 " reads in %" PRIu64
                " s) but no segment has room for another replica",
                (int)MC_MIN(key.len, 200u), key.ptr, hits, window_s);
        return;
    }
    name = mc_str_from_cstr(target->name);
    memset(&req, 0, sizeof(req));
    memset(&resp, 0, sizeof(resp));
    req.key       = key;
    req.targets.n = 1;
    req.targets.v = &name;
    st            = mc_master_create_copy_task(x, &req, &resp);
    if (st != MC_OK) {
        mc_info("dynamic replication: copy of hot key '%.*s' to %s not queued: %s",
                (int)MC_MIN(key.len, 200u), key.ptr, target->name, mc_status_name(st));
        return;
    }
    mc_uuid_format(resp.task_id, id);
    mc_info("dynamic replication: key '%.*s' is hot (%" PRIu64 " reads in %" PRIu64
            " s): copy task %s adds a replica on %s",
            (int)MC_MIN(key.len, 200u), key.ptr, hits, window_s, id, target->name);
}

void mc_master_dynrep_hit(mc_req_ctx_t *x, mc_object_t *o)
{
    const mc_master_config_t *cfg = x->m->cfg;
    uint64_t window_ms, w, threshold;
    uint32_t readable;
    heat_table_t *t;
    heat_t *h;

    if (x->m->dynrep_mode == MC_DYNREP_OFF)
        return;
    if (!o->complete ||
        (memory_replicas(o, &readable) >= (uint64_t)cfg->dynamic_replication_max_memory_replicas) ||
        (readable == 0))
        return;
    t = heat_of(x->m);
    if (t == NULL)
        return;
    window_ms = (uint64_t)cfg->dynamic_replication_heat_window_seconds * 1000u;
    w         = x->now_ms / window_ms;
    if (w != t->window)
        heat_prune(t, w, x->now_ms);
    h = heat_get(t, (mc_str_t){o->writer->tenant, o->writer->tenant_len}, mc_object_key(o));
    if (h == NULL)
        return;
    if (h->window != w) {
        h->window = w;
        h->hits   = 0;
    }
    {
        /* ceil(qps x window) without libm */
        double want = cfg->dynamic_replication_admission_qps_threshold *
                      (double)cfg->dynamic_replication_heat_window_seconds;
        threshold   = (uint64_t)want;
        if ((double)threshold < want)
            threshold++;
        if (threshold == 0)
            threshold = 1;
    }
    if (++h->hits != threshold)
        return; /* not hot yet, or already reported in this window */
    if (x->m->dynrep_mode == MC_DYNREP_OBSERVE) {
        mc_info("dynamic replication (observe): key '%.*s' is hot (%" PRIu64 " reads in %" PRId64
                " s); enforce would add a replica",
                (int)MC_MIN(o->key_len, 200u), mc_object_key(o).ptr, h->hits,
                cfg->dynamic_replication_heat_window_seconds);
        return;
    }
    if ((h->acted_ms != 0) && (x->now_ms < h->acted_ms + DYNREP_ACTION_COOLDOWN_MS))
        return;
    h->acted_ms = x->now_ms;
    propose(x, o, h->hits, (uint64_t)cfg->dynamic_replication_heat_window_seconds);
}

void mc_master_dynrep_stop(mc_master_t *m)
{
    heat_table_t *t = m->heat;
    if (t == NULL)
        return;
    for (uint32_t i = 0; i < DYNREP_BUCKETS; i++) {
        while (t->b[i] != NULL) {
            heat_t *h = t->b[i];
            t->b[i]   = h->next;
            free(h);
        }
    }
    free(t);
    m->heat = NULL;
}
