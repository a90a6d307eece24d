/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_client: the standalone real client.  It sets up an ordinary
 * store client (its segment is this process's contribution to the pool)
 * and serves dummy clients (mc_store_setup_dummy, Python setup_dummy) on
 * the unix socket "@mooncake_client_<port>.sock" (docs/protocol.md §8).
 *
 * Flags are upstream's (real_client_main.cpp), gflags style: --name=value
 * or --name value; booleans also bare.  Unknown flags, and flags whose
 * feature this build lacks, are refused with a message naming them (exit 2).
 *
 * Signals: SIGTERM and SIGINT close cleanly (dummies disconnected, the
 * segment unmounted, exit 0); SIGHUP is logged and ignored.
 *
 * Built on the public API only (DESIGN.md §2).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <mooncake/store.h>

typedef struct flags {
    const char *host;
    const char *metadata_server;
    const char *device_names;
    const char *master_server_address;
    const char *protocol;
    const char *tenant_id;
    const char *log_dir;
    const char *ipc_socket_path;
    const char *global_segment_size;
    const char *local_buffer_size;
    const char *auth_token_file; /* NULL: MC_AUTH_TOKEN_FILE */
    const char *ssd_offload_path; /* NULL: MOONCAKE_OFFLOAD_FILE_STORAGE_PATH */
    long port;
    long threads;
    long http_port;
    int enable_offload;
    int start_offload_rpc_server; /* -1: not given */
    int enable_http_server;
} flags_t;

static int parse_bool(const char *v, int *out)
{
    if (!strcasecmp(v, "true") || !strcmp(v, "1") || !strcasecmp(v, "yes"))
        *out = 1;
    else if (!strcasecmp(v, "false") || !strcmp(v, "0") || !strcasecmp(v, "no"))
        *out = 0;
    else
        return -1;
    return 0;
}

static int parse_long(const char *v, long lo, long hi, long *out)
{
    char *end;
    long x;
    errno = 0;
    x = strtol(v, &end, 10);
    if ((errno != 0) || (end == v) || (*end != 0) || (x < lo) || (x > hi))
        return -1;
    *out = x;
    return 0;
}

/* "4 GB", "512MB", "1048576", "1.5 GiB": upstream's size strings. */
static int parse_size(const char *v, uint64_t *out)
{
    char *end;
    double x;
    errno = 0;
    x = strtod(v, &end);
    if ((errno != 0) || (end == v) || (x < 0))
        return -1;
    while (*end == ' ')
        end++;
    double mul = 1;
    if (*end != 0) {
        switch (*end == 0 ? 0 : (*end | 0x20)) {
        case 'b': mul = 1; break;
        case 'k': mul = 1024.0; break;
        case 'm': mul = 1024.0 * 1024; break;
        case 'g': mul = 1024.0 * 1024 * 1024; break;
        case 't': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: return -1;
        }
        if ((*end | 0x20) != 'b') {
            end++;
            if ((*end | 0x20) == 'i')
                end++;
            if ((*end | 0x20) == 'b')
                end++;
        } else {
            end++;
        }
        if (*end != 0)
            return -1;
    }
    x *= mul;
    if (x > 1.8e19)
        return -1;
    *out = (uint64_t)x;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mooncake_client [--flag=value ...]\n"
            "  --host=0.0.0.0                   local hostname (transfer-engine identity)\n"
            "  --metadata_server=http://127.0.0.1:8080/metadata   or P2PHANDSHAKE\n"
            "  --device_names=                  RDMA devices\n"
            "  --master_server_address=127.0.0.1:50051\n"
            "  --protocol=tcp\n"
            "  --port=50052                     dummy clients use @mooncake_client_<port>.sock\n"
            "  --ipc_socket_path=PATH           override that socket (\"@name\": abstract)\n"
            "  --global_segment_size=\"4 GB\"     memory contributed to the pool\n"
            "  --local_buffer_size=0\n"
            "  --threads=1  --tenant_id=default  --log_dir=\n"
            "  --enable_offload=false           start the SSD tier (docs/tiers.md)\n"
            "  --ssd_offload_path=PATH          its directory; default\n"
            "                                   $MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, else\n"
            "                                   /data/file_storage\n"
            "  --start_offload_rpc_server=      true with --enable_offload (the default\n"
            "                                   there), false without\n"
            "  --enable_http_server=false  --http_port=9300\n"
            "  --auth_token_file=PATH           cluster secrets (docs/security.md); default\n"
            "                                   $MC_AUTH_TOKEN_FILE, else off\n");
}

static int parse_flags(int argc, char **argv, flags_t *f)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        char name[64];
        size_t nlen;
        int b;

        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        if (strncmp(a, "--", 2) != 0 && strncmp(a, "-", 1) != 0) {
            fprintf(stderr, "mooncake_client: unexpected argument '%s'\n", a);
            return -1;
        }
        a += (a[1] == '-') ? 2 : 1;
        const char *eq = strchr(a, '=');
        nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen >= sizeof(name)) {
            fprintf(stderr, "mooncake_client: unknown flag '--%s'\n", a);
            return -1;
        }
        memcpy(name, a, nlen);
        name[nlen] = 0;
        v = eq ? eq + 1 : NULL;
#define STR(flag, field)                                                              \
    if (!strcmp(name, flag)) {                                                        \
        if (v == NULL) {                                                              \
            if (i + 1 >= argc) {                                                      \
                fprintf(stderr, "mooncake_client: flag '--%s' needs a value\n", name); \
                return -1;                                                            \
            }                                                                         \
            v = argv[++i];                                                            \
        }                                                                             \
        f->field = v;                                                                 \
        continue;                                                                     \
    }
#define BOOL(flag, field)                                                             \
    if (!strcmp(name, flag)) {                                                        \
        if ((v != NULL) ? parse_bool(v, &b) : (b = 1, 0)) {                           \
            fprintf(stderr, "mooncake_client: flag '--%s' wants true or false\n", name); \
            return -1;                                                                \
        }                                                                             \
        f->field = b;                                                                 \
        continue;                                                                     \
    }
#define NUM(flag, field, lo, hi)                                                      \
    if (!strcmp(name, flag)) {                                                        \
        if (v == NULL) {                                                              \
            if (i + 1 >= argc) {                                                      \
                fprintf(stderr, "mooncake_client: flag '--%s' needs a value\n", name); \
                return -1;                                                            \
            }                                                                         \
            v = argv[++i];                                                            \
        }                                                                             \
        if (parse_long(v, lo, hi, &f->field) != 0) {                                  \
            fprintf(stderr, "mooncake_client: flag '--%s': bad value '%s'\n", name, v); \
            return -1;                                                                \
        }                                                                             \
        continue;                                                                     \
    }
        STR("host", host)
        STR("metadata_server", metadata_server)
        STR("device_names", device_names)
        STR("master_server_address", master_server_address)
        STR("protocol", protocol)
        STR("tenant_id", tenant_id)
        STR("log_dir", log_dir)
        STR("ipc_socket_path", ipc_socket_path)
        STR("global_segment_size", global_segment_size)
        STR("local_buffer_size", local_buffer_size)
        STR("auth_token_file", auth_token_file)
        STR("ssd_offload_path", ssd_offload_path)
        NUM("port", port, 1, 65535)
        NUM("threads", threads, 1, 1024)
        NUM("http_port", http_port, 0, 65535)
        BOOL("enable_offload", enable_offload)
        BOOL("start_offload_rpc_server", start_offload_rpc_server)
        BOOL("enable_http_server", enable_http_server)
#undef STR
#undef BOOL
#undef NUM
        fprintf(stderr, "mooncake_client: unknown flag '--%s'\n", name);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    flags_t f = {
        .host = "0.0.0.0",
        .metadata_server = "http://127.0.0.1:8080/metadata",
        .device_names = "",
        .master_server_address = "127.0.0.1:50051",
        .protocol = "tcp",
        .tenant_id = "default",
        .log_dir = "",
        .ipc_socket_path = NULL,
        .global_segment_size = "4 GB",
        .local_buffer_size = "0",
        .port = 50052,
        .threads = 1,
        .http_port = 9300,
        .enable_offload = 0,
        .start_offload_rpc_server = -1,
        .enable_http_server = 0,
    };
    mc_store_params_t p;
    mc_store_h store = NULL;
    mc_store_dummy_server_h srv = NULL;
    char ipc[108];
    uint64_t seg, lbuf;
    sigset_t set;
    mc_status_t st;
    int sig;

    if (parse_flags(argc, argv, &f) != 0) {
        usage(stderr);
        return 2;
    }
    if (parse_size(f.global_segment_size, &seg) != 0) {
        fprintf(stderr, "mooncake_client: flag '--global_segment_size': bad size '%s'\n",
                f.global_segment_size);
        return 2;
    }
    if (parse_size(f.local_buffer_size, &lbuf) != 0) {
        fprintf(stderr, "mooncake_client: flag '--local_buffer_size': bad size '%s'\n",
                f.local_buffer_size);
        return 2;
    }
    if (f.ssd_offload_path == NULL) {
        const char *env = getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
        f.ssd_offload_path = ((env != NULL) && (*env != '\0')) ? env : "/data/file_storage";
    } else if (!f.enable_offload) {
        fprintf(stderr, "mooncake_client: flag '--ssd_offload_path': needs "
                        "--enable_offload=true\n");
        return 2;
    }
    /* Upstream's offload RPC server answers other hosts' reads of this
     * client's disk tier.  Here those reads are DISK_READ requests on the
     * transfer engine's data port (docs/tiers.md §4), served whenever the
     * tier runs: so true goes with --enable_offload (its default there) and
     * false without it, and the other combinations are refused. */
    if (f.start_offload_rpc_server < 0)
        f.start_offload_rpc_server = f.enable_offload;
    if (f.start_offload_rpc_server && !f.enable_offload) {
        fprintf(stderr, "mooncake_client: flag '--start_offload_rpc_server': serves reads of "
                        "the SSD tier, so it needs --enable_offload=true\n");
        return 2;
    }
    if (!f.start_offload_rpc_server && f.enable_offload) {
        fprintf(stderr, "mooncake_client: flag '--start_offload_rpc_server': with "
                        "--enable_offload other hosts' reads of the tier are always served "
                        "(on the transfer-engine data port); only true is accepted\n");
        return 2;
    }
    if (f.threads != 1) {
        fprintf(stderr, "mooncake_client: flag '--threads': every dummy client is served on a "
                        "thread of its own, so there is no pool to size; only 1 is accepted\n");
        return 2;
    }
    if (f.log_dir[0] != 0) {
        /* the log (library and daemon messages, all on stderr) is appended
         * to <log_dir>/mooncake_client.log */
        char path[4096];
        int fd;
        if (snprintf(path, sizeof(path), "%s/mooncake_client.log", f.log_dir) >=
            (int)sizeof(path)) {
            fprintf(stderr, "mooncake_client: flag '--log_dir': path too long\n");
            return 2;
        }
        fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) {
            fprintf(stderr, "mooncake_client: flag '--log_dir': cannot open %s: %s\n", path,
                    strerror(errno));
            return 1;
        }
        if (dup2(fd, STDERR_FILENO) < 0) {
            fprintf(stderr, "mooncake_client: flag '--log_dir': %s\n", strerror(errno));
            close(fd);
            return 1;
        }
        close(fd);
    }
    if (f.ipc_socket_path != NULL)
        snprintf(ipc, sizeof(ipc), "%s", f.ipc_socket_path);
    else
        snprintf(ipc, sizeof(ipc), "@mooncake_client_%ld.sock", f.port);

    /* every thread started below inherits the blocked set: sigwait owns them */
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    memset(&p, 0, sizeof(p));
    p.field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                   MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_LOCAL_BUFFER_SIZE |
                   MC_STORE_PARAM_PROTOCOL | MC_STORE_PARAM_RDMA_DEVICES |
                   MC_STORE_PARAM_MASTER_SERVER_ADDR | MC_STORE_PARAM_TENANT_ID;
    p.local_hostname = f.host;
    p.metadata_server = f.metadata_server;
    p.global_segment_size = seg;
    p.local_buffer_size = lbuf;
    p.protocol = f.protocol;
    p.rdma_devices = f.device_names;
    p.master_server_addr = f.master_server_address;
    p.tenant_id = f.tenant_id;
    if (f.auth_token_file != NULL) {
        p.field_mask |= MC_STORE_PARAM_AUTH_TOKEN_FILE;
        p.auth_token_file = f.auth_token_file;
    }
    if (f.enable_http_server) {
        /* the client HTTP server of the store (GET /health, /metrics, ...) */
        p.field_mask |= MC_STORE_PARAM_CLIENT_HTTP_PORT;
        p.client_http_port = (uint16_t)f.http_port;
    }
    if ((st = mc_store_create(&store)) != MC_OK || (st = mc_store_setup(store, &p)) != MC_OK) {
        fprintf(stderr, "mooncake_client: setup failed: %s (%d): %s\n", mc_status_string(st),
                st, mc_last_error_detail());
        mc_store_destroy(store);
        return 1;
    }
    if (f.enable_offload && ((st = mc_store_offload_start(store, f.ssd_offload_path)) != MC_OK)) {
        fprintf(stderr, "mooncake_client: flag '--enable_offload': cannot start the SSD tier "
                        "in %s: %s (%d): %s\n",
                f.ssd_offload_path, mc_status_string(st), st, mc_last_error_detail());
        mc_store_close(store);
        mc_store_destroy(store);
        return 1;
    }
    st = mc_store_dummy_server_start(store, ipc, &srv);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_client: cannot serve dummy clients: %s\n",
                mc_last_error_detail());
        mc_store_destroy(store);
        return 1;
    }
    if (f.enable_offload)
        fprintf(stderr, "mooncake_client: SSD tier on in %s\n", f.ssd_offload_path);
    fprintf(stderr, "mooncake_client: %s ready; serving dummy clients on %s\n",
            mc_store_hostname(store), ipc);
    for (;;) {
        if (sigwait(&set, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            fprintf(stderr, "mooncake_client: SIGHUP ignored\n");
            continue;
        }
        break;
    }
    fprintf(stderr, "mooncake_client: signal %d, closing\n", sig);
    mc_store_dummy_server_stop(srv);
    st = mc_store_close(store);
    mc_store_destroy(store);
    return (st == MC_OK) ? 0 : 1;
}
