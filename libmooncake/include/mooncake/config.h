/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file config.h
 * @brief Replication configuration of a write (upstream ReplicateConfig).
 */
#ifndef MOONCAKE_CONFIG_H
#define MOONCAKE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <mooncake/visibility.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Soft-pin transition committed when the first replica becomes readable. @since 0.1 */
typedef enum mc_soft_pin_action {
    MC_SOFT_PIN_PRESERVE = 0, /**< keep an existing deadline (upsert); none for a new object */
    MC_SOFT_PIN_ENABLE   = 1, /**< start a fixed soft-pin lifetime */
    MC_SOFT_PIN_DISABLE  = 2  /**< remove any soft pin */
} mc_soft_pin_action_t;

/** Status of one replica (upstream ReplicaStatus). @since 0.1 */
typedef enum mc_replica_status {
    MC_REPLICA_UNDEFINED   = 0,
    MC_REPLICA_INITIALIZED = 1,
    MC_REPLICA_PROCESSING  = 2, /**< allocated, bytes being written */
    MC_REPLICA_COMPLETE    = 3, /**< readable */
    MC_REPLICA_REMOVED     = 4,
    MC_REPLICA_FAILED      = 5
} mc_replica_status_t;

/** Which optional fields of mc_replicate_config_t are set. @since 0.1 */
enum mc_replicate_config_field {
    MC_RC_FIELD_SOFT_PIN_TTL = 1u << 0, /**< soft_pin_ttl_ms is meaningful */
    MC_RC_FIELD_GROUP_IDS    = 1u << 1  /**< group_ids/group_ids_count are meaningful */
};

/**
 * Replication configuration; initialise with mc_replicate_config_init().
 * @since 0.1
 */
typedef struct mc_replicate_config {
    uint64_t field_mask;            /**< bits of enum mc_replicate_config_field */
    uint32_t replica_num;           /**< memory replicas on distinct segments (default 1) */
    uint32_t nof_replica_num;       /**< NVMe-oF SSD replicas (default 0) */
    uint32_t dfs_replica_num;       /**< shared-filesystem replicas (0 or 1; default 0):
                                     *   1 also writes a checksummed record into the
                                     *   DFS tier (docs/tiers.md §6); needs
                                     *   MOONCAKE_DFS_ROOT_DIR, replica_num >= 1 and
                                     *   the default tenant */
    mc_soft_pin_action_t soft_pin_action; /**< default PRESERVE */
    uint64_t soft_pin_ttl_ms;       /**< valid with MC_RC_FIELD_SOFT_PIN_TTL */
    int with_hard_pin;              /**< never evicted while set (default 0) */
    const char *preferred_segment;  /**< "host:port" or NULL/"" for none */
    int prefer_alloc_in_same_node;  /**< local-first placement (default 0) */
    const char *const *group_ids;   /**< one per key written; "" = ungrouped */
    size_t group_ids_count;         /**< number of entries in group_ids */
} mc_replicate_config_t;

/**
 * @brief Fill @p cfg with the upstream defaults.
 * @param [out] cfg  Configuration to initialise.
 * @since 0.1
 */
MC_API void mc_replicate_config_init(mc_replicate_config_t *cfg);

#ifdef __cplusplus
}
#endif
#endif /* MOONCAKE_CONFIG_H */
