/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the rest of the master reads of the election (ha.h): whether this
 * master serves now, its role and state names, the leader it knows of,
 * and the backend endpoints the flags name.  Each is a read of the
 * election thread's atomics (or its lock-held leader view): no call into
 * the election, so the loop's files that ask (rpc.c, master.c, events/,
 * durability/, admin/) do not depend on the election that calls them
 * back (ha.c empties the index and installs the log).
 *
 * Owns: the read side of the election's state.
 * May call: ha/ha.h, durability/ (whether a log install is pending),
 *   ../master.h.
 */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "durability/durability.h"
#include "ha.h"
#include "master.h"

int mc_master_ha_serving(mc_master_t *m)
{
    mc_master_ha_t *h = m->ha;
    if (h == NULL)
        return 1;
    return (atomic_load(&h->role) == MC_HA_LEADER) && (mc_now_ms() < atomic_load(&h->deadline_ms)) &&
           !mc_ship_install_pending(h->ship);
}

const char *mc_master_ha_role_name(mc_master_t *m)
{
    if (m->ha == NULL)
        return "leader";
    return (atomic_load(&m->ha->role) == MC_HA_LEADER) ? "leader" : "standby";
}

const char *mc_master_ha_state_name(mc_master_t *m)
{
    mc_master_ha_t *h = m->ha;
    if (h == NULL)
        return "serving";
    if (atomic_load(&h->role) == MC_HA_LEADER) {
        if (mc_ship_install_pending(h->ship))
            return "taking_over";
        return (mc_now_ms() < atomic_load(&h->deadline_ms)) ? "serving" : "stepping_down";
    }
    return atomic_load(&h->reset_pending) ? "stepping_down" : "standby";
}

int64_t mc_master_ha_leader(mc_master_t *m, char *addr, size_t cap)
{
    mc_master_ha_t *h = m->ha;
    int64_t term;
    if (h == NULL) {
        snprintf(addr, cap, "%s", m->rpc_bound);
        return 1;
    }
    pthread_mutex_lock(&h->lock);
    snprintf(addr, cap, "%s", h->leader_addr);
    term = h->leader_term;
    pthread_mutex_unlock(&h->lock);
    return term;
}

const char *mc_master_ha_endpoints(const mc_master_config_t *cfg)
{
    if (cfg->ha_backend_connstring[0] != '\0')
        return cfg->ha_backend_connstring;
    return (strcmp(cfg->ha_backend_type, "etcd") == 0) ? cfg->etcd_endpoints : "";
}
