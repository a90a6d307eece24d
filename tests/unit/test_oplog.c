/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The operation log codec and replay state (mooncake-master/durability/oplog.c):
 * every record type round-trips; every flipped byte of a frame is refused;
 * every cut of a frame reads as torn; a scan stops at the first bad frame
 * with the valid prefix; replay keeps the last state of each key and
 * segment, and the batched fold ends where the one-by-one fold does; the
 * group-commit writer makes what it was given durable in a
 * file that scans back.
 */
#include "config.h"

#include <check.h>
#include <poll.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_suites.h"
#include "../../mooncake-master/durability/oplog.h"

static const mc_oplog_replica_t reps[2] = {
    {{0x1111, 0x2222}, 4096, 8192},
    {{0x3333, 0x4444}, 0, 8192},
};

static mc_oplog_record_t obj_set(const char *key, uint32_t nrep)
{
    mc_oplog_record_t r;
    memset(&r, 0, sizeof(r));
    r.type            = MC_OPLOG_OBJ_SET;
    r.tenant          = mc_str_from_cstr("default");
    r.key             = mc_str_from_cstr(key);
    r.size            = 8000;
    r.owner.hi        = 7;
    r.owner.lo        = 9;
    r.hard_pin        = 1;
    r.soft_pin_ttl_ms = 1234;
    r.has_group       = 1;
    r.group_id        = mc_str_from_cstr("grp");
    r.nreplicas       = nrep;
    r.replicas        = reps;
    return r;
}

static mc_oplog_record_t seg_mount(uint64_t id)
{
    mc_oplog_record_t r;
    memset(&r, 0, sizeof(r));
    r.type     = MC_OPLOG_SEG_MOUNT;
    r.id.hi    = id;
    r.id.lo    = id + 1;
    r.owner.lo = 5;
    r.name     = mc_str_from_cstr("host:1234");
    r.protocol = mc_str_from_cstr("tcp");
    r.base     = 0x10000;
    r.size     = 1u << 20;
    return r;
}

START_TEST(test_roundtrip_every_type)
{
    mc_buf_t b;
    mc_oplog_record_t in[7], out;
    size_t used, off = 0;

    memset(in, 0, sizeof(in));
    in[0].type    = MC_OPLOG_LOG_BEGIN;
    in[0].gen     = 42;
    in[1].type    = MC_OPLOG_SNAP_BEGIN;
    in[1].gen     = 43;
    in[1].wall_ms = 99;
    in[2]         = seg_mount(3);
    in[3].type    = MC_OPLOG_SEG_UNMOUNT;
    in[3].id.hi   = 3;
    in[4]         = obj_set("key-1", 2);
    in[5].type    = MC_OPLOG_OBJ_DEL;
    in[5].tenant  = mc_str_from_cstr("t");
    in[5].key     = mc_str_from_cstr("key-1");
    in[6].type    = MC_OPLOG_SNAP_END;
    in[6].nsegs   = 1;
    in[6].nobjs   = 2;
    mc_buf_init(&b);
    for (int i = 0; i < 7; i++)
        mc_oplog_record_encode(&b, &in[i]);
    ck_assert(!b.oom);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(mc_oplog_record_decode(b.data + off, b.len - off, &out, &used),
                         MC_OPLOG_DECODED);
        ck_assert_int_eq(out.type, in[i].type);
        ck_assert_uint_eq(out.gen, in[i].gen);
        ck_assert_uint_eq(out.wall_ms, in[i].wall_ms);
        ck_assert(mc_uuid_eq(out.id, in[i].id));
        ck_assert(mc_str_eq(out.key, in[i].key));
        ck_assert(mc_str_eq(out.tenant, in[i].tenant));
        ck_assert(mc_str_eq(out.name, in[i].name));
        ck_assert_uint_eq(out.nsegs, in[i].nsegs);
        ck_assert_uint_eq(out.nobjs, in[i].nobjs);
        off += used;
    }
    ck_assert_uint_eq(off, b.len);
    /* the OBJ_SET fields in full */
    mc_buf_reset(&b);
    in[4] = obj_set("key-1", 2);
    mc_oplog_record_encode(&b, &in[4]);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    ck_assert_uint_eq(out.size, 8000);
    ck_assert_uint_eq(out.owner.hi, 7);
    ck_assert_uint_eq(out.owner.lo, 9);
    ck_assert_int_eq(out.hard_pin, 1);
    ck_assert_uint_eq(out.soft_pin_ttl_ms, 1234);
    ck_assert_int_eq(out.has_group, 1);
    ck_assert(mc_str_eq(out.group_id, mc_str_from_cstr("grp")));
    ck_assert_uint_eq(out.nreplicas, 2);
    for (uint32_t i = 0; i < 2; i++) {
        mc_oplog_replica_t r;
        mc_oplog_record_replica(&out, i, &r);
        ck_assert(mc_uuid_eq(r.seg, reps[i].seg));
        ck_assert_uint_eq(r.offset, reps[i].offset);
        ck_assert_uint_eq(r.size, reps[i].size);
    }
    mc_buf_cleanup(&b);
}
END_TEST

/* The disk replica rides in a versioned tail of OBJ_SET: a record without
 * it (as every log written before the disk tier) decodes with has_disk 0,
 * one with it round-trips, and a tail version this build does not know is
 * corruption, never guessed at. */
/* The DFS replica is the tail's second section (tag 2): it round-trips
 * alone and beside a disk replica, and a section given twice is
 * corruption. */
START_TEST(test_obj_set_dfs_tail)
{
    mc_buf_t b;
    mc_oplog_record_t in = obj_set("key-f", 1), out;
    size_t used;

    mc_buf_init(&b);
    in.has_dfs         = 1;
    in.dfs_shard       = 5;
    in.dfs_offset      = 3u << 20;
    in.dfs_span        = 12288;
    in.dfs_replica_num = 1;
    mc_oplog_record_encode(&b, &in);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    ck_assert_uint_eq(used, b.len);
    ck_assert_int_eq(out.has_disk, 0);
    ck_assert_int_eq(out.has_dfs, 1);
    ck_assert_uint_eq(out.dfs_shard, 5);
    ck_assert_uint_eq(out.dfs_offset, 3u << 20);
    ck_assert_uint_eq(out.dfs_span, 12288);
    ck_assert_uint_eq(out.dfs_replica_num, 1);
    ck_assert_uint_eq(out.nreplicas, 1);
    /* beside a disk replica */
    mc_buf_reset(&b);
    in.has_disk     = 1;
    in.disk_segment = mc_str_from_cstr("host:7");
    in.disk_path    = mc_str_from_cstr("/ssd/3.bucket");
    in.disk_length  = 8000;
    mc_oplog_record_encode(&b, &in);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    ck_assert_int_eq(out.has_disk, 1);
    ck_assert_int_eq(out.has_dfs, 1);
    ck_assert_uint_eq(out.dfs_span, 12288);
    ck_assert(mc_str_eq(out.disk_path, in.disk_path));
    /* the DFS section twice, with a valid CRC: refused */
    mc_buf_reset(&b);
    in.has_disk = 0;
    mc_oplog_record_encode(&b, &in);
    mc_oplog_put_dfs_tail(&b, 6, 0, 4096, 1);
    mc_oplog_frame_end(&b, 0);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_CORRUPT);
    mc_buf_cleanup(&b);
}
END_TEST

START_TEST(test_obj_set_disk_tail)
{
    mc_buf_t b;
    mc_oplog_record_t in = obj_set("key-d", 0), out;
    size_t used, tail;

    mc_buf_init(&b);
    mc_oplog_record_encode(&b, &in);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    ck_assert_int_eq(out.has_disk, 0);
    mc_buf_reset(&b);
    in.has_disk     = 1;
    in.disk_holder  = (mc_uuid_t){0x55, 0x66};
    in.disk_segment = mc_str_from_cstr("host:7");
    in.disk_path    = mc_str_from_cstr("/ssd/3.bucket");
    in.disk_offset  = 1u << 20;
    in.disk_length  = 8000;
    in.disk_crc     = 0xdeadbeefu;
    mc_oplog_record_encode(&b, &in);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    ck_assert_uint_eq(used, b.len);
    ck_assert_int_eq(out.has_disk, 1);
    ck_assert(mc_uuid_eq(out.disk_holder, in.disk_holder));
    ck_assert(mc_str_eq(out.disk_segment, in.disk_segment));
    ck_assert(mc_str_eq(out.disk_path, in.disk_path));
    ck_assert_uint_eq(out.disk_offset, 1u << 20);
    ck_assert_uint_eq(out.disk_length, 8000);
    ck_assert_uint_eq(out.disk_crc, 0xdeadbeefu);
    ck_assert_uint_eq(out.size, 8000);
    /* a tail tag this build does not know, with a valid CRC: refused */
    tail = b.len - (1 + 16 + 4 + 6 + 4 + 13 + 8 + 8 + 4);
    ck_assert_uint_eq(b.data[tail], MC_OPLOG_OBJ_TAIL_DISK);
    b.data[tail] = 9;
    mc_store_le32(b.data + 4, mc_crc32c(0, b.data + 8, b.len - MC_OPLOG_FRAME_HEADER + 1));
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_CORRUPT);
    /* a tail cut short, with a valid CRC: refused */
    b.data[tail] = MC_OPLOG_OBJ_TAIL_DISK;
    b.len -= 3;
    mc_store_le32(b.data, (uint32_t)(b.len - MC_OPLOG_FRAME_HEADER));
    mc_store_le32(b.data + 4, mc_crc32c(0, b.data + 8, b.len - MC_OPLOG_FRAME_HEADER + 1));
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_CORRUPT);
    mc_buf_cleanup(&b);
}
END_TEST

/* CRC32C: the standard check value, and long inputs (three joined lanes)
 * equal to the same bytes fed in short pieces (one chain). */
START_TEST(test_crc32c)
{
    static uint8_t big[300000];
    uint32_t x = 12345, whole, pieces = 0;

    ck_assert_uint_eq(mc_crc32c(0, "123456789", 9), 0xE3069283u);
    for (size_t i = 0; i < sizeof(big); i++) {
        x      = x * 1103515245u + 12345u;
        big[i] = (uint8_t)(x >> 16);
    }
    for (size_t len = 0; len <= sizeof(big); len += (len < 13000) ? 997 : 49999) {
        whole  = mc_crc32c(0, big, len);
        pieces = 0;
        for (size_t at = 0; at < len; at += 1000)
            pieces = mc_crc32c(pieces, big + at, MC_MIN((size_t)1000, len - at));
        ck_assert_msg(whole == pieces, "CRC32C of %zu bytes: %08x whole, %08x in pieces", len,
                      whole, pieces);
    }
}
END_TEST

START_TEST(test_task_roundtrip)
{
    mc_str_t targets[2] = {mc_str_from_cstr("h1:1"), mc_str_from_cstr("h2:2")}, got[2];
    mc_oplog_record_t in, out;
    mc_buf_t b;
    size_t used;

    memset(&in, 0, sizeof(in));
    in.type        = MC_OPLOG_TASK_SET;
    in.id.hi       = 11;
    in.owner.lo    = 12;
    in.task_type   = 2;
    in.status      = 4;
    in.created_ms  = 1000;
    in.updated_ms  = 2000;
    in.tenant      = mc_str_from_cstr("default");
    in.key         = mc_str_from_cstr("k");
    in.name        = mc_str_from_cstr("src:1");
    in.has_message = 1;
    in.message     = mc_str_from_cstr("boom");
    in.ntargets    = 2;
    in.targets     = targets;
    mc_buf_init(&b);
    mc_oplog_record_encode(&b, &in);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    ck_assert_uint_eq(used, b.len);
    ck_assert_uint_eq(out.id.hi, 11);
    ck_assert_uint_eq(out.owner.lo, 12);
    ck_assert_uint_eq(out.task_type, 2);
    ck_assert_uint_eq(out.status, 4);
    ck_assert_uint_eq(out.created_ms, 1000);
    ck_assert_uint_eq(out.updated_ms, 2000);
    ck_assert(mc_str_eq(out.name, in.name));
    ck_assert(mc_str_eq(out.message, in.message));
    ck_assert_uint_eq(out.ntargets, 2);
    mc_oplog_record_targets(&out, got);
    ck_assert(mc_str_eq(got[0], targets[0]));
    ck_assert(mc_str_eq(got[1], targets[1]));
    /* a target list running past the frame is refused */
    b.len -= 2;
    ck_assert_int_ne(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    mc_buf_cleanup(&b);
}
END_TEST

/* Any single flipped byte is caught; any cut reads as torn. */
START_TEST(test_corruption_and_truncation)
{
    mc_buf_t b;
    mc_oplog_record_t in = obj_set("some-key", 2), out;
    size_t used;

    mc_buf_init(&b);
    mc_oplog_record_encode(&b, &in);
    for (size_t i = 0; i < b.len; i++) {
        for (int bit = 0; bit < 8; bit++) {
            mc_oplog_decode_t d;
            b.data[i] ^= (uint8_t)(1u << bit);
            d = mc_oplog_record_decode(b.data, b.len, &out, &used);
            /* a corrupted length may also read as a longer, torn frame */
            ck_assert_msg(d != MC_OPLOG_DECODED, "flip of bit %d of byte %zu accepted", bit, i);
            b.data[i] ^= (uint8_t)(1u << bit);
        }
    }
    for (size_t n = 0; n < b.len; n++)
        ck_assert_int_eq(mc_oplog_record_decode(b.data, n, &out, &used), MC_OPLOG_TRUNCATED);
    ck_assert_int_eq(mc_oplog_record_decode(b.data, b.len, &out, &used), MC_OPLOG_DECODED);
    mc_buf_cleanup(&b);
}
END_TEST

static int count_cb(void *arg, const mc_oplog_record_t *r)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

START_TEST(test_scan_stops_at_torn_tail)
{
    mc_buf_t b;
    mc_oplog_record_t a = obj_set("a", 1), c = obj_set("c", 1);
    size_t first, valid;
    int n = 0;

    mc_buf_init(&b);
    mc_oplog_record_encode(&b, &a);
    first = b.len;
    mc_oplog_record_encode(&b, &c);
    /* whole */
    ck_assert_int_eq(mc_oplog_scan(b.data, b.len, count_cb, &n, &valid), MC_OPLOG_DECODED);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(valid, b.len);
    /* the second frame cut short */
    n = 0;
    ck_assert_int_eq(mc_oplog_scan(b.data, b.len - 3, count_cb, &n, &valid), MC_OPLOG_TRUNCATED);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(valid, first);
    /* the second frame corrupt */
    n = 0;
    b.data[b.len - 1] ^= 0x40;
    ck_assert_int_eq(mc_oplog_scan(b.data, b.len, count_cb, &n, &valid), MC_OPLOG_CORRUPT);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(valid, first);
    mc_buf_cleanup(&b);
}
END_TEST

/* Replay keeps the last OBJ_SET of a key, forgets deleted keys and
 * unmounted segments, and ignores markers. */
START_TEST(test_state_apply)
{
    mc_oplog_state_t s;
    mc_buf_t b;
    mc_oplog_record_t recs[6], r;
    size_t off = 0, used;

    recs[0] = seg_mount(1);
    recs[1] = seg_mount(2);
    recs[2] = obj_set("x", 1);
    recs[3] = obj_set("x", 2); /* replaces */
    recs[4] = obj_set("y", 1);
    memset(&recs[5], 0, sizeof(recs[5]));
    recs[5].type   = MC_OPLOG_OBJ_DEL;
    recs[5].tenant = mc_str_from_cstr("default");
    recs[5].key    = mc_str_from_cstr("y");
    ck_assert_int_eq(mc_oplog_state_init(&s), 0);
    mc_buf_init(&b);
    for (int i = 0; i < 6; i++)
        mc_oplog_record_encode(&b, &recs[i]);
    memset(&r, 0, sizeof(r));
    r.type  = MC_OPLOG_SEG_UNMOUNT;
    r.id.hi = 2;
    r.id.lo = 3;
    mc_oplog_record_encode(&b, &r);
    while (off < b.len) {
        ck_assert_int_eq(mc_oplog_record_decode(b.data + off, b.len - off, &r, &used),
                         MC_OPLOG_DECODED);
        ck_assert_int_eq(mc_oplog_state_apply(&s, &r), 0);
        off += used;
    }
    ck_assert_uint_eq(s.objs.count, 1);
    ck_assert_uint_eq(s.segs.count, 1);
    {
        mc_hmap_iter_t it;
        mc_oplog_entry_t *e = mc_container_of(mc_hmap_first(&s.objs, &it), mc_oplog_entry_t, node);
        ck_assert_int_eq(mc_oplog_record_decode(e->frame, e->len, &r, &used), MC_OPLOG_DECODED);
        ck_assert(mc_str_eq(r.key, mc_str_from_cstr("x")));
        ck_assert_uint_eq(r.nreplicas, 2);
        e = mc_container_of(mc_hmap_first(&s.segs, &it), mc_oplog_entry_t, node);
        ck_assert_int_eq(mc_oplog_record_decode(e->frame, e->len, &r, &used), MC_OPLOG_DECODED);
        ck_assert_uint_eq(r.id.hi, 1);
    }
    mc_oplog_state_clear(&s);
    ck_assert_uint_eq(s.objs.count, 0);
    mc_oplog_state_cleanup(&s);
    mc_buf_cleanup(&b);
}
END_TEST

/* Every entry of @p m, as a frame, into @p out (in no particular order). */
static size_t state_frames(const mc_hmap_t *m, const mc_oplog_entry_t **out, size_t cap)
{
    mc_hmap_iter_t it;
    size_t n = 0;
    for (mc_hnode_t *h = mc_hmap_first(m, &it); h != NULL; h = mc_hmap_next(m, &it)) {
        ck_assert_uint_lt(n, cap);
        out[n++] = mc_container_of(h, mc_oplog_entry_t, node);
    }
    return n;
}

/* @p a and @p b hold the same entries, byte for byte. */
static void assert_same_map(const mc_hmap_t *a, const mc_hmap_t *b)
{
    static const mc_oplog_entry_t *ea[4096], *eb[4096];
    size_t na = state_frames(a, ea, 4096), nb = state_frames(b, eb, 4096);
    ck_assert_msg(na == nb, "the states hold %zu and %zu entries", na, nb);
    for (size_t i = 0; i < na; i++) {
        size_t j = 0;
        while ((j < nb) && !((eb[j]->len == ea[i]->len) &&
                             (memcmp(eb[j]->frame, ea[i]->frame, ea[i]->len) == 0)))
            j++;
        ck_assert_msg(j < nb, "entry %zu of the one-by-one state is not in the batched one", i);
    }
}

/* The batched fold (mc_oplog_state_apply_all, which looks records ahead)
 * ends in the state the records give one by one, also when a key is set,
 * deleted and set again within its look-ahead, and folds the valid prefix
 * of a round whose last frame is torn. */
START_TEST(test_state_apply_all)
{
    mc_oplog_state_t one, all;
    mc_buf_t b;
    mc_oplog_record_t r;
    size_t off = 0, used;
    char key[32];

    mc_buf_init(&b);
    for (int i = 0; i < 600; i++) {
        /* keys recur 1..9 records apart: inside and beyond the look-ahead */
        snprintf(key, sizeof(key), "k%d", (i * 7) % 97);
        r = obj_set(key, 1 + (uint32_t)(i % 2));
        if (i % 5 == 3) {
            memset(&r, 0, sizeof(r));
            r.type   = MC_OPLOG_OBJ_DEL;
            r.tenant = mc_str_from_cstr("default");
            r.key    = mc_str_from_cstr(key);
        } else if (i % 11 == 4) {
            r = seg_mount((uint64_t)(i % 3));
        } else if (i % 13 == 6) {
            memset(&r, 0, sizeof(r));
            r.type  = MC_OPLOG_SEG_UNMOUNT;
            r.id.hi = (uint64_t)(i % 3);
            r.id.lo = (uint64_t)(i % 3) + 1;
        } else if (i % 17 == 8) {
            memset(&r, 0, sizeof(r));
            r.type = MC_OPLOG_LOG_BEGIN; /* a marker: no state */
            r.gen  = (uint64_t)i;
        }
        mc_oplog_record_encode(&b, &r);
    }
    ck_assert_int_eq(mc_oplog_state_init(&one), 0);
    ck_assert_int_eq(mc_oplog_state_init(&all), 0);
    while (off < b.len) {
        ck_assert_int_eq(mc_oplog_record_decode(b.data + off, b.len - off, &r, &used),
                         MC_OPLOG_DECODED);
        ck_assert_int_eq(mc_oplog_state_apply(&one, &r), 0);
        off += used;
    }
    ck_assert_int_eq(mc_oplog_state_apply_all(&all, b.data, b.len), 0);
    ck_assert_uint_eq(all.applied, one.applied);
    assert_same_map(&one.objs, &all.objs);
    assert_same_map(&one.segs, &all.segs);
    ck_assert_uint_gt(one.objs.count, 0);
    ck_assert_uint_gt(one.segs.count, 0);

    /* a torn last frame: the records before it are folded, 1 says so */
    mc_oplog_state_clear(&all);
    r = obj_set("torn", 1);
    mc_oplog_record_encode(&b, &r);
    ck_assert_int_eq(mc_oplog_state_apply_all(&all, b.data, b.len - 3), 1);
    ck_assert_uint_eq(all.applied, one.applied);
    assert_same_map(&one.objs, &all.objs);
    mc_oplog_state_cleanup(&one);
    mc_oplog_state_cleanup(&all);
    mc_buf_cleanup(&b);
}
END_TEST

/* The writer thread over the file sink: what was appended and kicked
 * becomes durable, the wake fd fires, and the file scans back. */
START_TEST(test_writer_file_sink)
{
    char dir[] = "/tmp/mc-oplog-XXXXXX";
    char path[4200];
    mc_oplog_sink_t *sink;
    mc_oplog_writer_t *w;
    int efd = eventfd(0, EFD_CLOEXEC);
    uint64_t seq = 0, v;
    int n = 0;
    size_t valid;
    struct stat sb;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_ge(efd, 0);
    sink = mc_oplog_file_sink_open(dir, 5);
    ck_assert_ptr_nonnull(sink);
    w = mc_oplog_writer_start(sink, efd);
    ck_assert_ptr_nonnull(w);
    for (int i = 0; i < 100; i++) {
        char key[16];
        mc_oplog_record_t r;
        snprintf(key, sizeof(key), "k%d", i);
        r = obj_set(key, 1);
        mc_oplog_record_encode(mc_oplog_writer_begin(w), &r);
        seq = mc_oplog_writer_end(w, 1);
    }
    ck_assert_uint_eq(seq, 100);
    mc_oplog_writer_kick(w);
    /* bounded: the eventfd read blocks until a round ends */
    for (int tries = 0; (mc_oplog_writer_durable(w) < seq) && (tries < 1000); tries++)
        ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
    ck_assert_uint_eq(mc_oplog_writer_durable(w), seq);
    ck_assert_int_eq(mc_oplog_writer_failed(w), 0);
    /* a rotation splits what is appended at the very point it is asked:
     * 3 more records to generation 5, the 2 after it to generation 6 */
    for (int i = 0; i < 5; i++) {
        mc_oplog_record_t r = obj_set("after", 1);
        if (i == 3)
            ck_assert_int_eq(mc_oplog_writer_rotate(w, 6), 0);
        mc_oplog_record_encode(mc_oplog_writer_begin(w), &r);
        seq = mc_oplog_writer_end(w, 1);
    }
    mc_oplog_writer_kick(w);
    for (int tries = 0; (mc_oplog_writer_durable(w) < seq) && (tries < 1000); tries++)
        ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
    ck_assert_uint_eq(mc_oplog_writer_durable(w), seq);
    mc_oplog_writer_stop(w);

    for (uint64_t gen = 5; gen <= 6; gen++) {
        int fd;
        uint8_t *data;
        ck_assert_int_eq(mc_oplog_path(path, sizeof(path), dir, "oplog", gen), 0);
        fd = open(path, O_RDONLY);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(fstat(fd, &sb), 0);
        data = malloc((size_t)sb.st_size);
        ck_assert_int_eq(read(fd, data, (size_t)sb.st_size), sb.st_size);
        close(fd);
        n = 0;
        ck_assert_int_eq(mc_oplog_scan(data, (size_t)sb.st_size, count_cb, &n, &valid),
                         MC_OPLOG_DECODED);
        /* LOG_BEGIN + 100 + 3, then LOG_BEGIN + 2 */
        ck_assert_int_eq(n, gen == 5 ? 104 : 3);
        free(data);
        unlink(path);
    }
    rmdir(dir);
    close(efd);
}
END_TEST

/* A pipelined sink for the writer's tests: every round submitted is
 * scanned, its records must be k<next>, k<next+1>, ... and the round's
 * sequence number the count of records submitted so far (a round that
 * reports records durable that it does not carry would acknowledge a put
 * the log lost).  Reported durable at once. */
typedef struct check_sink {
    mc_oplog_sink_t ops;
    uint64_t next;    /* records seen */
    unsigned nrounds;
    int bad;          /* a record out of order, or a seq not its count */
} check_sink_t;

static int check_rec_cb(void *arg, const mc_oplog_record_t *r)
{
    check_sink_t *cs = arg;
    char want[32];
    int n = snprintf(want, sizeof(want), "k%" PRIu64, cs->next);
    if ((r->type != MC_OPLOG_OBJ_SET) || (r->key.len != (size_t)n) ||
        (memcmp(r->key.ptr, want, (size_t)n) != 0))
        cs->bad = 1;
    cs->next++;
    return 0;
}

static int check_submit(mc_oplog_sink_t *sk, const void *data, size_t len, uint64_t seq)
{
    check_sink_t *cs = (check_sink_t *)sk;
    size_t valid;
    if (mc_oplog_scan(data, len, check_rec_cb, cs, &valid) != MC_OPLOG_DECODED)
        cs->bad = 1;
    if (cs->next != seq)
        cs->bad = 1;
    cs->nrounds++;
    cs->ops.done(cs->ops.done_arg, seq, 0);
    return 0;
}

static int check_sync(mc_oplog_sink_t *sk)
{
    (void)sk; /* every round is reported in its submit */
    return 0;
}

static void check_close(mc_oplog_sink_t *sk)
{
    (void)sk;
}

static void check_sink_init(check_sink_t *cs)
{
    memset(cs, 0, sizeof(*cs));
    cs->ops.sync   = check_sync;
    cs->ops.close  = check_close;
    cs->ops.submit = check_submit;
}

static uint64_t append_keys(mc_oplog_writer_t *w, uint64_t from, unsigned n)
{
    uint64_t seq = 0;
    for (unsigned i = 0; i < n; i++) {
        char key[32];
        mc_oplog_record_t r;
        snprintf(key, sizeof(key), "k%" PRIu64, from + i);
        r = obj_set(key, 1);
        mc_oplog_record_encode(mc_oplog_writer_begin(w), &r);
        seq = mc_oplog_writer_end(w, 1);
    }
    return seq;
}

static void wait_durable(mc_oplog_writer_t *w, int efd, uint64_t seq)
{
    uint64_t v;
    /* bounded: the eventfd read blocks until a round ends */
    for (int tries = 0; (mc_oplog_writer_durable(w) < seq) && (tries < 100000); tries++)
        ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
    ck_assert_uint_ge(mc_oplog_writer_durable(w), seq);
}

/* Many rounds while the thread runs: kicks at uneven points, the loop
 * reading the durable sequence number between them; every record arrives
 * once, in order, in a round whose sequence number counts it. */
START_TEST(test_writer_rounds_carry_their_records)
{
    check_sink_t cs;
    int efd = eventfd(0, EFD_CLOEXEC);
    mc_oplog_writer_t *w;
    uint64_t n = 0, seq = 0;
    unsigned x = 12345;

    check_sink_init(&cs);
    w = mc_oplog_writer_start(&cs.ops, efd);
    ck_assert_ptr_nonnull(w);
    while (n < 50000) {
        unsigned k = 1 + (x >> 16) % 97;
        x          = x * 1103515245u + 12345u;
        seq        = append_keys(w, n, k);
        n += k;
        ck_assert_uint_eq(seq, n);
        if ((x >> 20) % 4 != 0)
            mc_oplog_writer_kick(w);
        ck_assert_uint_le(mc_oplog_writer_durable_peek(w), seq);
    }
    mc_oplog_writer_kick(w);
    wait_durable(w, efd, seq);
    mc_oplog_writer_stop(w);
    ck_assert_int_eq(cs.bad, 0);
    ck_assert_uint_eq(cs.next, n);
    ck_assert_uint_gt(cs.nrounds, 1);
    close(efd);
}
END_TEST

/* Over a pipelined sink the thread takes the records each time
 * MC_OPLOG_EARLY_RECORDS are appended, without a kick (the loop's long
 * turn is coded while it goes on); over a file sink (a sync per round)
 * nothing goes before the kick. */
START_TEST(test_writer_early_hand_over)
{
    enum { N = 3 * MC_OPLOG_EARLY_RECORDS + 100 };
    check_sink_t cs;
    int efd = eventfd(0, EFD_CLOEXEC);
    mc_oplog_writer_t *w;
    mc_oplog_sink_t *fsink;
    char dir[] = "/tmp/mc-oplog-XXXXXX";
    uint64_t seq, rounds = 0, records = 0, bytes = 0;

    check_sink_init(&cs);
    w = mc_oplog_writer_start(&cs.ops, efd);
    ck_assert_ptr_nonnull(w);
    seq = append_keys(w, 0, N);
    /* unasked, the thread takes what is appended whenever 1024 records
     * wait, so at most 1023 are left for the kick (the thread may take
     * more at once: it takes all that waits) */
    wait_durable(w, efd, N - (MC_OPLOG_EARLY_RECORDS - 1));
    mc_oplog_writer_kick(w);
    wait_durable(w, efd, seq);
    mc_oplog_writer_stop(w);
    ck_assert_int_eq(cs.bad, 0);
    ck_assert_uint_eq(cs.next, N);

    ck_assert_ptr_nonnull(mkdtemp(dir));
    fsink = mc_oplog_file_sink_open(dir, 1);
    ck_assert_ptr_nonnull(fsink);
    w = mc_oplog_writer_start(fsink, efd);
    ck_assert_ptr_nonnull(w);
    seq = append_keys(w, 0, N);
    /* a file sink's round is its fsync: nothing is taken before the kick
     * (a thread woken early writes and syncs within a few ms here: 200 ms
     * bound the look), then all of it goes as one round */
    for (int i = 0; i < 20; i++) {
        ck_assert_uint_eq(mc_oplog_writer_durable(w), 0);
        poll(NULL, 0, 10);
    }
    mc_oplog_writer_stats(w, &rounds, &records, &bytes);
    ck_assert_uint_eq(rounds, 0);
    mc_oplog_writer_kick(w);
    wait_durable(w, efd, seq);
    mc_oplog_writer_stats(w, &rounds, &records, &bytes);
    ck_assert_uint_eq(rounds, 1);
    ck_assert_uint_eq(records, N);
    mc_oplog_writer_stop(w);
    close(efd);
    {
        char cmd[64];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        ck_assert_int_eq(system(cmd), 0);
    }
}
END_TEST

/* A record lost to an allocation failure while it was encoded (the
 * buffer's sticky oom): its round is never reported durable, and the
 * writer fails, so the loop stops acknowledging. */
START_TEST(test_writer_fails_a_round_that_lost_a_record)
{
    check_sink_t cs;
    int efd = eventfd(0, EFD_CLOEXEC);
    mc_oplog_writer_t *w;
    uint64_t seq, v;

    check_sink_init(&cs);
    w = mc_oplog_writer_start(&cs.ops, efd);
    ck_assert_ptr_nonnull(w);
    seq = append_keys(w, 0, 3);
    mc_oplog_writer_kick(w);
    wait_durable(w, efd, seq);
    append_keys(w, 3, 2);
    mc_oplog_writer_begin(w)->oom = 1; /* as a failed mc_buf_reserve leaves it */
    seq = mc_oplog_writer_end(w, 0);
    mc_oplog_writer_kick(w);
    /* the round ends failed (or, broken, reported durable): bounded */
    for (int tries = 0;
         !mc_oplog_writer_failed(w) && (mc_oplog_writer_durable(w) < seq) && (tries < 100000);
         tries++)
        ck_assert_int_eq(read(efd, &v, sizeof(v)), (ssize_t)sizeof(v));
    ck_assert_int_ne(mc_oplog_writer_failed(w), 0);
    ck_assert_uint_eq(mc_oplog_writer_durable(w), 3);
    ck_assert_uint_eq(seq, 5);
    mc_oplog_writer_stop(w);
    ck_assert_uint_eq(cs.next, 3);
    close(efd);
}
END_TEST

Suite *mc_test_oplog_suite(void)
{
    Suite *s   = suite_create("oplog");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_roundtrip_every_type);
    tcase_add_test(tc, test_task_roundtrip);
    tcase_add_test(tc, test_obj_set_disk_tail);
    tcase_add_test(tc, test_obj_set_dfs_tail);
    tcase_add_test(tc, test_crc32c);
    tcase_add_test(tc, test_corruption_and_truncation);
    tcase_add_test(tc, test_scan_stops_at_torn_tail);
    tcase_add_test(tc, test_state_apply);
    tcase_add_test(tc, test_state_apply_all);
    tcase_add_test(tc, test_writer_file_sink);
    tcase_add_test(tc, test_writer_rounds_carry_their_records);
    tcase_add_test(tc, test_writer_early_hand_over);
    tcase_add_test(tc, test_writer_fails_a_round_that_lost_a_record);
    suite_add_tcase(s, tc);
    return s;
}
