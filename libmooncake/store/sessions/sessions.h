/* SPDX-License-Identifier: Apache-2.0 */
/*
 * sessions/: the door of the ranged sessions.  Other folders include this
 * header and no other file of sessions/.
 */
#ifndef MC_STORE_SESSIONS_H
#define MC_STORE_SESSIONS_H

#include <stdint.h>

#include "store/store_internal.h"

/* Revoke every open put session and drop the get sessions (close,
 * mc_store_rd_destroy). */
void mc_store_sessions_release(mc_store_h s);

#endif /* MC_STORE_SESSIONS_H */
