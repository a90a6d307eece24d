/* SPDX-License-Identifier: Apache-2.0 */
/* MR splitting and the RDMA handshake record (codec.h). */
#include "config.h"

#include <ctype.h>
#include <string.h>

#include "common/log.h"
#include "transfer/rdma/codec.h"

size_t mc_rdma_mr_split(uint64_t addr, uint64_t len, uint64_t max_mr, mc_rdma_span_t *out,
                        size_t cap)
{
    size_t count, i;
    if ((len == 0) || (addr > UINT64_MAX - len))
        return 0;
    if ((max_mr == 0) || (max_mr >= len))
        count = 1;
    else
        count = (size_t)(len / max_mr + ((len % max_mr) != 0));
    for (i = 0; (i < count) && (i < cap); i++) {
        uint64_t off = (max_mr == 0) ? 0 : (uint64_t)i * max_mr;
        out[i].addr  = addr + off;
        out[i].len   = ((max_mr == 0) || (len - off < max_mr)) ? len - off : max_mr;
    }
    return count;
}

size_t mc_rdma_pieces(uint64_t base, uint64_t max_mr, uint64_t addr, uint64_t len,
                      uint64_t slice, mc_rdma_span_t *out, size_t cap)
{
    size_t n = 0;
    uint64_t done = 0;
    if ((len == 0) || (addr < base) || (addr > UINT64_MAX - len))
        return 0;
    while (done < len) {
        uint64_t at = addr + done, piece = len - done;
        if (max_mr != 0) {
            uint64_t mr_end_off = ((at - base) / max_mr + 1) * max_mr; /* from base */
            uint64_t room       = mr_end_off - (at - base);
            if (piece > room)
                piece = room;
        }
        if ((slice != 0) && (piece > slice))
            piece = slice;
        if (n < cap) {
            out[n].addr = at;
            out[n].len  = piece;
        }
        n++;
        done += piece;
    }
    return n;
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)((p[0] << 8) | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* NULL when the endpoint may travel, else what is wrong with it. */
static const char *ep_problem(const mc_rdma_ep_t *ep, size_t namelen)
{
    if ((namelen == 0) || (namelen >= MC_RDMA_NIC_NAME_MAX))
        return "NIC name length";
    for (size_t i = 0; i < namelen; i++) {
        unsigned char c = (unsigned char)ep->nic[i];
        if (!isalnum(c) && (c != '_') && (c != '-') && (c != '.'))
            return "NIC name";
    }
    if (ep->port == 0)
        return "port 0";
    if ((ep->mtu < 1) || (ep->mtu > 5))
        return "mtu";
    if ((ep->qpn > 0xffffffu) || (ep->psn > 0xffffffu))
        return "qpn/psn above 24 bits";
    return NULL;
}

size_t mc_rdma_hs_encode(const mc_rdma_ep_t *eps, size_t n, uint8_t *buf, size_t cap)
{
    size_t need = 8 + n * MC_RDMA_HS_EP_SIZE;
    uint8_t *p  = buf + 8;
    if ((n == 0) || (n > MC_RDMA_HS_MAX_EPS) || (cap < need))
        return 0;
    put32(buf, MC_RDMA_HS_MAGIC);
    put16(buf + 4, MC_RDMA_HS_VERSION);
    put16(buf + 6, (uint16_t)n);
    for (size_t i = 0; i < n; i++) {
        size_t namelen = strnlen(eps[i].nic, MC_RDMA_NIC_NAME_MAX);
        if (ep_problem(&eps[i], namelen) != NULL)
            return 0;
        memset(p, 0, MC_RDMA_HS_EP_SIZE);
        p[0] = (uint8_t)namelen;
        memcpy(p + 1, eps[i].nic, namelen);
        p += 1 + (MC_RDMA_NIC_NAME_MAX - 1);
        p[0] = eps[i].port;
        p[1] = eps[i].mtu;
        put16(p + 2, eps[i].lid);
        memcpy(p + 4, eps[i].gid, 16);
        put32(p + 20, eps[i].qpn);
        put32(p + 24, eps[i].psn);
        p += 28;
    }
    return need;
}

mc_status_t mc_rdma_hs_decode(const uint8_t *buf, size_t len, mc_rdma_ep_t *eps, size_t cap,
                              size_t *n_p)
{
    size_t n;
    const uint8_t *p;
    *n_p = 0;
    if ((len < 8) || (get32(buf) != MC_RDMA_HS_MAGIC)) {
        mc_set_error_detail("rdma handshake: bad magic");
        return MC_DESERIALIZE_FAIL;
    }
    if (get16(buf + 4) != MC_RDMA_HS_VERSION) {
        mc_set_error_detail("rdma handshake: version %u is not %u", get16(buf + 4),
                            MC_RDMA_HS_VERSION);
        return MC_DESERIALIZE_FAIL;
    }
    n = get16(buf + 6);
    if ((n == 0) || (n > MC_RDMA_HS_MAX_EPS) || (n > cap)) {
        mc_set_error_detail("rdma handshake: %zu endpoints (1..%zu accepted)", n,
                            (cap < MC_RDMA_HS_MAX_EPS) ? cap : (size_t)MC_RDMA_HS_MAX_EPS);
        return MC_DESERIALIZE_FAIL;
    }
    if (len != 8 + n * MC_RDMA_HS_EP_SIZE) {
        mc_set_error_detail("rdma handshake: %zu bytes for %zu endpoints", len, n);
        return MC_DESERIALIZE_FAIL;
    }
    p = buf + 8;
    for (size_t i = 0; i < n; i++) {
        mc_rdma_ep_t *ep = &eps[i];
        size_t namelen   = p[0];
        const char *why;
        memset(ep, 0, sizeof(*ep));
        if (namelen < MC_RDMA_NIC_NAME_MAX)
            memcpy(ep->nic, p + 1, namelen);
        p += 1 + (MC_RDMA_NIC_NAME_MAX - 1);
        ep->port = p[0];
        ep->mtu  = p[1];
        ep->lid  = get16(p + 2);
        memcpy(ep->gid, p + 4, 16);
        ep->qpn = get32(p + 20);
        ep->psn = get32(p + 24);
        p += 28;
        why = ep_problem(ep, namelen);
        if (why != NULL) {
            mc_set_error_detail("rdma handshake: endpoint %zu: bad %s", i, why);
            return MC_DESERIALIZE_FAIL;
        }
    }
    *n_p = n;
    return MC_OK;
}
