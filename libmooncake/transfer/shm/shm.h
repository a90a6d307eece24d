/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The same-host shared-memory path of the transfer engine
 * (docs/transfer.md, "Same-host shared memory").
 *
 * A region registered with a sealed memfd (mc_te_mem_reg_shared) can be
 * mapped by a peer engine on the same host, which then moves bytes with
 * memcpy instead of a socket.  The holder serves one abstract-namespace
 * unix socket (SOCK_SEQPACKET) whose name it publishes in its segment
 * descriptor ("shm_name"); abstract names are private to a network
 * namespace, so a reader elsewhere simply fails to connect and keeps using
 * the network transport.  Over that socket a reader asks "which shared
 * region holds this address" and gets the region's bounds and its memfd
 * (SCM_RIGHTS) — only regions registered for remote access, so a peer
 * reaches exactly what it could reach over TCP.
 *
 * Revocation: the holder keeps a small control memfd, mapped read-only by
 * readers, with one 64-bit word per shared region.  A live region's word
 * holds its generation (unique per registration); dereg zeroes it.  A
 * reader checks the word before and after each copy, so an access that
 * overlaps an unregistration fails the way the network path refuses it,
 * and a stale mapping is dropped and asked for again.  Unlike the network
 * path, dereg cannot wait for a reader's copy in progress: a write that
 * was already copying may still land in the old pages after dereg returns
 * (and then fails).  So a memfd must never be reused for other data once
 * its region is unregistered; the store unmaps and closes its segments'
 * memfds, and the pages live on only in stale mappings.
 *
 * Reuse under a later generation is different: the region stays, and the
 * master hands its memory to a new owner.  A direct write that saw the
 * earlier word must be done before the new owner's first byte lands, as
 * the network path waits out its own writes.  So each peer counts its
 * direct writes in progress per slot, in a memfd the holder gives it on
 * request (WRITERS) and reads; and the control memfd carries, after the
 * words, one gate word per slot.  A writer counts itself, then checks that
 * the gate is open and the word unchanged, else uncounts and goes over the
 * network.  The holder closes the gate, waits until no connection counts a
 * write in the slot, and only then stores the later word and opens the
 * gate (mc_te_shm_slot_fence).
 *
 * Safety of the reader: a granted memfd must be sealed against shrinking
 * (F_SEAL_SHRINK) and at least as long as the region, so a hostile or
 * buggy holder can never make a copy fault; every reply is checked before
 * anything is mapped.  Both sides only talk to processes of the same user.
 */
#ifndef MC_TRANSFER_SHM_H
#define MC_TRANSFER_SHM_H

#include <stddef.h>
#include <stdint.h>

#include <mooncake/status.h>
#include <mooncake/transfer.h>

/* Longest published name, '@' (abstract namespace) included. */
#define MC_TE_SHM_NAME_MAX 64u
/* Shared regions one engine can offer at once (control words). */
#define MC_TE_SHM_SLOTS    4096u

/* ---- wire format (host byte order: both ends share one kernel) ---------- */

#define MC_TE_SHM_MAGIC    0x4d434d53u /* "SMCM" */
#define MC_TE_SHM_VERSION  1u

enum mc_te_shm_op {
    MC_TE_SHM_HELLO = 1, /* reply carries the control memfd */
    MC_TE_SHM_MAP   = 2, /* reply carries the region's memfd when shared */
    MC_TE_SHM_WRITERS = 3 /* reply carries this connection's writer-count memfd */
};

enum mc_te_shm_answer {
    MC_TE_SHM_OK         = 0, /* fd attached */
    MC_TE_SHM_NO_REGION  = 1, /* no remote-access region holds the range */
    MC_TE_SHM_NOT_SHARED = 2, /* a region holds it but has no memfd: use TCP */
    MC_TE_SHM_BAD        = 3  /* malformed request */
};

typedef struct mc_te_shm_req {
    uint32_t magic;
    uint16_t version;
    uint16_t op;
    uint64_t addr;
    uint64_t len;
} mc_te_shm_req_t;

typedef struct mc_te_shm_resp {
    uint32_t magic;
    uint32_t answer;      /* enum mc_te_shm_answer */
    uint64_t region_addr; /* MAP, OK or NOT_SHARED: the region's bounds;
                           * HELLO with MC_TE_SHM_HELLO_LIFE: the holder's pid, */
    uint64_t region_len;  /* and the id of its thread holding the life lock */
    uint64_t gen;         /* MAP, OK: the region's control word value; HELLO: flags */
    uint32_t slot;        /* MAP, OK: index of that word; HELLO with
                           * MC_TE_SHM_HELLO_LIFE: the life lock's word's offset
                           * in the control memfd's life page */
    uint32_t nslots;      /* HELLO: words in the control memfd */
} mc_te_shm_resp_t;

/* HELLO's flag: the control memfd has a life page whose lock the holder's
 * serving thread holds (its pid, thread id and word offset given). */
#define MC_TE_SHM_HELLO_LIFE 1u

/* ---- holder side --------------------------------------------------------- */

typedef struct mc_te mc_te_t;
typedef struct mc_te_shm_server mc_te_shm_server_t;

/* Create the control memfd and the listening socket and start serving
 * te's regions.  MC_OK with *srv_p NULL when the kernel lacks what it needs
 * (the engine then simply has no same-host path). */
mc_status_t mc_te_shm_server_start(mc_te_t *te, mc_te_shm_server_t **srv_p);
/* Stop the thread and close everything; peers see their socket hang up. */
void mc_te_shm_server_stop(mc_te_shm_server_t *srv);
/* The name to publish ("@..."). */
const char *mc_te_shm_server_name(const mc_te_shm_server_t *srv);
/* Give a region a control word holding a fresh generation, or @p want when
 * it is non-zero (the region's own registration generation, which has its
 * top bit set and so never equals a counted one).  0 on success, -1 when
 * every slot is taken (the region is then not shared). */
int mc_te_shm_slot_open(mc_te_shm_server_t *srv, uint64_t want, uint32_t *slot_p,
                        uint64_t *gen_p);
/* Give the word of a live slot @p gen, the region's later generation
 * (engine.h, mc_te_gen_enter), once every direct write that saw the
 * earlier one is done: readers that mapped it under the earlier one see a
 * stale word and refuse what they copied meanwhile, and no earlier write
 * lands after the call.  -1 when a write is still counted at
 * @p deadline_ms (a peer stopped in the middle of a copy): the word stays
 * and the slot stays closed to direct writes until a later call gets
 * through. */
int mc_te_shm_slot_fence(mc_te_shm_server_t *srv, uint32_t slot, uint64_t gen,
                         uint64_t deadline_ms);
/* Zero the word (readers stop using the region) and free the slot. */
void mc_te_shm_slot_close(mc_te_shm_server_t *srv, uint32_t slot);
/* 1 when @p fd is a memfd sealed against shrinking of at least @p len
 * bytes: the only kind of fd a region may be shared with. */
int mc_te_shm_fd_shareable(int fd, uint64_t len);

/* ---- reader side --------------------------------------------------------- */

typedef struct mc_te_shm_peer mc_te_shm_peer_t;

/* Connect to a holder's published name.  NULL when it is not reachable:
 * another host or network namespace, another user, an old holder, or a
 * malformed answer.  @p timeout_ms bounds every exchange with the holder. */
mc_te_shm_peer_t *mc_te_shm_peer_open(const char *name, int timeout_ms);
void mc_te_shm_peer_close(mc_te_shm_peer_t *p);
/* The name the peer was opened with. */
const char *mc_te_shm_peer_name(const mc_te_shm_peer_t *p);
/* 0 once the holder hung up (its process ended or it stopped serving). */
int mc_te_shm_peer_alive(mc_te_shm_peer_t *p);
/*
 * After direct writes and before they are reported done (mc_te_shm_xfer and
 * mc_te_shm_write_many call it for every write they copied, and answer
 * MC_TRANSFER_FAIL when it says 0): 1 when the holder is not exiting, 0
 * (and the holder is given up, as on a hang-up) when it is.  A holder killed with SIGKILL keeps its socket open until its memory
 * is torn down, milliseconds later, so a copy into its memory in between
 * would otherwise be reported written into a process that is already
 * gone.  Checks the life lock's word (marked by the kernel as the serving
 * thread exits, in any pid namespace) and, where the holder's pid is
 * visible here, that thread's /proc stat (a pending SIGKILL, exiting,
 * zombie or reaped).  That read costs 4-10 us, so one that found the
 * holder live stands for 250 us: a write confirmed that long after the
 * kill is refused, and a stream of small writes pays a clock read each.
 */
int mc_te_shm_holder_confirm(mc_te_shm_peer_t *p);

/*
 * Move len (> 0) bytes between local memory and [remote, remote+len) of the
 * holder through shared memory.  Returns 1 when it handled the request and
 * wrote *st_p (MC_OK, MC_INVALID_READ/WRITE when the region was
 * unregistered during the copy, or MC_TRANSFER_FAIL for a write into a
 * holder that is exiting: mc_te_shm_holder_confirm), 0 when the range is
 * not shared (or the
 * holder is gone): the caller then uses the network transport, whose range
 * check stays the authority.  A READ with @p gen non-zero is refused
 * (handled, MC_INVALID_READ) when the live mapping holding it was granted
 * under another generation (engine.h, mc_te_transfer_gen).  Thread-safe.
 */
int mc_te_shm_xfer(mc_te_shm_peer_t *p, mc_te_op_t op, void *local, uint64_t remote,
                   uint64_t len, uint64_t gen, mc_status_t *st_p);
/* 1 when [remote, remote+len) lies in a region already mapped and live
 * (no exchange with the holder). */
int mc_te_shm_mapped(mc_te_shm_peer_t *p, uint64_t remote, uint64_t len);
/* 1 when mc_te_shm_write_many of pieces spanning [lo, hi) naming @p gen
 * (0: any) would copy now: the region is mapped and live under exactly
 * that generation, this connection has writer counts and the slot's gate
 * is open.  A hint only: a fence may begin right after it answers, and
 * mc_te_shm_write_many then declines. */
int mc_te_shm_write_ready(mc_te_shm_peer_t *p, uint64_t lo, uint64_t hi, uint64_t gen);
/* 1 when [remote, remote+len) lies in a region mapped and live whose word
 * is an earlier counter of @p gen's registration: the holder adopts @p gen
 * from the first request over the network that names it, and same-host
 * copies naming it wait for that (gen_mismatch).  A hint only. */
int mc_te_shm_gen_unadopted(mc_te_shm_peer_t *p, uint64_t remote, uint64_t len, uint64_t gen);
/*
 * Read many pieces at once: local[j] <- [remote[j], +length[j]) of the
 * holder for j < n, every piece inside [lo, hi) (the caller's span of
 * them), which must lie in one region already mapped and live.  One lock
 * and one lookup for the batch, then one memcpy per piece.  Returns 1 when
 * it handled them and wrote *st_p (as mc_te_shm_xfer), 0 when it copied
 * nothing: the caller then moves them one by one (which maps the region).
 * The op and segment of the requests are not looked at.  Thread-safe.
 */
int mc_te_shm_read_many(mc_te_shm_peer_t *p, const mc_te_request_t *reqs, size_t n, uint64_t lo,
                        uint64_t hi, uint64_t gen, mc_status_t *st_p);
/*
 * Write many pieces at once, the other way round: [remote[j], +length[j])
 * of the holder <- local[j] for j < n, every piece inside [lo, hi), which
 * must lie in one region already mapped and live.  One lock, one lookup
 * and one check that the region stayed the same for the batch, the pieces
 * copied with streaming stores (common/copy.h, as mc_te_shm_read_many) --
 * a batch of thousands of small parts (the rows of a ragged column)
 * otherwise pays the lookup, the lock and a full fence per piece, and a
 * row-sized memcpy reads every destination line before it fills it.  Returns 1 when it
 * handled them and wrote *st_p (as mc_te_shm_xfer), 0 when it copied
 * nothing: the caller then moves them one by one (which maps the region
 * and takes a generation the holder has not adopted yet to the network).
 * The op and segment of the requests are not looked at.  Thread-safe.
 */
int mc_te_shm_write_many(mc_te_shm_peer_t *p, const mc_te_request_t *reqs, size_t n,
                         uint64_t lo, uint64_t hi, uint64_t gen, mc_status_t *st_p);

#endif /* MC_TRANSFER_SHM_H */
