/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Admin HTTP server and metrics (--metrics_port, --metrics_host), the
 * counterpart of upstream's master_admin_service.
 *
 * Served by libevent's evhttp on the master's event loop, like the
 * metadata server in http.c, so every handler reads the master's
 * structures directly and without locks.  Only GET (and HEAD) are
 * allowed; anything else is 405, an unknown path 404.
 *
 *   /metrics          Prometheus text exposition (version 0.0.4) with the
 *                     upstream master_* names that apply: gauges for
 *                     capacity, allocation, keys, soft-pinned keys,
 *                     clients; eviction counters; and for every RPC of the
 *                     wire table master_<op>_requests_total and
 *                     master_<op>_failures_total (a reply status other
 *                     than OK), counted by rpc.c's dispatcher; for batch
 *                     RPCs also master_<op>_{partial_successes,items,
 *                     failed_items}_total.  Every counter ends in _total;
 *                     upstream's two eviction counters without the suffix
 *                     are repeated under their upstream names as untyped.
 *                     mooncake_build_info{version,...} is 1.
 *   /metrics/summary  the same figures, one human-readable line each.
 *   /health           "OK".
 *   /query_key?key=K[&tenant=T]
 *                     JSON: size, completeness, replicas (segment, addr,
 *                     size, status, type MEMORY or NOF), disk_replicas
 *                     (type LOCAL_DISK: the holder's SSD-tier record,
 *                     segment, file_path, offset; type DISK: the DFS
 *                     record, shard_idx, offset), lease and soft-pin time
 *                     remaining, pins, group; 404 when absent.  Looking a
 *                     key up here grants no lease.
 *   /get_all_keys[?tenant=T]
 *                     JSON {"keys": [...], "count": n, "truncated": b},
 *                     at most MC_ADMIN_MAX_KEYS keys (hash order).
 *   /get_all_segments JSON list of {name, id, size, used, status, client}.
 *   /query_segment?segment=NAME
 *                     JSON {name, capacity, allocated, client_id, segments:
 *                     [...]} summed over the segments of that name; 404
 *                     when none is mounted.
 *   /batch_query_keys?keys=K1,K2[&tenant=T]
 *                     upstream's {"success": true, "data": {K: {"ok": true,
 *                     "values": [{size_, buffer_address_, protocol_,
 *                     transport_endpoint_}]} or {"ok": false, "error":
 *                     "OBJECT_NOT_FOUND"}}}; no keys is 400 {"success":
 *                     false, "error": "No keys provided. ..."}.
 *   /get_segments_detail
 *                     upstream's {"total_segments", "segments": [{
 *                     segment_name, segment_id, client_id, base_address
 *                     ("0x..."), size_bytes, size_human, te_endpoint,
 *                     protocol, status, allocator_*}]}.
 *   /role             "leader": a master without HA leads alone.
 *
 * The tenant defaults to "default", as on the RPC side.  Keys and names
 * that are not valid UTF-8 are shown with every non-ASCII byte replaced by '?'
 * (JSON cannot carry them).  Gauges that need a scan of the index (soft-
 * pinned keys) cost O(keys) per scrape, which is fine at scrape rates.
 *
 * Owns: the admin HTTP server: /metrics, /health, the query and tenant
 *   endpoints.
 * May call: admin/, index/, durability/, events/, tiers/ and ha/ (what
 *   they report).
 */
#include "config.h"

#include <inttypes.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "admin.h"
#include "common/auth.h"
#include "common/log.h"
#include "durability/durability.h"
#include "events/events.h"
#include "ha/ha.h"
#include "index/index.h"
#include "master.h"
#include "tiers/tiers.h"

#define MC_ADMIN_MAX_KEYS 100000  /* /get_all_keys output cap */

/* ---- replies ---------------------------------------------------------------- */

static void reply_buf(struct evhttp_request *req, int code, const char *reason,
                      const char *ctype, struct evbuffer *b)
{
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", ctype);
    evhttp_send_reply(req, code, reason, b);
}

static void reply_text(struct evhttp_request *req, int code, const char *reason,
                       const char *text)
{
    struct evbuffer *b = evbuffer_new();
    if ((b == NULL) || (evbuffer_add(b, text, strlen(text)) != 0)) {
        if (b != NULL)
            evbuffer_free(b);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    reply_buf(req, code, reason, "text/plain; charset=utf-8", b);
    evbuffer_free(b);
}

/* Send @p j (consumed) as the body of a @p code reply. */
static void reply_json_status(struct evhttp_request *req, int code, const char *reason, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    struct evbuffer *b;

    json_decref(j);
    b = s ? evbuffer_new() : NULL;
    if ((b == NULL) || (evbuffer_add(b, s, strlen(s)) != 0)) {
        if (b != NULL)
            evbuffer_free(b);
        free(s);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    free(s);
    reply_buf(req, code, reason, "application/json", b);
    evbuffer_free(b);
}

/* Send @p j (consumed) as the 200 body. */
static void reply_json(struct evhttp_request *req, json_t *j)
{
    reply_json_status(req, HTTP_OK, "OK", j);
}

/* A JSON string from arbitrary bytes: invalid UTF-8 bytes become '?'. */
static json_t *jstr(const char *p, size_t n)
{
    json_t *j = json_stringn(p, n);
    char *copy;

    if (j != NULL)
        return j;
    copy = malloc(n ? n : 1);
    if (copy == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        copy[i]         = ((c >= 0x80) || (c == 0)) ? '?' : (char)c;
    }
    j = json_stringn(copy, n);
    free(copy);
    return j;
}

/* obj[name] = value; returns -1 (and frees value) on failure. */
static int jset(json_t *obj, const char *name, json_t *value)
{
    return (value == NULL) ? -1 : json_object_set_new(obj, name, value);
}

static uint64_t remaining(uint64_t deadline_ms, uint64_t now_ms)
{
    return deadline_ms > now_ms ? deadline_ms - now_ms : 0;
}

static const char *seg_state_name(mc_segment_state_t s)
{
    switch (s) {
    case MC_SEG_OK:
        return "OK";
    case MC_SEG_DRAINING:
        return "DRAINING";
    case MC_SEG_UNMOUNTING:
        return "UNMOUNTING";
    case MC_SEG_AWAITING:
        return "AWAITING_REMOUNT";
    }
    return "UNKNOWN";
}

/* ---- figures shared by /metrics and /metrics/summary ------------------------ */

typedef struct admin_figures {
    uint64_t keys;
    uint64_t soft_pinned;
    uint64_t hard_pinned;
    uint64_t clients;
    uint64_t value_bytes;      /* sum of complete objects' sizes */
} admin_figures_t;

static void gather(mc_master_t *m, admin_figures_t *f)
{
    uint64_t now = mc_now_ms();
    mc_chmap_iter_t it;

    memset(f, 0, sizeof(*f));
    f->keys    = mc_master_objects_count(m);
    f->clients = mc_master_clients_count(m);
    for (mc_cnode_t *n = mc_chmap_first(&m->objects, &it); n != NULL;
         n = mc_chmap_next(&m->objects, &it)) {
        const mc_object_t *o = mc_container_of(n, mc_object_t, node);
        if (mc_object_soft_pin_deadline(o) > now)
            f->soft_pinned++;
        if (o->hard_pin)
            f->hard_pinned++;
        if (o->complete)
            f->value_bytes += o->size;
    }
}

/* The wire table as (name, opcode) pairs for the per-RPC counters. */
typedef struct admin_op {
    const char *name;
    uint16_t code;
} admin_op_t;

static const admin_op_t admin_ops[] = {
#define MC_ADMIN_OP_(UP, low, code) {#low, (code)},
    MC_WIRE_MESSAGES(MC_ADMIN_OP_)
#undef MC_ADMIN_OP_
};

/* The shared helper (admin.h), under the short name this file uses. */
static void metric(struct evbuffer *b, const char *name, const char *type, const char *help,
                   uint64_t v)
{
    mc_master_metric(b, name, type, help, v);
}

/* master_batch_<op>_{partial_successes,items,failed_items}_total, counted
 * by rpc.c's dispatcher for every batch opcode. */
static void batch_metrics(mc_master_t *m, struct evbuffer *b, const admin_op_t *op)
{
    evbuffer_add_printf(b,
                        "# HELP master_%s_partial_successes_total %s requests answered OK "
                        "with some keys failed.\n"
                        "# TYPE master_%s_partial_successes_total counter\n"
                        "master_%s_partial_successes_total %" PRIu64 "\n",
                        op->name, mc_wire_op_name(op->code), op->name, op->name,
                        m->op_partial[op->code]);
    /* BATCH_REPLICA_CLEAR exports its own item counters (index/removes.c) */
    if (op->code == MC_WIRE_OP_BATCH_REPLICA_CLEAR)
        return;
    evbuffer_add_printf(b,
                        "# HELP master_%s_items_total Keys asked of %s.\n"
                        "# TYPE master_%s_items_total counter\n"
                        "master_%s_items_total %" PRIu64 "\n"
                        "# HELP master_%s_failed_items_total Keys of %s whose result was "
                        "an error.\n"
                        "# TYPE master_%s_failed_items_total counter\n"
                        "master_%s_failed_items_total %" PRIu64 "\n",
                        op->name, mc_wire_op_name(op->code), op->name, op->name,
                        m->op_items[op->code], op->name, mc_wire_op_name(op->code), op->name,
                        op->name, m->op_failed_items[op->code]);
}

static void do_metrics(mc_master_t *m, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    admin_figures_t f;

    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    gather(m, &f);
    metric(b, "master_allocated_bytes", "gauge", "Bytes allocated in mounted segments.",
           m->allocated_bytes);
    metric(b, "master_put_reservations", "gauge",
           "Put reservations granted and not yet committed or released (PUT_RESERVE).",
           (uint64_t)m->reservations.count);
    metric(b, "master_total_capacity_bytes", "gauge", "Capacity of all mounted segments.",
           m->capacity_bytes);
    metric(b, "master_value_size_bytes", "gauge", "Sum of the sizes of complete objects.",
           f.value_bytes);
    metric(b, "master_key_count", "gauge", "Objects in the index (all tenants).", f.keys);
    metric(b, "master_index_prefaulted_blocks_total", "counter",
           "2 MiB blocks of object records taken already faulted in from the index's "
           "helper thread (no page faults on the event loop for them).",
           (uint64_t)mc_slab_prefaulted_blocks(&m->objslab));
    metric(b, "master_soft_pin_key_count", "gauge", "Objects with an active soft pin.",
           f.soft_pinned);
    metric(b, "master_hard_pin_key_count", "gauge", "Hard-pinned objects.", f.hard_pinned);
    metric(b, "master_active_clients", "gauge", "Clients alive (pinged within --client_ttl).",
           f.clients);
    metric(b, "master_mounted_segments", "gauge", "Mounted segments.", m->nseg);
    metric(b, "master_rpc_connections", "gauge", "Open RPC connections.", m->nconns);
    metric(b, "master_evicted_key_count_total", "counter", "Objects evicted since start.",
           m->evicted_keys);
    metric(b, "master_evicted_size_bytes_total", "counter", "Bytes evicted since start.",
           m->evicted_bytes);
    /* upstream's names of the two above, which its dashboards query */
    metric(b, "master_evicted_key_count", "untyped",
           "Objects evicted since start (upstream name of master_evicted_key_count_total).",
           m->evicted_keys);
    metric(b, "master_evicted_size_bytes", "untyped",
           "Bytes evicted since start (upstream name of master_evicted_size_bytes_total).",
           m->evicted_bytes);
    metric(b, "master_disk_replicas", "gauge", "Disk replicas on client SSD tiers.",
           m->disk_replicas);
    metric(b, "master_disk_replica_bytes", "gauge", "Bytes of the disk replicas.",
           m->disk_bytes);
    metric(b, "master_offloaded_keys_total", "counter", "Disk replicas reported since start.",
           m->offloaded_keys);
    metric(b, "master_offloaded_bytes_total", "counter", "Bytes of the disk replicas reported.",
           m->offloaded_bytes);
    mc_master_nof_metrics(m, b);
    metric(b, "master_disk_replicas_dropped_total", "counter",
           "Disk replicas forgotten (bucket gone, holder gone, upsert, object end).",
           m->disk_dropped_keys);
    metric(b, "master_promotions_queued_total", "counter",
           "Disk-only objects whose copy back to memory was queued (--promotion_on_hit).",
           m->promotions_queued);
    metric(b, "master_promotions_total", "counter",
           "Disk-only objects copied back to memory (--promotion_on_hit).", m->promotions_done);
    if (m->dfs != NULL) {
        /* the DFS tier (--root_fs_dir, docs/tiers.md §6) */
        metric(b, "master_dfs_replicas", "gauge", "DFS replicas (records in the shard files).",
               m->dfs->replicas);
        metric(b, "master_dfs_replica_bytes", "gauge", "Value bytes of the DFS replicas.",
               m->dfs->bytes);
        metric(b, "master_dfs_allocated_bytes", "gauge",
               "Bytes of the DFS shards taken by records (aligned).", m->dfs->alloc.used);
        metric(b, "master_dfs_capacity_bytes", "gauge", "Bytes of all DFS shards.",
               mc_dfs_alloc_capacity(&m->dfs->alloc));
        metric(b, "master_dfs_writes_total", "counter", "DFS replicas placed since start.",
               m->dfs->writes);
        metric(b, "master_dfs_alloc_failures_total", "counter",
               "Writes refused because no DFS shard had room.", m->dfs->alloc_failures);
    }
    metric(b, "master_attempted_evictions_total", "counter",
           "Eviction passes started (background above the high watermark, or inline for "
           "a put that did not fit).",
           m->eviction_attempts);
    metric(b, "master_successful_evictions_total", "counter",
           "Eviction passes that freed something.", m->evictions);
    metric(b, "master_pending_tasks", "gauge", "Copy/move tasks waiting for their client.",
           m->taskq[MC_TASKQ_PENDING].n);
    metric(b, "master_processing_tasks", "gauge", "Copy/move tasks being executed.",
           m->taskq[MC_TASKQ_PROCESSING].n);
    metric(b, "master_finished_tasks", "gauge", "Finished copy/move tasks kept for queries.",
           m->taskq[MC_TASKQ_FINISHED].n);
    metric(b, "master_uptime_seconds", "gauge", "Seconds since the master started.",
           (mc_now_ms() - m->start_ms) / 1000);
    metric(b, "master_batch_replica_clear_items_total", "counter",
           "Keys asked of BATCH_REPLICA_CLEAR.", m->replica_clear_items);
    metric(b, "master_batch_replica_clear_failed_items_total", "counter",
           "Keys BATCH_REPLICA_CLEAR did not clear.", m->replica_clear_failed_items);
    {
        mc_durable_stats_t ds; /* --enable_snapshot (docs/ha.md) */
        if (mc_durable_get_stats(m, &ds) == 0) {
            metric(b, "master_snapshot_success", "counter", "Snapshots written since start.",
                   ds.snapshots_ok);
            metric(b, "master_snapshot_fail", "counter", "Snapshots that failed since start.",
                   ds.snapshots_failed);
            metric(b, "master_snapshot_duration_ms", "gauge", "Duration of the last snapshot.",
                   ds.last_snapshot_ms);
            metric(b, "master_snapshot_max_loop_pause_us", "gauge",
                   "Longest event-loop pause of a snapshot walk since start.", ds.max_pause_us);
            metric(b, "master_oplog_records_total", "counter",
                   "Operation log records appended since start.", ds.log_records);
            metric(b, "master_oplog_bytes_total", "counter",
                   "Operation log bytes written and synced since start.", ds.log_bytes);
            metric(b, "master_oplog_sync_rounds_total", "counter",
                   "Operation log write + sync rounds (group commits) since start.",
                   ds.log_rounds);
        }
    }
    for (size_t i = 0; i < MC_ARRAY_SIZE(admin_ops); i++) {
        const admin_op_t *op = &admin_ops[i];
        evbuffer_add_printf(b,
                            "# HELP master_%s_requests_total %s requests handled.\n"
                            "# TYPE master_%s_requests_total counter\n"
                            "master_%s_requests_total %" PRIu64 "\n"
                            "# HELP master_%s_failures_total %s requests answered with "
                            "an error status.\n"
                            "# TYPE master_%s_failures_total counter\n"
                            "master_%s_failures_total %" PRIu64 "\n",
                            op->name, mc_wire_op_name(op->code), op->name, op->name,
                            m->op_requests[op->code], op->name, mc_wire_op_name(op->code),
                            op->name, op->name, m->op_failures[op->code]);
        if (strncmp(op->name, "batch_", 6) == 0)
            batch_metrics(m, b, op);
    }
    /* upstream counts REMOUNT_SEGMENT(S) under the singular name */
    metric(b, "master_remount_segment_requests_total", "counter",
           "REMOUNT_SEGMENTS requests handled (upstream's name).",
           m->op_requests[MC_WIRE_OP_REMOUNT_SEGMENTS]);
    metric(b, "master_remount_segment_failures_total", "counter",
           "REMOUNT_SEGMENTS requests answered with an error status (upstream's name).",
           m->op_failures[MC_WIRE_OP_REMOUNT_SEGMENTS]);
    mc_master_ha_metrics(m, b);
    evbuffer_add_printf(b,
                        "# HELP mooncake_build_info Build of this master; the value is 1.\n"
                        "# TYPE mooncake_build_info gauge\n"
                        "mooncake_build_info{component=\"mooncake_master\",version=\"%s\","
                        "libevent=\"%s\",jansson=\"%s\"} 1\n",
                        mc_version_string(), event_get_version(), JANSSON_VERSION);
    reply_buf(req, HTTP_OK, "OK", "text/plain; version=0.0.4; charset=utf-8", b);
    evbuffer_free(b);
}

static void do_summary(mc_master_t *m, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    admin_figures_t f;
    uint64_t reqs = 0, fails = 0;

    if (b == NULL) {
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    gather(m, &f);
    for (size_t i = 0; i < MC_ARRAY_SIZE(admin_ops); i++) {
        reqs += m->op_requests[admin_ops[i].code];
        fails += m->op_failures[admin_ops[i].code];
    }
    evbuffer_add_printf(
        b,
        "mooncake_master %s, up %" PRIu64 " s\n"
        "Storage: %" PRIu64 " of %" PRIu64 " bytes allocated (%.1f%%) in %" PRIu32
        " segments\n"
        "Keys: %" PRIu64 " (%" PRIu64 " soft-pinned, %" PRIu64 " hard-pinned, %" PRIu64
        " value bytes)\n"
        "Clients: %" PRIu64 " active, %" PRIu32 " RPC connections\n"
        "Evictions: %" PRIu64 " keys, %" PRIu64 " bytes, %" PRIu64 " passes\n"
        "Requests: %" PRIu64 " (%" PRIu64 " failed)\n",
        mc_version_string(), (mc_now_ms() - m->start_ms) / 1000, m->allocated_bytes,
        m->capacity_bytes,
        m->capacity_bytes ? 100.0 * (double)m->allocated_bytes / (double)m->capacity_bytes : 0.0,
        m->nseg, f.keys, f.soft_pinned, f.hard_pinned, f.value_bytes, f.clients, m->nconns,
        m->evicted_keys, m->evicted_bytes, m->evictions, reqs, fails);
    for (size_t i = 0; i < MC_ARRAY_SIZE(admin_ops); i++) {
        uint16_t c = admin_ops[i].code;
        if (m->op_requests[c] != 0)
            evbuffer_add_printf(b, "  %-24s %12" PRIu64 " requests %10" PRIu64 " failed\n",
                                mc_wire_op_name(c), m->op_requests[c], m->op_failures[c]);
    }
    reply_buf(req, HTTP_OK, "OK", "text/plain; charset=utf-8", b);
    evbuffer_free(b);
}

/* GET /leader: {"present", "leader_address"?, "view_version"?} as this
 * master last saw the election (ha.h). */
static void do_leader(mc_master_t *m, struct evhttp_request *req)
{
    char addr[300];
    int64_t term = mc_master_ha_leader(m, addr, sizeof(addr));
    json_t *j    = json_object();

    if ((j == NULL) || jset(j, "present", json_boolean(term != 0)) ||
        ((term != 0) && (jset(j, "leader_address", json_string(addr)) ||
                         jset(j, "view_version", json_integer(term))))) {
        json_decref(j);
        evhttp_send_error(req, HTTP_INTERNAL, NULL);
        return;
    }
    reply_json(req, j);
}

/* ---- index queries ------------------------------------------------------------ */

static json_t *replica_json(const mc_replica_t *r, uint64_t size)
{
    json_t *j = json_object();
    char id[37];

    if (j == NULL)
        return NULL;
    mc_uuid_format(r->seg->id, id);
    if ((jset(j, "segment", jstr(r->seg->name, strlen(r->seg->name))) != 0) ||
        (jset(j, "segment_id", json_string(id)) != 0) ||
        (jset(j, "addr", json_integer((json_int_t)(r->seg->base +
                                                   mc_master_replica_block(r).offset))) != 0) ||
        (jset(j, "size", json_integer((json_int_t)size)) != 0) ||
        (jset(j, "status", json_string(r->status == MC_REPLICA_COMPLETE ? "COMPLETE"
                                                                         : "PROCESSING")) != 0) ||
        (jset(j, "type", json_string(r->seg->nof ? "NOF" : "MEMORY")) != 0)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/*
 * The disk replicas of @p o for /query_key, typed as upstream's
 * ReplicaType (what mc_replica_kind_t tells clients): the record in the
 * holder's SSD-offload tier is LOCAL_DISK, the record in the shared DFS
 * tier is DISK.  NULL on OOM.
 */
static json_t *disk_replicas_json(const mc_object_t *o)
{
    json_t *arr = json_array(), *d;
    const mc_disk_replica_t *ld = (o->ext != NULL) ? o->ext->disk : NULL;
    const mc_dfs_replica_t *fs  = (o->ext != NULL) ? o->ext->dfs : NULL;

    if (arr == NULL)
        return NULL;
    if (ld != NULL) {
        d = json_object();
        if ((d == NULL) || (json_array_append_new(arr, d) != 0) ||
            (jset(d, "type", json_string("LOCAL_DISK")) != 0) ||
            (jset(d, "segment", jstr(ld->segment, strlen(ld->segment))) != 0) ||
            (jset(d, "file_path", jstr(ld->path, strlen(ld->path))) != 0) ||
            (jset(d, "offset", json_integer((json_int_t)ld->offset)) != 0) ||
            (jset(d, "size", json_integer((json_int_t)ld->length)) != 0) ||
            (jset(d, "status", json_string("COMPLETE")) != 0))
            goto oom;
    }
    if (fs != NULL) {
        d = json_object();
        if ((d == NULL) || (json_array_append_new(arr, d) != 0) ||
            (jset(d, "type", json_string("DISK")) != 0) ||
            (jset(d, "shard_idx", json_integer((json_int_t)fs->shard)) != 0) ||
            (jset(d, "offset", json_integer((json_int_t)fs->offset)) != 0) ||
            (jset(d, "size", json_integer((json_int_t)o->size)) != 0) ||
            (jset(d, "status", json_string(fs->status == MC_REPLICA_COMPLETE ? "COMPLETE"
                                                                              : "PROCESSING")) !=
             0))
            goto oom;
    }
    return arr;

oom:
    json_decref(arr);
    return NULL;
}

static void do_query_key(mc_master_t *m, struct evhttp_request *req, const char *key,
                         const char *tenant)
{
    uint64_t now = mc_now_ms();
    mc_object_t *o;
    json_t *j, *reps;
    const mc_replica_t *r;

    o = mc_master_object_find(m, mc_str_from_cstr(tenant), mc_str_from_cstr(key));
    if (o == NULL) {
        reply_text(req, HTTP_NOTFOUND, "Not Found", "key not found");
        return;
    }
    j    = json_object();
    reps = json_array();
    if ((j == NULL) || (reps == NULL))
        goto oom;
    mc_object_for_each_replica(r, o)
    {
        if (json_array_append_new(reps, replica_json(r, o->size)) != 0)
            goto oom;
    }
    if (jset(j, "replicas", reps) != 0) /* consumes reps either way */
        goto oom_j;
    if (jset(j, "disk_replicas", disk_replicas_json(o)) != 0)
        goto oom_j;
    if ((jset(j, "key", jstr(key, strlen(key))) != 0) ||
        (jset(j, "tenant", jstr(tenant, strlen(tenant))) != 0) ||
        (jset(j, "size", json_integer((json_int_t)o->size)) != 0) ||
        (jset(j, "complete", json_boolean(o->complete)) != 0))
        goto oom_j;
    if ((jset(j, "lease_remaining_ms",
              json_integer((json_int_t)remaining(o->lease_deadline_ms, now))) != 0) ||
        (jset(j, "hard_pin", json_boolean(o->hard_pin)) != 0) ||
        (jset(j, "soft_pin", json_boolean(mc_object_soft_pin_deadline(o) > now)) != 0) ||
        (jset(j, "soft_pin_remaining_ms",
              json_integer((json_int_t)remaining(mc_object_soft_pin_deadline(o), now))) != 0) ||
        (jset(j, "group_id", mc_object_group_id(o)
                                 ? jstr(mc_object_group_id(o), strlen(mc_object_group_id(o)))
                                 : json_null()) != 0) ||
        (jset(j, "upserting", json_boolean(o->upsert != MC_UPSERT_NONE)) != 0))
        goto oom_j;
    reply_json(req, j);
    return;

oom:
    json_decref(reps);
oom_j:
    json_decref(j);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

static void do_all_keys(mc_master_t *m, struct evhttp_request *req, const char *tenant)
{
    mc_str_t t = mc_str_from_cstr(tenant);
    json_t *j  = json_object();
    json_t *keys = json_array();
    uint64_t count = 0;
    int truncated  = 0;
    mc_chmap_iter_t it;

    if ((j == NULL) || (keys == NULL))
        goto oom;
    for (mc_cnode_t *n = mc_chmap_first(&m->objects, &it); n != NULL;
         n = mc_chmap_next(&m->objects, &it)) {
        const mc_object_t *o = mc_container_of(n, mc_object_t, node);
        mc_str_t k;
        if (!mc_str_eq(mc_object_tenant(o), t))
            continue;
        count++;
        if (json_array_size(keys) >= MC_ADMIN_MAX_KEYS) {
            truncated = 1;
            continue;
        }
        k = mc_object_key(o);
        if (json_array_append_new(keys, jstr(k.ptr, k.len)) != 0)
            goto oom;
    }
    if (jset(j, "keys", keys) != 0) {
        keys = NULL; /* consumed */
        goto oom;
    }
    keys = NULL;
    if ((jset(j, "tenant", jstr(tenant, strlen(tenant))) != 0) ||
        (jset(j, "count", json_integer((json_int_t)count)) != 0) ||
        (jset(j, "truncated", json_boolean(truncated)) != 0))
        goto oom;
    reply_json(req, j);
    return;

oom:
    json_decref(keys);
    json_decref(j);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

static json_t *segment_json(const mc_segment_t *s)
{
    json_t *j = json_object();
    mc_alloc_stats_t st;
    char id[37], cid[37];

    if (j == NULL)
        return NULL;
    memset(&st, 0, sizeof(st));
    if (s->alloc != NULL)
        mc_alloc_get_stats(s->alloc, &st);
    mc_uuid_format(s->id, id);
    mc_uuid_format(s->owner->id, cid);
    if ((jset(j, "name", jstr(s->name, strlen(s->name))) != 0) ||
        (jset(j, "id", json_string(id)) != 0) ||
        (jset(j, "size", json_integer((json_int_t)s->size)) != 0) ||
        (jset(j, "used", json_integer((json_int_t)st.allocated)) != 0) ||
        (jset(j, "status", json_string(seg_state_name(s->state))) != 0) ||
        (jset(j, "client_id", json_string(cid)) != 0)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static void do_all_segments(mc_master_t *m, struct evhttp_request *req)
{
    json_t *arr = json_array();

    if (arr == NULL)
        goto oom;
    for (uint32_t i = 0; i < m->nseg; i++) {
        if (json_array_append_new(arr, segment_json(m->segv[i])) != 0)
            goto oom;
    }
    reply_json(req, arr);
    return;

oom:
    json_decref(arr);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

static void do_query_segment(mc_master_t *m, struct evhttp_request *req, const char *name)
{
    json_t *j = NULL, *arr = json_array();
    uint64_t capacity = 0, allocated = 0;
    const mc_segment_t *first = NULL;
    char cid[37];

    if (arr == NULL)
        goto oom;
    for (uint32_t i = 0; i < m->nseg; i++) {
        const mc_segment_t *s = m->segv[i];
        json_t *sj;
        if (strcmp(s->name, name) != 0)
            continue;
        sj = segment_json(s);
        if ((sj == NULL) || (json_array_append_new(arr, sj) != 0))
            goto oom;
        if (first == NULL)
            first = s;
        capacity += s->size;
        allocated += (uint64_t)json_integer_value(json_object_get(sj, "used"));
    }
    if (first == NULL) {
        json_decref(arr);
        reply_text(req, HTTP_NOTFOUND, "Not Found", "segment not found");
        return;
    }
    j = json_object();
    if (j == NULL)
        goto oom;
    mc_uuid_format(first->owner->id, cid);
    if ((jset(j, "name", jstr(name, strlen(name))) != 0) ||
        (jset(j, "capacity", json_integer((json_int_t)capacity)) != 0) ||
        (jset(j, "allocated", json_integer((json_int_t)allocated)) != 0) ||
        (jset(j, "client_id", json_string(cid)) != 0))
        goto oom;
    if (jset(j, "segments", arr) != 0) {
        arr = NULL;
        goto oom;
    }
    reply_json(req, j);
    return;

oom:
    json_decref(arr);
    json_decref(j);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

/* ---- upstream's JSON views ------------------------------------------------------ */

/* One key of /batch_query_keys: upstream's {"ok", "values": [memory
 * replica descriptors]} or {"ok": false, "error": status name}.  Grants
 * no lease. */
static json_t *batch_query_one(mc_master_t *m, const char *key, const char *tenant)
{
    mc_object_t *o = mc_master_object_find(m, mc_str_from_cstr(tenant), mc_str_from_cstr(key));
    json_t *j = json_object(), *vals;
    const mc_replica_t *r;

    if (j == NULL)
        return NULL;
    if ((o == NULL) || !o->complete) {
        mc_status_t st = (o == NULL) ? MC_OBJECT_NOT_FOUND : MC_REPLICA_IS_NOT_READY;
        if ((jset(j, "ok", json_false()) != 0) ||
            (jset(j, "error", json_string(mc_status_name(st))) != 0)) {
            json_decref(j);
            return NULL;
        }
        return j;
    }
    vals = json_array();
    if ((jset(j, "ok", json_true()) != 0) || (vals == NULL)) {
        json_decref(vals);
        json_decref(j);
        return NULL;
    }
    if (jset(j, "values", vals) != 0) { /* consumes vals */
        json_decref(j);
        return NULL;
    }
    mc_object_for_each_replica(r, o)
    {
        json_t *d;
        if (r->status != MC_REPLICA_COMPLETE)
            continue;
        d = json_object();
        if ((d == NULL) || (json_array_append_new(vals, d) != 0) ||
            (jset(d, "size_", json_integer((json_int_t)o->size)) != 0) ||
            (jset(d, "buffer_address_",
                  json_integer((json_int_t)(r->seg->base + mc_master_replica_block(r).offset))) !=
             0) ||
            (jset(d, "protocol_", json_string(r->seg->protocol)) != 0) ||
            (jset(d, "transport_endpoint_", jstr(r->seg->name, strlen(r->seg->name))) != 0)) {
            json_decref(j);
            return NULL;
        }
    }
    return j;
}

/* /batch_query_keys?keys=k1,k2,...: every named key, as upstream. */
static void do_batch_query_keys(mc_master_t *m, struct evhttp_request *req, const char *keys,
                                const char *tenant)
{
    json_t *j = NULL, *data = NULL;
    char *list = keys ? mc_strdup(keys) : NULL;
    char *save = NULL;
    int n      = 0;

    if ((keys != NULL) && (list == NULL))
        goto oom;
    data = json_object();
    if (data == NULL)
        goto oom;
    for (char *k = list ? strtok_r(list, ",", &save) : NULL; k != NULL;
         k = strtok_r(NULL, ",", &save)) {
        json_t *one = batch_query_one(m, k, tenant);
        if ((one == NULL) || (json_object_set_new(data, k, one) != 0))
            goto oom;
        n++;
    }
    free(list);
    list = NULL;
    j    = json_object();
    if (j == NULL)
        goto oom;
    if (n == 0) {
        json_decref(data);
        if ((jset(j, "success", json_false()) != 0) ||
            (jset(j, "error", json_string("No keys provided. Use ?keys=key1,key2,...")) != 0))
            goto oom;
        reply_json_status(req, HTTP_BADREQUEST, "Bad Request", j);
        return;
    }
    if (jset(j, "success", json_true()) != 0)
        goto oom;
    if (jset(j, "data", data) != 0) {
        data = NULL;
        goto oom;
    }
    reply_json(req, j);
    return;

oom:
    free(list);
    json_decref(data);
    json_decref(j);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

/* /get_segments_detail: upstream's per-segment view. */
static json_t *segment_detail_json(const mc_segment_t *s)
{
    json_t *j = json_object();
    mc_alloc_stats_t st;
    char id[37], cid[37], base[32], human[48];

    if (j == NULL)
        return NULL;
    memset(&st, 0, sizeof(st));
    if (s->alloc != NULL)
        mc_alloc_get_stats(s->alloc, &st);
    mc_uuid_format(s->id, id);
    mc_uuid_format(s->owner->id, cid);
    snprintf(base, sizeof(base), "0x%" PRIx64, s->base);
    snprintf(human, sizeof(human), "%.2f GiB", (double)s->size / (double)(1ull << 30));
    if ((jset(j, "segment_name", jstr(s->name, strlen(s->name))) != 0) ||
        (jset(j, "segment_id", json_string(id)) != 0) ||
        (jset(j, "client_id", json_string(cid)) != 0) ||
        (jset(j, "base_address", json_string(base)) != 0) ||
        (jset(j, "size_bytes", json_integer((json_int_t)s->size)) != 0) ||
        (jset(j, "size_human", json_string(human)) != 0) ||
        (jset(j, "te_endpoint", jstr(s->name, strlen(s->name))) != 0) ||
        (jset(j, "protocol", json_string(s->protocol)) != 0) ||
        (jset(j, "status", json_string(seg_state_name(s->state))) != 0) ||
        (jset(j, "allocator_used_bytes", json_integer((json_int_t)st.allocated)) != 0) ||
        (jset(j, "allocator_capacity_bytes", json_integer((json_int_t)s->size)) != 0) ||
        (jset(j, "allocator_usage_percent",
              json_real(s->size ? 100.0 * (double)st.allocated / (double)s->size : 0.0)) != 0)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static void do_segments_detail(mc_master_t *m, struct evhttp_request *req)
{
    json_t *j = json_object(), *arr = json_array();

    if ((j == NULL) || (arr == NULL))
        goto oom;
    for (uint32_t i = 0; i < m->nseg; i++) {
        if (json_array_append_new(arr, segment_detail_json(m->segv[i])) != 0)
            goto oom;
    }
    if (jset(j, "total_segments", json_integer((json_int_t)m->nseg)) != 0)
        goto oom;
    if (jset(j, "segments", arr) != 0) {
        arr = NULL;
        goto oom;
    }
    reply_json(req, j);
    return;

oom:
    json_decref(arr);
    json_decref(j);
    evhttp_send_error(req, HTTP_INTERNAL, NULL);
}

/* ---- routing -------------------------------------------------------------------- */

/* Value of query parameter @p name: NULL when absent, empty or when the
 * query does not parse. */
static const char *param(struct evkeyvalq *params, int parsed, const char *name)
{
    const char *v = parsed ? evhttp_find_header(params, name) : NULL;
    return (v != NULL && *v != '\0') ? v : NULL;
}

/* What a route's handler gets: the request's query, parsed once. */
typedef struct route_args {
    mc_master_t *m;
    struct evhttp_request *req;
    struct evkeyvalq *params;
    int parsed;
    const char *tenant; /* ?tenant=, "default" when absent */
} route_args_t;

static void route_metrics(const route_args_t *a)
{
    do_metrics(a->m, a->req);
}

static void route_summary(const route_args_t *a)
{
    do_summary(a->m, a->req);
}

static void route_health(const route_args_t *a)
{
    reply_text(a->req, HTTP_OK, "OK", "OK");
}

static void route_role(const route_args_t *a)
{
    /* one master without HA is always the leader */
    reply_text(a->req, HTTP_OK, "OK", mc_master_ha_role_name(a->m));
}

static void route_ha_status(const route_args_t *a)
{
    reply_text(a->req, HTTP_OK, "OK", mc_master_ha_state_name(a->m));
}

static void route_leader(const route_args_t *a)
{
    do_leader(a->m, a->req);
}

static void route_query_key(const route_args_t *a)
{
    const char *v = param(a->params, a->parsed, "key");

    if (v == NULL)
        reply_text(a->req, HTTP_BADREQUEST, "Bad Request", "Missing key parameter");
    else
        do_query_key(a->m, a->req, v, a->tenant);
}

static void route_batch_query_keys(const route_args_t *a)
{
    do_batch_query_keys(a->m, a->req, param(a->params, a->parsed, "keys"), a->tenant);
}

static void route_all_keys(const route_args_t *a)
{
    do_all_keys(a->m, a->req, a->tenant);
}

static void route_all_segments(const route_args_t *a)
{
    do_all_segments(a->m, a->req);
}

static void route_segments_detail(const route_args_t *a)
{
    do_segments_detail(a->m, a->req);
}

static void route_query_segment(const route_args_t *a)
{
    const char *v = param(a->params, a->parsed, "segment");

    if (v == NULL)
        reply_text(a->req, HTTP_BADREQUEST, "Bad Request", "Missing segment parameter");
    else
        do_query_segment(a->m, a->req, v);
}

/*
 * /api/v1/tenant_quotas (upstream's quota admin API, tenants.h): GET lists
 * the tenants or shows ?tenant_id=; PUT {"requested_quota_bytes": n} sets
 * one's quota; DELETE removes it (409 TENANT_NOT_EMPTY while it holds
 * objects).  409 UNAVAILABLE_IN_CURRENT_MODE without
 * --enable_multi_tenants.
 */
static void route_tenant_quotas(const route_args_t *a)
{
    const char *tenant = param(a->params, a->parsed, "tenant_id");
    enum evhttp_cmd_type cmd = evhttp_request_get_command(a->req);
    json_t *body = NULL;
    int code;

    if (cmd == EVHTTP_REQ_PUT) {
        struct evbuffer *in = evhttp_request_get_input_buffer(a->req);
        size_t len          = evbuffer_get_length(in);
        char *text          = malloc(len + 1);
        if (text == NULL) {
            evhttp_send_error(a->req, HTTP_INTERNAL, NULL);
            return;
        }
        evbuffer_copyout(in, text, len);
        text[len] = '\0';
        code      = mc_master_tenant_quota_put(a->m, tenant, text, &body);
        free(text);
    } else if (cmd == EVHTTP_REQ_DELETE) {
        code = mc_master_tenant_quota_delete(a->m, tenant, &body);
    } else {
        code = mc_master_tenant_quota_get(a->m, tenant, &body);
    }
    if (body == NULL) {
        evhttp_send_error(a->req, HTTP_INTERNAL, NULL);
        return;
    }
    reply_json_status(a->req, code, (code == 200) ? "OK" : "Error", body);
}

/* GET /kv_events/status (docs/events.md §5): the publisher's counters in
 * upstream's key order; zeros and "enabled": false when it is off. */
static void route_kv_events(const route_args_t *a)
{
    mc_kv_events_stats_t s;
    json_t *j;

    mc_kv_events_stats(a->m, &s);
    j = json_pack("{s:b, s:I, s:I, s:I, s:I}", "enabled", s.enabled, "published_batches",
                  (json_int_t)s.published_batches, "published_events",
                  (json_int_t)s.published_events, "dropped_events", (json_int_t)s.dropped_events,
                  "skipped_unparsed_keys", (json_int_t)s.skipped_unparsed_keys);
    reply_json(a->req, j);
}

/*
 * Every route of the admin server (--help of --metrics_port names them
 * all).  A public route answers without a signed request and on a standby;
 * the others list keys, segments and their addresses, so they need a
 * signed request when cluster authentication is on (docs/security.md) and
 * the index of a serving master.  Every route takes GET and HEAD; `write`
 * names the methods it takes beyond them (EVHTTP_REQ_* bits).
 */
static const struct admin_route {
    const char *path;
    int public;
    unsigned write;
    void (*handle)(const route_args_t *a);
} admin_routes[] = {
    {"/metrics", 1, 0, route_metrics},
    {"/metrics/summary", 1, 0, route_summary},
    {"/health", 1, 0, route_health},
    {"/role", 1, 0, route_role},
    {"/ha_status", 1, 0, route_ha_status},
    {"/leader", 1, 0, route_leader},
    {"/query_key", 0, 0, route_query_key},
    {"/batch_query_keys", 0, 0, route_batch_query_keys},
    {"/get_all_keys", 0, 0, route_all_keys},
    {"/get_all_segments", 0, 0, route_all_segments},
    {"/get_segments_detail", 0, 0, route_segments_detail},
    {"/query_segment", 0, 0, route_query_segment},
    {"/kv_events/status", 0, 0, route_kv_events},
    {"/api/v1/tenant_quotas", 0, EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE, route_tenant_quotas},
};

static void admin_cb(struct evhttp_request *req, void *arg)
{
    mc_master_t *m               = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path             = uri ? evhttp_uri_get_path(uri) : NULL;
    const char *query            = uri ? evhttp_uri_get_query(uri) : NULL;
    enum evhttp_cmd_type cmd     = evhttp_request_get_command(req);
    const struct admin_route *r  = NULL;
    struct evkeyvalq params;
    route_args_t a;
    size_t i;

    for (i = 0; (path != NULL) && (i < MC_ARRAY_SIZE(admin_routes)); i++) {
        if (strcmp(path, admin_routes[i].path) == 0) {
            r = &admin_routes[i];
            break;
        }
    }
    if (r == NULL) {
        reply_text(req, HTTP_NOTFOUND, "Not Found", "not found");
        return;
    }
    if ((cmd != EVHTTP_REQ_GET) && (cmd != EVHTTP_REQ_HEAD) && !(r->write & cmd)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          r->write ? "GET, HEAD, PUT, DELETE" : "GET, HEAD");
        reply_text(req, HTTP_BADMETHOD, "Method Not Allowed", "method not allowed");
        return;
    }
    if (!r->public && (m->auth != NULL) && (mc_http_auth_check(m->auth, m->auth_replay, req) != 0))
        return;
    if (!r->public && !mc_master_ha_serving(m)) {
        /* the index of a standby is empty: say so instead of answering "none" */
        json_t *j = json_pack("{s:b, s:i, s:s}", "success", 0, "error_code",
                              (int)MC_UNAVAILABLE_IN_CURRENT_MODE, "error_message",
                              "service plane is not active");
        if (j == NULL)
            evhttp_send_error(req, HTTP_INTERNAL, NULL);
        else
            reply_json_status(req, HTTP_SERVUNAVAIL, "Service Unavailable", j);
        return;
    }
    a.m      = m;
    a.req    = req;
    a.params = &params;
    /* evhttp_parse_query_str initialises params and clears them itself on
     * failure; values come back URL-decoded */
    a.parsed = (query != NULL) && (evhttp_parse_query_str(query, &params) == 0);
    a.tenant = param(&params, a.parsed, "tenant");
    if (a.tenant == NULL)
        a.tenant = "default";
    r->handle(&a);
    if (a.parsed)
        evhttp_clear_headers(&params);
}

mc_status_t mc_master_admin_start(mc_master_t *m)
{
    const char *host = m->cfg->metrics_host;
    uint16_t port    = (uint16_t)m->cfg->metrics_port;

    m->admin = evhttp_new(m->base);
    if (m->admin == NULL)
        return MC_INTERNAL_ERROR;
    /* requests carry no body worth keeping */
    evhttp_set_max_body_size(m->admin, 64 * 1024);
    evhttp_set_max_headers_size(m->admin, 64 * 1024);
    evhttp_set_timeout(m->admin, 30);
    /* every method reaches admin_cb so the wrong ones get 405, not 501 */
    evhttp_set_allowed_methods(m->admin, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                             EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
                                             EVHTTP_REQ_PATCH | EVHTTP_REQ_OPTIONS);
    evhttp_set_gencb(m->admin, admin_cb, m);
    if (mc_master_evhttp_bind(m->admin, "admin/metrics server", host, port, m->admin_bound,
                              sizeof(m->admin_bound)) != 0) {
        mc_master_admin_stop(m);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

void mc_master_admin_stop(mc_master_t *m)
{
    if (m->admin == NULL)
        return;
    evhttp_free(m->admin);
    m->admin = NULL;
}
