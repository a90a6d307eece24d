/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers of the store suites (store_util.h). */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <mooncake/mooncake.h>

#include "check_suites.h"
#include "store_util.h"

void st_params(mc_store_params_t *p, const char *master_addr, uint64_t segment, uint64_t lbuf)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                    MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_LOCAL_BUFFER_SIZE |
                    MC_STORE_PARAM_MASTER_SERVER_ADDR;
    p->local_hostname      = "127.0.0.1";
    p->metadata_server     = "P2PHANDSHAKE";
    p->global_segment_size = segment;
    p->local_buffer_size   = lbuf;
    p->master_server_addr  = master_addr;
}

mc_store_h st_open(const char *master_addr, uint64_t segment)
{
    mc_store_h s;
    mc_store_params_t p;

    st_params(&p, master_addr, segment, 1u << 20);
    ck_assert_status_ok(mc_store_create(&s));
    ck_assert_status_ok(mc_store_setup(s, &p));
    return s;
}

void st_pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed * 7u + (i >> 8));
}

void st_value(mc_store_h s, const char *key, const uint8_t *want, size_t len)
{
    uint64_t size = 0;
    uint8_t *got  = malloc(len + 16);

    ck_assert_ptr_nonnull(got);
    ck_assert_status_ok(mc_store_get(s, key, got, len + 16, &size));
    ck_assert_msg(size == len, "%s should hold %zu bytes, not %llu", key, len,
                  (unsigned long long)size);
    ck_assert_msg(memcmp(got, want, len) == 0, "%s should hold exactly the bytes written", key);
    free(got);
}

void st_missing(mc_store_h s, const char *key)
{
    uint64_t size;
    mc_status_t st = mc_store_get_size(s, key, &size);
    ck_assert_msg(st == MC_OBJECT_NOT_FOUND, "%s should not be visible, but get_size says %s",
                  key, mc_status_name(st));
}
