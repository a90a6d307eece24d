/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The read side of the store client against the real mooncake_master:
 * registration, get_into and its batch/scatter form, ranged reads, get and
 * put sessions, get_buffer handles and the mem pool.
 *
 * Each test starts its own mooncake_master on free loopback ports
 * ($MC_MASTER_BIN, else ./mooncake_master from the build directory, where
 * `make check` runs) and kills it in teardown.  Waits are polls with a
 * bounded deadline.  The last case forks a second client process that owns
 * the data, so its reads cross a real TCP transfer, and prints the batched
 * 4 KiB get rate.
 */
#include "config.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/store.h>

#include "check_suites.h"
#include "master_proc.h"
#include "common/util.h"
#include "store/read/read.h"
#include "store/store_internal.h"

static mc_test_master_t master;
static mc_store_h store;

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while ((nanosleep(&ts, &ts) != 0) && (errno == EINTR)) {
    }
}

static void master_start(unsigned lease_ms)
{
    char lease[48];
    const char *flags[] = {lease, NULL};

    snprintf(lease, sizeof(lease), "--default_kv_lease_ttl=%u", lease_ms);
    mc_test_master_start(&master, flags);
}

static void master_stop(void)
{
    mc_test_master_stop(&master);
}

static void fill_params(mc_store_params_t *p, uint64_t seg, uint64_t lbuf)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                    MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_LOCAL_BUFFER_SIZE |
                    MC_STORE_PARAM_MASTER_SERVER_ADDR;
    p->local_hostname      = "127.0.0.1";
    p->metadata_server     = "P2PHANDSHAKE";
    p->global_segment_size = seg;
    p->local_buffer_size   = lbuf;
    p->master_server_addr  = master.addr;
}

static void store_up(void)
{
    mc_store_params_t p;
    ck_assert_status_ok(mc_store_create(&store));
    fill_params(&p, 16u << 20, 4u << 20);
    ck_assert_status_ok(mc_store_setup(store, &p));
}

static void setup_default(void)
{
    master_start(5000);
    store_up();
}

static void setup_short_lease(void)
{
    master_start(300);
    store_up();
}

static void teardown_all(void)
{
    mc_store_destroy(store);
    store = NULL;
    master_stop();
}

static void pattern(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31u + seed);
}

static int all_bytes(const uint8_t *p, size_t n, uint8_t v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

static void put_pattern(const char *key, size_t n, unsigned seed)
{
    uint8_t *v = malloc(n);
    ck_assert_ptr_nonnull(v);
    pattern(v, n, seed);
    ck_assert_status_ok(mc_store_put(store, key, v, n, NULL));
    free(v);
}

/* ---- registration ----------------------------------------------------------- */

START_TEST(test_register_buffer)
{
    static uint8_t mem[3 * 4096];
    uint8_t *lb;

    ck_assert_status_eq(mc_store_register_buffer(store, NULL, 10), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_register_buffer(store, mem, 0), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_register_buffer(store, mem + 4096, 4096));
    /* overlaps on either side, and inside */
    ck_assert_status_eq(mc_store_register_buffer(store, mem, 4097), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_register_buffer(store, mem + 8191, 2), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_register_buffer(store, mem + 5000, 1), MC_INVALID_PARAMS);
    /* neighbours touching it are fine */
    ck_assert_status_ok(mc_store_register_buffer(store, mem, 4096));
    ck_assert_status_ok(mc_store_register_buffer(store, mem + 8192, 4096));

    ck_assert_int_eq(mc_store_mem_is_usable(store, mem + 4096, 4096), 1);
    ck_assert_int_eq(mc_store_mem_is_usable(store, mem + 4100, 4092), 1);
    /* spanning two regions is not inside ONE region */
    ck_assert_int_eq(mc_store_mem_is_usable(store, mem + 4000, 200), 0);
    ck_assert_int_eq(mc_store_mem_is_usable(store, mem + 4096, 4097), 0);
    ck_assert_int_eq(mc_store_mem_is_usable(store, mem + 4096, SIZE_MAX), 0);

    /* the local buffer counts as usable, and cannot be registered again */
    lb = store->rd->lbuf->base;
    ck_assert_int_eq(mc_store_mem_is_usable(store, lb + 100, 1000), 1);
    ck_assert_status_eq(mc_store_register_buffer(store, lb + 4096, 10), MC_INVALID_PARAMS);

    ck_assert_status_eq(mc_store_unregister_buffer(store, mem + 1), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_unregister_buffer(store, mem + 4096));
    ck_assert_status_eq(mc_store_unregister_buffer(store, mem + 4096), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_mem_is_usable(store, mem + 4096, 1), 0);
    ck_assert_status_ok(mc_store_unregister_buffer(store, mem));
    /* mem + 8192 stays registered: close must unregister it */
}
END_TEST

/* ---- get_into ------------------------------------------------------------------ */

START_TEST(test_get_into)
{
    static uint8_t reg[8192], unreg[8192];
    uint8_t want[3000];

    put_pattern("gi", sizeof(want), 7);
    pattern(want, sizeof(want), 7);
    ck_assert_status_ok(mc_store_register_buffer(store, reg, sizeof(reg)));

    memset(unreg, 0xAB, sizeof(unreg));
    ck_assert_int_eq(mc_store_get_into(store, "gi", unreg, sizeof(unreg)), MC_INVALID_PARAMS);
    ck_assert_msg(all_bytes(unreg, sizeof(unreg), 0xAB),
                  "an unregistered buffer should not be touched");
    /* the capacity must be registered too */
    ck_assert_int_eq(mc_store_get_into(store, "gi", reg + 8000, 3000), MC_INVALID_PARAMS);

    memset(reg, 0xCD, sizeof(reg));
    ck_assert_int_eq(mc_store_get_into(store, "gi", reg, 2999), MC_INVALID_PARAMS);
    ck_assert_msg(all_bytes(reg, sizeof(reg), 0xCD), "a too small buffer should not be touched");

    ck_assert_int_eq(mc_store_get_into(store, "gi", reg + 10, 5000), 3000);
    ck_assert_msg(memcmp(reg + 10, want, sizeof(want)) == 0, "get_into should read the value");
    ck_assert_int_eq(reg[9], 0xCD);
    ck_assert_int_eq(reg[3010], 0xCD);

    ck_assert_int_eq(mc_store_get_into(store, "missing", reg, 100), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(mc_store_get_into(store, "", reg, 100), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_batch_get_into_multi)
{
    static uint8_t reg[16384];
    uint8_t want[1000], want2[500];
    const char *keys[4] = {"m1", "m2", "missing", "m1"};
    mc_iov_t b0[3] = {{reg, 100}, {reg + 200, 200}, {reg + 1000, 1000}};
    mc_iov_t b1[2] = {{reg + 4000, 200}, {reg + 4300, 200}};
    mc_iov_t b2[1] = {{reg + 6000, 1000}};
    mc_iov_t b3[1] = {{reg + 8000, 1000}};
    const mc_iov_t *bufs[4] = {b0, b1, b2, b3};
    size_t counts[4] = {3, 2, 1, 1};
    int64_t res[4];

    put_pattern("m1", sizeof(want), 1);
    put_pattern("m2", sizeof(want2), 2);
    pattern(want, sizeof(want), 1);
    pattern(want2, sizeof(want2), 2);
    ck_assert_status_ok(mc_store_register_buffer(store, reg, sizeof(reg)));
    memset(reg, 0xEE, sizeof(reg));

    ck_assert_status_ok(mc_store_batch_get_into_multi(store, keys, bufs, counts, 0, res));
    ck_assert_status_eq(mc_store_batch_get_into_multi(store, keys, NULL, counts, 1, res),
                        MC_INVALID_PARAMS);
    {
        const mc_iov_t *nb[1] = {NULL};
        ck_assert_int_eq(mc_store_batch_get_into_multi(store, keys, nb, counts, 1, res),
                         MC_INVALID_PARAMS);
        ck_assert_int_eq(res[0], MC_INVALID_PARAMS);
    }
    ck_assert_int_ne(mc_store_batch_get_into_multi(store, keys, bufs, counts, 4, res), MC_OK);
    ck_assert_int_eq(res[0], 1000);
    ck_assert_int_eq(res[1], MC_INVALID_PARAMS); /* 400 bytes of buffers for 500 */
    ck_assert_int_eq(res[2], MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(res[3], 1000);
    /* scattered in order: 100 + 200 + 700 */
    ck_assert(memcmp(reg, want, 100) == 0);
    ck_assert(all_bytes(reg + 100, 100, 0xEE));
    ck_assert(memcmp(reg + 200, want + 100, 200) == 0);
    ck_assert(memcmp(reg + 1000, want + 300, 700) == 0);
    ck_assert(all_bytes(reg + 1700, 300, 0xEE));
    ck_assert_msg(all_bytes(reg + 4000, 600, 0xEE), "a too small key should not be touched");
    ck_assert(memcmp(reg + 8000, want, 1000) == 0);

    /* an unregistered buffer fails its key only */
    {
        static uint8_t unreg[1000];
        mc_iov_t u[1] = {{unreg, sizeof(unreg)}};
        const mc_iov_t *ub[2] = {u, b3};
        size_t uc[2] = {1, 1};
        const char *uk[2] = {"m1", "m1"};
        memset(unreg, 0x11, sizeof(unreg));
        ck_assert_int_eq(mc_store_batch_get_into_multi(store, uk, ub, uc, 2, res),
                         MC_INVALID_PARAMS);
        ck_assert_int_eq(res[0], MC_INVALID_PARAMS);
        ck_assert_int_eq(res[1], 1000);
        ck_assert(all_bytes(unreg, sizeof(unreg), 0x11));
    }
}
END_TEST

/* ---- ranges ----------------------------------------------------------------------- */

START_TEST(test_read_ranges)
{
    static uint8_t reg[4096];
    uint8_t a[4096], b[100];
    mc_store_range_t r[7];

    put_pattern("ra", sizeof(a), 3);
    put_pattern("rb", sizeof(b), 4);
    pattern(a, sizeof(a), 3);
    pattern(b, sizeof(b), 4);
    ck_assert_status_ok(mc_store_register_buffer(store, reg, sizeof(reg)));
    memset(reg, 0, sizeof(reg));
    memset(r, 0, sizeof(r));
    r[0] = (mc_store_range_t){"ra", reg, 0, 10, 100, 0};
    r[1] = (mc_store_range_t){"rb", reg, 200, 50, 50, 0};
    r[2] = (mc_store_range_t){"ra", reg + 4000, 50, 0, 50, 0};     /* dst overflow */
    r[3] = (mc_store_range_t){"rb", reg, 300, 60, 41, 0};          /* src overflow */
    r[4] = (mc_store_range_t){"nope", reg, 400, 0, 10, 0};         /* missing key */
    r[5] = (mc_store_range_t){"ra", reg + 1, UINT64_MAX, 0, 2, 0}; /* wrapping dst */
    r[6] = (mc_store_range_t){"ra", reg, 1000, 4000, 96, 0};
    ck_assert_int_ne(mc_store_read_ranges(store, r, 7), MC_OK);
    ck_assert_int_eq(r[0].result, 100);
    ck_assert_int_eq(r[1].result, 50);
    ck_assert_int_eq(r[2].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[3].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[4].result, MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(r[5].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[6].result, 96);
    ck_assert(memcmp(reg, a + 10, 100) == 0);
    ck_assert(memcmp(reg + 200, b + 50, 50) == 0);
    ck_assert(all_bytes(reg + 300, 100, 0));
    ck_assert(all_bytes(reg + 400, 10, 0));
    ck_assert(memcmp(reg + 1000, a + 4000, 96) == 0);
    ck_assert(all_bytes(reg + 4000, 96, 0));
    ck_assert_status_ok(mc_store_read_ranges(store, r, 0));

    /* hostile fragments fail alone */
    r[0] = (mc_store_range_t){NULL, reg, 0, 0, 10, 0};
    r[1] = (mc_store_range_t){"ra", NULL, 0, 0, 10, 0};
    r[2] = (mc_store_range_t){"ra", reg, 0, UINT64_MAX, 2, 0};
    r[3] = (mc_store_range_t){"ra", reg, 0, 0, UINT64_MAX, 0};
    r[4] = (mc_store_range_t){"ra", reg, 20, 0, 0, 0};
    ck_assert_int_eq(mc_store_read_ranges(store, r, 5), MC_INVALID_PARAMS);
    ck_assert_int_eq(r[0].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[1].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[2].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[3].result, MC_INVALID_PARAMS);
    ck_assert_int_eq(r[4].result, 0);
    ck_assert_int_eq(mc_store_read_ranges(store, NULL, 1), MC_INVALID_PARAMS);
}
END_TEST

/*
 * Many ranges: rows of two objects interleaved (runs of one key split by
 * the other's), rows of 1 byte to 4 KiB + 5 at odd destination offsets,
 * ranges at both edges of each object, zero-length ranges, and ranges
 * refused among them (past the object's end, past the registered buffer):
 * each refused one writes nothing, the others all arrive.
 */
START_TEST(test_read_ranges_many)
{
    enum { N = 3000, OBJ = 64 * 1024 };
    static const uint64_t lens[] = {1, 300, 1024, 4096 + 5, 0, 64};
    static uint8_t reg[4 * 1024 * 1024];
    uint8_t *a = malloc(OBJ), *b = malloc(OBJ);
    mc_store_range_t *r = calloc(N, sizeof(*r));
    uint64_t at = 0;
    size_t nbad = 0;

    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(r);
    put_pattern("ma", OBJ, 5);
    put_pattern("mb", OBJ, 6);
    pattern(a, OBJ, 5);
    pattern(b, OBJ, 6);
    ck_assert_status_ok(mc_store_register_buffer(store, reg, sizeof(reg)));
    memset(reg, 0xee, sizeof(reg));
    for (size_t i = 0; i < N; i++) {
        uint64_t len = lens[i % MC_ARRAY_SIZE(lens)];
        uint64_t src = (i * 977u) % (OBJ - len + 1);
        if (i % 500 == 1)
            src = 0; /* the object's first byte */
        if (i % 500 == 2)
            src = OBJ - len; /* its last */
        r[i] = (mc_store_range_t){((i / 40) % 3 == 1) ? "mb" : "ma", reg, at + (i % 5), src, len,
                                  0};
        at += len + 8;
    }
    ck_assert_uint_lt(at + 8, sizeof(reg) - 8192);
    /* refused: one byte past the object's end, a range leaving the buffer */
    r[777].src_offset = OBJ - r[777].length + 1;
    r[1234]           = (mc_store_range_t){"ma", reg, sizeof(reg) - 100, 0, 101, 0};
    nbad              = 2;
    ck_assert_int_eq(mc_store_read_ranges(store, r, N), MC_INVALID_PARAMS);
    for (size_t i = 0; i < N; i++) {
        const uint8_t *want = (strcmp(r[i].key, "mb") == 0) ? b : a;
        const uint8_t *got  = reg + r[i].dst_offset;
        if ((i == 777) || (i == 1234)) {
            ck_assert_int_eq(r[i].result, MC_INVALID_PARAMS);
            ck_assert_msg(all_bytes(got, r[i].dst_offset + r[i].length <= sizeof(reg)
                                             ? r[i].length : sizeof(reg) - r[i].dst_offset,
                                    0xee),
                          "refused range %zu wrote", i);
            nbad--;
            continue;
        }
        ck_assert_int_eq(r[i].result, (int64_t)r[i].length);
        ck_assert_msg(memcmp(got, want + r[i].src_offset, r[i].length) == 0, "range %zu", i);
        ck_assert_msg(got[r[i].length] == 0xee, "range %zu wrote past its end", i);
    }
    ck_assert_uint_eq(nbad, 0);
    ck_assert_status_ok(mc_store_unregister_buffer(store, reg));
    free(r);
    free(a);
    free(b);
}
END_TEST

/* ---- sessions ---------------------------------------------------------------------- */

START_TEST(test_sessions_roundtrip)
{
    enum { PAGE = 1024, LAYERS = 4 };
    static uint8_t src[LAYERS][PAGE], dst[LAYERS][PAGE];
    const char *keys[2] = {"s0", "s1"};
    uint64_t sizes[2] = {PAGE * LAYERS, PAGE * LAYERS};
    mc_status_t sts[2];
    int64_t res[2];

    for (int l = 0; l < LAYERS; l++) {
        memset(src[l], 'a' + l, PAGE);
        ck_assert_status_ok(mc_store_register_buffer(store, src[l], PAGE));
        ck_assert_status_ok(mc_store_register_buffer(store, dst[l], PAGE));
    }
    ck_assert_status_ok(mc_store_put_session_start(store, keys, sizes, 2, NULL, sts));
    ck_assert_int_eq(sts[0], MC_OK);
    ck_assert_int_eq(sts[1], MC_OK);
    /* a key with a session already is skipped, not an error */
    ck_assert_status_ok(mc_store_put_session_start(store, keys, sizes, 1, NULL, sts));
    for (int l = 0; l < LAYERS; l++) {
        mc_iov_t iov[1] = {{src[l], PAGE}};
        const mc_iov_t *bufs[2] = {iov, iov};
        uint64_t off[1] = {(uint64_t)l * PAGE};
        const uint64_t *offs[2] = {off, off};
        size_t counts[2] = {1, 1};
        ck_assert_status_ok(mc_store_put_session_write(store, keys, bufs, offs, counts, 2, res));
        ck_assert_int_eq(res[0], PAGE);
        ck_assert_int_eq(res[1], PAGE);
    }
    {
        /* past the reserved size */
        mc_iov_t iov[1] = {{src[0], PAGE}};
        const mc_iov_t *bufs[1] = {iov};
        uint64_t off[1] = {PAGE * LAYERS - 1};
        const uint64_t *offs[1] = {off};
        size_t counts[1] = {1};
        ck_assert_int_eq(mc_store_put_session_write(store, keys, bufs, offs, counts, 1, res),
                         MC_INVALID_PARAMS);
        ck_assert_int_eq(res[0], MC_INVALID_PARAMS);
    }
    /* not readable before the end */
    ck_assert_int_eq(mc_store_exist(store, "s0"), 0);
    ck_assert_status_ok(mc_store_put_session_end(store, keys, 2, sts));
    ck_assert_int_eq(mc_store_exist(store, "s0"), 1);
    {
        /* write after end, end twice */
        mc_iov_t iov[1] = {{src[0], PAGE}};
        const mc_iov_t *bufs[1] = {iov};
        uint64_t off[1] = {0};
        const uint64_t *offs[1] = {off};
        size_t counts[1] = {1};
        ck_assert_int_eq(mc_store_put_session_write(store, keys, bufs, offs, counts, 1, res),
                         MC_INVALID_PARAMS);
        ck_assert_int_eq(mc_store_put_session_end(store, keys, 1, sts), MC_INVALID_PARAMS);
    }

    ck_assert_status_ok(mc_store_get_session_start(store, keys, 2, sts));
    for (int l = LAYERS - 1; l >= 0; l--) {
        mc_iov_t iov0[1] = {{dst[l], PAGE / 2}};
        mc_iov_t iov1[2] = {{dst[l] + PAGE / 2, PAGE / 4}, {dst[l] + 3 * PAGE / 4, PAGE / 4}};
        const mc_iov_t *bufs[2] = {iov0, iov1};
        uint64_t off0[1] = {(uint64_t)l * PAGE};
        uint64_t off1[2] = {(uint64_t)l * PAGE + PAGE / 2, (uint64_t)l * PAGE + 3 * PAGE / 4};
        const uint64_t *offs[2] = {off0, off1};
        size_t counts[2] = {1, 2};
        ck_assert_status_ok(mc_store_get_session_read(store, keys, bufs, offs, counts, 2, res));
        ck_assert_int_eq(res[0], PAGE / 2);
        ck_assert_int_eq(res[1], PAGE / 2);
        ck_assert_msg(all_bytes(dst[l], PAGE, (uint8_t)('a' + l)),
                      "layer %d should read back what was written", l);
    }
    {
        /* source range past the object */
        mc_iov_t iov[1] = {{dst[0], 2}};
        const mc_iov_t *bufs[1] = {iov};
        uint64_t off[1] = {PAGE * LAYERS - 1};
        const uint64_t *offs[1] = {off};
        size_t counts[1] = {1};
        ck_assert_int_eq(mc_store_get_session_read(store, keys, bufs, offs, counts, 1, res),
                         MC_INVALID_PARAMS);
        ck_assert_status_ok(mc_store_get_session_end(store, keys, 2));
        ck_assert_status_ok(mc_store_get_session_end(store, keys, 2)); /* unknown: ignored */
        off[0] = 0;
        ck_assert_int_eq(mc_store_get_session_read(store, keys, bufs, offs, counts, 1, res),
                         MC_INVALID_PARAMS);
    }
    /* an existing key cannot get a put session */
    ck_assert_int_eq(mc_store_put_session_start(store, keys, sizes, 1, NULL, sts),
                     MC_OBJECT_ALREADY_EXISTS);
}
END_TEST

START_TEST(test_put_session_revoke)
{
    const char *keys[2] = {"rv", "never"};
    uint64_t sizes[1] = {4096};
    mc_status_t sts[2];

    ck_assert_status_ok(mc_store_put_session_start(store, keys, sizes, 1, NULL, sts));
    ck_assert_int_eq(mc_store_put_session_revoke(store, keys, 2, sts), MC_INVALID_PARAMS);
    ck_assert_int_eq(sts[0], MC_OK);
    ck_assert_int_eq(sts[1], MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_exist(store, "rv"), 0);
    /* revoked: the key is free for a new put at once */
    put_pattern("rv", 100, 9);
    ck_assert_int_eq(mc_store_exist(store, "rv"), 1);
    /* a put session left open is revoked by close: another client can
     * reserve the key at once */
    keys[0] = "open";
    {
        /* no segment of its own: the reservation lives in `store`'s */
        mc_store_h c = NULL;
        mc_store_params_t p;
        ck_assert_status_ok(mc_store_create(&c));
        fill_params(&p, 0, 1u << 20);
        ck_assert_status_ok(mc_store_setup(c, &p));
        ck_assert_status_ok(mc_store_put_session_start(c, keys, sizes, 1, NULL, sts));
        ck_assert_int_eq(mc_store_put_session_start(store, keys, sizes, 1, NULL, sts),
                         MC_OBJECT_ALREADY_EXISTS);
        mc_store_destroy(c);
    }
    ck_assert_status_ok(mc_store_put_session_start(store, keys, sizes, 1, NULL, sts));
    ck_assert_status_ok(mc_store_put_session_revoke(store, keys, 1, sts));
}
END_TEST

START_TEST(test_get_session_lease_expiry)
{
    static uint8_t reg[256];
    const char *keys[1] = {"lk"};
    mc_status_t sts[1];
    int64_t res[1];
    mc_iov_t iov[1] = {{reg, 100}};
    const mc_iov_t *bufs[1] = {iov};
    uint64_t off[1] = {0};
    const uint64_t *offs[1] = {off};
    size_t counts[1] = {1};

    put_pattern("lk", 100, 5);
    ck_assert_status_ok(mc_store_register_buffer(store, reg, sizeof(reg)));
    ck_assert_status_ok(mc_store_get_session_start(store, keys, 1, sts));
    ck_assert_status_ok(mc_store_get_session_read(store, keys, bufs, offs, counts, 1, res));
    ck_assert_int_eq(res[0], 100);
    sleep_ms(450); /* past the 300 ms lease */
    memset(reg, 0x77, sizeof(reg));
    ck_assert_int_eq(mc_store_get_session_read(store, keys, bufs, offs, counts, 1, res),
                     MC_LEASE_EXPIRED);
    ck_assert_int_eq(res[0], MC_LEASE_EXPIRED);
    ck_assert_msg(all_bytes(reg, sizeof(reg), 0x77), "an expired lease should move no byte");
    /* a new start renews it */
    ck_assert_status_ok(mc_store_get_session_start(store, keys, 1, sts));
    ck_assert_status_ok(mc_store_get_session_read(store, keys, bufs, offs, counts, 1, res));
    ck_assert_int_eq(res[0], 100);
}
END_TEST

/* Writers keep writing while another thread ends the session. */
#define CW_SIZE (64 * 1024)
static uint8_t cw_src[CW_SIZE];
static volatile int cw_stop;
static int cw_bad;
static unsigned long cw_writes;
static pthread_mutex_t cw_mu = PTHREAD_MUTEX_INITIALIZER;

static void *cw_writer(void *arg)
{
    const char *keys[1] = {"cw"};
    mc_iov_t iov[1] = {{cw_src, CW_SIZE}};
    const mc_iov_t *bufs[1] = {iov};
    uint64_t off[1] = {0};
    const uint64_t *offs[1] = {off};
    size_t counts[1] = {1};
    int64_t res[1];

    (void)arg;
    while (!cw_stop) {
        mc_store_put_session_write(store, keys, bufs, offs, counts, 1, res);
        pthread_mutex_lock(&cw_mu);
        if (res[0] == CW_SIZE)
            cw_writes++;
        else if (res[0] != MC_INVALID_PARAMS)
            cw_bad++;
        pthread_mutex_unlock(&cw_mu);
        if (res[0] == MC_INVALID_PARAMS)
            break; /* sealed */
    }
    return NULL;
}

START_TEST(test_put_session_end_races_writes)
{
    const char *keys[1] = {"cw"};
    uint64_t sizes[1] = {CW_SIZE};
    mc_status_t sts[1];
    pthread_t th[3];
    uint64_t deadline;
    uint8_t *got = malloc(CW_SIZE);
    uint64_t size = 0;
    unsigned long w;

    ck_assert_ptr_nonnull(got);
    pattern(cw_src, CW_SIZE, 21);
    ck_assert_status_ok(mc_store_register_buffer(store, cw_src, CW_SIZE));
    ck_assert_status_ok(mc_store_put_session_start(store, keys, sizes, 1, NULL, sts));
    cw_stop = 0;
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, cw_writer, NULL), 0);
    deadline = mc_now_ms() + 10000;
    do {
        pthread_mutex_lock(&cw_mu);
        w = cw_writes;
        pthread_mutex_unlock(&cw_mu);
        ck_assert_msg(mc_now_ms() < deadline, "writers should make progress");
        if (w < 20)
            sleep_ms(1);
    } while (w < 20);
    ck_assert_status_ok(mc_store_put_session_end(store, keys, 1, sts));
    cw_stop = 1;
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    ck_assert_int_eq(cw_bad, 0);
    ck_assert_status_ok(mc_store_get(store, "cw", got, CW_SIZE, &size));
    ck_assert_uint_eq(size, CW_SIZE);
    ck_assert(memcmp(got, cw_src, CW_SIZE) == 0);
    free(got);
}
END_TEST

/* ---- buffers owned by the store ------------------------------------------------ */

START_TEST(test_get_buffer)
{
    uint8_t want[5000];
    mc_store_buffer_h b = NULL, bs[3];
    mc_status_t sts[3];
    const char *keys[3] = {"gb", "missing", "gb2"};

    put_pattern("gb", sizeof(want), 11);
    put_pattern("gb2", 10, 12);
    pattern(want, sizeof(want), 11);
    ck_assert_status_eq(mc_store_get_buffer(store, "missing", &b), MC_OBJECT_NOT_FOUND);
    ck_assert_ptr_null(b);
    ck_assert_status_ok(mc_store_get_buffer(store, "gb", &b));
    ck_assert_uint_eq(mc_store_buffer_size(b), sizeof(want));
    ck_assert(memcmp(mc_store_buffer_data(b), want, sizeof(want)) == 0);
    ck_assert_int_eq(mc_store_mem_is_usable(store, mc_store_buffer_data(b), sizeof(want)), 1);

    ck_assert_status_eq(mc_store_batch_get_buffer(store, keys, 3, bs, sts), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(sts[0], MC_OK);
    ck_assert_int_eq(sts[1], MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(sts[2], MC_OK);
    ck_assert_ptr_null(bs[1]);
    ck_assert(memcmp(mc_store_buffer_data(bs[0]), want, sizeof(want)) == 0);
    ck_assert_uint_eq(mc_store_buffer_size(bs[2]), 10);
    mc_store_buffer_release(bs[2]);

    /* handles survive close and destroy */
    ck_assert_status_ok(mc_store_close(store));
    ck_assert(memcmp(mc_store_buffer_data(b), want, sizeof(want)) == 0);
    mc_store_destroy(store);
    store = NULL;
    ck_assert(memcmp(mc_store_buffer_data(bs[0]), want, sizeof(want)) == 0);
    mc_store_buffer_release(b);
    ck_assert(memcmp(mc_store_buffer_data(bs[0]), want, sizeof(want)) == 0);
    mc_store_buffer_release(bs[0]);
    mc_store_buffer_release(NULL);
}
END_TEST

START_TEST(test_mem_pool)
{
    void *p[8], *q = NULL;
    size_t n = 0;
    int64_t got;

    ck_assert_status_eq(mc_store_mem_pool_alloc(store, 0, &q), MC_INVALID_PARAMS);
    ck_assert_status_ok(mc_store_mem_pool_alloc(store, 1000, &q));
    put_pattern("mp", 1000, 13);
    ck_assert_int_eq(mc_store_get_into(store, "mp", q, 1000), 1000);
    ck_assert_status_ok(mc_store_mem_pool_free(store, q));
    ck_assert_status_eq(mc_store_mem_pool_free(store, q), MC_INVALID_PARAMS);
    ck_assert_status_eq(mc_store_mem_pool_free(store, &n), MC_INVALID_PARAMS);

    /* 4 MiB local buffer: 1 MiB blocks run out */
    while (n < 8) {
        mc_status_t st = mc_store_mem_pool_alloc(store, 1u << 20, &p[n]);
        if (st != MC_OK) {
            ck_assert_status_eq(st, MC_NO_AVAILABLE_HANDLE);
            break;
        }
        n++;
    }
    ck_assert_msg((n >= 3) && (n <= 4), "a 4 MiB pool should hold 3 or 4 MiB blocks, got %zu", n);
    got = mc_store_get_into(store, "mp", p[0], 1u << 20);
    ck_assert_int_eq(got, 1000);
    for (size_t i = 0; i < n; i++)
        ck_assert_status_ok(mc_store_mem_pool_free(store, p[i]));
    ck_assert_status_ok(mc_store_mem_pool_alloc(store, 3u << 20, &q));
    /* left allocated: close gives it back */
}
END_TEST

START_TEST(test_closed_store)
{
    static uint8_t reg[64];
    const char *keys[1] = {"x"};
    mc_status_t sts[1];
    mc_store_buffer_h b = NULL;
    void *p = NULL;

    ck_assert_status_ok(mc_store_close(store));
    ck_assert_status_eq(mc_store_register_buffer(store, reg, 64), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_int_eq(mc_store_get_into(store, "x", reg, 64), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_get_session_start(store, keys, 1, sts),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_put_session_end(store, keys, 1, sts),
                        MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_get_buffer(store, "x", &b), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_eq(mc_store_mem_pool_alloc(store, 10, &p), MC_UNAVAILABLE_IN_CURRENT_STATUS);
}
END_TEST

/* ---- a second process owns the data: batched 4 KiB gets ---------------------------- */

#define PERF_KEYS 1024
#define PERF_BATCH 32
#define PERF_SIZE 4096

static void perf_owner(int ready_fd, int done_fd)
{
    mc_store_h s = NULL;
    mc_store_params_t p;
    static uint8_t v[PERF_SIZE];
    char key[32];
    char c = 'R';

    if (mc_store_create(&s) != MC_OK)
        _exit(2);
    fill_params(&p, 64u << 20, 1u << 20);
    if (mc_store_setup(s, &p) != MC_OK)
        _exit(3);
    for (int i = 0; i < PERF_KEYS; i++) {
        snprintf(key, sizeof(key), "perf-%d", i);
        pattern(v, sizeof(v), (unsigned)i);
        if (mc_store_put(s, key, v, sizeof(v), NULL) != MC_OK)
            _exit(4);
    }
    if (write(ready_fd, &c, 1) != 1)
        _exit(5);
    while ((read(done_fd, &c, 1) < 0) && (errno == EINTR)) {
    }
    mc_store_destroy(s);
    _exit(0);
}

START_TEST(test_batched_get_rate)
{
    int ready[2], done[2], wst;
    pid_t owner;
    char c;
    mc_store_params_t p;
    void *mem = NULL;
    char keybuf[PERF_KEYS][32];
    const char *keys[PERF_KEYS];
    mc_iov_t iovs[PERF_KEYS];
    const mc_iov_t *bufs[PERF_KEYS];
    size_t counts[PERF_KEYS];
    int64_t res[PERF_BATCH];
    uint64_t t0, dt, nkeys = 0;
    uint8_t want[PERF_SIZE];

    ck_assert(pipe(ready) == 0 && pipe(done) == 0);
    owner = fork();
    ck_assert(owner >= 0);
    if (owner == 0) {
        close(ready[0]);
        close(done[1]);
        perf_owner(ready[1], done[0]);
    }
    close(ready[1]);
    close(done[0]);
    ck_assert_msg(read(ready[0], &c, 1) == 1, "the owner process should store its keys");

    /* no segment of our own: every byte crosses the TCP transport */
    ck_assert_status_ok(mc_store_create(&store));
    fill_params(&p, 0, (uint64_t)PERF_KEYS * PERF_SIZE + (1u << 20));
    ck_assert_status_ok(mc_store_setup(store, &p));
    for (int i = 0; i < PERF_KEYS; i++) {
        snprintf(keybuf[i], sizeof(keybuf[i]), "perf-%d", i);
        keys[i] = keybuf[i];
        counts[i] = 1;
        bufs[i] = &iovs[i];
    }
    ck_assert_status_ok(mc_store_mem_pool_alloc(store, (size_t)PERF_KEYS * PERF_SIZE, &mem));
    for (int i = 0; i < PERF_KEYS; i++)
        iovs[i] = (mc_iov_t){(uint8_t *)mem + (size_t)i * PERF_SIZE, PERF_SIZE};

    /* warm up connections, then measure */
    ck_assert_status_ok(mc_store_batch_get_into_multi(store, keys, bufs, counts, PERF_BATCH, res));
    t0 = mc_now_ns();
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < PERF_KEYS; i += PERF_BATCH) {
            ck_assert_status_ok(mc_store_batch_get_into_multi(store, &keys[i], &bufs[i],
                                                              &counts[i], PERF_BATCH, res));
            nkeys += PERF_BATCH;
        }
    }
    dt = mc_now_ns() - t0;
    if (getenv("MC_PERF_SPLIT") != NULL) {
        mc_store_query_h qq[PERF_BATCH];
        mc_status_t qs[PERF_BATCH];
        void *dsts[PERF_BATCH];
        uint64_t tq = 0, tr = 0, t1;
        for (int i = 0; i < PERF_KEYS; i += PERF_BATCH) {
            t1 = mc_now_ns();
            mc_store_batch_query(store, &keys[i], PERF_BATCH, qq, qs);
            tq += mc_now_ns() - t1;
            for (int j = 0; j < PERF_BATCH; j++)
                dsts[j] = (void *)(uintptr_t)iovs[i + j].base;
            t1 = mc_now_ns();
            mc_store_batch_query_read(store, qq, PERF_BATCH, dsts, qs);
            tr += mc_now_ns() - t1;
            for (int j = 0; j < PERF_BATCH; j++)
                mc_store_query_release(qq[j]);
        }
        fprintf(stderr, "per batch: lookup %.1f us, read %.1f us\n",
                (double)tq / 1e3 / (PERF_KEYS / PERF_BATCH), (double)tr / 1e3 / (PERF_KEYS / PERF_BATCH));
    }
    for (int i = 0; i < PERF_KEYS; i += 97) {
        pattern(want, sizeof(want), (unsigned)i);
        ck_assert_msg(memcmp((uint8_t *)mem + (size_t)i * PERF_SIZE, want, PERF_SIZE) == 0,
                      "key %d should read back", i);
    }
    fprintf(stderr, "store_read: batched 4 KiB gets, batch %d, other process: %.0f keys/s\n",
            PERF_BATCH, (double)nkeys * 1e9 / (double)dt);

    mc_store_destroy(store);
    store = NULL;
    close(done[1]);
    close(ready[0]);
    ck_assert(waitpid(owner, &wst, 0) == owner);
    ck_assert_msg(WIFEXITED(wst) && (WEXITSTATUS(wst) == 0), "the owner process should exit 0");
}
END_TEST

static void setup_master_only(void)
{
    master_start(5000);
}

Suite *mc_test_store_read_suite(void)
{
    Suite *s = suite_create("store_read");
    TCase *tc;

    tc = tcase_create("zero_copy");
    tcase_add_checked_fixture(tc, setup_default, teardown_all);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_register_buffer);
    tcase_add_test(tc, test_get_into);
    tcase_add_test(tc, test_batch_get_into_multi);
    tcase_add_test(tc, test_read_ranges);
    tcase_add_test(tc, test_read_ranges_many);
    tcase_add_test(tc, test_sessions_roundtrip);
    tcase_add_test(tc, test_put_session_revoke);
    tcase_add_test(tc, test_put_session_end_races_writes);
    tcase_add_test(tc, test_get_buffer);
    tcase_add_test(tc, test_mem_pool);
    tcase_add_test(tc, test_closed_store);
    suite_add_tcase(s, tc);

    tc = tcase_create("lease");
    tcase_add_checked_fixture(tc, setup_short_lease, teardown_all);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_get_session_lease_expiry);
    suite_add_tcase(s, tc);

    tc = tcase_create("two_processes");
    tcase_add_checked_fixture(tc, setup_master_only, teardown_all);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_batched_get_rate);
    suite_add_tcase(s, tc);
    return s;
}
