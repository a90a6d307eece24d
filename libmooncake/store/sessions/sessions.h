/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sessions/: the door of the ranged sessions (layer-wise KV-cache loads
 * and saves: session.c).  Other folders include this header and no other
 * file of sessions/.
 *
 * May call: ../store_internal.h (calls.c), ../read/read.h (lookups and
 * reads of many pieces), the master pool, the engine.  Called by: the
 * public API, store.c (close releases every session).
 */
#ifndef MC_STORE_SESSIONS_H
#define MC_STORE_SESSIONS_H

#include <stdint.h>

#include "store/store_internal.h"

/* Revoke every open put session and drop the get sessions (close,
 * mc_store_rd_destroy). */
void mc_store_sessions_release(mc_store_h s);

#endif /* MC_STORE_SESSIONS_H */
