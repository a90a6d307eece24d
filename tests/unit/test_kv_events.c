/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The pure half of the KV event publisher (mooncake-master/events/msgpack.c and
 * kv_event_codec.c): the MessagePack encoder read back by its own reader,
 * the key -> seq_hash rule, the batch encoding's keys and types, and the
 * bounded queue that drops the oldest and counts the gap.  These run
 * whether or not the build has libzmq (the publisher thread itself is
 * tested against a real subscriber in tests/python/test_kv_events.py).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_suites.h"
#include "../../mooncake-master/flags.h"
#include "../../mooncake-master/events/kv_events.h"
#include "../../mooncake-master/events/msgpack.h"

/* Read the next token of @p b at *@p off, which must be of @p type. */
static mc_mp_token_t next(const mc_mp_buf_t *b, size_t *off, mc_mp_type_t type)
{
    mc_mp_token_t t;
    ck_assert_msg(mc_mp_read(b->data, b->len, off, &t) == 0, "a token is readable at %zu",
                  *off);
    ck_assert_msg(t.type == type, "token at %zu is of type %d, not %d", *off, t.type, type);
    return t;
}

static void next_str(const mc_mp_buf_t *b, size_t *off, const char *want)
{
    mc_mp_token_t t = next(b, off, MC_MP_STR);
    ck_assert_msg((t.n == strlen(want)) && (memcmp(t.str, want, t.n) == 0),
                  "string '%.*s' should be '%s'", (int)t.n, t.str, want);
}

START_TEST(test_msgpack_integers_take_their_smallest_form)
{
    static const struct {
        int64_t v;
        int sign;      /* 1: mc_mp_int */
        size_t bytes;  /* encoded size */
        uint8_t tag;
    } cases[] = {
        {0, 0, 1, 0x00},          {127, 0, 1, 0x7f},       {128, 0, 2, 0xcc},
        {255, 0, 2, 0xcc},        {256, 0, 3, 0xcd},       {65536, 0, 5, 0xce},
        {-1, 1, 1, 0xff},         {-32, 1, 1, 0xe0},       {-33, 1, 2, 0xd0},
        {-129, 1, 3, 0xd1},       {-32769, 1, 5, 0xd2},    {INT64_MIN, 1, 9, 0xd3},
        {5, 1, 1, 0x05},
    };
    mc_mp_buf_t b;

    mc_mp_init(&b);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t off = 0;
        mc_mp_token_t t;
        mc_mp_reset(&b);
        if (cases[i].sign)
            mc_mp_int(&b, cases[i].v);
        else
            mc_mp_uint(&b, (uint64_t)cases[i].v);
        ck_assert_msg(b.len == cases[i].bytes, "%lld takes %zu bytes, not %zu",
                      (long long)cases[i].v, b.len, cases[i].bytes);
        ck_assert_uint_eq(b.data[0], cases[i].tag);
        ck_assert_int_eq(mc_mp_read(b.data, b.len, &off, &t), 0);
        if (cases[i].v < 0)
            ck_assert_msg(t.type == MC_MP_INT && t.i == cases[i].v, "%lld reads back",
                          (long long)cases[i].v);
        else
            ck_assert_msg(t.type == MC_MP_UINT && t.u == (uint64_t)cases[i].v, "%lld reads back",
                          (long long)cases[i].v);
        ck_assert_uint_eq(off, b.len);
    }
    mc_mp_reset(&b);
    mc_mp_uint(&b, UINT64_MAX);
    ck_assert_uint_eq(b.len, 9);
    ck_assert_uint_eq(b.data[0], 0xcf);
    /* a truncated token is refused, the offset stays */
    {
        size_t off = 0;
        mc_mp_token_t t;
        ck_assert_int_eq(mc_mp_read(b.data, 5, &off, &t), -1);
        ck_assert_uint_eq(off, 0);
    }
    mc_mp_cleanup(&b);
}
END_TEST

START_TEST(test_msgpack_strings_and_containers)
{
    char big[70000];
    mc_mp_buf_t b;
    size_t off = 0;
    mc_mp_token_t t;

    memset(big, 'k', sizeof(big));
    mc_mp_init(&b);
    mc_mp_map(&b, 2);
    mc_mp_cstr(&b, "a");
    mc_mp_array(&b, 20);
    for (int i = 0; i < 20; i++)
        mc_mp_bool(&b, i & 1);
    mc_mp_str(&b, big, 31);
    mc_mp_str(&b, big, sizeof(big));
    ck_assert(!mc_mp_failed(&b));
    ck_assert_uint_eq(next(&b, &off, MC_MP_MAP).n, 2);
    next_str(&b, &off, "a");
    ck_assert_uint_eq(next(&b, &off, MC_MP_ARRAY).n, 20);
    ck_assert_uint_eq(b.data[off - 3], 0xdc); /* array16 past 15 */
    for (int i = 0; i < 20; i++)
        ck_assert_uint_eq(next(&b, &off, MC_MP_BOOL).u, (uint64_t)(i & 1));
    t = next(&b, &off, MC_MP_STR);
    ck_assert_uint_eq(t.n, 31);
    t = next(&b, &off, MC_MP_STR);
    ck_assert_uint_eq(t.n, sizeof(big));
    ck_assert(memcmp(t.str, big, sizeof(big)) == 0);
    ck_assert_uint_eq(off, b.len);
    mc_mp_cleanup(&b);
}
END_TEST

START_TEST(test_seq_hash_rules)
{
    static const struct {
        const char *key;
        int ok;
        uint64_t h;
    } cases[] = {
        {"0", 1, 0},
        {"000123", 1, 123},
        {"18446744073709551615", 1, UINT64_MAX},
        {"18446744073709551616", 0, 0},      /* overflow */
        {"0x1F", 1, 31},
        {"0XdeadBEEF", 1, 0xdeadbeef},
        {"0xffffffffffffffff", 1, UINT64_MAX},
        {"0x10000000000000000", 0, 0},
        {"0x", 0, 0},                         /* nothing after the prefix */
        {"123abc", 0, 0},                     /* partial */
        {"", 0, 0},
        {"abc", 0, 0},
        {" 42", 1, 42},                       /* strtoull's leading blanks */
        {"+7", 1, 7},
        {"-1", 1, UINT64_MAX},                /* strtoull negates */
        {"42 ", 0, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t h = 0;
        int ok = mc_kv_event_seq_hash(cases[i].key, strlen(cases[i].key), &h);
        ck_assert_msg(ok == cases[i].ok, "'%s' parses: %d, expected %d", cases[i].key, ok,
                      cases[i].ok);
        if (ok)
            ck_assert_msg(h == cases[i].h, "'%s' is %llu", cases[i].key, (unsigned long long)h);
    }
    /* a NUL inside the key is no number */
    {
        uint64_t h;
        ck_assert_int_eq(mc_kv_event_seq_hash("12\0" "3", 4, &h), 0);
    }
}
END_TEST

/* The keys of the map at *@p off, in order, into @p names (space-separated). */
static void map_keys(const mc_mp_buf_t *b, size_t *off, char *names, size_t cap)
{
    mc_mp_token_t m = next(b, off, MC_MP_MAP);
    names[0]        = '\0';
    for (uint32_t i = 0; i < m.n; i++) {
        mc_mp_token_t k = next(b, off, MC_MP_STR), v;
        size_t len      = strlen(names);
        snprintf(names + len, cap - len, "%s%.*s", i ? " " : "", (int)k.n, k.str);
        ck_assert_int_eq(mc_mp_read(b->data, b->len, off, &v), 0);
        if (v.type == MC_MP_ARRAY) /* seq_hashes, block_hashes: 0 or 1 int */
            for (uint32_t j = 0; j < v.n; j++)
                ck_assert_int_eq(mc_mp_read(b->data, b->len, off, &v), 0);
    }
}

START_TEST(test_batch_encoding)
{
    mc_kv_event_opts_t o = {.backend_id = "be", .emit_legacy_compat = 1, .emit_object_key = 1};
    mc_kv_event_t *ev[3];
    mc_mp_buf_t b;
    size_t off = 0;
    uint64_t id = 7;
    char names[1024];
    mc_mp_token_t t;

    ev[0] = mc_kv_event_new(MC_KV_EVENT_STORED, MC_KV_MEDIUM_DISK, "18446744073709551615", 20,
                            "default", 7, "g1", 2);
    ev[1] = mc_kv_event_new(MC_KV_EVENT_REMOVED, MC_KV_MEDIUM_CPU, "abc", 3, "t", 1, NULL, 0);
    ev[2] = mc_kv_event_new(MC_KV_EVENT_CLEARED, MC_KV_MEDIUM_CPU, NULL, 0, "t", 1, NULL, 0);
    mc_mp_init(&b);
    ck_assert_int_eq(mc_kv_event_encode_batch(&b, &o, 1700000000123, ev, 3, &id), 0);
    ck_assert_uint_eq(id, 10);
    ck_assert_uint_eq(next(&b, &off, MC_MP_ARRAY).n, 3);
    ck_assert_uint_eq(next(&b, &off, MC_MP_UINT).u, 1700000000123u);
    ck_assert_uint_eq(next(&b, &off, MC_MP_ARRAY).n, 3);
    {
        size_t at = off;
        map_keys(&b, &off, names, sizeof(names));
        ck_assert_str_eq(names,
                         "event_id timestamp event_type type model_name block_size "
                         "additional_salt lora_name tenant_id backend_id group_id medium dp_rank "
                         "object_key seq_hashes block_hashes base_block_idx parent_hash "
                         "token_ids parent_block_hash");
        /* values of the first: id 7, medium disk, the hash as u64 and as -1 */
        off = at;
        next(&b, &off, MC_MP_MAP);
        next_str(&b, &off, "event_id");
        ck_assert_uint_eq(next(&b, &off, MC_MP_UINT).u, 7);
        for (int i = 0; i < 10; i++) { /* timestamp .. group_id */
            next(&b, &off, MC_MP_STR);
            ck_assert_int_eq(mc_mp_read(b.data, b.len, &off, &t), 0);
        }
        next_str(&b, &off, "medium");
        next_str(&b, &off, "disk");
        next_str(&b, &off, "dp_rank");
        next(&b, &off, MC_MP_NIL);
        next_str(&b, &off, "object_key");
        next_str(&b, &off, "18446744073709551615");
        next_str(&b, &off, "seq_hashes");
        ck_assert_uint_eq(next(&b, &off, MC_MP_ARRAY).n, 1);
        ck_assert_uint_eq(next(&b, &off, MC_MP_UINT).u, UINT64_MAX);
        next_str(&b, &off, "block_hashes");
        ck_assert_uint_eq(next(&b, &off, MC_MP_ARRAY).n, 1);
        ck_assert_int_eq(next(&b, &off, MC_MP_INT).i, -1);
        next_str(&b, &off, "base_block_idx");
        ck_assert_uint_eq(next(&b, &off, MC_MP_UINT).u, 0);
        for (int i = 0; i < 3; i++) {
            next(&b, &off, MC_MP_STR);
            next(&b, &off, MC_MP_NIL);
        }
    }
    map_keys(&b, &off, names, sizeof(names));
    ck_assert_str_eq(names, "event_id timestamp event_type type model_name block_size "
                            "additional_salt lora_name tenant_id backend_id group_id medium "
                            "dp_rank object_key seq_hashes block_hashes base_block_idx");
    map_keys(&b, &off, names, sizeof(names));
    ck_assert_msg(strstr(names, "object_key") != NULL, "cleared has the removed keys");
    ck_assert_uint_eq(next(&b, &off, MC_MP_UINT).u, 0); /* dp_rank */
    ck_assert_uint_eq(off, b.len);

    /* both options off: 14 and 16 keys, no legacy names */
    o.emit_legacy_compat = 0;
    o.emit_object_key    = 0;
    off                  = 0;
    ck_assert_int_eq(mc_kv_event_encode_batch(&b, &o, 1, ev, 1, &id), 0);
    next(&b, &off, MC_MP_ARRAY);
    next(&b, &off, MC_MP_UINT);
    next(&b, &off, MC_MP_ARRAY);
    map_keys(&b, &off, names, sizeof(names));
    ck_assert_str_eq(names, "event_id timestamp event_type model_name block_size "
                            "additional_salt lora_name tenant_id backend_id group_id medium "
                            "dp_rank seq_hashes base_block_idx parent_hash token_ids");
    for (int i = 0; i < 3; i++)
        free(ev[i]);
    mc_mp_cleanup(&b);
}
END_TEST

static mc_kv_event_t *numbered(unsigned i)
{
    char key[32];
    int n = snprintf(key, sizeof(key), "%u", i);
    return mc_kv_event_new(MC_KV_EVENT_STORED, MC_KV_MEDIUM_CPU, key, (size_t)n, "t", 1, NULL,
                           0);
}

START_TEST(test_queue_drops_the_oldest_and_counts_the_gap)
{
    mc_kv_queue_t q;
    mc_kv_event_t *out[64];
    uint64_t gap;
    int stop;
    size_t n;

    ck_assert_int_eq(mc_kv_queue_init(&q, 3), 0);
    for (unsigned i = 0; i < 10; i++)
        mc_kv_queue_push(&q, numbered(i));
    ck_assert_uint_eq(q.dropped, 7);
    n = mc_kv_queue_pop(&q, out, 64, 0, &gap, &stop);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(gap, 7);
    ck_assert_int_eq(stop, 0);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_uint_eq(out[i]->hash, 7 + i); /* the newest three, in order */
        free(out[i]);
    }
    /* the gap is handed out once */
    n = mc_kv_queue_pop(&q, out, 64, 0, &gap, &stop);
    ck_assert_uint_eq(n, 0);
    ck_assert_uint_eq(gap, 0);
    /* batches of at most max; stop after draining */
    mc_kv_queue_cleanup(&q);
    ck_assert_int_eq(mc_kv_queue_init(&q, 0), 0); /* unbounded */
    for (unsigned i = 0; i < 100; i++)
        mc_kv_queue_push(&q, numbered(i));
    mc_kv_queue_stop(&q);
    n = mc_kv_queue_pop(&q, out, 64, 1, &gap, &stop);
    ck_assert_uint_eq(n, 64);
    for (size_t i = 0; i < n; i++)
        free(out[i]);
    n = mc_kv_queue_pop(&q, out, 64, 1, &gap, &stop);
    ck_assert_uint_eq(n, 36);
    ck_assert_uint_eq(out[35]->hash, 99);
    for (size_t i = 0; i < n; i++)
        free(out[i]);
    n = mc_kv_queue_pop(&q, out, 64, 1, &gap, &stop);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(stop, 1);
    ck_assert_uint_eq(q.dropped, 0);
    mc_kv_queue_cleanup(&q);
}
END_TEST

/* Upstream's defaults; --enable_kv_events starts with libzmq and is
 * refused, naming the library, in a build configured without it. */
START_TEST(test_flags_and_the_refusal_without_libzmq)
{
    mc_master_config_t cfg;
    char err[512];
    char *argv[] = {"mooncake_master", "--enable_kv_events", "--kv_events_queue_capacity=0",
                    "--kv_events_bind_endpoint=tcp://127.0.0.1:5557",
                    "--kv_events_backend_id=b", NULL};

    ck_assert_status_ok(mc_master_config_init(&cfg));
    ck_assert_int_eq(cfg.enable_kv_events, 0);
    ck_assert_str_eq(cfg.kv_events_bind_endpoint, "");
    ck_assert_str_eq(cfg.kv_events_backend_id, "");
    ck_assert_int_eq(cfg.kv_events_queue_capacity, 65536);
    ck_assert_int_eq(cfg.kv_events_emit_legacy_compat, 1);
    ck_assert_int_eq(cfg.kv_events_emit_object_key, 1);
    ck_assert_status_ok(mc_master_flags_parse(&cfg, 5, argv, err, sizeof(err)));
    ck_assert_int_eq(cfg.kv_events_queue_capacity, 0); /* 0 = unbounded, accepted */
#ifdef MC_HAVE_ZMQ
    ck_assert_status_ok(mc_master_config_check(&cfg, err, sizeof(err)));
#else
    ck_assert_status_eq(mc_master_config_check(&cfg, err, sizeof(err)), MC_INVALID_PARAMS);
    ck_assert_msg(strstr(err, "libzmq") != NULL, "the refusal names libzmq: %s", err);
#endif
    mc_master_config_cleanup(&cfg);
}
END_TEST

Suite *mc_test_kv_events_suite(void)
{
    Suite *s  = suite_create("kv_events");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_msgpack_integers_take_their_smallest_form);
    tcase_add_test(tc, test_msgpack_strings_and_containers);
    tcase_add_test(tc, test_seq_hash_rules);
    tcase_add_test(tc, test_batch_encoding);
    tcase_add_test(tc, test_queue_drops_the_oldest_and_counts_the_gap);
    tcase_add_test(tc, test_flags_and_the_refusal_without_libzmq);
    suite_add_tcase(s, tc);
    return s;
}
