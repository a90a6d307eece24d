/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict parsers and identifiers from common/util.h.  Each parser is fed
 * the accepted spellings (with their exact values) and the near misses a
 * configuration file is likely to contain, which must all be refused.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check_suites.h"
#include "common/util.h"
#include <mooncake/store.h>

static const struct {
    const char *s;
    uint64_t v;
} sizes_ok[] = {
    {"0", 0},
    {"1", 1},
    {"16777216", 16777216},
    {"16MB", 16ull << 20},
    {"16 MB", 16ull << 20},
    {"16mb", 16ull << 20},
    {"16MiB", 16ull << 20},
    {"16M", 16ull << 20},
    {"1.5GiB", 3ull << 29},
    {"1.5 gb", 3ull << 29},
    {"4gb", 4ull << 30},
    {"4GB", 4ull << 30},
    {"512k", 512ull << 10},
    {"512KB", 512ull << 10},
    {"2TB", 2ull << 40},
    {"100b", 100},
    {" 8 GB ", 8ull << 30},
    {"18446744073709551615", UINT64_MAX},
    {"16777215TB", 16777215ull << 40},
};

static const char *const sizes_bad[] = {
    "", " ", "50%", "-1", "-1MB", "+1", "MB", "abc", "16 MB x", "16XB", "16mbb",
    "1e3", "0x10", "18446744073709551616", "16777216TB", "17179869184GB", "1.5.5GB",
    "16 M B", "99999999999999999999999", "1.0e30GB", ".5GB", "16MB\n5",
};

START_TEST(test_parse_size)
{
    for (size_t i = 0; i < sizeof(sizes_ok) / sizeof(sizes_ok[0]); i++) {
        uint64_t v = 12345;
        ck_assert_msg(mc_parse_size(sizes_ok[i].s, &v) == 0, "\"%s\" should parse as a size",
                      sizes_ok[i].s);
        ck_assert_msg(v == sizes_ok[i].v, "\"%s\" should be %llu bytes, not %llu", sizes_ok[i].s,
                      (unsigned long long)sizes_ok[i].v, (unsigned long long)v);
    }
    for (size_t i = 0; i < sizeof(sizes_bad) / sizeof(sizes_bad[0]); i++) {
        uint64_t v = 12345;
        ck_assert_msg(mc_parse_size(sizes_bad[i], &v) != 0, "\"%s\" should not parse as a size",
                      sizes_bad[i]);
        ck_assert_msg(v == 12345, "a refused size should leave the output alone");
    }
    uint64_t v;
    ck_assert_msg(mc_parse_size(NULL, &v) != 0, "NULL should not parse");
}
END_TEST

START_TEST(test_parse_duration)
{
    static const struct {
        const char *s;
        uint64_t ms;
    } ok[] = {{"0", 0},       {"500", 500},      {"500ms", 500},   {"10s", 10000},
              {"2m", 120000}, {"1h", 3600000},  {"30000", 30000}, {"0s", 0}};
    static const char *const bad[] = {"", "ms", "-1", "10x", "10 s", "1.5s", "s10", "10sec",
                                      "18446744073709551615h", "99999999999999999999",
                                      "+5", " 5"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 777;
        ck_assert_msg(mc_parse_duration_ms(ok[i].s, &v) == 0, "\"%s\" should parse", ok[i].s);
        ck_assert_msg(v == ok[i].ms, "\"%s\" should be %llu ms, not %llu", ok[i].s,
                      (unsigned long long)ok[i].ms, (unsigned long long)v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 777;
        ck_assert_msg(mc_parse_duration_ms(bad[i], &v) != 0, "\"%s\" should not parse", bad[i]);
        ck_assert_msg(v == 777, "a refused duration should leave the output alone");
    }
}
END_TEST

START_TEST(test_parse_host_port)
{
    static const struct {
        const char *s;
        const char *host;
        uint16_t port;
    } ok[] = {
        {"localhost", "localhost", 0},
        {"127.0.0.1:50051", "127.0.0.1", 50051},
        {"master.example.com:1", "master.example.com", 1},
        {"host:65535", "host", 65535},
        {"[::1]:80", "::1", 80},
        {"[fe80::1%eth0]:12300", "fe80::1%eth0", 12300},
        {"[::1]", "::1", 0},
        {"::1", "::1", 0},
        {"10.0.0.2", "10.0.0.2", 0},
    };
    static const char *const bad[] = {
        "", ":80", "host:", "host:0", "host:65536", "host:99999999999", "host:-1",
        "host:8o", "host:80x", "host: 80", "[::1", "[::1]x", "[::1]:", "[::1]:0",
        "[::1]:65536",
    };
    char host[256];
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint16_t port = 9;
        ck_assert_msg(mc_parse_host_port(ok[i].s, host, sizeof(host), &port) == 0,
                      "\"%s\" should parse", ok[i].s);
        ck_assert_str_eq(host, ok[i].host);
        ck_assert_msg(port == ok[i].port, "\"%s\" should have port %u, not %u", ok[i].s,
                      ok[i].port, port);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint16_t port = 9;
        ck_assert_msg(mc_parse_host_port(bad[i], host, sizeof(host), &port) != 0,
                      "\"%s\" should not parse as host:port", bad[i]);
    }
    uint16_t port;
    char small[5];
    ck_assert_msg(mc_parse_host_port("abcd:1", small, sizeof(small), &port) == 0,
                  "a host that just fits should parse");
    ck_assert_str_eq(small, "abcd");
    ck_assert_msg(mc_parse_host_port("abcde:1", small, sizeof(small), &port) != 0,
                  "a host longer than the buffer should be refused");
    ck_assert_msg(mc_parse_host_port("[abcde]:1", small, sizeof(small), &port) != 0,
                  "a bracketed host longer than the buffer should be refused");
    ck_assert_msg(mc_parse_host_port(NULL, host, sizeof(host), &port) != 0,
                  "NULL should be refused");
}
END_TEST

START_TEST(test_parse_bool)
{
    static const char *const yes[] = {"true", "TRUE", "True", "1", "yes", "on", "ON"};
    static const char *const no[]  = {"false", "FALSE", "0", "no", "off", "Off"};
    static const char *const bad[] = {"", "2", "tru", "yess", "enable", " true", "true ", "-1"};
    int v;
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        v = 0;
        ck_assert_msg(mc_parse_bool(yes[i], &v) == 0 && v == 1, "\"%s\" should be true", yes[i]);
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        v = 1;
        ck_assert_msg(mc_parse_bool(no[i], &v) == 0 && v == 0, "\"%s\" should be false", no[i]);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(mc_parse_bool(bad[i], &v) != 0, "\"%s\" should not parse as a bool",
                      bad[i]);
    ck_assert_msg(mc_parse_bool(NULL, &v) != 0, "NULL should not parse as a bool");
}
END_TEST

START_TEST(test_parse_numbers)
{
    uint64_t u;
    int64_t i;
    double d;
    ck_assert_msg(mc_parse_u64("18446744073709551615", &u) == 0 && u == UINT64_MAX,
                  "the largest u64 should parse");
    ck_assert_msg(mc_parse_u64("18446744073709551616", &u) != 0, "u64 overflow is refused");
    ck_assert_msg(mc_parse_u64("-1", &u) != 0, "a negative u64 is refused");
    ck_assert_msg(mc_parse_u64("12a", &u) != 0, "trailing bytes are refused");
    ck_assert_msg(mc_parse_u64("", &u) != 0, "an empty u64 is refused");
    ck_assert_msg(mc_parse_u64(" 1", &u) != 0, "leading space is refused");
    ck_assert_msg(mc_parse_i64("-9223372036854775808", &i) == 0 && i == INT64_MIN,
                  "the smallest i64 should parse");
    ck_assert_msg(mc_parse_i64("9223372036854775808", &i) != 0, "i64 overflow is refused");
    ck_assert_msg(mc_parse_double("0.9", &d) == 0 && d == 0.9, "0.9 should parse");
    ck_assert_msg(mc_parse_double("nan", &d) != 0, "nan is refused");
    ck_assert_msg(mc_parse_double("inf", &d) != 0, "inf is refused");
    ck_assert_msg(mc_parse_double("1e999", &d) != 0, "an overflowing double is refused");
    ck_assert_msg(mc_parse_double("0.5x", &d) != 0, "trailing bytes are refused");
}
END_TEST

static int uuid_text_ok(const char *s)
{
    static const int dash[] = {8, 13, 18, 23};
    if (strlen(s) != 36)
        return 0;
    for (int i = 0, d = 0; i < 36; i++) {
        if (d < 4 && i == dash[d]) {
            if (s[i] != '-')
                return 0;
            d++;
        } else if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i])) {
            return 0;
        }
    }
    return 1;
}

START_TEST(test_uuid)
{
    mc_uuid_t a, b, c;
    char text[37];
    mc_uuid_generate(&a);
    mc_uuid_generate(&b);
    ck_assert_msg(!mc_uuid_eq(a, b), "two generated UUIDs should differ");
    ck_assert_msg(!mc_uuid_is_nil(a), "a generated UUID should not be nil");
    mc_uuid_format(a, text);
    ck_assert_msg(uuid_text_ok(text), "\"%s\" should look like a UUID", text);
    ck_assert_msg(text[14] == '4', "a generated UUID should be version 4 (%s)", text);
    ck_assert_msg(strchr("89ab", text[19]) != NULL, "the variant should be RFC 4122 (%s)", text);
    ck_assert_int_eq(mc_uuid_parse(text, &c), 0);
    ck_assert_msg(mc_uuid_eq(a, c), "format then parse should give the same UUID");

    mc_uuid_t k = {0x0123456789abcdefull, 0xfedcba9876543210ull};
    mc_uuid_format(k, text);
    ck_assert_str_eq(text, "01234567-89ab-cdef-fedc-ba9876543210");
    ck_assert_int_eq(mc_uuid_parse("01234567-89AB-CDEF-FEDC-BA9876543210", &c), 0);
    ck_assert_msg(mc_uuid_eq(k, c), "upper-case hex should parse to the same UUID");
    mc_uuid_t nil = {0, 0};
    mc_uuid_format(nil, text);
    ck_assert_str_eq(text, "00000000-0000-0000-0000-000000000000");

    static const char *const bad[] = {
        "", "01234567-89ab-cdef-fedc-ba987654321",
        "01234567-89ab-cdef-fedc-ba98765432100", "01234567-89ab-cdef-fedc-ba987654321g",
        "01234567 89ab cdef fedc ba9876543210",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(mc_uuid_parse(bad[i], &c) != 0, "\"%s\" should not parse as a UUID",
                      bad[i]);
    ck_assert_msg(mc_uuid_parse(NULL, &c) != 0, "NULL should not parse as a UUID");
}
END_TEST

START_TEST(test_clocks_and_strdup)
{
    uint64_t t0 = mc_now_ns();
    uint64_t t1 = mc_now_ns();
    ck_assert_msg(t1 >= t0, "the monotonic clock should not go back");
    ck_assert_msg(mc_wall_ms() > 1600000000000ull, "the wall clock should be after 2020");
    char *s = mc_strdup("abc");
    ck_assert_str_eq(s, "abc");
    free(s);
    s = mc_strdup(NULL);
    ck_assert_str_eq(s, "");
    free(s);
}
END_TEST

/* mc_huge_zalloc: whole, aligned, zeroed blocks; sizes rounded up; no
 * block for 0 or for a size that cannot be rounded. */
START_TEST(test_huge_zalloc)
{
    const size_t sizes[] = {1, MC_HUGE_BLOCK, MC_HUGE_BLOCK + 1};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        size_t whole = (sizes[k] + MC_HUGE_BLOCK - 1) / MC_HUGE_BLOCK * MC_HUGE_BLOCK;
        unsigned char *p = mc_huge_zalloc(sizes[k]);
        ck_assert_ptr_nonnull(p);
        ck_assert_msg(((uintptr_t)p % MC_HUGE_BLOCK) == 0, "%zu bytes: not block-aligned",
                      sizes[k]);
        for (size_t i = 0; i < whole; i += 4096)
            if (p[i] != 0)
                ck_abort_msg("%zu bytes: byte %zu is not zero", sizes[k], i);
        memset(p, 0xa5, whole); /* every rounded byte is ours to write */
        ck_assert_uint_eq(p[whole - 1], 0xa5);
        mc_huge_free(p, sizes[k]);
    }
    ck_assert_ptr_null(mc_huge_zalloc(0));
    ck_assert_ptr_null(mc_huge_zalloc(SIZE_MAX - 10));
    mc_huge_free(NULL, 1); /* ignored */
}
END_TEST

/* mc_huge_advise: a hint only; the bytes stay, unaligned edges and odd
 * arguments (NULL, nothing, a length past the address space) are taken. */
START_TEST(test_huge_advise)
{
    size_t len       = 4 * MC_HUGE_BLOCK;
    unsigned char *p = mc_huge_zalloc(len);
    ck_assert_ptr_nonnull(p);
    for (size_t i = 0; i < len; i++)
        p[i] = (unsigned char)(i * 7u + 3u);
    mc_huge_advise(p + 1, len - 2);
    mc_huge_advise(p, MC_HUGE_BLOCK - 1); /* no whole block inside */
    mc_huge_advise(p, 0);
    mc_huge_advise(p + 5, SIZE_MAX);
    mc_huge_advise(NULL, len);
    mc_store_prepare_buffer(p, len);
    mc_store_prepare_buffer(NULL, 0);
    for (size_t i = 0; i < len; i++)
        if (p[i] != (unsigned char)(i * 7u + 3u))
            ck_abort_msg("byte %zu changed", i);
    mc_huge_free(p, len);
}
END_TEST

/* Pages of [p, p + len) (page-aligned p) that are in memory (mincore). */
static size_t resident_pages(void *p, size_t len)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE), n = (len + page - 1) / page, in = 0;
    unsigned char *v = malloc(n);
    ck_assert_ptr_nonnull(v);
    ck_assert_int_eq(mincore(p, len, v), 0);
    for (size_t i = 0; i < n; i++)
        in += v[i] & 1u;
    free(v);
    return in;
}

/* mc_populate: every page of a fresh shared mapping is in memory after
 * it, on one thread and on several (the range cut into chunks of at least
 * MC_POPULATE_CHUNK_MIN, the last one shorter), and the bytes are zero;
 * a mapping it may not write is left to fault (EFAULT, nothing crashes);
 * NULL and empty ranges are no-ops. */
START_TEST(test_populate)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t lens[] = {16 * page + 0, 2 * MC_POPULATE_CHUNK_MIN + 5 * page};
    unsigned threads[] = {1, 3};

    for (size_t k = 0; k < 2; k++) {
        size_t len = lens[k];
        unsigned char *p =
            mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        ck_assert_ptr_ne(p, MAP_FAILED);
        ck_assert_uint_eq(resident_pages(p, len), 0);
        int err = mc_populate(p, len, threads[k]);
        if (err == EINVAL) { /* a kernel before 5.14: best effort, nothing done */
            munmap(p, len);
            return;
        }
        ck_assert_int_eq(err, 0);
        ck_assert_uint_eq(resident_pages(p, len), len / page);
        for (size_t i = 0; i < len; i += page)
            ck_assert_uint_eq(p[i], 0);
        ck_assert_int_eq(munmap(p, len), 0);
    }
    void *ro = mmap(NULL, 4 * page, PROT_READ, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(ro, MAP_FAILED);
    ck_assert_int_ne(mc_populate(ro, 4 * page, 1), 0);
    munmap(ro, 4 * page);
    ck_assert_int_eq(mc_populate(NULL, page, 2), 0);
    ck_assert_int_eq(mc_populate(ro, 0, 2), 0);
    ck_assert_uint_ge(mc_cpus_available(), 1);
}
END_TEST

/* SipHash-2-4 against the reference vectors of its paper. */
/* mc_spin_readable: 1 at once when something waits, 0 after at least the
 * window when nothing does; eight empty windows in a row switch polling
 * off for the next 256 waits; the peer's close counts as readable. */
START_TEST(test_spin_readable)
{
    int sv[2];
    char c;
    uint64_t t0;

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(mc_spin_readable(sv[0], 0), 0);
    t0 = mc_now_ns();
    ck_assert_int_eq(mc_spin_readable(sv[0], 300), 0);
    ck_assert_uint_ge(mc_now_ns() - t0, 300000u);
    ck_assert_int_eq(write(sv[1], "x", 1), 1);
    ck_assert_int_eq(mc_spin_readable(sv[0], 300), 1); /* a hit: the misses start over */
    ck_assert_int_eq(read(sv[0], &c, 1), 1);
    for (unsigned i = 0; i < MC_SPIN_MISSES; i++)
        ck_assert_int_eq(mc_spin_readable(sv[0], 50), 0);
    ck_assert_int_eq(write(sv[1], "y", 1), 1);
    for (unsigned i = 0; i < MC_SPIN_SKIP; i++)
        ck_assert_int_eq(mc_spin_readable(sv[0], 50), 0); /* skipped, data or not */
    ck_assert_int_eq(mc_spin_readable(sv[0], 50), 1);
    ck_assert_int_eq(read(sv[0], &c, 1), 1);
    close(sv[1]);
    ck_assert_int_eq(mc_spin_readable(sv[0], 50), 1);
    close(sv[0]);
}
END_TEST

START_TEST(test_siphash)
{
    const uint64_t k[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    uint8_t msg[64];
    for (unsigned i = 0; i < sizeof(msg); i++)
        msg[i] = (uint8_t)i;
    ck_assert_uint_eq(mc_siphash24(k, msg, 0), 0x726fdb47dd0e0e31ull);
    ck_assert_uint_eq(mc_siphash24(k, msg, 8), 0x93f5f5799a932462ull);
    ck_assert_uint_eq(mc_siphash24(k, msg, 15), 0xa129ca6149be45e5ull);
    ck_assert_uint_eq(mc_siphash24(k, msg, 63), 0x958a324ceb064572ull);
}
END_TEST

Suite *mc_test_util_suite(void)
{
    Suite *s  = suite_create("util");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_parse_size);
    tcase_add_test(tc, test_parse_duration);
    tcase_add_test(tc, test_parse_host_port);
    tcase_add_test(tc, test_parse_bool);
    tcase_add_test(tc, test_parse_numbers);
    tcase_add_test(tc, test_uuid);
    tcase_add_test(tc, test_siphash);
    tcase_add_test(tc, test_spin_readable);
    tcase_add_test(tc, test_clocks_and_strdup);
    tcase_add_test(tc, test_huge_zalloc);
    tcase_add_test(tc, test_huge_advise);
    tcase_add_test(tc, test_populate);
    suite_add_tcase(s, tc);
    return s;
}
