/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target for the operation log and snapshot decoder
 * (mooncake-master/durability/oplog.c): the input is a log file or a snapshot.  The
 * scan must stop at the first bad frame without reading past the input;
 * every record it accepts is folded into a replay state and must decode
 * again, with its replicas, from the frame the state kept; a valid record
 * re-encoded must give back the same bytes.
 *
 * Built with -DMC_FUZZ_WRITE_SEEDS it is instead a program that writes a
 * small log (every record type) into a corpus directory.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../mooncake-master/durability/oplog.h"

#ifndef MC_FUZZ_WRITE_SEEDS

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_oplog: %s\n", what);
    abort();
}

static int apply_cb(void *arg, const mc_oplog_record_t *r)
{
    mc_oplog_state_t *s = arg;
    mc_oplog_record_t copy = *r, again;
    mc_oplog_replica_t *reps = NULL;
    mc_str_t *tg = NULL;
    mc_buf_t b;
    size_t used;

    /* re-encoding a decoded record gives back its frame */
    if (r->nreplicas > 0) {
        reps = malloc(r->nreplicas * sizeof(*reps));
        if (reps == NULL)
            return 1;
        for (uint32_t i = 0; i < r->nreplicas; i++)
            mc_oplog_record_replica(r, i, &reps[i]);
    }
    copy.replicas = reps;
    if (r->ntargets > 0) {
        tg = malloc(r->ntargets * sizeof(*tg));
        if (tg == NULL) {
            free(reps);
            return 1;
        }
        mc_oplog_record_targets(r, tg);
    }
    copy.targets = tg;
    mc_buf_init(&b);
    mc_oplog_record_encode(&b, &copy);
    if (!b.oom && ((b.len != r->frame_len) || (memcmp(b.data, r->frame, b.len) != 0)))
        fail("a decoded record does not re-encode to its frame");
    if (!b.oom && (mc_oplog_record_decode(b.data, b.len, &again, &used) != MC_OPLOG_DECODED))
        fail("a re-encoded record does not decode");
    mc_buf_cleanup(&b);
    free(reps);
    free(tg);
    if (mc_oplog_state_apply(s, r) != 0)
        return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_oplog_state_t s;
    mc_hmap_iter_t it;
    size_t valid = 0;
    mc_oplog_decode_t d;

    if (mc_oplog_state_init(&s) != 0)
        return 0;
    d = mc_oplog_scan(data, size, apply_cb, &s, &valid);
    if (valid > size)
        fail("valid prefix longer than the input");
    if ((d == MC_OPLOG_DECODED) && (valid != size))
        fail("a clean scan that did not reach the end");
    /* what the state kept decodes again */
    for (mc_hnode_t *n = mc_hmap_first(&s.objs, &it); n != NULL; n = mc_hmap_next(&s.objs, &it)) {
        mc_oplog_entry_t *e = mc_container_of(n, mc_oplog_entry_t, node);
        mc_oplog_record_t r;
        size_t used;
        if ((mc_oplog_record_decode(e->frame, e->len, &r, &used) != MC_OPLOG_DECODED) ||
            (r.type != MC_OPLOG_OBJ_SET))
            fail("a kept object frame does not decode");
        for (uint32_t i = 0; i < r.nreplicas; i++) {
            mc_oplog_replica_t rep;
            mc_oplog_record_replica(&r, i, &rep);
        }
    }
    mc_oplog_state_cleanup(&s);
    return 0;
}

#else /* MC_FUZZ_WRITE_SEEDS */

int main(int argc, char **argv)
{
    static const mc_oplog_replica_t reps[2] = {{{1, 2}, 0, 4096}, {{3, 4}, 8192, 4096}};
    mc_oplog_record_t r[8];
    mc_str_t targets[2] = {{"a:1", 3}, {"b:2", 3}};
    mc_buf_t b;
    char path[4096];
    FILE *f;

    if (argc != 2)
        return 2;
    memset(r, 0, sizeof(r));
    r[0].type = MC_OPLOG_LOG_BEGIN;
    r[0].gen  = 1;
    r[1].type     = MC_OPLOG_SEG_MOUNT;
    r[1].id.hi    = 1;
    r[1].id.lo    = 2;
    r[1].name     = mc_str_from_cstr("host:1");
    r[1].protocol = mc_str_from_cstr("tcp");
    r[1].base     = 4096;
    r[1].size     = 1 << 20;
    r[2].type      = MC_OPLOG_OBJ_SET;
    r[2].tenant    = mc_str_from_cstr("default");
    r[2].key       = mc_str_from_cstr("key");
    r[2].size      = 4000;
    r[2].has_group = 1;
    r[2].group_id  = mc_str_from_cstr("g");
    r[2].nreplicas = 2;
    r[2].replicas  = reps;
    /* the versioned tail: a disk replica (docs/tiers.md) */
    r[2].has_disk     = 1;
    r[2].disk_holder  = r[1].id;
    r[2].disk_segment = mc_str_from_cstr("host:1");
    r[2].disk_path    = mc_str_from_cstr("/ssd/1.bucket");
    r[2].disk_offset  = 24;
    r[2].disk_length  = 4000;
    r[2].disk_crc     = 0x12345678u;
    r[3].type   = MC_OPLOG_OBJ_DEL;
    r[3].tenant = mc_str_from_cstr("default");
    r[3].key    = mc_str_from_cstr("key");
    r[4].type   = MC_OPLOG_SEG_UNMOUNT;
    r[4].id.hi  = 1;
    r[5].type   = MC_OPLOG_SNAP_BEGIN;
    r[6].type   = MC_OPLOG_SNAP_END;
    r[7].type        = MC_OPLOG_TASK_SET;
    r[7].tenant      = mc_str_from_cstr("default");
    r[7].key         = mc_str_from_cstr("key");
    r[7].name        = mc_str_from_cstr("src:1");
    r[7].has_message = 1;
    r[7].message     = mc_str_from_cstr("done");
    r[7].ntargets    = 2;
    r[7].targets     = targets;
    mc_buf_init(&b);
    for (int i = 0; i < 8; i++)
        mc_oplog_record_encode(&b, &r[i]);
    snprintf(path, sizeof(path), "%s/seed-log", argv[1]);
    f = fopen(path, "wb");
    if ((f == NULL) || (fwrite(b.data, 1, b.len, f) != b.len) || (fclose(f) != 0))
        return 1;
    mc_buf_cleanup(&b);
    return 0;
}

#endif
