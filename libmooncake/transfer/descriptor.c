/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Segment descriptor <-> JSON, with jansson.
 *
 * The encoder writes the upstream TCP shape:
 *   {"name": "host:port", "protocol": "tcp", "tcp_data_port": N,
 *    "timestamp": "YYYY-MM-DD HH:MM:SS.mmm",
 *    "buffers": [{"name": "cpu:0", "addr": N, "length": N}, ...]}
 * and, for an rdma engine, the upstream RDMA members: "devices"
 * ([{"name", "lid", "gid"}]) and per buffer "rkey" (one per NIC, and per
 * MR when the buffer is cut at "rdma_mr_size", our addition).  An efa or
 * cxi engine (libfabric) adds ours: "fabric" ({"provider", "address" in
 * hex, "virt_addr"}) and per buffer "fabric_key" (a 64-bit key in hex: a
 * JSON integer is signed).
 * The decoder accepts that shape and ignores members it does not know
 * (upstream adds "tcp_proto_version", RDMA keys, ...), but it is strict
 * about the members it uses: a descriptor comes from the network or from a
 * shared metadata service, so a wrong type, a negative or wrapping range,
 * overlapping buffers or an absurd count is an error, never a guess.
 *
 * jansson integers are signed 64-bit; user-space addresses on the
 * platforms we build for are below 2^63, so nothing is lost, and a value
 * that would not fit is refused on both sides.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/log.h"
#include "transfer/descriptor.h"

void mc_te_desc_init(mc_te_desc_t *d)
{
    memset(d, 0, sizeof(*d));
}

void mc_te_desc_cleanup(mc_te_desc_t *d)
{
    if (d == NULL)
        return;
    free(d->name);
    for (size_t i = 0; i < d->nbuffers; i++)
        free(d->buffers[i].rkeys);
    free(d->buffers);
    free(d->devices);
    memset(d, 0, sizeof(*d));
}

void mc_te_desc_move(mc_te_desc_t *dst, mc_te_desc_t *src)
{
    mc_te_desc_cleanup(dst);
    *dst = *src;
    memset(src, 0, sizeof(*src));
}

static void desc_timestamp(char *out, size_t cap)
{
    struct timespec ts;
    struct tm tm;
    size_t n;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(out, cap, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(out + n, cap - n, ".%03u", (unsigned)(ts.tv_nsec / 1000000L) % 1000u);
}

void mc_te_gid_format(const uint8_t gid[16], char out[48])
{
    for (int i = 0; i < 16; i++)
        snprintf(out + 3 * i, 4, (i < 15) ? "%02x:" : "%02x", gid[i]);
}

int mc_te_gid_parse(const char *s, uint8_t gid[16])
{
    if (strlen(s) != 47)
        return -1;
    for (int i = 0; i < 16; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = s[3 * i + k];
            v <<= 4;
            if ((c >= '0') && (c <= '9'))
                v |= (unsigned)(c - '0');
            else if ((c >= 'a') && (c <= 'f'))
                v |= (unsigned)(c - 'a' + 10);
            else if ((c >= 'A') && (c <= 'F'))
                v |= (unsigned)(c - 'A' + 10);
            else
                return -1;
        }
        if ((i < 15) && (s[3 * i + 2] != ':'))
            return -1;
        gid[i] = (uint8_t)v;
    }
    return 0;
}

/* The libfabric members: "fabric" on @p root and "fabric_key" on each
 * keyed buffer of @p bufs (encoded in array order).  0, or -1 (no memory). */
static int desc_encode_fabric(json_t *root, json_t *bufs, const mc_te_desc_t *d)
{
    char hex[2 * MC_TE_DESC_MAX_FABRIC_ADDR + 1];
    json_t *o;
    size_t n = (d->fabric_addrlen <= MC_TE_DESC_MAX_FABRIC_ADDR) ? d->fabric_addrlen : 0;

    for (size_t i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", d->fabric_addr[i]);
    hex[2 * n] = '\0';
    o = json_pack("{s:s, s:s, s:b}", "provider", d->fabric_provider, "address", hex,
                  "virt_addr", d->fabric_virt_addr != 0);
    if ((o == NULL) || (json_object_set_new(root, "fabric", o) != 0))
        return -1;
    for (size_t i = 0; i < d->nbuffers; i++) {
        char key[24];
        if (!d->buffers[i].has_fabric_key)
            continue;
        snprintf(key, sizeof(key), "%llx", (unsigned long long)d->buffers[i].fabric_key);
        if (json_object_set_new(json_array_get(bufs, i), "fabric_key", json_string(key)) != 0)
            return -1;
    }
    return 0;
}

/* "rdma_gen_words" on @p root: {"addr", "count", "rkey": one per device}.
 * 0, or -1 (out of memory, or an address JSON cannot carry). */
static int desc_encode_gen_words(json_t *root, const mc_te_desc_t *d)
{
    json_t *o, *keys;
    if (d->gen_words.addr > (uint64_t)INT64_MAX)
        return -1;
    keys = json_array();
    o    = json_pack("{s:I, s:I, s:o}", "addr", (json_int_t)d->gen_words.addr, "count",
                     (json_int_t)d->gen_words.nwords, "rkey", keys);
    if (o == NULL)
        return -1;
    for (size_t k = 0; (k < d->ndevices) && (k < MC_TE_DESC_MAX_DEVICES); k++)
        if (json_array_append_new(keys, json_integer(d->gen_words.rkeys[k])) != 0) {
            json_decref(o);
            return -1;
        }
    return json_object_set_new(root, "rdma_gen_words", o);
}

mc_status_t mc_te_desc_encode(const mc_te_desc_t *d, char **json_p, size_t *len_p)
{
    mc_status_t st = MC_INTERNAL_ERROR;
    json_t *root = NULL, *bufs = NULL, *devs = NULL;
    char stamp[64];
    char *text;

    root = json_object();
    bufs = json_array();
    if ((root == NULL) || (bufs == NULL))
        goto out;
    desc_timestamp(stamp, sizeof(stamp));
    if ((json_object_set_new(root, "name", json_string(d->name ? d->name : "")) != 0) ||
        (json_object_set_new(root, "protocol", json_string(d->protocol)) != 0) ||
        (json_object_set_new(root, "tcp_data_port", json_integer(d->tcp_data_port)) != 0) ||
        (json_object_set_new(root, "timestamp", json_string(stamp)) != 0))
        goto out;
    if ((d->shm_name[0] != '\0') &&
        (json_object_set_new(root, "shm_name", json_string(d->shm_name)) != 0))
        goto out;
    if (d->tcp_readv && (json_object_set_new(root, "tcp_readv", json_true()) != 0))
        goto out;
    if (d->tcp_readv_strided &&
        (json_object_set_new(root, "tcp_readv_strided", json_true()) != 0))
        goto out;
    for (size_t i = 0; i < d->nbuffers; i++) {
        const mc_te_buf_desc_t *b = &d->buffers[i];
        json_t *o;
        if ((b->addr > (uint64_t)INT64_MAX) || (b->length > (uint64_t)INT64_MAX)) {
            mc_set_error_detail("buffer at 0x%llx cannot be described in JSON",
                                (unsigned long long)b->addr);
            st = MC_SERIALIZE_FAIL;
            goto out;
        }
        o = json_pack("{s:s, s:I, s:I}", "name", b->name, "addr", (json_int_t)b->addr,
                      "length", (json_int_t)b->length);
        if ((o == NULL) || (json_array_append_new(bufs, o) != 0))
            goto out;
        if (b->nrkeys > 0) {
            json_t *keys = json_array();
            if ((keys == NULL) || (json_object_set_new(o, "rkey", keys) != 0))
                goto out;
            for (size_t k = 0; k < b->nrkeys; k++)
                if (json_array_append_new(keys, json_integer(b->rkeys[k])) != 0)
                    goto out;
        }
        if (b->has_gen_slot && (d->gen_words.nwords > 0) &&
            (json_object_set_new(o, "rdma_gen_slot", json_integer(b->gen_slot)) != 0))
            goto out;
    }
    if (json_object_set(root, "buffers", bufs) != 0)
        goto out;
    if ((d->fabric_provider[0] != '\0') && (desc_encode_fabric(root, bufs, d) != 0))
        goto out;
    if (d->ndevices > 0) {
        devs = json_array();
        if ((devs == NULL) || (json_object_set(root, "devices", devs) != 0))
            goto out;
        for (size_t i = 0; i < d->ndevices; i++) {
            char gid[48];
            json_t *o;
            mc_te_gid_format(d->devices[i].gid, gid);
            o = json_pack("{s:s, s:i, s:s}", "name", d->devices[i].name, "lid",
                          (int)d->devices[i].lid, "gid", gid);
            if ((o == NULL) || (json_array_append_new(devs, o) != 0))
                goto out;
        }
        if ((d->rdma_mr_size != 0) &&
            (json_object_set_new(root, "rdma_mr_size",
                                 json_integer((json_int_t)d->rdma_mr_size)) != 0))
            goto out;
        if ((d->gen_words.nwords > 0) && (desc_encode_gen_words(root, d) != 0))
            goto out;
    }
    text = json_dumps(root, JSON_COMPACT);
    if (text == NULL)
        goto out;
    *json_p = text;
    if (len_p != NULL)
        *len_p = strlen(text);
    st = MC_OK;
out:
    json_decref(devs);
    if (st == MC_INTERNAL_ERROR)
        mc_set_error_detail("out of memory while encoding a segment descriptor");
    json_decref(bufs);
    json_decref(root);
    return st;
}

static int buf_cmp(const void *a, const void *b)
{
    const mc_te_buf_desc_t *x = a, *y = b;
    return (x->addr > y->addr) - (x->addr < y->addr);
}

/* A JSON integer in [0, max]; jansson rejects integers beyond int64 at
 * parse time, so a huge address arrives as a real and fails here. */
static int get_uint(const json_t *o, const char *key, uint64_t max, uint64_t *v_p)
{
    json_t *v = json_object_get(o, key);
    json_int_t i;
    if ((v == NULL) || !json_is_integer(v))
        return -1;
    i = json_integer_value(v);
    if ((i < 0) || ((uint64_t)i > max))
        return -1;
    *v_p = (uint64_t)i;
    return 0;
}

/* "devices" (optional): at most MC_TE_DESC_MAX_DEVICES objects with a
 * NIC name, a lid in 0..65535 and a gid "xx:xx:...:xx" (16 bytes); and
 * "rdma_mr_size" (optional, only with devices): at least
 * MC_TE_DESC_MIN_MR_SIZE.  Returns 0, or -1 with the detail set. */
static int desc_decode_devices(const json_t *root, mc_te_desc_t *d)
{
    const json_t *devs = json_object_get(root, "devices");
    uint64_t v;
    size_t n;
    if (devs == NULL)
        return 0;
    n = json_is_array(devs) ? json_array_size(devs) : SIZE_MAX;
    if ((n == SIZE_MAX) || (n > MC_TE_DESC_MAX_DEVICES)) {
        mc_set_error_detail("segment descriptor has an invalid \"devices\" array");
        return -1;
    }
    if (n == 0)
        return 0;
    d->devices = calloc(n, sizeof(*d->devices));
    if (d->devices == NULL) {
        mc_set_error_detail("out of memory");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(devs, i), *name, *gid;
        mc_te_dev_desc_t *dd = &d->devices[i];
        name = json_is_object(o) ? json_object_get(o, "name") : NULL;
        gid  = json_is_object(o) ? json_object_get(o, "gid") : NULL;
        if ((name == NULL) || !json_is_string(name) || (json_string_length(name) == 0) ||
            (json_string_length(name) >= sizeof(dd->name)) || (gid == NULL) ||
            !json_is_string(gid) || (mc_te_gid_parse(json_string_value(gid), dd->gid) != 0) ||
            (get_uint(o, "lid", 65535, &v) != 0)) {
            mc_set_error_detail("segment descriptor device %zu is malformed", i);
            return -1;
        }
        snprintf(dd->name, sizeof(dd->name), "%s", json_string_value(name));
        dd->lid = (uint16_t)v;
        d->ndevices++;
    }
    if (json_object_get(root, "rdma_mr_size") != NULL) {
        if ((get_uint(root, "rdma_mr_size", INT64_MAX, &v) != 0) ||
            (v < MC_TE_DESC_MIN_MR_SIZE)) {
            mc_set_error_detail("segment descriptor has an invalid \"rdma_mr_size\"");
            return -1;
        }
        d->rdma_mr_size = v;
    }
    return 0;
}

/* "rdma_gen_words" (optional, only with devices): {"addr", "count" in
 * 1..MC_TE_DESC_MAX_GEN_WORDS, "rkey": one 32-bit key per device}, the
 * words not wrapping.  Returns 0, or -1 with the detail set. */
static int desc_decode_gen_words(const json_t *root, mc_te_desc_t *d)
{
    const json_t *o = json_object_get(root, "rdma_gen_words"), *keys;
    uint64_t addr, cnt;
    if (o == NULL)
        return 0;
    keys = json_is_object(o) ? json_object_get(o, "rkey") : NULL;
    if ((d->ndevices == 0) || (keys == NULL) || !json_is_array(keys) ||
        (json_array_size(keys) != d->ndevices) || (get_uint(o, "addr", INT64_MAX, &addr) != 0) ||
        (get_uint(o, "count", MC_TE_DESC_MAX_GEN_WORDS, &cnt) != 0) || (cnt == 0) ||
        (addr > (uint64_t)INT64_MAX - 8 * cnt)) {
        mc_set_error_detail("segment descriptor has an invalid \"rdma_gen_words\"");
        return -1;
    }
    for (size_t k = 0; k < d->ndevices; k++) {
        const json_t *kv = json_array_get(keys, k);
        if (!json_is_integer(kv) || (json_integer_value(kv) < 0) ||
            (json_integer_value(kv) > (json_int_t)UINT32_MAX)) {
            mc_set_error_detail("segment descriptor: \"rdma_gen_words\" rkey %zu is not a "
                                "32-bit integer", k);
            return -1;
        }
        d->gen_words.rkeys[k] = (uint32_t)json_integer_value(kv);
    }
    d->gen_words.addr   = addr;
    d->gen_words.nwords = (uint32_t)cnt;
    return 0;
}

/* A buffer's "rdma_gen_slot" (optional, only with "rdma_gen_words"): an
 * index below its count. */
static int desc_decode_gen_slot(const json_t *b, const mc_te_desc_t *d, mc_te_buf_desc_t *bd,
                                size_t i)
{
    uint64_t v;
    if (json_object_get(b, "rdma_gen_slot") == NULL)
        return 0;
    if ((d->gen_words.nwords == 0) ||
        (get_uint(b, "rdma_gen_slot", d->gen_words.nwords - 1u, &v) != 0)) {
        mc_set_error_detail("segment descriptor buffer %zu: invalid \"rdma_gen_slot\"", i);
        return -1;
    }
    bd->gen_slot     = (uint32_t)v;
    bd->has_gen_slot = 1;
    return 0;
}

/* A buffer's "rkey" (optional): exactly ndevices x (MRs of the buffer)
 * integers in 0..2^32-1, at most MC_TE_DESC_MAX_RKEYS. */
static int desc_decode_rkeys(const json_t *b, const mc_te_desc_t *d, mc_te_buf_desc_t *bd,
                             size_t i)
{
    const json_t *keys = json_object_get(b, "rkey");
    uint64_t nmr, want;
    errno = 0;
    if (keys == NULL)
        return 0;
    nmr  = (d->rdma_mr_size == 0) ? 1 : (bd->length + d->rdma_mr_size - 1) / d->rdma_mr_size;
    want = nmr * d->ndevices;
    if (!json_is_array(keys) || (d->ndevices == 0) || (want > MC_TE_DESC_MAX_RKEYS) ||
        (json_array_size(keys) != want)) {
        mc_set_error_detail("segment descriptor buffer %zu: \"rkey\" must list one key per "
                            "NIC and memory region (%llu)", i, (unsigned long long)want);
        return -1;
    }
    bd->rkeys = calloc((size_t)want, sizeof(*bd->rkeys));
    if (bd->rkeys == NULL) {
        errno = ENOMEM;
        mc_set_error_detail("out of memory");
        return -1;
    }
    for (size_t k = 0; k < want; k++) {
        const json_t *kv = json_array_get(keys, k);
        if (!json_is_integer(kv) || (json_integer_value(kv) < 0) ||
            (json_integer_value(kv) > (json_int_t)UINT32_MAX)) {
            mc_set_error_detail("segment descriptor buffer %zu: rkey %zu is not a 32-bit "
                                "integer", i, k);
            return -1;
        }
        bd->rkeys[k] = (uint32_t)json_integer_value(kv);
    }
    bd->nrkeys = (size_t)want;
    return 0;
}

static int hex_digit(char c)
{
    if ((c >= '0') && (c <= '9'))
        return c - '0';
    if ((c >= 'a') && (c <= 'f'))
        return c - 'a' + 10;
    if ((c >= 'A') && (c <= 'F'))
        return c - 'A' + 10;
    return -1;
}

/* "fabric" (optional): {"provider": 1..63 printable characters, "address":
 * 2..2*MC_TE_DESC_MAX_FABRIC_ADDR hex digits, "virt_addr": boolean}.
 * Returns 0, or -1 with the detail set. */
static int desc_decode_fabric(const json_t *root, mc_te_desc_t *d)
{
    const json_t *f = json_object_get(root, "fabric"), *prov, *addr, *virt;
    const char *ps, *as;
    size_t pl, al;
    if (f == NULL)
        return 0;
    prov = json_is_object(f) ? json_object_get(f, "provider") : NULL;
    addr = json_is_object(f) ? json_object_get(f, "address") : NULL;
    virt = json_is_object(f) ? json_object_get(f, "virt_addr") : NULL;
    ps   = json_is_string(prov) ? json_string_value(prov) : NULL;
    as   = json_is_string(addr) ? json_string_value(addr) : NULL;
    pl   = (ps != NULL) ? json_string_length(prov) : 0;
    al   = (as != NULL) ? json_string_length(addr) : 0;
    if ((ps == NULL) || (pl == 0) || (pl >= sizeof(d->fabric_provider)) ||
        (strlen(ps) != pl) || (as == NULL) || (al == 0) || (al % 2 != 0) ||
        (al > 2 * MC_TE_DESC_MAX_FABRIC_ADDR) || !json_is_boolean(virt)) {
        mc_set_error_detail("segment descriptor has an invalid \"fabric\" member");
        return -1;
    }
    for (size_t i = 0; i < pl; i++) {
        if ((ps[i] < 0x21) || (ps[i] > 0x7e)) {
            mc_set_error_detail("segment descriptor has an invalid fabric provider name");
            return -1;
        }
    }
    for (size_t i = 0; i < al / 2; i++) {
        int hi = hex_digit(as[2 * i]), lo = hex_digit(as[2 * i + 1]);
        if ((hi < 0) || (lo < 0)) {
            mc_set_error_detail("segment descriptor has a fabric address that is not hex");
            return -1;
        }
        d->fabric_addr[i] = (uint8_t)((hi << 4) | lo);
    }
    memcpy(d->fabric_provider, ps, pl + 1);
    d->fabric_addrlen   = al / 2;
    d->fabric_virt_addr = json_is_true(virt);
    return 0;
}

/* A buffer's "fabric_key" (optional, only with "fabric"): 1..16 hex
 * digits.  Returns 0, or -1 with the detail set. */
static int desc_decode_fabric_key(const json_t *b, const mc_te_desc_t *d, mc_te_buf_desc_t *bd,
                                  size_t i)
{
    const json_t *k = json_object_get(b, "fabric_key");
    const char *ks  = json_is_string(k) ? json_string_value(k) : NULL;
    size_t kl       = (ks != NULL) ? json_string_length(k) : 0;
    uint64_t v      = 0;
    if (k == NULL)
        return 0;
    if ((d->fabric_provider[0] == '\0') || (kl == 0) || (kl > 16)) {
        mc_set_error_detail("segment descriptor buffer %zu: invalid \"fabric_key\"", i);
        return -1;
    }
    for (size_t j = 0; j < kl; j++) {
        int x = hex_digit(ks[j]);
        if (x < 0) {
            mc_set_error_detail("segment descriptor buffer %zu: \"fabric_key\" is not hex", i);
            return -1;
        }
        v = (v << 4) | (uint64_t)x;
    }
    bd->fabric_key     = v;
    bd->has_fabric_key = 1;
    return 0;
}

mc_status_t mc_te_desc_decode(const char *json, size_t len, mc_te_desc_t *out)
{
    mc_te_desc_t d;
    json_error_t jerr;
    json_t *root, *v, *bufs;
    uint64_t port;
    size_t n;
    mc_status_t st = MC_DESERIALIZE_FAIL;

    mc_te_desc_init(&d);
    root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        mc_set_error_detail("segment descriptor is not JSON: %s (line %d)", jerr.text,
                            jerr.line);
        return MC_DESERIALIZE_FAIL;
    }
    if (!json_is_object(root)) {
        mc_set_error_detail("segment descriptor is not a JSON object");
        goto out;
    }
    v = json_object_get(root, "name");
    if ((v == NULL) || !json_is_string(v) || (json_string_length(v) == 0) ||
        (json_string_length(v) > 1024) || (strlen(json_string_value(v)) != json_string_length(v))) {
        mc_set_error_detail("segment descriptor has no valid \"name\"");
        goto out;
    }
    d.name = strdup(json_string_value(v));
    if (d.name == NULL) {
        st = MC_INTERNAL_ERROR;
        mc_set_error_detail("out of memory");
        goto out;
    }
    v = json_object_get(root, "protocol");
    if ((v == NULL) || !json_is_string(v) || (json_string_length(v) >= sizeof(d.protocol))) {
        mc_set_error_detail("segment descriptor has no valid \"protocol\"");
        goto out;
    }
    snprintf(d.protocol, sizeof(d.protocol), "%s", json_string_value(v));
    if ((get_uint(root, "tcp_data_port", 65535, &port) != 0) || (port == 0)) {
        mc_set_error_detail("segment descriptor has no valid \"tcp_data_port\"");
        goto out;
    }
    d.tcp_data_port = (uint16_t)port;
    /* optional (our extension): the same-host server, "@" + [A-Za-z0-9._-] */
    v = json_object_get(root, "shm_name");
    if (v != NULL) {
        const char *sn = json_is_string(v) ? json_string_value(v) : NULL;
        size_t sl      = (sn != NULL) ? json_string_length(v) : 0;
        int ok         = (sl >= 2) && (sl < sizeof(d.shm_name)) && (sn[0] == '@');
        for (size_t k = 1; ok && (k < sl); k++)
            ok = ((sn[k] >= 'a') && (sn[k] <= 'z')) || ((sn[k] >= 'A') && (sn[k] <= 'Z')) ||
                 ((sn[k] >= '0') && (sn[k] <= '9')) || (sn[k] == '.') || (sn[k] == '_') ||
                 (sn[k] == '-');
        if (!ok) {
            mc_set_error_detail("segment descriptor has an invalid \"shm_name\"");
            goto out;
        }
        memcpy(d.shm_name, sn, sl + 1);
    }
    /* optional (ours): the data port serves READV (docs/transfer.md §3.3) */
    v = json_object_get(root, "tcp_readv");
    if ((v != NULL) && !json_is_boolean(v)) {
        mc_set_error_detail("segment descriptor has a non-boolean \"tcp_readv\"");
        goto out;
    }
    d.tcp_readv = (v != NULL) && json_is_true(v);
    /* optional (ours): ... and READV_STRIDED */
    v = json_object_get(root, "tcp_readv_strided");
    if ((v != NULL) && !json_is_boolean(v)) {
        mc_set_error_detail("segment descriptor has a non-boolean \"tcp_readv_strided\"");
        goto out;
    }
    d.tcp_readv_strided = (v != NULL) && json_is_true(v);
    if ((desc_decode_devices(root, &d) != 0) || (desc_decode_fabric(root, &d) != 0) ||
        (desc_decode_gen_words(root, &d) != 0))
        goto out;
    bufs = json_object_get(root, "buffers");
    if ((bufs == NULL) || !json_is_array(bufs)) {
        mc_set_error_detail("segment descriptor has no \"buffers\" array");
        goto out;
    }
    n = json_array_size(bufs);
    if (n > MC_TE_DESC_MAX_BUFFERS) {
        mc_set_error_detail("segment descriptor lists %zu buffers (limit %u)", n,
                            MC_TE_DESC_MAX_BUFFERS);
        goto out;
    }
    if (n > 0) {
        d.buffers = calloc(n, sizeof(*d.buffers));
        if (d.buffers == NULL) {
            st = MC_INTERNAL_ERROR;
            mc_set_error_detail("out of memory");
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        json_t *b = json_array_get(bufs, i);
        mc_te_buf_desc_t *bd = &d.buffers[i];
        json_t *name;
        if (!json_is_object(b) || (get_uint(b, "addr", INT64_MAX, &bd->addr) != 0) ||
            (get_uint(b, "length", INT64_MAX, &bd->length) != 0) || (bd->length == 0) ||
            (bd->addr > UINT64_MAX - bd->length)) {
            mc_set_error_detail("segment descriptor buffer %zu is malformed", i);
            goto out;
        }
        name = json_object_get(b, "name");
        if ((name != NULL) && json_is_string(name))
            snprintf(bd->name, sizeof(bd->name), "%s", json_string_value(name));
        d.nbuffers++;
        if (desc_decode_rkeys(b, &d, bd, i) != 0) {
            if (errno == ENOMEM)
                st = MC_INTERNAL_ERROR;
            goto out;
        }
        if ((desc_decode_fabric_key(b, &d, bd, i) != 0) ||
            (desc_decode_gen_slot(b, &d, bd, i) != 0))
            goto out;
    }
    if (d.nbuffers > 1) /* qsort(NULL, 0, ...) is undefined */
        qsort(d.buffers, d.nbuffers, sizeof(*d.buffers), buf_cmp);
    for (size_t i = 1; i < d.nbuffers; i++) {
        if (d.buffers[i - 1].addr + d.buffers[i - 1].length > d.buffers[i].addr) {
            mc_set_error_detail("segment descriptor buffers overlap at 0x%llx",
                                (unsigned long long)d.buffers[i].addr);
            goto out;
        }
    }
    *out = d;
    mc_te_desc_init(&d);
    st = MC_OK;
out:
    mc_te_desc_cleanup(&d);
    json_decref(root);
    return st;
}

const mc_te_buf_desc_t *mc_te_desc_find(const mc_te_desc_t *d, uint64_t addr, uint64_t len)
{
    size_t lo = 0, hi = d->nbuffers;
    const mc_te_buf_desc_t *b;
    /* last buffer whose start is <= addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (d->buffers[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return NULL;
    b = &d->buffers[lo - 1];
    /* addr - b->addr cannot underflow; compare lengths, never end addresses */
    if ((addr - b->addr >= b->length) || (len > b->length - (addr - b->addr)))
        return NULL;
    return b;
}

int mc_te_desc_contains(const mc_te_desc_t *d, uint64_t addr, uint64_t len)
{
    return mc_te_desc_find(d, addr, len) != NULL;
}
