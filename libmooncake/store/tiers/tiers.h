/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tiers/: the door of the client's storage tiers.  Other folders include
 * this header and no other file of tiers/.
 */
#ifndef MC_STORE_TIERS_H
#define MC_STORE_TIERS_H

#include <stdint.h>

#include "store/store_internal.h"
#include "store/tiers/dfs.h"
#include "store/tiers/disk.h"

/* ---- NoF segments (nof.c, docs/tiers.md §8) ---- */
/* REMOUNT_NOF_SEGMENTS of every NoF segment we serve (heartbeat remount), each
 * first moved to a fence of its own with @p fence (heartbeat.c). */
void mc_store_nof_remount(mc_store_h s, mc_mconn_t *conn, int fence);
/* Unregister every NoF segment and free the record (teardown, after
 * CLIENT_CLOSE told the master they are gone). */
void mc_store_nof_release(mc_store_h s);

#endif /* MC_STORE_TIERS_H */
