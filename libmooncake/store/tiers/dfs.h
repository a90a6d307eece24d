/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client side of the DFS tier (dfs.c, docs/tiers.md §6), as the rest
 * of the store sees it.
 *
 * Owns: the interface of dfs.c, part of tiers/'s door (tiers/tiers.h
 *   includes it).
 * May call: libmooncake's wire/ (the replica records).
 */
#ifndef MC_STORE_DFS_H
#define MC_STORE_DFS_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/config.h>
#include <mooncake/store.h>

#include "wire/wire.h"

/* Read MOONCAKE_DFS_ROOT_DIR and the layout variables into s->dfs (setup,
 * before the first HELLO); nothing when the root is unset.
 * MC_INVALID_PARAMS (detail names the variable) on a bad setting. */
mc_status_t mc_store_dfs_init(mc_store_h s);
void mc_store_dfs_cleanup(mc_store_h s);

/* HELLO hook (mc_master_target_t.on_hello): a client with a DFS tier
 * refuses a master whose root or shard layout differ from its own. */
mc_status_t mc_store_dfs_on_hello(void *arg, const mc_wire_hello_resp_t *resp);

/* What a write asking for DFS replicas needs on this client: a DFS tier,
 * replica_num >= 1, the default tenant (MC_INVALID_PARAMS, detail set).
 * MC_OK when @p cfg asks for none. */
mc_status_t mc_store_dfs_config_check(mc_store_h s, const mc_replicate_config_t *cfg);

/* A COMPLETE DFS replica of a @p size-byte object this client can read:
 * its full path into @p path (@p cap bytes); 0 when not usable here. */
int mc_store_dfs_replica_path(mc_store_h s, const mc_wire_replica_t *r, uint64_t size,
                              char *path, size_t cap);

/* Write the record of @p key (value parts[0..n), @p total bytes) where
 * the DFS replica @p r says: one pwritev, no fsync (upstream's promise).
 * MC_INVALID_REPLICA for a replica that does not fit the layout,
 * MC_DFS_PARTIAL_WRITE (detail set) when the write fails. */
mc_status_t mc_store_dfs_write(mc_store_h s, const mc_wire_replica_t *r, mc_str_t key,
                               const mc_iov_t *parts, size_t n, uint64_t total);

#endif /* MC_STORE_DFS_H */
