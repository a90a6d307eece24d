/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client's SSD tier (libmooncake/store/tiers/disk.c, docs/tiers.md) through
 * the public API, against a real mooncake_master --enable_offload and real
 * bucket files in a temporary directory.  The Python suite
 * (tests/python/test_tiers.py) covers the same ground across processes;
 * this one also runs in the sanitizer build.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mooncake/store.h>

#include "check_suites.h"
#include "common/buf.h"
#include "common/crc32c.h"
#include "master_proc.h"
#include "store/tiers/tiers.h"

static mc_test_master_t master;
static mc_store_h store;
static char dir[64];

static void sleep_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while ((nanosleep(&ts, &ts) != 0) && (errno == EINTR)) {
    }
}

/* Setup parameters against the test's master: a segment of @p seg bytes. */
static void fill_params(mc_store_params_t *p, uint64_t seg)
{
    memset(p, 0, sizeof(*p));
    p->field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                    MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_LOCAL_BUFFER_SIZE |
                    MC_STORE_PARAM_MASTER_SERVER_ADDR;
    p->local_hostname      = "127.0.0.1";
    p->metadata_server     = "P2PHANDSHAKE";
    p->global_segment_size = seg;
    p->local_buffer_size   = 4u << 20;
    p->master_server_addr  = master.addr;
}

static void setup(void)
{
    static const char *const flags[] = {"--enable_offload", "--default_kv_lease_ttl=100", NULL};
    mc_store_params_t p;

    snprintf(dir, sizeof(dir), "/tmp/mc-disk-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
    mc_test_master_start(&master, flags);
    fill_params(&p, 8u << 20);
    ck_assert_status_ok(mc_store_create(&store));
    ck_assert_status_ok(mc_store_setup(store, &p));
    ck_assert_status_ok(mc_store_offload_start(store, dir));
}

static void teardown(void)
{
    char cmd[128];
    mc_store_destroy(store);
    store = NULL;
    ck_assert_int_eq(mc_test_master_stop(&master), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* The disk replica's file and offset of @p key once it has one (bounded wait). */
static void wait_disk(const char *key, char *path, size_t cap, uint64_t *off)
{
    uint64_t deadline = mc_test_now_ms() + 10000;
    for (;;) {
        mc_store_query_h q = NULL;
        mc_status_t st     = mc_store_query(store, key, &q);
        if (st == MC_OK)
            st = mc_store_query_disk_replica(q, path, cap, off);
        mc_store_query_release(q);
        if (st == MC_OK)
            return;
        ck_assert_msg(mc_test_now_ms() < deadline, "%s never reached the disk tier", key);
        sleep_ms(10);
    }
}

/* Whether the master lists a disk replica of @p key now. */
static int has_disk_replica(const char *key)
{
    char path[4096];
    uint64_t off;
    mc_store_query_h q = NULL;
    mc_status_t st     = mc_store_query(store, key, &q);
    if (st == MC_OK)
        st = mc_store_query_disk_replica(q, path, sizeof(path), &off);
    mc_store_query_release(q);
    return st == MC_OK;
}

/* Clear the memory replica of @p key (a read lease may delay it). */
static void make_disk_only(const char *key)
{
    uint64_t deadline = mc_test_now_ms() + 10000;
    for (;;) {
        mc_status_t st = MC_INTERNAL_ERROR;
        ck_assert_status_ok(
            mc_store_batch_replica_clear(store, &key, 1, mc_store_hostname(store), &st));
        if (st == MC_OK)
            break;
        ck_assert_msg(mc_test_now_ms() < deadline, "could not clear %s: %d", key, st);
        sleep_ms(20);
    }
}

START_TEST(test_disk_only_get_and_damage)
{
    enum { N = 100000 };
    static uint8_t v[N], got[N];
    char path[4096];
    uint64_t off = 0, size = 0;
    mc_store_query_h q = NULL;
    mc_replica_desc_t d;
    mc_store_disk_stats_t st;
    int fd;

    for (size_t i = 0; i < N; i++)
        v[i] = (uint8_t)(i * 7u + 3u);
    ck_assert_status_ok(mc_store_put(store, "dk", v, N, NULL));
    wait_disk("dk", path, sizeof(path), &off);
    make_disk_only("dk");
    /* described as one disk replica */
    ck_assert_status_ok(mc_store_query(store, "dk", &q));
    ck_assert_uint_eq(mc_store_query_replica_count(q), 1);
    ck_assert_status_ok(mc_store_query_replica(q, 0, &d));
    ck_assert_int_eq(d.is_memory, MC_REPLICA_KIND_LOCAL_DISK); /* upstream LOCAL_DISK */
    ck_assert_uint_eq(d.addr, off);
    ck_assert_uint_eq(d.size, N);
    ck_assert_str_eq(d.protocol, "file");
    /* a part, then the whole, byte-exact */
    ck_assert_status_ok(mc_store_query_read(store, q, 5000, got, 1000));
    ck_assert_int_eq(memcmp(got, v + 5000, 1000), 0);
    mc_store_query_release(q);
    memset(got, 0, sizeof(got));
    ck_assert_status_ok(mc_store_get(store, "dk", got, sizeof(got), &size));
    ck_assert_uint_eq(size, N);
    ck_assert_int_eq(memcmp(got, v, N), 0);
    ck_assert_status_ok(mc_store_offload_stats(store, &st));
    ck_assert_uint_ge(st.offloaded_keys, 1);
    ck_assert_uint_ge(st.used_bytes, N);
    /* one byte of the value flipped: a miss, the buffer not passed off as data */
    fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    {
        uint8_t b;
        off_t at = (off_t)(off + 24 + 2 + 777);
        ck_assert_int_eq(pread(fd, &b, 1, at), 1);
        b ^= 0x40;
        ck_assert_int_eq(pwrite(fd, &b, 1, at), 1);
    }
    ck_assert_int_eq(mc_store_get(store, "dk", got, sizeof(got), &size), MC_OBJECT_NOT_FOUND);
    /* truncated inside the record: a miss too */
    ck_assert_int_eq(ftruncate(fd, (off_t)(off + 100)), 0);
    close(fd);
    ck_assert_int_eq(mc_store_get(store, "dk", got, sizeof(got), &size), MC_OBJECT_NOT_FOUND);
}
END_TEST

/*
 * A get of @p key into @p buf (@p n bytes, which must equal @p want), then
 * its size hint, which must be @p n.  The hint may come from the read
 * lease the get took, and a lease lives about 95 ms here
 * (--default_kv_lease_ttl=100): a missing hint is a failure only when the
 * two calls took less than that, and otherwise (a loaded machine) the pair
 * runs again.  With @p cached_only the hint is the lease's alone, and a
 * value that reached the disk tier before the get (the offloader writes
 * every new value there) has none: the location cache keeps no object
 * with a disk replica (docs/architecture.md); a miss is then no failure.
 */
static void assert_hint_after_get(const char *key, uint8_t *buf, const uint8_t *want, size_t n,
                                  int cached_only, const char *what)
{
    for (int i = 0; i < 20; i++) {
        uint64_t size = 0, hint = 0, t0 = mc_test_now_ms();
        mc_status_t st;

        ck_assert_status_ok(mc_store_get(store, key, buf, n, &size));
        ck_assert_uint_eq(size, n);
        ck_assert_msg(memcmp(buf, want, n) == 0, "%s: the get returned other bytes", what);
        st = mc_store_get_size_hint(store, key, &hint);
        if (st == MC_OK) {
            ck_assert_uint_eq(hint, n);
            return;
        }
        if (cached_only && has_disk_replica(key))
            return;
        ck_assert_msg(mc_test_now_ms() - t0 >= 90, "%s: no size hint right after the get (%s)",
                      what, mc_status_name(st));
    }
    ck_abort_msg("%s: twenty gets and hints in a row outlasted the lease", what);
}

/*
 * A disk-only object's record is read while the master answers the lookup
 * (mc_store_get_size_hint, docs/tiers.md §4).  The bytes read early count
 * only when the answer names that record: after an upsert, a new disk
 * copy, or a remove, the old record (still in its bucket) is never
 * returned.
 */
START_TEST(test_disk_hints_never_return_an_outdated_record)
{
    enum { N = 90000 };
    static uint8_t v1[N], v2[N], got[N];
    char path[4096];
    uint64_t off = 0, size = 0, hint = 0;

    for (size_t i = 0; i < N; i++) {
        v1[i] = (uint8_t)(i * 5u + 1u);
        v2[i] = (uint8_t)(i * 11u + 7u);
    }
    ck_assert_status_ok(mc_store_put(store, "hk", v1, N, NULL));
    wait_disk("hk", path, sizeof(path), &off);
    /* the handle's own put leaves a size (its speculative entry) */
    ck_assert_status_ok(mc_store_get_size_hint(store, "hk", &hint));
    ck_assert_uint_eq(hint, N);
    make_disk_only("hk");
    assert_hint_after_get("hk", got, v1, N, 0, "a disk-only read leaves a size hint");
    /* the overlapped read, byte-exact */
    memset(got, 0, sizeof(got));
    ck_assert_status_ok(mc_store_get(store, "hk", got, sizeof(got), &size));
    ck_assert_uint_eq(size, N);
    ck_assert_int_eq(memcmp(got, v1, N), 0);

    /* upserted: the new value from memory, though the hinted record reads
     * fine; no disk hint now, but the lease that get took knows the size */
    ck_assert_status_ok(mc_store_upsert(store, "hk", v2, N, NULL));
    assert_hint_after_get("hk", got, v2, N, 1, "a get after an upsert");

    /* the new value on disk only: its own record, not the hinted one */
    wait_disk("hk", path, sizeof(path), &off);
    make_disk_only("hk");
    ck_assert_status_ok(mc_store_get(store, "hk", got, sizeof(got), &size));
    ck_assert_int_eq(memcmp(got, v2, N), 0);
    ck_assert_status_ok(mc_store_get(store, "hk", got, sizeof(got), &size));
    ck_assert_int_eq(memcmp(got, v2, N), 0);

    /* removed: a miss, though both records are still in their buckets */
    ck_assert_status_ok(mc_store_remove(store, "hk", 1));
    ck_assert_int_eq(mc_store_get(store, "hk", got, sizeof(got), &size), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(mc_store_get_size_hint(store, "hk", &hint), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(mc_store_get_size_hint(store, "hk", NULL), MC_INVALID_PARAMS);
}
END_TEST

START_TEST(test_bad_directories)
{
    mc_store_h other = NULL;
    mc_store_params_t p;

    /* on already; a second client cannot share the directory */
    ck_assert_int_eq(mc_store_offload_start(store, dir), MC_INVALID_PARAMS);
    fill_params(&p, 1u << 20);
    ck_assert_status_ok(mc_store_create(&other));
    ck_assert_int_eq(mc_store_offload_start(other, dir), MC_UNAVAILABLE_IN_CURRENT_STATUS);
    ck_assert_status_ok(mc_store_setup(other, &p));
    ck_assert_int_eq(mc_store_offload_start(other, dir), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_offload_start(other, "relative"), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_offload_start(other, "/tmp/../etc"), MC_INVALID_PARAMS);
    ck_assert_int_eq(mc_store_offload_start(other, "/nonexistent/dir"), MC_INVALID_PARAMS);
    mc_store_destroy(other);
}
END_TEST

/*
 * A reader that cannot read the file (MC_TEST_DISK_REMOTE_ONLY=1 plays
 * another host) gets the bytes from the holder's engine with a DISK_READ:
 * a second store in this process, with its own engine, so the request goes
 * over TCP to the holder's data port.  Once the record is damaged, the
 * holder's checks make it a miss for that reader too.
 */
START_TEST(test_disk_only_read_through_the_holder)
{
    enum { N = 70000 };
    static uint8_t v[N], got[N];
    char path[4096];
    uint64_t off = 0, size = 0;
    mc_store_params_t p;
    mc_store_h reader = NULL;
    int fd;

    for (size_t i = 0; i < N; i++)
        v[i] = (uint8_t)(i * 13u + 1u);
    ck_assert_status_ok(mc_store_put(store, "rk", v, N, NULL));
    wait_disk("rk", path, sizeof(path), &off);
    make_disk_only("rk");
    fill_params(&p, 0);
    ck_assert_status_ok(mc_store_create(&reader));
    ck_assert_status_ok(mc_store_setup(reader, &p));
    ck_assert_int_eq(setenv("MC_TEST_DISK_REMOTE_ONLY", "1", 1), 0);
    ck_assert_msg(mc_store_get(reader, "rk", got, sizeof(got), &size) == MC_OK,
                  "the holder serves its record: %s", mc_last_error_detail());
    ck_assert_uint_eq(size, N);
    ck_assert_int_eq(memcmp(got, v, N), 0);
    fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "X", 1, (off_t)(off + 24 + 2 + 4000)), 1);
    close(fd);
    ck_assert_int_eq(mc_store_get(reader, "rk", got, sizeof(got), &size), MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(unsetenv("MC_TEST_DISK_REMOTE_ONLY"), 0);
    mc_store_destroy(reader);
}
END_TEST

/* Write one record (docs/tiers.md §3) of @p key and @p val as the whole of
 * a new file @p path; the value's CRC32C. */
static uint32_t write_record(const char *path, const char *key, const uint8_t *val, size_t len)
{
    uint8_t hdr[24];
    size_t klen   = strlen(key);
    uint32_t vcrc = mc_crc32c(0, val, len);
    FILE *f;

    mc_store_le32(hdr, 0x5244434Du);
    mc_store_le16(hdr + 4, 1);
    mc_store_le16(hdr + 6, (uint16_t)klen);
    mc_store_le64(hdr + 8, len);
    mc_store_le32(hdr + 16, vcrc);
    mc_store_le32(hdr + 20, mc_crc32c(mc_crc32c(0, hdr, 20), key, klen));
    f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(hdr, 1, sizeof(hdr), f), sizeof(hdr));
    ck_assert_uint_eq(fwrite(key, 1, klen, f), klen);
    ck_assert_uint_eq(fwrite(val, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
    return vcrc;
}

/*
 * Bucket files stay open in a per-process cache.  A path deleted and
 * written afresh (a new client on the same directory) must read the new
 * file at once, within the cache's stat() interval: a record that fails
 * its checks through a cached fd is read again through a fresh open.
 */
START_TEST(test_reused_path_reads_the_new_file)
{
    char tdir[64], path[96];
    uint8_t a[1000], b[1000], out[1000];
    uint32_t crc_a, crc_b;

    snprintf(tdir, sizeof(tdir), "/tmp/mc-fdc-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
    snprintf(path, sizeof(path), "%s/1.bucket", tdir);
    memset(a, 'a', sizeof(a));
    memset(b, 'b', sizeof(b));
    crc_a = write_record(path, "old", a, sizeof(a));
    ck_assert_status_ok(mc_store_disk_read(path, 0, mc_str_from_cstr("old"), sizeof(a), crc_a,
                                           out));
    ck_assert_mem_eq(out, a, sizeof(a));
    ck_assert_int_eq(unlink(path), 0);
    crc_b = write_record(path, "new", b, sizeof(b));
    ck_assert_msg(mc_store_disk_read(path, 0, mc_str_from_cstr("new"), sizeof(b), crc_b, out) ==
                      MC_OK,
                  "the record of the new file reads although the old one was cached");
    ck_assert_mem_eq(out, b, sizeof(b));
    /* and the old record is gone with its file */
    ck_assert_int_eq(mc_store_disk_read(path, 0, mc_str_from_cstr("old"), sizeof(a), crc_a, out),
                     MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(tdir), 0);
}
END_TEST

/*
 * Values of 512 KiB and more are read in chunks by the reader and a
 * helper thread, each checksumming the chunks it read (disk.c, pipe_read).
 * Odd sizes read back byte-exact; a byte flipped in the last chunk, or a
 * file cut in a middle chunk, is a miss; readers on several threads at once (one has
 * the helper, the others read alone) all get their own bytes, and so does
 * a child of fork(), which has no helper.
 */
#define BIG_N      (1536u * 1024u + 777u)
#define BIG_READERS 4

typedef struct big_reader {
    const char *path;
    const uint8_t *want;
    uint32_t crc;
    int bad;
} big_reader_t;

static void *big_read_loop(void *arg)
{
    big_reader_t *r = arg;
    uint8_t *out    = malloc(BIG_N);

    for (int i = 0; (out != NULL) && (i < 20); i++) {
        memset(out, 0, BIG_N);
        if ((mc_store_disk_read(r->path, 0, mc_str_from_cstr("big"), BIG_N, r->crc, out) !=
             MC_OK) ||
            (memcmp(out, r->want, BIG_N) != 0))
            r->bad++;
    }
    if (out == NULL)
        r->bad++;
    free(out);
    return NULL;
}

START_TEST(test_large_records_read_in_checked_chunks)
{
    char tdir[64], path[96];
    uint8_t *v   = malloc(BIG_N), *out = malloc(BIG_N);
    uint32_t crc, seed = 99;
    big_reader_t r[BIG_READERS];
    pthread_t t[BIG_READERS];
    int fd;

    ck_assert_ptr_nonnull(v);
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < BIG_N; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = (uint8_t)(seed >> 16);
    }
    snprintf(tdir, sizeof(tdir), "/tmp/mc-big-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
    snprintf(path, sizeof(path), "%s/1.bucket", tdir);
    crc = write_record(path, "big", v, BIG_N);
    ck_assert_status_ok(mc_store_disk_read(path, 0, mc_str_from_cstr("big"), BIG_N, crc, out));
    ck_assert_int_eq(memcmp(out, v, BIG_N), 0);
    for (int i = 0; i < BIG_READERS; i++) {
        r[i] = (big_reader_t){path, v, crc, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, big_read_loop, &r[i]), 0);
    }
    for (int i = 0; i < BIG_READERS; i++) {
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
        ck_assert_msg(r[i].bad == 0, "reader %d got %d bad reads", i, r[i].bad);
    }
    /* a child of fork() has no helper thread: it reads alone, never waits for one */
    {
        pid_t pid = fork();
        int status = -1;
        uint64_t deadline = mc_test_now_ms() + 10000;
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
            _exit((mc_store_disk_read(path, 0, mc_str_from_cstr("big"), BIG_N, crc, out) ==
                   MC_OK) && (memcmp(out, v, BIG_N) == 0) ? 0 : 1);
        while (waitpid(pid, &status, WNOHANG) == 0) {
            if (mc_test_now_ms() > deadline) {
                kill(pid, SIGKILL);
                (void)waitpid(pid, &status, 0);
                ck_abort_msg("a large read in a forked child did not finish in 10 s");
            }
            sleep_ms(5);
        }
        ck_assert_msg(WIFEXITED(status) && (WEXITSTATUS(status) == 0),
                      "a large read in a forked child failed");
    }
    /* the last byte of the value flipped */
    fd = open(path, O_RDWR);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "\x5a", 1, (off_t)(24 + 3 + BIG_N - 1)), 1);
    ck_assert_int_eq(mc_store_disk_read(path, 0, mc_str_from_cstr("big"), BIG_N, crc, out),
                     MC_OBJECT_NOT_FOUND);
    /* cut in the middle of the value */
    ck_assert_int_eq(ftruncate(fd, (off_t)(24 + 3 + BIG_N / 2 + 1000)), 0);
    close(fd);
    ck_assert_int_eq(mc_store_disk_read(path, 0, mc_str_from_cstr("big"), BIG_N, crc, out),
                     MC_OBJECT_NOT_FOUND);
    ck_assert_int_eq(unlink(path), 0);
    ck_assert_int_eq(rmdir(tdir), 0);
    free(v);
    free(out);
}
END_TEST

/* CRC32C one bit at a time: the definition, to check the fast forms by. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc & 1) ? (crc >> 1) ^ 0x82F63B78u : (crc >> 1);
    }
    return ~crc;
}

/*
 * Every record's value is checked with mc_crc32c, which takes the
 * carry-less-multiply folding path for 256 bytes and more where the CPU
 * has it, the crc32 chains otherwise.  Every length around the folding
 * steps (128-byte rounds, 16-byte tail blocks, byte tails), at every
 * alignment, from a chained state, gives the definition's value.
 */
START_TEST(test_crc32c_matches_the_definition)
{
    static uint8_t buf[3 * 4096 * 2 + 64];
    uint32_t seed = 12345;

    for (size_t i = 0; i < sizeof(buf); i++) {
        seed   = seed * 1103515245u + 12345u;
        buf[i] = (uint8_t)(seed >> 16);
    }
    for (size_t n = 0; n < 1100; n++) {
        size_t off = n % 8;
        uint32_t init = (uint32_t)n * 0x9E3779B9u;
        ck_assert_msg(mc_crc32c(init, buf + off, n) == crc_bitwise(init, buf + off, n),
                      "CRC32C of %zu bytes at offset %zu differs from the definition", n, off);
    }
    for (size_t n = 3 * 4096 - 300; n < sizeof(buf) - 8; n += 997)
        ck_assert_msg(mc_crc32c(7, buf + 3, n) == crc_bitwise(7, buf + 3, n),
                      "CRC32C of %zu bytes differs from the definition", n);
    /* pieces checksummed apart, joined */
    for (size_t a = 0; a < sizeof(buf); a += 1111) {
        size_t b = sizeof(buf) - a;
        ck_assert_msg(mc_crc32c_combine(mc_crc32c(0, buf, a), mc_crc32c(0, buf + a, b), b) ==
                          mc_crc32c(0, buf, sizeof(buf)),
                      "joining the CRCs of %zu and %zu bytes differs from the whole", a, b);
    }
    /* chained pieces give the CRC of the whole */
    ck_assert_uint_eq(mc_crc32c(mc_crc32c(0, buf, 300), buf + 300, 5000),
                      crc_bitwise(0, buf, 5300));
    ck_assert_uint_eq(mc_crc32c(0, "123456789", 9), 0xE3069283u);
}
END_TEST

Suite *mc_test_store_disk_suite(void)
{
    Suite *s  = suite_create("store_disk");
    TCase *tc = tcase_create("disk");
    TCase *rc = tcase_create("records");

    tcase_add_test(rc, test_reused_path_reads_the_new_file);
    tcase_add_test(rc, test_crc32c_matches_the_definition);
    tcase_add_test(rc, test_large_records_read_in_checked_chunks);
    suite_add_tcase(s, rc);

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_disk_only_get_and_damage);
    tcase_add_test(tc, test_disk_hints_never_return_an_outdated_record);
    tcase_add_test(tc, test_bad_directories);
    tcase_add_test(tc, test_disk_only_read_through_the_holder);
    suite_add_tcase(s, tc);
    return s;
}
