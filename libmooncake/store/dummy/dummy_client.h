/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The dummy client's own state and the helpers its files share
 * (dummy_client.c: connection, lifecycle, memory; dummy_io.c: writes,
 * reads, copies; dummy_calls.c: removal, tasks, mounts, sessions).  Only
 * the files of dummy/ include it; other folders go through dummy.h, and
 * the handle reaches the dummy through its ops table (dummy_ops.c).
 *
 * Owns: the dummy handle's state (struct mc_dummy) and the declarations
 *   shared by dummy/'s files.
 * May call: dummy/wire.h (the frames), ../store_internal.h (the handle).
 */
#ifndef MC_STORE_DUMMY_CLIENT_H
#define MC_STORE_DUMMY_CLIENT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "store/dummy/dummy.h"
#include "store/dummy/wire.h"
#include "store/store_internal.h"

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

/* A PUT's config on the wire, with its strings: the preferred segment
 * (w.plen bytes) and, per item of the frame, the group id its key carries
 * (igroups NULL, or NULL entries: none). */
typedef struct put_cfg {
    mc_dummy_cfg_t w;
    const char *pref;
    const char **igroups;
} put_cfg_t;

/* One request and its answer on the dummy's connection (d->lock). */
mc_status_t mc_dummy_call(mc_dummy_t *d, unsigned op, unsigned hflags, const mc_dummy_item_t *items,
                          const char *const *keys, size_t n, const put_cfg_t *cfg,
                          mc_dummy_result_t *results, size_t nres);
/* The same with d->lock held, passing @p sendfd along (MOUNT); -1 none. */
mc_status_t mc_dummy_call_fd(mc_dummy_t *d, unsigned op, unsigned hflags,
                             const mc_dummy_item_t *items, const char *const *keys, size_t n,
                             const put_cfg_t *cfg, mc_dummy_result_t *results, size_t nres,
                             int sendfd);
/* What the real client checks of @p cfg for @p nkeys keys, before any
 * frame; and its strings must fit the frame's limit. */
mc_status_t mc_dummy_cfg_check(const mc_replicate_config_t *cfg, size_t nkeys);
/* The group id key @p k of a call writes under, or NULL. */
const char *mc_dummy_cfg_group(const mc_replicate_config_t *cfg, size_t k);
/* A checked config (NULL: the defaults) as a PUT carries it. */
void mc_dummy_cfg_to_wire(const mc_replicate_config_t *cfg, put_cfg_t *pc);
/* `life` for reading and the dummy of @p s; NULL (nothing held) when
 * @p s is not a dummy. */
mc_dummy_t *mc_dummy_enter(mc_store_h s);
void mc_dummy_leave(mc_store_h s);
/* The length of @p key, UINT32_MAX when the master would refuse it. */
uint32_t mc_dummy_key_len(const char *key);
/* Region and offset of [p, p+len) when it lies in the shared memory: the
 * pool, the staging buffer, or one registered host-memory block (1). */
int mc_dummy_locate(mc_dummy_t *d, const void *p, size_t len, uint16_t *region_p, uint64_t *off_p);
/* The alloc_from_mem_pool block holding @p p: 1 with its start and length. */
int mc_dummy_pool_block_of(mc_dummy_t *d, const void *p, uintptr_t *start_p, uint64_t *len_p);
/* Give staging block @p handle back to the real client (FREE, no answer). */
void mc_dummy_staged_free(mc_dummy_t *d, uint32_t handle);

#endif /* MC_STORE_DUMMY_CLIENT_H */
