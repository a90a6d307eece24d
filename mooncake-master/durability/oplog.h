/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The master's operation log: one record format shared by the log files
 * and the snapshots (docs/ha.md, "Durability").
 *
 * A record on disk is a frame:
 *
 *   u32 payload length | u32 CRC32C of (type byte + payload) | u8 type | payload
 *
 * all little-endian.  Records describe resulting state, not requests:
 * OBJ_SET carries the whole durable state of one complete object (size,
 * owner, pins, group, and every replica as segment id + offset + size),
 * OBJ_DEL names a key that is gone, SEG_MOUNT/SEG_UNMOUNT a segment.  So
 * replaying a record is idempotent, and a snapshot is just the OBJ_SET and
 * SEG_MOUNT records of the whole state between SNAP_BEGIN and SNAP_END.
 *
 * This file is the pure part, with no dependency on the master: the codec
 * (mc_oplog_record_encode/decode), a scanner over a byte range that stops
 * at the first torn or corrupt frame, the replay state that
 * mc_oplog_state_apply() folds records into, and the group-commit writer
 * (a thread that writes and syncs whatever was appended since its last
 * round to a sink, then wakes the event loop).  The sink is an interface:
 * the file sink writes DIR/oplog.<gen>; a replicated sink (etcd, a shared
 * log) implements the same four calls.
 *
 * Owns: the record format shared by the log files, the snapshots and the
 *   shipped log.
 * May call: nothing.
 */
#ifndef MC_MASTER_OPLOG_H
#define MC_MASTER_OPLOG_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/crc32c.h" /* mc_crc32c: the frame checksum */
#include "common/hashmap.h"
#include "common/slab.h"
#include "common/util.h"

/* Record types (the byte after the CRC).  Never renumber. */
enum {
    MC_OPLOG_LOG_BEGIN   = 1, /* first record of oplog.<gen>: gen */
    MC_OPLOG_SNAP_BEGIN  = 2, /* first record of snapshot.<gen>: gen, wall ms */
    MC_OPLOG_SNAP_END    = 3, /* last record of a snapshot: segment and object counts */
    MC_OPLOG_SEG_MOUNT   = 4,
    MC_OPLOG_SEG_UNMOUNT = 5,
    MC_OPLOG_OBJ_SET     = 6,
    MC_OPLOG_OBJ_DEL     = 7,
    MC_OPLOG_TASK_SET    = 8, /* a copy/move task's whole state */
    MC_OPLOG_TASK_DEL    = 9  /* a finished task forgotten */
};

#define MC_OPLOG_FRAME_HEADER 9u               /* length, CRC, type */
#define MC_OPLOG_MAX_PAYLOAD  (64u << 20)      /* a larger length is corruption */
#define MC_OPLOG_MAX_STR      (1u << 20)       /* any string field */
#define MC_OPLOG_MAX_REPLICAS 4096u
#define MC_OPLOG_MAX_TARGETS  1024u

/* The whole length of the frame that starts at @p p (its header read). */
static inline size_t mc_oplog_frame_len(const uint8_t *p)
{
    return MC_OPLOG_FRAME_HEADER + (size_t)mc_load_le32(p);
}

/* One replica of an OBJ_SET: where its bytes are. */
typedef struct mc_oplog_replica {
    mc_uuid_t seg;
    uint64_t offset; /* in the segment, as the allocator granted it */
    uint64_t size;   /* granted size */
} mc_oplog_replica_t;

/*
 * A decoded record.  Strings borrow the decoded bytes.  Which fields are
 * meaningful depends on @c type:
 *   LOG_BEGIN: gen;  SNAP_BEGIN: gen, wall_ms;  SNAP_END: nsegs, nobjs;
 *   SEG_MOUNT: id, owner, name, protocol, base, size;  SEG_UNMOUNT: id;
 *   OBJ_SET: tenant, key, size, owner, hard_pin, soft_pin_ttl_ms,
 *            has_group/group_id, nreplicas/replicas, then optionally a
 *            tail: tagged sections, each a u8 tag then its fields, at
 *            most one of each, in any order: tag 1 the disk_* fields,
 *            tag 2 the dfs_* fields (u32 shard, u64 offset, u64 span,
 *            u32 replica_num); an unknown tag is a corrupt record;
 *   OBJ_DEL: tenant, key;
 *   TASK_SET: id, owner (the assigned client), task_type, status,
 *            created_ms, updated_ms (wall clock), tenant, key, name (the
 *            source segment), ntargets/targets, has_message/message;
 *   TASK_DEL: id.
 * For encoding, @c replicas points at nreplicas entries; a decoded record
 * leaves it NULL and keeps the raw entries for mc_oplog_record_replica().
 */
typedef struct mc_oplog_record {
    uint8_t type;
    uint64_t gen;
    uint64_t wall_ms;
    uint64_t nsegs;
    uint64_t nobjs;
    mc_uuid_t id;
    mc_uuid_t owner;
    mc_str_t name;
    mc_str_t protocol;
    uint64_t base;
    uint64_t size;
    mc_str_t tenant;
    mc_str_t key;
    uint8_t hard_pin;
    uint8_t has_group;
    uint64_t soft_pin_ttl_ms;
    mc_str_t group_id;
    uint32_t nreplicas;
    const mc_oplog_replica_t *replicas; /* encode only */
    const uint8_t *raw_replicas;        /* decode only */
    /* OBJ_SET, optional tail (version 1, docs/tiers.md): the object's
     * disk replica.  Records without it decode with has_disk 0, so logs
     * written before the disk tier read unchanged. */
    uint8_t has_disk;
    mc_uuid_t disk_holder;
    mc_str_t disk_segment;
    mc_str_t disk_path;
    uint64_t disk_offset;
    uint64_t disk_length;
    uint32_t disk_crc;
    /* OBJ_SET: the object's DFS replica (tail tag 2, docs/tiers.md §6);
     * has_dfs 0 in records without it. */
    uint8_t has_dfs;
    uint32_t dfs_shard;
    uint64_t dfs_offset;
    uint64_t dfs_span;
    uint32_t dfs_replica_num;
    uint8_t task_type;
    uint8_t status;
    uint8_t has_message;
    uint64_t created_ms;
    uint64_t updated_ms;
    mc_str_t message;
    uint32_t ntargets;
    const mc_str_t *targets;            /* encode only */
    const uint8_t *raw_targets;         /* decode only */
    /* decode only: the whole frame the record came from */
    const uint8_t *frame;
    size_t frame_len;
} mc_oplog_record_t;


/* Append the frame of @p r to @p out (out->oom on allocation failure). */
void mc_oplog_record_encode(mc_buf_t *out, const mc_oplog_record_t *r);

/* The version-1 tail of OBJ_SET (a disk replica) into @p out; encoders
 * that build OBJ_SET field by field call it last. */
#define MC_OPLOG_OBJ_TAIL_DISK 1
void mc_oplog_put_disk_tail(mc_buf_t *out, mc_uuid_t holder, mc_str_t segment, mc_str_t path,
                            uint64_t offset, uint64_t length, uint32_t crc);
/* The DFS section of the OBJ_SET tail (a DFS replica), likewise. */
#define MC_OPLOG_OBJ_TAIL_DFS 2
void mc_oplog_put_dfs_tail(mc_buf_t *out, uint32_t shard, uint64_t offset, uint64_t span,
                           uint32_t replica_num);

/* Frame building for encoders that write fields straight from their own
 * structures: begin returns the frame's offset in @p out, end fills in
 * its length and CRC. */
size_t mc_oplog_frame_begin(mc_buf_t *out, uint8_t type);
void mc_oplog_frame_end(mc_buf_t *out, size_t at);

/* Results of mc_oplog_record_decode(). */
typedef enum mc_oplog_decode {
    MC_OPLOG_DECODED   = 0, /* *used bytes form a valid record */
    MC_OPLOG_TRUNCATED = 1, /* the input ends inside the frame (a torn tail) */
    MC_OPLOG_CORRUPT   = 2  /* bad length, CRC, type or fields */
} mc_oplog_decode_t;

/* Decode the frame at the start of @p p (@p n bytes available). */
mc_oplog_decode_t mc_oplog_record_decode(const uint8_t *p, size_t n, mc_oplog_record_t *r,
                                         size_t *used);

/* Replica @p i of a decoded OBJ_SET (i < nreplicas). */
void mc_oplog_record_replica(const mc_oplog_record_t *r, uint32_t i, mc_oplog_replica_t *out);
/* The targets of a decoded TASK_SET into @p out (ntargets entries). */
void mc_oplog_record_targets(const mc_oplog_record_t *r, mc_str_t *out);

/*
 * Decode the records of @p data in order, calling @p cb for each until it
 * returns non-zero.  *valid_p is the length of the prefix of whole, valid
 * frames.  Returns MC_OPLOG_DECODED when every byte was a valid frame (or
 * the callback stopped), else the problem at *valid_p.
 */
typedef int (*mc_oplog_scan_cb)(void *arg, const mc_oplog_record_t *r);
mc_oplog_decode_t mc_oplog_scan(const uint8_t *data, size_t len, mc_oplog_scan_cb cb, void *arg,
                                size_t *valid_p);

/* ---- replay state ---------------------------------------------------------- */

/*
 * The durable state as the records describe it: the latest SEG_MOUNT of
 * every mounted segment and the latest OBJ_SET of every live key, each
 * kept as its frame.  A restoring master folds the snapshot and the logs
 * into one, then installs it (snapshot.c); a standby would follow a
 * leader's log the same way.  Entries come from a slab of the state's own
 * (one thread at a time uses a state): a leader shipping its log folds
 * every record it writes, and one malloc() each grew the fold thread's
 * heap a few pages at a time, each growth an mprotect() that stalled the
 * event loop's page faults and interrupted its CPU.
 */
typedef struct mc_oplog_state {
    mc_hmap_t objs; /* mc_oplog_entry_t by (tenant, key) */
    mc_hmap_t segs; /* mc_oplog_entry_t by segment id */
    mc_hmap_t tasks; /* mc_oplog_entry_t by task id */
    mc_slab_t slab;  /* every entry, sizeof(mc_oplog_entry_t) + len bytes */
    uint64_t applied;
} mc_oplog_state_t;

typedef struct mc_oplog_entry {
    mc_hnode_t node;
    size_t len;
    uint8_t frame[]; /* the record's frame */
} mc_oplog_entry_t;

int mc_oplog_state_init(mc_oplog_state_t *s);
void mc_oplog_state_cleanup(mc_oplog_state_t *s);
/* Forget everything (a snapshot starts from nothing). */
void mc_oplog_state_clear(mc_oplog_state_t *s);
/* Fold one decoded record in.  0, or -1 when out of memory. */
int mc_oplog_state_apply(mc_oplog_state_t *s, const mc_oplog_record_t *r);
/* Fold the frames of @p data in, in order, as mc_oplog_state_apply would
 * one by one, loading each record's hash bucket and chain a few records
 * ahead (a large state misses the caches on both).  0 when every byte was
 * a whole valid frame, 1 when one was not (those before it are folded
 * in), -1 when out of memory. */
int mc_oplog_state_apply_all(mc_oplog_state_t *s, const uint8_t *data, size_t len);

/* ---- group-commit writer --------------------------------------------------- */

/*
 * Where the writer thread puts records.  Each call returns 0 or -1 with
 * errno set; a failure stops the writer (mc_oplog_writer_failed).
 *   append: write @p len bytes at the end of the current log;
 *   sync:   make everything appended durable;
 *   rotate: later appends go to a new log of generation @p gen (after a
 *           sync of the old one);
 *   close:  release everything (no sync).
 */
typedef struct mc_oplog_sink {
    int (*append)(struct mc_oplog_sink *sk, const void *data, size_t len);
    int (*sync)(struct mc_oplog_sink *sk);
    int (*rotate)(struct mc_oplog_sink *sk, uint64_t gen);
    void (*close)(struct mc_oplog_sink *sk);
    /*
     * Optional (NULL for the file sink): a sink that keeps several rounds
     * in flight (ship.c).  submit takes a copy of a whole round whose last
     * record has sequence number @p seq and returns without waiting for
     * it (it may block while too many rounds are in flight); the sink
     * then calls done(done_arg, seq, 0) for every round in submission
     * order once it and every round before it are durable, or
     * done(done_arg, seq, -1) once one cannot be (nothing after it is
     * durable).  sync waits until every submitted round has been
     * reported.  The writer sets done/done_arg before its first submit.
     */
    int (*submit)(struct mc_oplog_sink *sk, const void *data, size_t len, uint64_t seq);
    void (*done)(void *done_arg, uint64_t seq, int failed);
    void *done_arg;
} mc_oplog_sink_t;

/* The file sink: DIR/oplog.<gen>, fdatasync per round, the directory
 * fsynced when a file is created.  NULL with errno set on failure. */
mc_oplog_sink_t *mc_oplog_file_sink_open(const char *dir, uint64_t gen);

/* write(2) all of @p data to a file, over short writes and EINTR; 0 or
 * -1 with errno set. */
int mc_oplog_write_all(int fd, const void *data, size_t len);

/* fsync a directory (after creating or renaming a file in it). */
int mc_oplog_fsync_dir(const char *dir);

/* The path of a file of generation @p gen ("oplog" or "snapshot"). */
int mc_oplog_path(char *out, size_t outlen, const char *dir, const char *kind, uint64_t gen);

typedef struct mc_oplog_writer mc_oplog_writer_t;

/*
 * Start the writer thread over @p sink (taken over).  @p wake_fd is
 * written (8 bytes, eventfd style) after every round that made records
 * durable or failed.  NULL on failure.
 */
mc_oplog_writer_t *mc_oplog_writer_start(mc_oplog_sink_t *sink, int wake_fd);
/* Stop the thread after it has written and synced what was appended;
 * close the sink. */
void mc_oplog_writer_stop(mc_oplog_writer_t *w);

/* The buffer records are encoded into, and the call that ends an append
 * (event-loop thread only): begin locks the buffer, end unlocks it and
 * returns the sequence number of what was appended. */
mc_buf_t *mc_oplog_writer_begin(mc_oplog_writer_t *w);
uint64_t mc_oplog_writer_end(mc_oplog_writer_t *w, unsigned nrecords);
/* Ask the thread to write what was appended (the group-commit point).
 * Over a pipelined sink the thread is also handed the records each time
 * MC_OPLOG_EARLY_RECORDS have been appended since it last took them. */
void mc_oplog_writer_kick(mc_oplog_writer_t *w);
#define MC_OPLOG_EARLY_RECORDS 1024u
/* Records appended from here on go to generation @p gen, those before to
 * the current one (kicks).  -1 while an earlier rotation is not done. */
int mc_oplog_writer_rotate(mc_oplog_writer_t *w, uint64_t gen);
/* Sequence numbers: of the last record appended, of the last durable. */
uint64_t mc_oplog_writer_appended(const mc_oplog_writer_t *w);
uint64_t mc_oplog_writer_durable(mc_oplog_writer_t *w);
/* The last durable sequence number without the writer's lock (one atomic
 * load, for polling; mc_oplog_writer_durable also keeps the statistics). */
uint64_t mc_oplog_writer_durable_peek(const mc_oplog_writer_t *w);
/* Non-zero once the sink failed: nothing after it is durable. */
int mc_oplog_writer_failed(mc_oplog_writer_t *w);
/* Rounds (write + sync) done, and records written: for metrics. */
void mc_oplog_writer_stats(mc_oplog_writer_t *w, uint64_t *rounds, uint64_t *records,
                           uint64_t *bytes);

#endif /* MC_MASTER_OPLOG_H */
