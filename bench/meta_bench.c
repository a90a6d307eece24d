/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Metadata benchmark: how many object-metadata operations per second the
 * master sustains, and how much resident memory it spends per object.
 *
 * The data path is left out on purpose.  The parent mounts one large fake
 * segment for a fake client id (MOUNT_SEGMENT only records a base address
 * and a size; the master never touches those bytes), then forks worker
 * processes that each open their own master connection and run the same
 * phases in lock step: PUT_START, PUT_END, EXIST_KEY and GET_REPLICA_LIST
 * one key per request, then the BATCH_* forms with --batch keys per
 * request.  Each connection keeps between depth/2 and depth requests in
 * flight (the master answers a connection's frames in order, so a refill
 * after every half window keeps it busy without one syscall per request):
 * the figure is the master's rate, not a round trip's.
 *
 * A phase starts when the parent releases every worker at once and ends
 * when the last one reports; ops/s is the total over all workers divided
 * by that wall time.  Around the batched put phases the parent samples
 * the master's VmRSS from /proc, so the difference over the --objects
 * keys put there is the per-object cost: all of it (record, key, index
 * bucket, the segment allocator's block) is held to the target of
 * 150 bytes, and the figure without the key bytes is printed beside it.
 *
 *   meta_bench [--master HOST:PORT | --master-bin PATH] [--objects N]
 *              [--single N] [--procs P] [--depth D] [--batch B]
 *              [--value-size BYTES] [--durability DIR]
 *
 * Without --master it starts --master-bin (default ./mooncake_master) on
 * free loopback ports and stops it at the end.  Memory is only reported
 * when the master's /proc entry is readable (same host).
 *
 * --durability DIR runs everything twice in one invocation, against a
 * master without and then with its operation log (--enable_snapshot, the
 * log in a fresh directory under DIR), and prints each phase's durable
 * rate as a ratio of the in-memory one, then the batched puts
 * (BATCH_PUT_START plus BATCH_PUT_END).  The pair runs --repeat times (3),
 * alternating, and each side's best rate per phase counts: on a shared
 * machine other load only ever slows a run down.  A third master, durable
 * with a snapshot every second, is then filled the same way, and the
 * longest event-loop pause of its snapshot walks is reported: as the
 * master measures it (its log) and as a client sees it (the slowest of
 * back-to-back PINGs over three seconds of snapshots).  DIR should be on the disk to measure:
 * a tmpfs makes every sync free.
 *
 * --ha-etcd HOST:PORT[;HOST:PORT] (with --durability) makes the durable
 * side a master started with upstream's production flags, --enable_ha
 * --ha_backend_type=etcd --ha_backend_connstring=... --enable_oplog, so the
 * operation log is shipped through that etcd (docs/ha.md), each run under a
 * cluster id of its own; the snapshot-stall run is skipped.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "store/master_client.h"
#include "wire/wire.h"

#define KEY_LEN   16
#define MAX_PROCS 16

enum {
    PH_PUT_START, PH_PUT_END, PH_EXIST, PH_GET,
    PH_BPUT_START, PH_BPUT_END, PH_BEXIST, PH_BGET,
    PH_COUNT
};

static const char *const phase_name[PH_COUNT] = {
    "PUT_START", "PUT_END", "EXIST_KEY", "GET_REPLICA_LIST",
    "BATCH_PUT_START", "BATCH_PUT_END", "BATCH_EXIST_KEY", "BATCH_GET_REPLICA_LIST",
};

typedef struct bench_opts {
    char master[300];
    const char *master_bin;
    uint64_t objects;    /* keys put by the batched phases, all workers */
    uint64_t single;     /* keys per worker for the single-key phases */
    unsigned procs;
    unsigned depth;
    unsigned batch;
    uint64_t value_size;
    const char *durability; /* --durability DIR, or NULL */
    const char *ha_etcd;    /* --ha-etcd ENDPOINTS: the log shipped through etcd */
    unsigned repeat;        /* --durability: off/on pairs; the best of each counts */
} bench_opts_t;

/* One worker's view: its connection and the key space it owns. */
typedef struct worker {
    const bench_opts_t *o;
    unsigned idx;
    mc_mconn_t *conn;
    mc_uuid_t client_id;
    char *sbuf, *bbuf;   /* KEY_LEN bytes per key, no terminator */
    mc_str_t *skeys;     /* the single-key phases' keys */
    mc_str_t *bkeys;     /* the batched phases' keys */
    mc_str_t *keys;      /* the current phase's: skeys or bkeys */
    uint64_t nkeys;
    uint64_t lengths[4096];
    uint64_t failures;
} worker_t;

/* Count a failed key (or request, @p st its status); the first of a
 * phase is shown, so a failed run says why. */
static void count_failure(worker_t *w, int ph, int st)
{
    if (w->failures++ == 0)
        fprintf(stderr, "meta_bench: worker %u, %s: first failure: %s\n", w->idx,
                phase_name[ph], mc_status_name(st));
}

static void make_key(char *out, char kind, unsigned worker, uint64_t i)
{
    char tmp[KEY_LEN + 1];
    snprintf(tmp, sizeof(tmp), "%c%1x%014" PRIu64, kind, worker & 0xf, (uint64_t)(i % 100000000000000ull));
    memcpy(out, tmp, KEY_LEN);
}

static void default_config(mc_wire_config_t *c)
{
    memset(c, 0, sizeof(*c));
    c->replica_num = 1;
}

/* Encode request @p i of phase @p ph (a key or a batch of keys). */
static void encode_one(worker_t *w, int ph, uint64_t i)
{
    mc_mconn_t *c = w->conn;
    uint32_t id = mc_mconn_take_id(c);
    unsigned b = w->o->batch;
    uint64_t first = i * b;
    uint32_t n = (uint32_t)MC_MIN((uint64_t)b, w->nkeys - MC_MIN(first, w->nkeys));
    mc_wire_str_list_t kl = {n, w->keys + MC_MIN(first, w->nkeys)};

    switch (ph) {
    case PH_PUT_START: {
        mc_wire_put_start_req_t r = {.client_id = w->client_id, .key = w->keys[i],
                                     .length = w->o->value_size};
        default_config(&r.config);
        mc_wire_encode_put_start_req(&c->wbuf, id, &r);
        break;
    }
    case PH_PUT_END: {
        mc_wire_put_end_req_t r = {.client_id = w->client_id, .key = w->keys[i]};
        mc_wire_encode_put_end_req(&c->wbuf, id, &r);
        break;
    }
    case PH_EXIST: {
        mc_wire_exist_key_req_t r = {.key = w->keys[i]};
        mc_wire_encode_exist_key_req(&c->wbuf, id, &r);
        break;
    }
    case PH_GET: {
        mc_wire_get_replica_list_req_t r = {.key = w->keys[i]};
        mc_wire_encode_get_replica_list_req(&c->wbuf, id, &r);
        break;
    }
    case PH_BPUT_START: {
        mc_wire_batch_put_start_req_t r = {.client_id = w->client_id, .keys = kl,
                                           .lengths = {n, w->lengths}};
        default_config(&r.config);
        mc_wire_encode_batch_put_start_req(&c->wbuf, id, &r);
        break;
    }
    case PH_BPUT_END: {
        mc_wire_batch_put_end_req_t r = {.client_id = w->client_id, .keys = kl};
        mc_wire_encode_batch_put_end_req(&c->wbuf, id, &r);
        break;
    }
    case PH_BEXIST: {
        mc_wire_batch_exist_key_req_t r = {.keys = kl};
        mc_wire_encode_batch_exist_key_req(&c->wbuf, id, &r);
        break;
    }
    default: {
        mc_wire_batch_get_replica_list_req_t r = {.keys = kl};
        mc_wire_encode_batch_get_replica_list_req(&c->wbuf, id, &r);
        break;
    }
    }
}

/*
 * Read the response to request @p id and count per-key failures: every
 * key of the run must succeed (exist, be found, be allocated), otherwise
 * the rate would be measuring error paths.
 */
static mc_status_t recv_one(worker_t *w, int ph, uint32_t id)
{
    mc_mconn_t *c = w->conn;
    mc_status_t st;
    uint32_t k;

    switch (ph) {
    case PH_PUT_START: {
        mc_wire_put_start_resp_t r;
        st = mc_master_recv_put_start(c, id, &r);
        break;
    }
    case PH_PUT_END: {
        mc_wire_put_end_resp_t r;
        st = mc_master_recv_put_end(c, id, &r);
        break;
    }
    case PH_EXIST: {
        mc_wire_exist_key_resp_t r;
        st = mc_master_recv_exist_key(c, id, &r);
        if ((st == MC_OK) && (r.exists != 1))
            count_failure(w, ph, MC_OBJECT_NOT_FOUND);
        break;
    }
    case PH_GET: {
        mc_wire_get_replica_list_resp_t r;
        st = mc_master_recv_get_replica_list(c, id, &r);
        break;
    }
    case PH_BPUT_START: {
        mc_wire_batch_put_start_resp_t r;
        st = mc_master_recv_batch_put_start(c, id, &r);
        for (k = 0; (st == MC_OK) && (k < r.results.n); k++)
            if (r.results.v[k].status != MC_OK)
                count_failure(w, ph, r.results.v[k].status);
        break;
    }
    case PH_BPUT_END: {
        mc_wire_batch_put_end_resp_t r;
        st = mc_master_recv_batch_put_end(c, id, &r);
        for (k = 0; (st == MC_OK) && (k < r.statuses.n); k++)
            if (r.statuses.v[k] != MC_OK)
                count_failure(w, ph, r.statuses.v[k]);
        break;
    }
    case PH_BEXIST: {
        mc_wire_batch_exist_key_resp_t r;
        st = mc_master_recv_batch_exist_key(c, id, &r);
        for (k = 0; (st == MC_OK) && (k < r.results.n); k++)
            if (r.results.v[k] != 1)
                count_failure(w, ph, MC_OBJECT_NOT_FOUND);
        break;
    }
    default: {
        mc_wire_batch_get_replica_list_resp_t r;
        st = mc_master_recv_batch_get_replica_list(c, id, &r);
        for (k = 0; (st == MC_OK) && (k < r.results.n); k++)
            if (r.results.v[k].status != MC_OK)
                count_failure(w, ph, r.results.v[k].status);
        break;
    }
    }
    if ((st != MC_OK) && !c->broken) {
        /* a whole-request error from the master: every key in it failed */
        count_failure(w, ph, st);
        st = MC_OK;
    }
    return st;
}

/* Run @p nreq requests of phase @p ph with a sliding window. */
static mc_status_t run_phase(worker_t *w, int ph, uint64_t nreq)
{
    mc_mconn_t *c = w->conn;
    unsigned depth = w->o->depth, half = MC_MAX(depth / 2, 1u);
    uint64_t sent = 0, done = 0;
    uint32_t next_recv = c->next_id;
    mc_status_t st;

    mc_mconn_begin(c);
    while ((sent < nreq) && (sent < depth))
        encode_one(w, ph, sent++);
    if ((st = mc_mconn_send(c)) != MC_OK)
        return st;
    while (done < nreq) {
        unsigned k, chunk = (unsigned)MC_MIN((uint64_t)half, nreq - done);
        /* the arena holds decoded lists; begin() drops the ones read */
        mc_mconn_begin(c);
        for (k = 0; k < chunk; k++) {
            if ((st = recv_one(w, ph, next_recv)) != MC_OK)
                return st;
            next_recv = (next_recv + 1 == 0) ? 1 : next_recv + 1;
            done++;
        }
        mc_mconn_begin(c);
        for (k = 0; (k < chunk) && (sent < nreq); k++)
            encode_one(w, ph, sent++);
        if ((c->wbuf.len > 0) && ((st = mc_mconn_send(c)) != MC_OK))
            return st;
    }
    return MC_OK;
}

/* Build @p n keys of @p kind into one block; 0 or -1 (out of memory). */
static int fill_keys(unsigned idx, char kind, uint64_t n, char **buf_p, mc_str_t **keys_p)
{
    uint64_t i;
    char *buf       = malloc(MC_MAX(n, 1) * KEY_LEN);
    mc_str_t *keys  = malloc(MC_MAX(n, 1) * sizeof(*keys));
    *buf_p  = buf;
    *keys_p = keys;
    if ((buf == NULL) || (keys == NULL))
        return -1;
    for (i = 0; i < n; i++) {
        make_key(buf + i * KEY_LEN, kind, idx, i);
        keys[i].ptr = buf + i * KEY_LEN;
        keys[i].len = KEY_LEN;
    }
    return 0;
}

/* Worker process: wait for "go" on @p go_fd, run, report on @p done_fd. */
static int worker_main(const bench_opts_t *o, unsigned idx, int go_fd, int done_fd)
{
    worker_t w;
    mc_master_target_t t;
    uint64_t per = o->objects / o->procs + ((idx < o->objects % o->procs) ? 1 : 0);
    unsigned i;
    int ph, rc = 1;
    char go;

    memset(&w, 0, sizeof(w));
    w.o   = o;
    w.idx = idx;
    for (i = 0; i < sizeof(w.lengths) / sizeof(w.lengths[0]); i++)
        w.lengths[i] = o->value_size;
    mc_uuid_generate(&w.client_id);
    if (mc_master_target_init(&t, o->master, w.client_id, "default") != MC_OK)
        goto out;
    t.io_timeout_ms = 60000;
    if (mc_mconn_open(&t, &w.conn) != MC_OK) {
        fprintf(stderr, "meta_bench: worker %u cannot connect to %s: %s\n", idx, o->master,
                mc_last_error_detail());
        goto out;
    }
    /* keys are built before the first phase so no phase times their making */
    if ((fill_keys(idx, 's', o->single, &w.sbuf, &w.skeys) != 0) ||
        (fill_keys(idx, 'b', per, &w.bbuf, &w.bkeys) != 0)) {
        fprintf(stderr, "meta_bench: worker %u: out of memory for keys\n", idx);
        goto out;
    }
    for (ph = 0; ph < PH_COUNT; ph++) {
        uint64_t nreq;
        uint64_t report[3];
        w.keys  = (ph < PH_BPUT_START) ? w.skeys : w.bkeys;
        w.nkeys = (ph < PH_BPUT_START) ? o->single : per;
        nreq = (ph < PH_BPUT_START) ? w.nkeys : (w.nkeys + o->batch - 1) / o->batch;
        if (read(go_fd, &go, 1) != 1)
            goto out;
        w.failures = 0;
        if (run_phase(&w, ph, nreq) != MC_OK) {
            fprintf(stderr, "meta_bench: worker %u, %s: %s\n", idx, phase_name[ph],
                    mc_last_error_detail());
            goto out;
        }
        report[0] = w.nkeys;
        report[1] = w.failures;
        report[2] = nreq;
        if (write(done_fd, report, sizeof(report)) != (ssize_t)sizeof(report))
            goto out;
    }
    rc = 0;
out:
    if (w.conn != NULL)
        mc_mconn_close(w.conn);
    free(w.sbuf);
    free(w.skeys);
    free(w.bbuf);
    free(w.bkeys);
    return rc;
}

/* ---- the parent: master, fake segment, phases, table ------------------- */

static int free_port(void)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd < 0)
        return -1;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family      = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if ((bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) &&
        (getsockname(fd, (struct sockaddr *)&sa, &len) == 0))
        port = ntohs(sa.sin_port);
    close(fd);
    return port;
}

/* The master on loopback only; its admin/metrics listener on a free port
 * too (it listens even with metric reporting off). */
static pid_t start_master(const char *bin, int port, char *const *extra)
{
    char a_port[32], a_mport[40], a_ttl[] = "--client_ttl=3600";
    int mport = free_port();
    pid_t pid;
    if (mport <= 0)
        return -1;
    snprintf(a_port, sizeof(a_port), "--port=%d", port);
    snprintf(a_mport, sizeof(a_mport), "--metrics_port=%d", mport);
    pid = fork();
    if (pid == 0) {
        /* the extra flags come last: a later value of a flag wins.  The
         * fake holder pings once a second, and a pause of the master's
         * loop (its index doubling at millions of keys, on a loaded
         * machine) can make a ping late: never suspect it, or placement
         * would refuse keys for a moment and the run would be void. */
        char *argv[24] = {(char *)bin, a_port, (char *)"--rpc_address=127.0.0.1",
                          (char *)"--enable_metric_reporting=false", a_mport,
                          (char *)"--metrics_host=127.0.0.1", a_ttl,
                          (char *)"--log_level=error", (char *)"--client_suspect_heartbeats=0"};
        int n = 9;
        for (; (extra != NULL) && (*extra != NULL) && (n < 23); extra++)
            argv[n++] = *extra;
        argv[n] = NULL;
        execv(bin, argv);
        fprintf(stderr, "meta_bench: cannot run %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* VmRSS of @p pid in bytes, or 0 when it cannot be read. */
static uint64_t rss_bytes(pid_t pid)
{
    char path[64], line[256];
    uint64_t kb = 0;
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if ((f = fopen(path, "r")) == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %" SCNu64 " kB", &kb) == 1)
            break;
    }
    fclose(f);
    return kb * 1024;
}

/* CPU time (user + system) of @p pid in nanoseconds, or 0 when it cannot
 * be read. */
static uint64_t cpu_ns(pid_t pid)
{
    char path[64], buf[1024];
    unsigned long long ut = 0, st = 0;
    const char *p;
    size_t n;
    long hz = sysconf(_SC_CLK_TCK);
    FILE *f;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((hz <= 0) || ((f = fopen(path, "r")) == NULL))
        return 0;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* fields 14 and 15, counted after the ")" that ends the name */
    if (((p = strrchr(buf, ')')) == NULL) ||
        (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2))
        return 0;
    return (uint64_t)((ut + st) * (1000000000.0 / (double)hz));
}

static void usage(void)
{
    fprintf(stderr,
            "usage: meta_bench [--master HOST:PORT | --master-bin PATH] [--objects N]\n"
            "                  [--single N] [--procs P] [--depth D] [--batch B]\n"
            "                  [--value-size BYTES] [--durability DIR [--repeat N]\n"
            "                  [--ha-etcd HOST:PORT]]\n");
}

static int parse_opts(int argc, char **argv, bench_opts_t *o)
{
    int i;
    memset(o, 0, sizeof(*o));
    o->master_bin = "./mooncake_master";
    o->objects    = 1000000;
    o->single     = 100000;
    o->procs      = 2;
    o->depth      = 16;
    o->batch      = 128;
    o->value_size = 4096;
    o->repeat     = 3;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i], *v = (i + 1 < argc) ? argv[i + 1] : NULL;
        uint64_t n = 0;
        if (v == NULL)
            return -1;
        if (strcmp(a, "--master") == 0) {
            if (strlen(v) >= sizeof(o->master))
                return -1;
            strcpy(o->master, v);
        } else if (strcmp(a, "--master-bin") == 0) {
            o->master_bin = v;
        } else if (strcmp(a, "--ha-etcd") == 0 && v != NULL) {
            o->ha_etcd = v;
        } else if (strcmp(a, "--durability") == 0) {
            o->durability = v;
        } else if (mc_parse_u64(v, &n) != 0) {
            return -1;
        } else if (strcmp(a, "--objects") == 0) {
            o->objects = n;
        } else if (strcmp(a, "--single") == 0) {
            o->single = n;
        } else if (strcmp(a, "--procs") == 0 && n >= 1 && n <= MAX_PROCS) {
            o->procs = (unsigned)n;
        } else if (strcmp(a, "--depth") == 0 && n >= 1 && n <= 1024) {
            o->depth = (unsigned)n;
        } else if (strcmp(a, "--batch") == 0 && n >= 1 && n <= 4096) {
            o->batch = (unsigned)n;
        } else if (strcmp(a, "--value-size") == 0 && n >= 1 && n <= (1ull << 30)) {
            o->value_size = n;
        } else if (strcmp(a, "--repeat") == 0 && n >= 1 && n <= 20) {
            o->repeat = (unsigned)n;
        } else {
            return -1;
        }
        i++;
    }
    return 0;
}

/* Keep the fake client alive against a master started by someone else. */
static void ping(mc_mconn_t *c, mc_uuid_t id)
{
    mc_wire_ping_req_t req = {.client_id = id};
    mc_wire_ping_resp_t resp;
    (void)mc_master_call_ping(c, &req, &resp);
}

/*
 * Wait for one report (keys, failed keys, requests) from each worker, pinging every second.
 * Returns 0, or -1 when a worker died.
 */
static int collect(int done_fd, unsigned procs, mc_mconn_t *c, mc_uuid_t id,
                   uint64_t *keys_p, uint64_t *fail_p, uint64_t *nreq_p)
{
    unsigned got = 0;
    uint64_t last_ping = mc_now_ms();
    *keys_p = *fail_p = *nreq_p = 0;
    while (got < procs) {
        fd_set rs;
        struct timeval tv = {1, 0};
        uint64_t report[3];
        int r;
        FD_ZERO(&rs);
        FD_SET(done_fd, &rs);
        r = select(done_fd + 1, &rs, NULL, NULL, &tv);
        if ((r < 0) && (errno != EINTR))
            return -1;
        if (mc_now_ms() - last_ping >= 1000) {
            ping(c, id);
            last_ping = mc_now_ms();
        }
        if (r <= 0)
            continue;
        /* reports are 24 bytes, written atomically (< PIPE_BUF) */
        if (read(done_fd, report, sizeof(report)) != (ssize_t)sizeof(report))
            return -1;
        *keys_p += report[0];
        *fail_p += report[1];
        *nreq_p += report[2];
        got++;
    }
    return 0;
}

/* What one run against one master measured. */
typedef struct run_result {
    double rate[PH_COUNT];
    double reqs[PH_COUNT];
    double secs[PH_COUNT];
    double cpu_ns_per_key[PH_COUNT]; /* the master's CPU time; 0 = unknown */
    uint64_t rss0, rss1, fails;
    /* the stall probe (after the phases, when asked) */
    uint64_t probe_max_us, probe_pings;
} run_result_t;

/* The slowest of back-to-back PINGs over @p ms milliseconds. */
static void probe_stall(mc_mconn_t *c, mc_uuid_t id, uint64_t ms, run_result_t *res)
{
    uint64_t end = mc_now_ms() + ms;
    while (mc_now_ms() < end) {
        uint64_t t0 = mc_now_ns(), us;
        ping(c, id);
        us = (mc_now_ns() - t0) / 1000u;
        if (us > res->probe_max_us)
            res->probe_max_us = us;
        res->probe_pings++;
    }
}

/*
 * Start a master (unless --master) with @p extra flags, run every phase,
 * and stop it.  With @p probe_ms, probe the loop's stalls that long after
 * the phases.  Returns 0, or 1 when something failed.
 */
static int run_once(bench_opts_t o, char *const *extra, uint64_t probe_ms, run_result_t *res)
{
    pid_t master = -1, kids[MAX_PROCS];
    int go[MAX_PROCS][2], done[2] = {-1, -1};
    unsigned i, nkids = 0;
    mc_master_target_t t;
    mc_mconn_t *ctl = NULL;
    mc_uuid_t fake_client;
    uint64_t deadline;
    int ph, rc = 1;

    memset(res, 0, sizeof(*res));
    if (o.master[0] == '\0') {
        int port = free_port();
        if (port <= 0) {
            fprintf(stderr, "meta_bench: no free port\n");
            return 1;
        }
        snprintf(o.master, sizeof(o.master), "127.0.0.1:%d", port);
        if ((master = start_master(o.master_bin, port, extra)) < 0)
            return 1;
    }
    /* The fake client that owns the segment; the parent keeps it alive. */
    mc_uuid_generate(&fake_client);
    if (mc_master_target_init(&t, o.master, fake_client, "default") != MC_OK) {
        fprintf(stderr, "meta_bench: bad --master %s\n", o.master);
        goto out;
    }
    t.io_timeout_ms = 60000;
    deadline = mc_now_ms() + 10000;
    while (mc_mconn_open(&t, &ctl) != MC_OK) {
        int status;
        if ((mc_now_ms() > deadline) ||
            ((master > 0) && (waitpid(master, &status, WNOHANG) == master))) {
            fprintf(stderr, "meta_bench: master at %s did not answer\n", o.master);
            if ((master > 0) && (waitpid(master, &status, WNOHANG) != 0))
                master = -1; /* already exited and reaped */
            goto out;
        }
        usleep(20000);
    }
    {
        /* 1 PiB at an address nobody maps: the allocator only does arithmetic */
        mc_wire_mount_segment_req_t req = {.client_id = fake_client};
        mc_wire_mount_segment_resp_t resp;
        mc_status_t st;
        mc_uuid_generate(&req.segment.id);
        req.segment.name     = mc_str_from_cstr("127.0.0.1:1");
        req.segment.base     = 1ull << 40;
        req.segment.size     = 1ull << 50;
        req.segment.protocol = mc_str_from_cstr("tcp");
        if ((st = mc_master_call_mount_segment(ctl, &req, &resp)) != MC_OK) {
            fprintf(stderr, "meta_bench: MOUNT_SEGMENT failed: %d %s\n", (int)st,
                    mc_last_error_detail());
            goto out;
        }
    }

    if (pipe(done) != 0)
        goto out;
    for (i = 0; i < o.procs; i++) {
        if (pipe(go[i]) != 0)
            goto out;
        fflush(NULL);
        kids[i] = fork();
        if (kids[i] < 0) {
            close(go[i][0]);
            close(go[i][1]);
            goto out;
        }
        if (kids[i] == 0) {
            unsigned j;
            close(go[i][1]);
            close(done[0]);
            for (j = 0; j < i; j++)
                close(go[j][1]);
            _exit(worker_main(&o, i, go[i][0], done[1]));
        }
        close(go[i][0]);
        nkids++;
    }
    close(done[1]);
    done[1] = -1;

    for (ph = 0; ph < PH_COUNT; ph++) {
        uint64_t t0, t1, keys, fails, nreq, c0 = 0;
        if ((ph == PH_BPUT_START) && (master > 0))
            res->rss0 = rss_bytes(master);
        if (master > 0)
            c0 = cpu_ns(master);
        t0 = mc_now_ns();
        for (i = 0; i < nkids; i++) {
            if (write(go[i][1], "g", 1) != 1)
                goto out;
        }
        if (collect(done[0], nkids, ctl, fake_client, &keys, &fails, &nreq) != 0) {
            fprintf(stderr, "meta_bench: a worker failed in %s\n", phase_name[ph]);
            goto out;
        }
        t1 = mc_now_ns();
        res->fails += fails;
        if (fails != 0)
            fprintf(stderr, "meta_bench: %s: %" PRIu64 " of %" PRIu64 " keys failed\n",
                    phase_name[ph], fails, keys);
        res->rate[ph] = (double)keys * 1e9 / (double)(t1 - t0 ? t1 - t0 : 1);
        res->reqs[ph] = (double)nreq * 1e9 / (double)(t1 - t0 ? t1 - t0 : 1);
        res->secs[ph] = (double)(t1 - t0) / 1e9;
        if ((master > 0) && (keys > 0))
            res->cpu_ns_per_key[ph] = (double)(cpu_ns(master) - c0) / (double)keys;
        if ((ph == PH_BPUT_END) && (master > 0))
            res->rss1 = rss_bytes(master);
    }
    if (probe_ms > 0)
        probe_stall(ctl, fake_client, probe_ms, res);
    rc = (res->fails == 0) ? 0 : 1;

out:
    for (i = 0; i < nkids; i++)
        close(go[i][1]);
    for (i = 0; i < nkids; i++) {
        int status;
        if (rc != 0)
            kill(kids[i], SIGTERM);
        if ((waitpid(kids[i], &status, 0) == kids[i]) &&
            (!WIFEXITED(status) || (WEXITSTATUS(status) != 0)))
            rc = 1;
    }
    if (done[0] >= 0)
        close(done[0]);
    if (done[1] >= 0)
        close(done[1]);
    if (ctl != NULL)
        mc_mconn_close(ctl);
    if (master > 0) {
        int status;
        kill(master, SIGTERM);
        deadline = mc_now_ms() + 10000;
        while (waitpid(master, &status, WNOHANG) == 0) {
            if (mc_now_ms() > deadline) {
                kill(master, SIGKILL);
                waitpid(master, &status, 0);
                break;
            }
            usleep(20000);
        }
    }
    return rc;
}

static void print_table(const bench_opts_t *o, unsigned nkids, const run_result_t *r)
{
    int ph;
    double sum = 0;

    printf("mooncake master metadata benchmark: %u client processes, %u requests in flight "
           "per connection, %d-byte keys, batches of %u\n",
           nkids, o->depth, KEY_LEN, o->batch);
    /* the master's CPU time per key does not move with other load on the
     * machine, unlike the rates: compare builds with it */
    printf("%-24s %14s %14s %14s\n", "operation", "keys/s", "requests/s", "master ns/key");
    for (ph = 0; ph < PH_COUNT; ph++)
        printf("%-24s %14.0f %14.0f %14.0f\n", phase_name[ph], r->rate[ph], r->reqs[ph],
               r->cpu_ns_per_key[ph]);
    for (ph = PH_BPUT_START; ph < PH_COUNT; ph++)
        sum += 1.0 / r->rate[ph];
    printf("batched mean (harmonic)  %14.0f keys/s   (target >= 1000000)\n",
           (PH_COUNT - PH_BPUT_START) / sum);
}

/* Keys per second of a batched put (BATCH_PUT_START then BATCH_PUT_END). */
static double batched_put_rate(const bench_opts_t *o, const run_result_t *r)
{
    double s = r->secs[PH_BPUT_START] + r->secs[PH_BPUT_END];
    return s > 0 ? (double)o->objects / s : 0;
}

/* Fold run @p r into @p best: the best rate of each phase, and the run
 * with the best batched put rate for the START+END figure. */
static void keep_best(const bench_opts_t *o, run_result_t *best, const run_result_t *r, int first)
{
    double bp = batched_put_rate(o, best);
    if (first) {
        *best = *r;
        return;
    }
    for (int ph = 0; ph < PH_COUNT; ph++) {
        if (r->rate[ph] > best->rate[ph]) {
            best->rate[ph] = r->rate[ph];
            best->reqs[ph] = r->reqs[ph];
        }
    }
    if (batched_put_rate(o, r) > bp) {
        best->secs[PH_BPUT_START] = r->secs[PH_BPUT_START];
        best->secs[PH_BPUT_END]   = r->secs[PH_BPUT_END];
    }
}

/* The longest loop pause (wall clock, and its own CPU time) of the
 * snapshots of at least @p min_objs objects a master log reports ("written
 * in N ms: M objects in S slices, longest loop pause U us (C us of it on
 * the CPU)"), and how many there were. */
static void snapshot_pauses(const char *log, uint64_t min_objs, uint64_t *max_us,
                            uint64_t *cpu_us, unsigned *n)
{
    char line[1024];
    FILE *f = fopen(log, "r");
    *max_us = *cpu_us = 0;
    *n = 0;
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, "written in ");
        uint64_t ms, us, cpu, k;
        unsigned sl;
        if ((p != NULL) &&
            (sscanf(p, "written in %" SCNu64 " ms: %" SCNu64 " objects in %u slices, longest loop "
                    "pause %" SCNu64 " us (%" SCNu64, &ms, &k, &sl, &us, &cpu) == 5) &&
            (k >= min_objs)) {
            (*n)++;
            if (us > *max_us) {
                *max_us = us;
                *cpu_us = cpu;
            }
        }
    }
    fclose(f);
}

/* The table of an off/on pair: each phase's rate and the ratio. */
static void print_pair(const bench_opts_t *o, const run_result_t *off, const run_result_t *on,
                       const char *name, const char *note)
{
    char h1[32], h2[32];
    snprintf(h1, sizeof(h1), "%s keys/s", name);
    snprintf(h2, sizeof(h2), "%s/off", name);
    printf("%-24s %14s %14s %8s\n", "operation", "off keys/s", h1, h2);
    for (int ph = 0; ph < PH_COUNT; ph++)
        printf("%-24s %14.0f %14.0f %8.2f\n", phase_name[ph], off->rate[ph], on->rate[ph],
               off->rate[ph] > 0 ? on->rate[ph] / off->rate[ph] : 0);
    printf("batched puts (START+END) %14.0f %14.0f %8.2f%s\n", batched_put_rate(o, off),
           batched_put_rate(o, on),
           batched_put_rate(o, off) > 0 ? batched_put_rate(o, on) / batched_put_rate(o, off) : 0,
           note);
}

static int durability_runs(const bench_opts_t *o)
{
    char dir_on[4200], dir_stall[4200], logdir[4300], logfile[4400];
    char a_dir[4300], a_dir2[4300], a_log[4400];
    char *on[] = {(char *)"--enable_snapshot=true", a_dir, NULL};
    char *stall[] = {(char *)"--enable_snapshot=true", a_dir2,
                     (char *)"--snapshot_interval_seconds=1", a_log, (char *)"--log_level=info",
                     NULL};
    run_result_t off, dur, st, r;
    uint64_t max_us, cpu_us;
    unsigned nsnaps;

    char a_eps[400], a_cid[64];
    /* upstream's production flags (docs/ha.md): no directory */
    char *ship[] = {(char *)"--enable_ha=true", (char *)"--ha_backend_type=etcd", a_eps,
                    (char *)"--enable_oplog=true", a_cid, NULL};

    if (o->master[0] != '\0') {
        fprintf(stderr, "meta_bench: --durability starts its own masters (no --master)\n");
        return 2;
    }
    snprintf(a_eps, sizeof(a_eps), "--ha_backend_connstring=%s", o->ha_etcd ? o->ha_etcd : "");
    snprintf(a_cid, sizeof(a_cid), "--cluster_id=meta_bench-%d-0", (int)getpid());
    snprintf(dir_on, sizeof(dir_on), "%s/meta_bench-%d-on", o->durability, (int)getpid());
    snprintf(dir_stall, sizeof(dir_stall), "%s/meta_bench-%d-stall", o->durability, (int)getpid());
    snprintf(logdir, sizeof(logdir), "%s/log", dir_stall);
    snprintf(a_dir, sizeof(a_dir), "--snapshot_backup_dir=%s", dir_on);
    snprintf(a_dir2, sizeof(a_dir2), "--snapshot_backup_dir=%s", dir_stall);
    snprintf(a_log, sizeof(a_log), "--log_dir=%s", logdir);
    snprintf(logfile, sizeof(logfile), "%s/mooncake_master.log", logdir);
    if ((mkdir(dir_stall, 0755) != 0) || (mkdir(logdir, 0755) != 0)) {
        fprintf(stderr, "meta_bench: cannot create %s: %s\n", logdir, strerror(errno));
        return 1;
    }
    for (unsigned k = 0; k < o->repeat; k++) {
        char *const *sides[2] = {NULL, (o->ha_etcd != NULL) ? ship : on};
        for (int side = 0; side < 2; side++) {
            if (run_once(*o, sides[side], 0, &r) != 0) {
                fprintf(stderr, "meta_bench: a run failed\n");
                return 1;
            }
            keep_best(o, side ? &dur : &off, &r, k == 0);
            if (side) {
                snprintf(a_dir, sizeof(a_dir), "--snapshot_backup_dir=%s.%u", dir_on, k + 1);
                snprintf(a_cid, sizeof(a_cid), "--cluster_id=meta_bench-%d-%u", (int)getpid(),
                         k + 1);
            }
        }
    }
    if (o->ha_etcd != NULL) {
        printf("operation log shipped through etcd %s (--enable_oplog: fenced txns, several "
               "in flight, delta-coded); best of %u alternating runs each\n",
               o->ha_etcd, o->repeat);
        print_pair(o, &off, &dur, "etcd", "   (target >= 0.50)");
        return 0;
    }
    if (run_once(*o, stall, 3000, &st) != 0) {
        fprintf(stderr, "meta_bench: a run failed\n");
        return 1;
    }
    printf("durability: operation log in %s (one write + fdatasync per event-loop turn); "
           "best of %u alternating runs each\n",
           dir_on, o->repeat);
    print_pair(o, &off, &dur, "on", "   (target >= 0.70)");
    snapshot_pauses(logfile, o->objects, &max_us, &cpu_us, &nsnaps);
    printf("snapshot stall: %u snapshots of >= %" PRIu64 " objects; the longest event-loop "
           "pause of their walks %.2f ms (%.2f ms of it on the CPU); slowest of %" PRIu64
           " back-to-back PINGs during 3 s of snapshots: %.2f ms\n",
           nsnaps, o->objects, max_us / 1000.0, cpu_us / 1000.0, st.probe_pings,
           st.probe_max_us / 1000.0);
    printf("(the durable runs leave %s* and %s behind)\n", dir_on, dir_stall);
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts_t o;
    run_result_t r;

    signal(SIGPIPE, SIG_IGN);
    if (parse_opts(argc, argv, &o) != 0) {
        usage();
        return 2;
    }
    if (o.objects < o.procs)
        o.objects = o.procs;
    if (o.durability != NULL)
        return durability_runs(&o);
    if (run_once(o, NULL, 0, &r) != 0 && r.fails == 0)
        return 1;
    print_table(&o, o.procs, &r);
    if ((r.rss0 > 0) && (r.rss1 > r.rss0)) {
        double per = (double)(r.rss1 - r.rss0) / (double)o.objects;
        printf("master VmRSS %.1f MiB -> %.1f MiB over %" PRIu64 " objects: %.0f bytes/object "
               "(target <= 150), %.0f beyond the %d-byte key\n",
               r.rss0 / 1048576.0, r.rss1 / 1048576.0, o.objects, per, per - KEY_LEN, KEY_LEN);
    } else if (o.master[0] != '\0') {
        printf("master memory: not measured (--master given)\n");
    }
    /* rates of failing requests measure the error paths: not a result */
    if (r.fails != 0) {
        fprintf(stderr, "meta_bench: %" PRIu64 " keys failed; the figures above are not valid "
                "(a --master that already holds these keys?)\n", r.fails);
        return 1;
    }
    return 0;
}
