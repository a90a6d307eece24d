/* SPDX-License-Identifier: Apache-2.0 */
/* Transfer-engine test helpers (te_util.h). */
#include "config.h"

#include <string.h>

#include <check.h>

#include "check_suites.h"
#include "te_util.h"

mc_te_h te_new(const char *host, const char *meta)
{
    mc_te_params_t p;
    mc_te_h te = NULL;
    mc_status_t st;
    memset(&p, 0, sizeof(p));
    p.field_mask      = MC_TE_PARAM_LOCAL_HOSTNAME | MC_TE_PARAM_METADATA_SERVER;
    p.local_hostname  = host;
    p.metadata_server = meta;
    st                = mc_te_create(&p, &te);
    ck_assert_msg(st == MC_OK, "creating an engine on %s should succeed but gave %s (%s)", host,
                  mc_status_name(st), mc_last_error_detail());
    return te;
}

mc_te_segment_id_t te_open(mc_te_h te, mc_te_h target)
{
    mc_te_segment_id_t id = 0;
    mc_status_t st        = mc_te_segment_open(te, mc_te_local_name(target), &id);
    ck_assert_msg(st == MC_OK, "opening %s should succeed but gave %s (%s)",
                  mc_te_local_name(target), mc_status_name(st), mc_last_error_detail());
    return id;
}

void te_fill(uint8_t *p, size_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
}

mc_status_t te_xfer1(mc_te_h te, mc_te_op_t op, void *local, uint64_t remote, uint64_t len,
                     mc_te_segment_id_t seg)
{
    mc_te_request_t r = {op, local, remote, len, seg};
    mc_status_t st    = MC_INTERNAL_ERROR;
    mc_status_t ret   = mc_te_transfer(te, &r, 1, &st);
    ck_assert_int_eq(ret, st);
    return st;
}

mc_te_h A, B;

void te_setup_two(void)
{
    A = te_new("127.0.0.1", NULL);
    B = te_new("127.0.0.1", "P2PHANDSHAKE");
}

void te_teardown_two(void)
{
    mc_te_destroy(A);
    mc_te_destroy(B);
    A = B = NULL;
}
