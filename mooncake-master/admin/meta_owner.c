/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Who may replace or delete a segment's descriptors in the embedded HTTP
 * metadata store (docs/protocol.md §6.1).
 *
 * The descriptors of segment "host:port" live under mooncake/ram/<name>
 * and mooncake/rpc_meta/<name> (with an optional cluster component after
 * "mooncake/").  Anyone who can reach the HTTP port could overwrite them
 * and so steer every new reader and writer of that segment to themselves.
 * While a client has the segment mounted, only that client may: its
 * HELLO answer carries a metadata token, SipHash-2-4 of its client id
 * under a key drawn at the master's start, and its transfer engine sends
 * it on PUT and DELETE as X-Mooncake-Owner-Token.  The master keeps no
 * per-client state for it: the token is recomputed for the owner of the
 * named segment.  A segment nobody has mounted (not yet, or no longer:
 * its client closed or expired) accepts any writer, so upstream engines
 * that send no token keep working wherever no owner is registered.
 *
 * Owns: who may replace or delete a segment's descriptors in the metadata
 *   store (the metadata tokens).
 * May call: admin/, ../master.h (the segment map).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "admin.h"
#include "common/log.h"
#include "master.h"

void mc_master_meta_owner_init(mc_master_t *m)
{
    mc_uuid_t k;
    mc_uuid_generate(&k); /* getrandom() */
    m->meta_token_key[0] = k.hi;
    m->meta_token_key[1] = k.lo;
}

mc_uuid_t mc_master_metadata_token(const mc_master_t *m, mc_uuid_t client_id)
{
    uint8_t b[17];
    mc_uuid_t t;

    for (int i = 0; i < 8; i++) {
        b[i]     = (uint8_t)(client_id.hi >> (8 * i));
        b[8 + i] = (uint8_t)(client_id.lo >> (8 * i));
    }
    b[16] = 1;
    t.hi  = mc_siphash24(m->meta_token_key, b, sizeof(b));
    b[16] = 2;
    t.lo  = mc_siphash24(m->meta_token_key, b, sizeof(b));
    return t;
}

/* The segment name in a descriptor key, or NULL when @p key is no
 * descriptor key: "mooncake/" [cluster "/"] ("ram" | "rpc_meta") "/" name. */
static const char *descriptor_segment(const char *key)
{
    static const char *const kinds[] = {"ram/", "rpc_meta/"};
    const char *p = key;

    if (strncmp(p, "mooncake/", 9) != 0)
        return NULL;
    p += 9;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < MC_ARRAY_SIZE(kinds); i++) {
            size_t n = strlen(kinds[i]);
            if ((strncmp(p, kinds[i], n) == 0) && (p[n] != '\0'))
                return p + n;
        }
        p = strchr(p, '/'); /* a cluster component, once */
        if (p == NULL)
            return NULL;
        p++;
    }
    return NULL;
}

int mc_master_meta_write_allowed(void *arg, const char *key, const char *token)
{
    mc_master_t *m    = arg;
    const char *name  = descriptor_segment(key);
    const mc_client_t *owner = NULL;
    char want[33];
    mc_uuid_t t;

    if (name == NULL)
        return 1;
    for (uint32_t i = 0; i < m->nseg; i++) {
        if (strcmp(m->segv[i]->name, name) == 0) {
            owner = m->segv[i]->owner;
            break;
        }
    }
    if (owner == NULL)
        return 1;
    t = mc_master_metadata_token(m, owner->id);
    snprintf(want, sizeof(want), "%016llx%016llx", (unsigned long long)t.hi,
             (unsigned long long)t.lo);
    if ((token != NULL) && (strcasecmp(token, want) == 0))
        return 1;
    mc_log_ratelimited(MC_LOG_WARN,
                       "http metadata: refused a write of %.200s: segment %.200s is mounted by "
                       "another client (%s owner token)",
                       key, name, token ? "wrong" : "no");
    return 0;
}
