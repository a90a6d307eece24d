/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The writer's side of one-round-trip puts (docs/protocol.md §5.18): a few
 * reservations kept for the next put of the same length and placement.
 *
 * A reservation names buffers that the master placed for this client and
 * will release at its deadline.  The bytes of a put land in them before
 * the master hears of the put (PUT_COMMIT), so the one rule here is that
 * a reservation is used only while the master surely still holds it:
 *
 *  - before half its TTL has passed (and at most MC_RESV_FRESH_US),
 *    counted from when PUT_RESERVE or PUT_COMMIT was *sent* (the master's
 *    clock starts later), so a transfer that starts in time has the other
 *    half to finish;
 *  - on the master it was granted by: every slot records the view_version
 *    of the connection that carried the grant, and a heartbeat that sees
 *    another view, or none (mc_store_resv_view), empties the cache.
 *
 * A reservation is owned by exactly one caller at a time: take moves it
 * out of its slot, give puts it back (or frees it when no longer usable).
 *
 * Reservations are asked for only for put shapes (length and placement)
 * that came within the last MC_RESV_FRESH_US (mc_store_resv_seen): the
 * first put of a shape takes PUT_START + PUT_END, so a writer of values of
 * ever-changing sizes leaves no unused reservation behind, while a writer
 * of a steady shape puts in one round trip from its third put on.
 *
 * May call: nothing of the store but its own types (a leaf).  Called by:
 * write.c (the one-trip put), store.c (setup, close),
 * ../threads/heartbeat.c (a new master view).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "common/hashmap.h"
#include "common/log.h"
#include "common/util.h"
#include "store/store_internal.h"
#include "store/write/write.h"

/* Longest value a reservation is asked for: the space held unused per
 * writer stays at most MC_RESV_SLOTS times this. */
#define MC_RESV_MAX_LEN (1u << 20)

/* A reservation is used for at most this long after its grant was asked
 * for (and never past half its TTL).  Its segment may go away meanwhile
 * (unmounted, its holder declared dead), and the writer hears of that only
 * from the commit, after its bytes went out; a segment mounted in its place
 * at the same addresses is the one hazard, and this bounds its window, as
 * the length of a transfer bounds it for PUT_START.  A writer that puts
 * more often than this keeps one round trip per put: every commit brings a
 * fresh reservation. */
#define MC_RESV_FRESH_US 1000000u

void mc_store_resv_init(mc_store_h s)
{
    memset(&s->resv, 0, sizeof(s->resv));
    pthread_mutex_init(&s->resv.mu, NULL);
}

mc_status_t mc_store_resv_config(mc_store_h s)
{
    const char *env = getenv("MC_PUT_ONE_TRIP");

    /* MC_PUT_ONE_TRIP=0: every put takes PUT_START + PUT_END */
    if ((env == NULL) || (*env == '\0') || (strcmp(env, "1") == 0)) {
        s->resv.disabled = 0;
    } else if (strcmp(env, "0") == 0) {
        s->resv.disabled = 1;
    } else {
        mc_set_error_detail("MC_PUT_ONE_TRIP=\"%s\": expected 0 (off) or 1 (on)", env);
        mc_error("setup: %s", mc_last_error_detail());
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

void mc_store_resv_free(mc_resv_t *r)
{
    free(r->mem);
    memset(r, 0, sizeof(*r));
}

/* Empty every slot; mu held. */
static void do_clear(mc_store_h s)
{
    for (size_t i = 0; i < MC_RESV_SLOTS; i++)
        mc_store_resv_free(&s->resv.slot[i]);
}

void mc_store_resv_cleanup(mc_store_h s)
{
    pthread_mutex_lock(&s->resv.mu);
    do_clear(s);
    pthread_mutex_unlock(&s->resv.mu);
    pthread_mutex_destroy(&s->resv.mu);
}

void mc_store_resv_clear(mc_store_h s)
{
    pthread_mutex_lock(&s->resv.mu);
    do_clear(s);
    pthread_mutex_unlock(&s->resv.mu);
}

void mc_store_resv_view(mc_store_h s, uint64_t view)
{
    pthread_mutex_lock(&s->resv.mu);
    if (view != s->resv.view) {
        do_clear(s);
        s->resv.view = view;
    }
    pthread_mutex_unlock(&s->resv.mu);
}

void mc_store_resv_disable(mc_store_h s)
{
    pthread_mutex_lock(&s->resv.mu);
    s->resv.disabled = 1;
    do_clear(s);
    pthread_mutex_unlock(&s->resv.mu);
}

int mc_store_resv_wanted(mc_store_h s, uint64_t length)
{
    int on;
    if ((length == 0) || (length > MC_RESV_MAX_LEN))
        return 0;
    pthread_mutex_lock(&s->resv.mu);
    on = !s->resv.disabled;
    pthread_mutex_unlock(&s->resv.mu);
    return on;
}

static uint64_t placement_hash(const mc_wire_config_t *c)
{
    uint64_t h = mc_hash_bytes(c->preferred_segment.ptr, c->preferred_segment.len, 0);
    uint32_t f[2] = {c->replica_num, c->prefer_alloc_in_same_node};
    return mc_hash_bytes(f, sizeof(f), h);
}

int mc_store_resv_seen(mc_store_h s, uint64_t length, const mc_wire_config_t *cfg)
{
    uint64_t now = mc_now_us(), h = placement_hash(cfg);
    mc_resv_seen_t *old = NULL;
    int seen = 0;

    pthread_mutex_lock(&s->resv.mu);
    for (size_t i = 0; i < MC_RESV_SEEN; i++) {
        mc_resv_seen_t *e = &s->resv.seen[i];
        if ((e->at_us != 0) && (e->length == length) && (e->placement == h)) {
            seen     = now < e->at_us + MC_RESV_FRESH_US;
            e->at_us = now;
            old      = NULL;
            break;
        }
        if ((old == NULL) || (e->at_us < old->at_us))
            old = e;
    }
    if (old != NULL) {
        old->length    = length;
        old->placement = h;
        old->at_us     = now;
    }
    pthread_mutex_unlock(&s->resv.mu);
    return seen;
}

/* Same placement: what the master placed the buffers for. */
static int same_placement(const mc_resv_t *r, uint64_t length, const mc_wire_config_t *c)
{
    return (r->length == length) && (r->replica_num == c->replica_num) &&
           (r->same_node == c->prefer_alloc_in_same_node) &&
           mc_str_eq(mc_str_from_cstr(r->preferred), c->preferred_segment);
}

int mc_store_resv_take(mc_store_h s, uint64_t length, const mc_wire_config_t *cfg, mc_resv_t *out)
{
    uint64_t now = mc_now_us();
    int found    = 0;

    pthread_mutex_lock(&s->resv.mu);
    for (size_t i = 0; i < MC_RESV_SLOTS; i++) {
        mc_resv_t *r = &s->resv.slot[i];
        if (r->id == 0)
            continue;
        if ((now >= r->use_by_us) || (r->view != s->resv.view)) {
            mc_store_resv_free(r); /* the master releases it by itself */
            continue;
        }
        if (!found && same_placement(r, length, cfg)) {
            *out = *r;
            memset(r, 0, sizeof(*r));
            found = 1;
        }
    }
    pthread_mutex_unlock(&s->resv.mu);
    return found;
}

void mc_store_resv_give(mc_store_h s, mc_resv_t *r)
{
    mc_resv_t *victim = NULL;

    if (r->id == 0)
        return;
    pthread_mutex_lock(&s->resv.mu);
    if (r->view != s->resv.view) {
        /* granted on a connection to a master other than the one the
         * slots came from: the slots are the stale ones */
        do_clear(s);
        s->resv.view = r->view;
    }
    if (s->resv.disabled || (mc_now_us() >= r->use_by_us)) {
        pthread_mutex_unlock(&s->resv.mu);
        mc_store_resv_free(r);
        return;
    }
    for (size_t i = 0; i < MC_RESV_SLOTS; i++) {
        mc_resv_t *c = &s->resv.slot[i];
        if (c->id == 0) {
            victim = c;
            break;
        }
        if ((victim == NULL) || (c->use_by_us < victim->use_by_us))
            victim = c;
    }
    mc_store_resv_free(victim); /* the oldest goes (the master releases it) */
    *victim = *r;
    memset(r, 0, sizeof(*r));
    pthread_mutex_unlock(&s->resv.mu);
}

mc_status_t mc_store_resv_make(mc_resv_t *r, uint64_t id, uint64_t ttl_ms, uint64_t sent_us,
                               uint64_t view, uint64_t length, const mc_wire_config_t *cfg,
                               const mc_wire_replica_list_t *reps)
{
    size_t strs = (size_t)cfg->preferred_segment.len + 1, off;
    char *p;

    memset(r, 0, sizeof(*r));
    if ((id == 0) || (reps->n == 0) || (ttl_ms == 0))
        return MC_INVALID_PARAMS;
    for (uint32_t i = 0; i < reps->n; i++) {
        if ((reps->v[i].type != MC_WIRE_REPLICA_MEMORY) || (reps->v[i].size < length))
            return MC_INVALID_REPLICA;
        strs += (size_t)reps->v[i].segment.len + 1;
    }
    off    = (size_t)reps->n * sizeof(mc_wire_replica_t);
    r->mem = malloc(off + strs);
    if (r->mem == NULL)
        return MC_INTERNAL_ERROR;
    r->reps.v = r->mem;
    r->reps.n = reps->n;
    p         = (char *)r->mem + off;
    for (uint32_t i = 0; i < reps->n; i++) {
        mc_wire_replica_t *d = &r->reps.v[i];
        *d                   = reps->v[i];
        memcpy(p, reps->v[i].segment.ptr, reps->v[i].segment.len);
        p[reps->v[i].segment.len] = '\0';
        d->segment                = (mc_str_t){p, reps->v[i].segment.len};
        d->file_path              = (mc_str_t){NULL, 0};
        p += reps->v[i].segment.len + 1;
    }
    memcpy(p, cfg->preferred_segment.ptr, cfg->preferred_segment.len);
    p[cfg->preferred_segment.len] = '\0';
    r->preferred                  = p;
    r->id                         = id;
    r->length                     = length;
    r->use_by_us                  = sent_us + MC_MIN(ttl_ms * 1000u / 2, MC_RESV_FRESH_US);
    r->view                       = view;
    r->replica_num                = cfg->replica_num;
    r->same_node                  = cfg->prefer_alloc_in_same_node;
    return MC_OK;
}
