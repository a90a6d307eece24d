/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The mooncake_master context and the interfaces between its parts.
 *
 * Everything the daemon knows lives in one mc_master_t: the event loop,
 * the RPC listener and its connections (rpc.c), the object index
 * (index/objects.c), the mounted segments and their allocators
 * (index/segments.c), the clients and their liveness deadlines
 * (index/clients.c) and the embedded HTTP metadata store (admin/http.c).
 * There are no globals; the only process-wide state is the log
 * threshold.
 *
 * Threads: one touches this state.  Every callback runs on the event loop
 * of m->base, so no structure here has a lock; with --enable_snapshot a
 * log writer thread and a snapshot file thread only take buffers the loop
 * hands them (docs/threads.md).
 *
 * Ownership graph, all plain pointers:
 *   client 1--* segment      (mc_segment_t.owner, client->segments list)
 *   segment 1--* replica     (replica->seg)
 *   object 1--* replica      (mc_replica_obj(); its rep0, then obj->replicas)
 * A replica is freed exactly once, through mc_master_replica_drop() or
 * when its object is erased.  A segment keeps no list of its replicas:
 * that would cost 16 bytes in each of millions of replicas, so "drop
 * everything on this segment" (unmount, client expiry; rare) walks the
 * index instead, as upstream's unmount does
 * (mc_master_objects_drop_segment).
 *
 * Owns: mc_master_t, the records every folder shares (objects, replicas,
 *   segments, clients, writers, reservations), the request context, and
 *   the interface of master.c and rpc.c.  The folders' own functions are
 *   declared in their doors (index/index.h, durability/durability.h,
 *   ha/ha.h, tiers/tiers.h, events/events.h, admin/admin.h); this header
 *   includes only the handle types it holds (tiers/dfs.h, ha/ha.h,
 *   admin/http.h).
 * May call: nothing: types and prototypes only; docs/architecture.md, "The
 *   master's map".
 */
#ifndef MC_MASTER_MASTER_H
#define MC_MASTER_MASTER_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/config.h>
#include <mooncake/status.h>
#include <mooncake/store.h> /* mc_task_status_t, mc_task_type_t */

#include "admin/http.h" /* mc_meta_server_t, mc_master_evhttp_bind (docs/protocol.md §6) */
#include "alloc/offset_alloc.h"
#include "common/buf.h"
#include "common/hashmap.h"
#include "common/slab.h"
#include "common/util.h"
#include "flags.h"
#include "ha/ha.h"   /* mc_master_ha_t (--enable_ha) */
#include "tiers/dfs.h"  /* mc_dfs_replica_t, mc_master_dfs_t (--root_fs_dir) */
#include "wire/wire.h"

struct event_base;
struct event;
struct evconnlistener;
struct evhttp;

/* Size of the per-opcode counter arrays; every opcode of the wire table
 * is below it (asserted where they are counted). */
#define MC_MASTER_NOPS 128

/* The period of the master's tick (master.c): client expiry, abandoned
 * puts, leases, eviction, HA and durability housekeeping. */
#define MC_MASTER_TICK_MS 250

/* The event loop's priorities (docs/threads.md): every event runs at
 * MC_MASTER_PRIO_DEFAULT except the operation log's wake, whose held
 * answers go out before the loop reads the next requests (a loop turn of
 * batched puts takes about a millisecond, which the answers, and the
 * clients' next requests, would otherwise wait behind). */
#define MC_MASTER_PRIORITIES   2
#define MC_MASTER_PRIO_RELEASE 0
#define MC_MASTER_PRIO_DEFAULT 1

/* ---- intrusive circular doubly-linked list ------------------------------ */

typedef struct mc_mlist {
    struct mc_mlist *prev;
    struct mc_mlist *next;
} mc_mlist_t;

static inline void mc_mlist_init(mc_mlist_t *h) { h->prev = h->next = h; }
static inline int mc_mlist_empty(const mc_mlist_t *h) { return h->next == h; }
static inline void mc_mlist_insert_tail(mc_mlist_t *h, mc_mlist_t *n)
{
    n->prev       = h->prev;
    n->next       = h;
    h->prev->next = n;
    h->prev       = n;
}
static inline void mc_mlist_remove(mc_mlist_t *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = n;
}
/* Safe against removal of the current entry. */
#define mc_mlist_for_each_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

/* ---- records -------------------------------------------------------------- */

typedef struct mc_master mc_master_t;
typedef struct mc_object mc_object_t;
typedef struct mc_segment mc_segment_t;
typedef struct mc_client mc_client_t;
typedef struct mc_group mc_group_t;
typedef struct mc_durable mc_durable_t; /* snapshot.c */

/*
 * Who wrote an object: its tenant and the client of its PutStart (or of
 * the upsert that replaced its value).  Every object needs both, but a
 * store holds millions of objects and only a few (tenant, client) pairs,
 * so objects point at one shared record in m->writers instead of each
 * carrying a 16-byte UUID and the tenant's bytes.  Freed with its last
 * reference (objects.c: mc_idx_writer_get/mc_idx_writer_put).
 */
typedef struct mc_writer {
    mc_hnode_t node;           /* in m->writers, hash of (tenant, owner) */
    mc_uuid_t owner;
    uint64_t refs;             /* objects and fresh upserts pointing here */
    uint32_t tenant_len;
    char tenant[];             /* no NUL */
} mc_writer_t;

/* Segment states (upstream SegmentStatus); only OK takes allocations. */
typedef enum mc_segment_state {
    MC_SEG_OK         = 1,
    MC_SEG_DRAINING   = 2,
    MC_SEG_UNMOUNTING = 5,
    /* restored from the operation log (snapshot.c): its replicas are kept
     * but neither read nor written until the owner remounts it */
    MC_SEG_AWAITING   = 6
} mc_segment_state_t;

/* One buffer of an object in one segment.  There is one per object and
 * copy, so the fields are packed: a discarded replica has no object, so
 * its release time shares the object pointer's storage, and the range is
 * kept as the allocator's 32-bit node index (mc_master_replica_block()
 * rebuilds offset and size from it).
 *
 * The first replica of a put lives inside its object (mc_object_t.rep0,
 * @c embedded set), which knows its object without a pointer and is on no
 * list: it is its object's first replica by position (see
 * mc_object_replica_first()), so the last two fields (@c link, and
 * @c heap_obj or @c release_ms) are not part of it, and the object's key
 * starts there.  Most objects have one replica, so this saves them a list
 * link and an object pointer.  So get and set the object with
 * mc_replica_obj() and mc_replica_set_obj(), walk an object's replicas
 * with mc_object_for_each_replica(), unlink one with mc_replica_unlink(),
 * and copy an embedded replica only up to MC_REPLICA_EMBEDDED_SIZE.  An
 * embedded replica is freed only through objects.c (mc_idx_replica_free), never
 * with free(), and never waits on m->discarded: objects.c moves it to a
 * record of its own first. */
typedef struct mc_replica {
    uint64_t id;               /* unique for the life of the master */
    mc_segment_t *seg;         /* never NULL while the replica exists */
    uint32_t node;             /* its block in seg->alloc (mc_alloc_lookup) */
    uint8_t status;            /* MC_REPLICA_PROCESSING or MC_REPLICA_COMPLETE */
    uint8_t fresh : 1;         /* in obj->ext->up->replicas (an upsert's new buffers) */
    uint8_t discarded : 1;     /* on m->discarded (preempted put, replaced buffer) */
    uint8_t embedded : 1;      /* an object's rep0 */
    /* not embedded only (see above) */
    mc_mlist_t link;           /* in obj->replicas, obj->ext->up->replicas, a task's
                                * staged list or m->discarded */
    union {
        mc_object_t *heap_obj; /* !discarded: its object (mc_replica_obj()) */
        uint64_t release_ms;   /* discarded: when the space is freed */
    };
} mc_replica_t;

/* The bytes of an embedded replica: all but the last two fields. */
#define MC_REPLICA_EMBEDDED_SIZE offsetof(mc_replica_t, link)

/*
 * A put reservation (docs/protocol.md §5.18): buffers placed for one future
 * put of exactly @c length bytes, owned by a writer and by no key.  The
 * writer fills them and names them in PUT_COMMIT; unclaimed, they go back
 * at @c deadline_ms, when the writer closes, or with any of their segments.
 */
typedef struct mc_reservation {
    mc_hnode_t node;           /* in m->reservations, hash of id */
    mc_mlist_t link;           /* in m->resv_order, earliest deadline first */
    uint64_t id;               /* never 0 */
    uint64_t deadline_ms;      /* monotonic */
    uint64_t length;
    mc_writer_t *writer;       /* tenant and owner (a mc_idx_writer_get reference) */
    uint32_t n;
    mc_replica_t *reps[];      /* placed, on no list, obj NULL */
} mc_reservation_t;

/* An upsert in progress on an existing object (docs/protocol.md §5.11). */
/* --allocation_strategy and --dynamic_replication_mode, parsed once at
 * start (mc_master_create) so the put and get paths compare an enum */
typedef enum mc_alloc_strategy {
    MC_ALLOC_RANDOM = 0, /* also unknown names, cxl, ssd_free_ratio_first */
    MC_ALLOC_FREE_RATIO_FIRST,
    MC_ALLOC_LOCAL_FIRST,
} mc_alloc_strategy_t;

typedef enum mc_dynrep_mode {
    MC_DYNREP_OFF = 0, /* also unknown names */
    MC_DYNREP_OBSERVE,
    MC_DYNREP_ENFORCE,
} mc_dynrep_mode_t;

typedef enum mc_upsert_mode {
    MC_UPSERT_NONE    = 0,
    MC_UPSERT_INPLACE = 1,     /* same buffers, object unreadable until the end */
    MC_UPSERT_FRESH   = 2      /* new buffers in up->replicas, old ones readable */
} mc_upsert_mode_t;

/*
 * An upsert in progress on an existing object: the config to apply at
 * UPSERT_END.  In place, the object's owner/put_start_ms/pending_link
 * describe the upsert; fresh, the fields here do and the object stays
 * complete.
 */
typedef struct mc_upsert {
    mc_object_t *obj;          /* the object upserted (for m->upserting walks) */
    uint8_t hard_pin;
    uint8_t pin_action;        /* mc_soft_pin_action_t */
    uint8_t has_group;
    uint64_t pin_ttl_ms;
    char *group_id;            /* with has_group; NULL = ungrouped */
    uint64_t size;             /* fresh */
    uint64_t start_ms;         /* fresh */
    mc_writer_t *writer;       /* fresh: the upserter (a reference); NULL otherwise */
    mc_mlist_t replicas;       /* fresh: mc_replica_t.link */
    mc_mlist_t link;           /* fresh: in m->upserting, oldest first */
    struct mc_dfs_replica *dfs; /* fresh: the new value's DFS replica, or NULL */
} mc_upsert_t;

/*
 * The state only some objects have, split off so the rest pay one
 * pointer for it: a soft pin (docs/protocol.md §5.5) and group
 * membership (§5.12).  Allocated when an object first needs either
 * (PUT_START, or UPSERT_START for UPSERT_END to apply), freed with it.
 */
typedef struct mc_object_ext {
    mc_object_t *obj;          /* the owner (for group->members walks) */
    /* Soft pin: ttl chosen at PutStart, deadline set when the object
     * completes; 0 = not pinned. */
    uint64_t soft_pin_ttl_ms;
    uint64_t soft_pin_deadline_ms;
    char *group_id;            /* NULL = ungrouped */
    mc_group_t *group;         /* group_id's group once complete; NULL = none */
    mc_mlist_t group_link;     /* in group->members; self-linked when none */
    /* Copy/move tasks between TASK_REPLICA_START and END/REVOKE
     * (mc_task_t.obj_link, tasks.c): while any is here the object is not
     * removed without force, not evicted and not upserted. */
    mc_mlist_t tasks;
    /* The copy on a holder's disk tier (--enable_offload): set by
     * OFFLOAD_REPORT, dropped by DISK_REPLICA_DROP, an upsert, the
     * holder's departure or the object's end.  NULL = none. */
    struct mc_disk_replica *disk;
    /* The object's record in the DFS tier (dfs.h, docs/tiers.md §6):
     * placed at PUT_START, readable from PUT_END, kept when memory goes,
     * freed with the value.  NULL = none. */
    struct mc_dfs_replica *dfs;
    /* Reads since the object became disk-only (--promotion_on_hit):
     * at --promotion_admission_threshold the master asks the holder to
     * copy it back to memory (tasks.c). */
    uint32_t disk_hits;
    /* The upsert in progress: non-NULL exactly while obj->upsert != NONE. */
    mc_upsert_t *up;
} mc_object_ext_t;

/*
 * A disk replica (docs/tiers.md): one record in a bucket file of the
 * holder's SSD tier.  The master never reads it; it hands out where it is
 * (holder segment, path, offset, length, CRC32C of the value) and forgets
 * it when the holder says the bucket went or the holder goes.
 */
typedef struct mc_disk_replica {
    uint64_t id;               /* from the replica id counter */
    mc_uuid_t holder;          /* the client whose disk holds it */
    uint64_t offset;           /* of the record's value bytes in the file */
    uint64_t length;           /* value bytes (the object's size) */
    uint32_t crc;              /* CRC32C of the value bytes */
    char *segment;             /* holder's transfer-engine segment name */
    char *path;                /* bucket file, absolute */
} mc_disk_replica_t;

/* One key.  There are millions, so the record holds only what every
 * object needs; the rest hangs off @c ext. */
struct mc_object {
    mc_cnode_t node;           /* in m->objects */
    /* next to the index link, so a lookup's chain walk reads one line
     * per object until the hash matches */
    uint32_t hash;             /* low 32 bits of the index hash of (tenant, key) */
    uint16_t key_len;          /* <= MC_WIRE_MAX_KEY */
    uint8_t hard_pin : 1;
    uint8_t complete : 1;      /* PutEnd done: every replica is COMPLETE */
    uint8_t upsert : 2;        /* mc_upsert_mode_t; upsert in progress */
    /* The replicas after rep0 (mc_replica_t.link): the object's memory
     * replicas are rep0, when in use, then these, in that order. */
    mc_mlist_t replicas;
    /* An incomplete object is on m->pending, a complete one on m->lru
     * (evict.h), so one link serves both; self-linked when off both
     * (mc_master_lru_touch() leaves incomplete objects alone). */
    union {
        mc_mlist_t pending_link;
        mc_mlist_t lru_link;
    };
    uint64_t size;
    mc_writer_t *writer;       /* tenant, and client that did PutStart */
    /* An incomplete object (a put, or an in-place upsert, which needs an
     * unleased object) has no lease, and a complete one needs its
     * PutStart time no more, so the two share a word: PUT_END and
     * UPSERT_END set the lease to 0, and the lease read of an incomplete
     * object (its PutStart, which is never in the future) means none. */
    union {
        uint64_t put_start_ms;       /* !complete; monotonic */
        uint64_t lease_deadline_ms;  /* complete */
    };
    mc_object_ext_t *ext;      /* soft pin, group, upsert, tasks, disk; NULL = none */
    /* The put's first replica, unused while rep0.seg is NULL; only its
     * first MC_REPLICA_EMBEDDED_SIZE bytes are the object's: the key
     * bytes start over its last field (see mc_replica_t). */
    union {
        mc_replica_t rep0;
        struct {
            char rep0_bytes_[MC_REPLICA_EMBEDDED_SIZE];
            char strs[];       /* key bytes, no NUL; the object is
                                * mc_object_alloc_size() bytes of m->objslab */
        };
    };
};

/* The object of replica @p r (NULL for a discarded one). */
static inline mc_object_t *mc_replica_obj(const mc_replica_t *r)
{
    if (r->discarded)
        return NULL;
    return r->embedded ? (mc_object_t *)((char *)r - offsetof(mc_object_t, rep0)) : r->heap_obj;
}
/* Make @p o the object of replica @p r (an embedded one already is). */
static inline void mc_replica_set_obj(mc_replica_t *r, mc_object_t *o)
{
    if (!r->embedded)
        r->heap_obj = o;
}

/* Take @p r, not embedded, off the list it is on; an embedded rep0 is on
 * none. */
static inline void mc_replica_unlink(mc_replica_t *r)
{
    if (!r->embedded)
        mc_mlist_remove(&r->link);
}

/* The memory replicas of @p o after @p r (NULL: from the start), rep0
 * first when in use; NULL past the last.  The object is not const in
 * the result, as with mc_replica_obj(). */
static inline mc_replica_t *mc_object_replica_next(const mc_object_t *o, const mc_replica_t *r)
{
    const mc_mlist_t *n;

    if ((r == NULL) && (o->rep0.seg != NULL))
        return (mc_replica_t *)&o->rep0;
    n = ((r == NULL) || r->embedded) ? o->replicas.next : r->link.next;
    return (n == &o->replicas) ? NULL : mc_container_of(n, mc_replica_t, link);
}
static inline mc_replica_t *mc_object_replica_first(const mc_object_t *o)
{
    return mc_object_replica_next(o, NULL);
}
/* Every memory replica @p r of object @p o; @p tmp lets the body free
 * @p r (but not erase @p o, whose list the step reads). */
#define mc_object_for_each_replica(r, o) \
    for ((r) = mc_object_replica_first(o); (r) != NULL; (r) = mc_object_replica_next((o), (r)))
#define mc_object_replica_after_(r, o) (((r) != NULL) ? mc_object_replica_next((o), (r)) : NULL)
#define mc_object_for_each_replica_safe(r, tmp, o)                                     \
    for ((r) = mc_object_replica_first(o), (tmp) = mc_object_replica_after_((r), (o)); \
         (r) != NULL; (r) = (tmp), (tmp) = mc_object_replica_after_((r), (o)))
/* 1 when @p o has a memory replica. */
static inline int mc_object_has_replicas(const mc_object_t *o)
{
    return (o->rep0.seg != NULL) || !mc_mlist_empty(&o->replicas);
}
/* Its memory replicas. */
static inline uint32_t mc_object_replica_count(const mc_object_t *o)
{
    uint32_t n = (o->rep0.seg != NULL);
    for (const mc_mlist_t *pos = o->replicas.next; pos != &o->replicas; pos = pos->next)
        n++;
    return n;
}

/* What an object costs before its key (x86-64): 80 bytes of header and
 * 24 of rep0.  With the key (in the slab's 8-byte classes), its index
 * bucket and its block in the segment allocator, a 16-byte key comes to
 * about 143 bytes an object (bench/meta_bench), against a target of 150:
 * a field added here must pay for itself. */
#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(offsetof(mc_object_t, strs) == 104, "the object record changed size");
#endif

/* Bytes of the record of an object with a key of @p key_len bytes. */
static inline size_t mc_object_alloc_size(size_t key_len)
{
    return offsetof(mc_object_t, strs) + key_len;
}

/* Soft-pin deadline (0 = none), group and group id of @p o. */
static inline uint64_t mc_object_soft_pin_deadline(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->soft_pin_deadline_ms : 0;
}
static inline mc_group_t *mc_object_group(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->group : NULL;
}
static inline const char *mc_object_group_id(const mc_object_t *o)
{
    return (o->ext != NULL) ? o->ext->group_id : NULL;
}

static inline mc_str_t mc_object_tenant(const mc_object_t *o)
{
    mc_str_t s = {o->writer->tenant, o->writer->tenant_len};
    return s;
}
static inline mc_str_t mc_object_key(const mc_object_t *o)
{
    mc_str_t s = {o->strs, o->key_len};
    return s;
}
/* The client that did PutStart (or the last upsert's start). */
static inline mc_uuid_t mc_object_owner(const mc_object_t *o)
{
    return o->writer->owner;
}

/*
 * The complete objects of one tenant sharing a group id (ReplicateConfig
 * group_ids, taken at PUT_END/UPSERT_END): leased and evicted together
 * (docs/protocol.md §5.12).  Freed when its last member leaves.
 */
struct mc_group {
    mc_hnode_t node;           /* in m->groups, hash of (tenant, id) */
    mc_mlist_t members;        /* mc_object_t.group_link */
    uint32_t count;            /* members */
    uint64_t lease_deadline_ms; /* every member is leased at least this long */
    uint32_t tenant_len;
    uint32_t id_len;
    char strs[];               /* tenant bytes then group id bytes */
};

/*
 * A copy or move task (tasks.c, docs/protocol.md §5.13).  It sits in
 * m->tasks by id for its whole life and on exactly one of the state lists
 * m->tasks_{pending,processing,finished}, oldest state change first.
 * Between TASK_REPLICA_START and END/REVOKE it holds the new buffers in
 * @c staged and is linked to its object's ext->tasks.
 */
typedef struct mc_task {
    mc_hnode_t node;           /* in m->tasks, hash of id */
    mc_uuid_t id;
    mc_uuid_t assigned;        /* the client that executes it */
    uint8_t type;              /* mc_task_type_t */
    uint8_t status;            /* mc_task_status_t */
    uint8_t committed;         /* TASK_REPLICA_END done */
    uint8_t promote;           /* a promotion: the source may be the disk replica */
    uint32_t ntargets;
    uint32_t nstaged;          /* buffers START allocated (staged may lose some) */
    uint64_t created_ms;       /* wall clock */
    uint64_t updated_ms;       /* wall clock, last state change */
    uint64_t state_since_ms;   /* monotonic, last state change (timeouts) */
    uint64_t source_replica;   /* id of the replica START handed out */
    char *tenant;              /* tenant_len bytes, NUL-terminated */
    char *key;                 /* key_len bytes, NUL-terminated */
    uint32_t tenant_len;
    uint32_t key_len;
    char *source;              /* segment name */
    char **targets;            /* segment names */
    char *message;             /* set when finished */
    mc_object_t *obj;          /* while staged; NULL once the object is gone */
    mc_mlist_t obj_link;       /* in obj->ext->tasks while staged */
    mc_mlist_t staged;         /* mc_replica_t.link (obj NULL, PROCESSING) */
    mc_mlist_t state_link;     /* in m->taskq[] of its status */
} mc_task_t;

/* The task lists of m->taskq: tasks by state, oldest state change first.
 * FAILED and SUCCESS share the finished queue. */
enum { MC_TASKQ_PENDING = 0, MC_TASKQ_PROCESSING = 1, MC_TASKQ_FINISHED = 2, MC_TASKQ_COUNT = 3 };
typedef struct mc_task_queue {
    mc_mlist_t list;           /* mc_task_t.state_link */
    uint32_t n;
} mc_task_queue_t;

#define MC_SEG_GEN_READER 1
#define MC_SEG_GEN_WRITER 2

struct mc_segment {
    mc_hnode_t node;           /* in m->segments, hash of id */
    mc_uuid_t id;
    mc_client_t *owner;
    char *name;                /* transfer-engine segment name, "host:port" */
    char *protocol;
    uint64_t base;
    uint64_t size;
    mc_alloc_t *alloc;
    mc_segment_state_t state;
    uint32_t index;            /* position in m->segv (m->nofv when nof) */
    mc_mlist_t client_link;    /* in owner->segments */
    uint8_t nof;               /* a NoF segment (nof.c): in m->nofv, not m->segments */
    /* The generation reads and writes of its memory name (common/gen.h):
     * its owner's at mount, moved on before memory is handed out again
     * that a reader may still be reading (gen_dirty MC_SEG_GEN_READER: the
     * next counter) or a writer still writing (MC_SEG_GEN_WRITER: the
     * next fence). */
    uint8_t gen_dirty;
    uint64_t gen;
};

/* 1 when @p o has a replica that is (@p nof) or is not (!@p nof) in a
 * segment of the NoF pool (tiers/nof.c). */
static inline int mc_object_has_kind(const mc_object_t *o, int nof)
{
    const mc_replica_t *r;
    mc_object_for_each_replica(r, o)
    {
        if ((int)r->seg->nof == nof)
            return 1;
    }
    return 0;
}
/* 1 when @p o has a replica in a memory segment. */
static inline int mc_master_object_has_memory(const mc_object_t *o)
{
    return mc_object_has_kind(o, 0);
}

struct mc_client {
    mc_hnode_t node;           /* in m->clients, hash of id */
    mc_uuid_t id;
    uint64_t deadline_ms;      /* monotonic; expired past it */
    uint64_t seen_ms;          /* last ping or mount (monotonic) */
    uint64_t last_ping_ms;     /* last ping, 0 before the first */
    uint32_t ping_period_ms;   /* gap between its last two pings (its heartbeat) */
    mc_mlist_t segments;       /* mc_segment_t.client_link */
    uint32_t nsegments;
    uint8_t restored;          /* known from the operation log only: its pings
                                * answer NEED_REMOUNT until it remounts */
};

struct mc_master {
    mc_master_config_t *cfg;
    struct mc_auth *auth;          /* --auth_token_file, or NULL (off) */
    struct mc_auth_replay *auth_replay; /* nonces of signed admin requests */
    struct event_base *base;
    uint64_t view_version;     /* wall-clock ms at start */
    uint64_t meta_token_key[2]; /* meta_owner.c: SipHash key of metadata tokens */

    /* rpc.c */
    struct evconnlistener *listener;
    mc_mlist_t conns;
    uint32_t nconns;
    mc_mlist_t held_conns;     /* answers waiting for the operation log */
    uint64_t in_reserved;       /* rpc.c: bodies of large frames being read, all
                                 * connections (--rpc_max_buffered_input) */
    char rpc_bound[300];       /* "addr:port" actually bound */

    /* objects.c */
    mc_chmap_t objects;        /* mc_object_t by (tenant, key) */
    /* the key a batch works on and its index hash (index/objects_internal.h:
     * key_pipe_t); key.ptr NULL when none */
    struct {
        mc_str_t tenant, key;
        uint32_t hash;
    } key_memo;
    mc_slab_t objslab;         /* the mc_object_t records */
    mc_mlist_t pending;        /* incomplete objects, oldest PutStart first */
    mc_mlist_t discarded;      /* replicas awaiting release: preempted puts,
                                * buffers replaced under a reader's lease */
    mc_mlist_t upserting;      /* objects with a fresh-buffer upsert, oldest first */
    uint64_t next_replica_id;
    mc_mlist_t lru;            /* evict.h: least recently used first */
    mc_hmap_t groups;          /* mc_group_t by (tenant, group id) */
    mc_hmap_t writers;         /* mc_writer_t by (tenant, owner) */
    mc_hmap_t reservations;    /* mc_reservation_t by id (§5.18) */
    mc_mlist_t resv_order;     /* the same, earliest deadline first */
    uint64_t next_resv_id;     /* random start: ids do not repeat across restarts */

    /* segments.c */
    mc_hmap_t segments;
    mc_segment_t **segv;       /* mounted segments, placement order */
    uint32_t nseg;
    uint32_t segv_cap;
    uint64_t rng;              /* xorshift64* state for placement */
    uint64_t capacity_bytes;
    uint64_t allocated_bytes;

    /* clients.c */
    mc_hmap_t clients;
    uint64_t clients_tick_ms;  /* the last liveness tick that served */
    int clients_unserved;      /* a tick since then found the master not serving */

    /* http.c: the embedded metadata store, NULL unless
     * --enable_http_metadata_server */
    mc_meta_server_t *http;

    /* ha.c: leader election and fencing, NULL unless --enable_ha */
    mc_master_ha_t *ha;
    /* snapshot.c: the operation log and snapshots; NULL unless
     * --enable_snapshot */
    mc_durable_t *durable;
    /* what index/ reports of its durable changes (mc_master_journal_t):
     * durability/'s table while the log is on, else NULL */
    const struct mc_master_journal *journal;
    int fatal;                 /* the loop stopped on an error: exit 1 */
    /* kv_events.c: the KV cache event publisher, NULL while off */
    struct mc_kv_events *kv_events;
    struct mc_tenants *tenants;  /* --enable_multi_tenants (tenants.c) */
    struct heat_table *heat;     /* --dynamic_replication_mode (dynrep.c) */
    mc_dynrep_mode_t dynrep_mode;
    mc_alloc_strategy_t alloc_strategy;

    /* master.c */
    struct event *tick_ev;
    struct event *metrics_ev;
    struct event *sig_ev[3];   /* SIGTERM, SIGINT, SIGHUP */

    /* eviction counters (evict.c), exported by admin.c */
    uint64_t evicted_keys;
    uint64_t evicted_bytes;
    /* the NoF pool (nof.c) */
    mc_segment_t **nofv;
    uint32_t nnof;
    uint32_t nofv_cap;
    uint64_t nof_rr;               /* rotating start of NoF placement */
    uint64_t nof_capacity_bytes;
    uint64_t nof_allocated_bytes;
    uint64_t nof_evicted_keys;
    uint64_t nof_evicted_bytes;
    uint64_t nof_eviction_attempts;
    uint64_t nof_evictions;
    uint64_t evictions;
    uint64_t eviction_attempts;        /* passes started (background or inline) */

    /* disk tier (index/offload.c, docs/tiers.md), exported by admin.c */
    uint64_t disk_replicas;            /* disk replicas now */
    uint64_t disk_bytes;               /* their value bytes */
    uint64_t offloaded_keys;           /* OFFLOAD_REPORTs taken */
    uint64_t offloaded_bytes;
    uint64_t disk_dropped_keys;        /* disk replicas gone (holder, drop, object end) */
    uint64_t promotions_queued;        /* --promotion_on_hit copies queued */
    uint64_t promotions_done;          /* ... and committed */

    /* DFS tier (dfs.c, docs/tiers.md §6): NULL without --root_fs_dir */
    mc_master_dfs_t *dfs;

    /* tasks.c */
    mc_hmap_t tasks;
    mc_task_queue_t taskq[MC_TASKQ_COUNT];

    /* admin.c; op_requests/op_failures are counted by rpc.c's dispatcher
     * (a status other than MC_OK is a failure), indexed by opcode */
    struct evhttp *admin;
    char admin_bound[300];
    uint64_t start_ms;                     /* monotonic, at create */
    uint64_t op_requests[MC_MASTER_NOPS];
    uint64_t op_failures[MC_MASTER_NOPS];
    /* batch opcodes only (rpc.c): keys asked, keys whose per-key status
     * was an error, and requests that answered OK with some keys failed */
    uint64_t op_items[MC_MASTER_NOPS];
    uint64_t op_failed_items[MC_MASTER_NOPS];
    uint64_t op_partial[MC_MASTER_NOPS];
    /* BATCH_REPLICA_CLEAR keys asked, and those not cleared (index/removes.c) */
    uint64_t replica_clear_items;
    uint64_t replica_clear_failed_items;
};

/* ---- the journal: index/'s durable changes --------------------------------
 *
 * index/ reports each change a restart must see through this table, and
 * knows nothing of where it goes; durability/ (snapshot.c) installs its
 * table when the operation log is on (the mc_durable_* functions).  So
 * index/ calls no file of durability/, which calls index/ to restore.
 */
typedef struct mc_master_journal {
    /* an object became complete or changed while complete (OBJ_SET) */
    void (*object)(mc_master_t *m, const mc_object_t *o);
    /* a complete object left the index, or an in-place upsert started
     * overwriting its bytes (OBJ_DEL) */
    void (*erase)(mc_master_t *m, const mc_object_t *o);
    /* a segment was mounted or unmounted */
    void (*segment)(mc_master_t *m, const mc_segment_t *seg, int mounted);
    /* a task was created or changed state (@p live), or was forgotten */
    void (*task)(mc_master_t *m, const mc_task_t *t, int live);
} mc_master_journal_t;

static inline void mc_journal_object(mc_master_t *m, const mc_object_t *o)
{
    if (m->journal != NULL)
        m->journal->object(m, o);
}
static inline void mc_journal_erase(mc_master_t *m, const mc_object_t *o)
{
    if (m->journal != NULL)
        m->journal->erase(m, o);
}
static inline void mc_journal_segment(mc_master_t *m, const mc_segment_t *seg, int mounted)
{
    if (m->journal != NULL)
        m->journal->segment(m, seg, mounted);
}
static inline void mc_journal_task(mc_master_t *m, const mc_task_t *t, int live)
{
    if (m->journal != NULL)
        m->journal->task(m, t, live);
}

/* ---- master.c ------------------------------------------------------------ */

/* Binds every listener; MC_INVALID_PARAMS (with a logged reason) when an
 * address cannot be bound. */
mc_status_t mc_master_create(mc_master_config_t *cfg, mc_master_t **m_p);
/* Runs until SIGTERM/SIGINT (SIGHUP reopens the --log_dir file, or is
 * only logged); returns the process exit code. */
int mc_master_run(mc_master_t *m);
void mc_master_destroy(mc_master_t *m);
/* Point stderr (the log) at <dir>/mooncake_master.log, opened for append
 * (--log_dir); again on SIGHUP, for log rotation.  -1 with errno set when
 * the file cannot be opened; stderr is then unchanged. */
int mc_master_log_open(const char *dir);

/* ---- rpc.c (docs/protocol.md §1-§3) -------------------------------------- */

mc_status_t mc_master_rpc_start(mc_master_t *m);
void mc_master_rpc_stop(mc_master_t *m); /* closes the listener and every connection */

/* Per-request context handed by rpc.c to the handlers. */
typedef struct mc_req_ctx {
    mc_master_t *m;
    mc_str_t tenant;
    mc_arena_t *arena;         /* response storage, reset after the frame */
    uint64_t now_ms;
} mc_req_ctx_t;

#endif /* MC_MASTER_MASTER_H */
