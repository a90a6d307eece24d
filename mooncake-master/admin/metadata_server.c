/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mooncake_http_metadata_server: the transfer-engine metadata store alone,
 * for deployments that keep it apart from the master (upstream ships it as
 * a Python command of the same name).  The store and its HTTP handler are
 * the master's own (http.c) in the standalone dialect, so the routes and
 * texts are those of upstream's Python server (http.h), plus GET /health.
 *
 * Command line, as upstream's argparse: --port (8080), --host (0.0.0.0),
 * --log-level DEBUG|INFO|WARNING|ERROR|CRITICAL (INFO; our lower-case
 * level names are accepted too); --name=value or --name value; -h/--help,
 * --version.
 *
 * Signals are libevent signal events on the one loop: SIGTERM and SIGINT
 * stop it cleanly (exit 0, everything freed); SIGHUP is logged and
 * ignored (the store lives in this process only, so a hang-up must not
 * lose it).  SIGPIPE is ignored.
 *
 * Exit codes: 0 after a clean stop, --help or --version; 2 for a bad
 * command line (argparse's code); 1 when the address cannot be bound.
 *
 * Owns: the mooncake_http_metadata_server daemon.
 * May call: http.h and libmooncake's common/ only.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>
#include <mooncake/mooncake.h> /* mc_version_string */

#include "common/auth.h"
#include "common/log.h"
#include "common/util.h"
#include "http.h"

#define MC_EXIT_USAGE 2
#define PROG          "mooncake_http_metadata_server"

typedef struct meta_opts {
    const char *host;
    int64_t port;
    int level;
    uint64_t max_value;
    uint64_t quota;
    const char *auth_file;
    int help;
    int version;
} meta_opts_t;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: " PROG " [-h] [--port PORT] [--host HOST]\n"
            "       [--log-level {DEBUG,INFO,WARNING,ERROR,CRITICAL}] [--version]\n"
            "       [--max-value-size SIZE] [--quota SIZE] [--log-rate-limit N]\n"
            "       [--auth-token-file PATH]\n"
            "\n"
            "HTTP metadata server of the Mooncake transfer engines: GET/PUT/DELETE\n"
            "/metadata?key=K and GET /health, in memory.\n"
            "\n"
            "options:\n"
            "  -h, --help            show this help message and exit\n"
            "  --port PORT           port to listen on (default: 8080)\n"
            "  --host HOST           address to bind (default: 0.0.0.0)\n"
            "  --log-level {DEBUG,INFO,WARNING,ERROR,CRITICAL}\n"
            "                        log level (default: INFO)\n"
            "  --max-value-size SIZE largest value one PUT may store (default: 16MB)\n"
            "  --quota SIZE          bytes of keys and values the store holds (default: 256MB)\n"
            "  --log-rate-limit N    lines a second per log site about what peers send\n"
            "                        (default: 10; 0: no limit)\n"
            "  --auth-token-file PATH\n"
            "                        cluster secrets file (docs/security.md): PUT and DELETE\n"
            "                        must carry a valid X-Mooncake-Auth signature (default:\n"
            "                        none, writes unauthenticated)\n"
            "  --version             print the version and exit\n");
}

/* Upstream's Python level names, then ours (error, warn, ..., 0..4). */
static int parse_level(const char *s, int *level_p)
{
    static const struct {
        const char *name;
        int level;
    } names[] = {
        {"DEBUG", MC_LOG_DEBUG}, {"INFO", MC_LOG_INFO},     {"WARNING", MC_LOG_WARN},
        {"ERROR", MC_LOG_ERROR}, {"CRITICAL", MC_LOG_ERROR},
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(names); i++) {
        if (strcasecmp(s, names[i].name) == 0) {
            *level_p = names[i].level;
            return 0;
        }
    }
    return mc_log_parse_level(s, level_p);
}

enum { OPT_PORT, OPT_HOST, OPT_LEVEL, OPT_MAX_VALUE, OPT_QUOTA, OPT_RATE, OPT_AUTH };

/* Which option "--name" (of @p nlen bytes, before any '=') is; '-' and '_'
 * are the same inside a name, as argparse's dests.  -1 if none. */
static int option_index(const char *arg, size_t nlen)
{
    static const struct {
        const char *name;
        int opt;
    } opts[] = {
        {"--port", OPT_PORT},        {"--host", OPT_HOST},   {"--log-level", OPT_LEVEL},
        {"--max-value-size", OPT_MAX_VALUE}, {"--quota", OPT_QUOTA},
        {"--log-rate-limit", OPT_RATE}, {"--auth-token-file", OPT_AUTH},
    };
    for (size_t i = 0; i < MC_ARRAY_SIZE(opts); i++) {
        const char *n = opts[i].name;
        size_t k;
        if (strlen(n) != nlen)
            continue;
        for (k = 2; k < nlen; k++) {
            char a = (arg[k] == '_') ? '-' : arg[k];
            if (a != n[k])
                break;
        }
        if ((k == nlen) && (strncmp(arg, "--", 2) == 0))
            return opts[i].opt;
    }
    return -1;
}

/* Parse argv into @p o; -1 with a message in @p err on a bad command line. */
static int parse_args(meta_opts_t *o, int argc, char **argv, char *err, size_t errlen)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *eq  = strchr(arg, '=');
        size_t nlen     = eq ? (size_t)(eq - arg) : strlen(arg);
        const char *value;

        if ((strcmp(arg, "-h") == 0) || (strcmp(arg, "--help") == 0)) {
            o->help = 1;
            continue;
        }
        if (strcmp(arg, "--version") == 0) {
            o->version = 1;
            continue;
        }
        int which = option_index(arg, nlen);
        if (which < 0) {
            snprintf(err, errlen, "unrecognized arguments: %s", arg);
            return -1;
        }
        if (eq != NULL) {
            value = eq + 1;
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            snprintf(err, errlen, "argument %.*s: expected one argument", (int)nlen, arg);
            return -1;
        }
        if ((which == OPT_MAX_VALUE) || (which == OPT_QUOTA)) {
            uint64_t *dst = (which == OPT_QUOTA) ? &o->quota : &o->max_value;
            if ((mc_parse_size(value, dst) != 0) || (*dst == 0)) {
                snprintf(err, errlen, "argument %.*s: invalid size: '%s'", (int)nlen, arg, value);
                return -1;
            }
        } else if (which == OPT_RATE) {
            int64_t r;
            if ((mc_parse_i64(value, &r) != 0) || (r < 0) || (r > 1000000)) {
                snprintf(err, errlen, "argument %.*s: invalid count: '%s'", (int)nlen, arg,
                         value);
                return -1;
            }
            mc_log_rate_per_s = (unsigned)r;
        } else if (which == OPT_PORT) {
            if ((mc_parse_i64(value, &o->port) != 0) || (o->port < 0) || (o->port > 65535)) {
                snprintf(err, errlen, "argument --port: invalid port: '%s'", value);
                return -1;
            }
        } else if (which == OPT_AUTH) {
            if (*value == '\0') {
                snprintf(err, errlen, "argument --auth-token-file: must not be empty");
                return -1;
            }
            o->auth_file = value;
        } else if (which == OPT_HOST) {
            if (*value == '\0') {
                snprintf(err, errlen, "argument --host: must not be empty");
                return -1;
            }
            o->host = value;
        } else if (parse_level(value, &o->level) != 0) {
            snprintf(err, errlen,
                     "argument --log-level: invalid choice: '%s' (choose from 'DEBUG', 'INFO', "
                     "'WARNING', 'ERROR', 'CRITICAL')",
                     value);
            return -1;
        }
    }
    return 0;
}

static void signal_cb(evutil_socket_t sig, short what, void *arg)
{
    struct event_base *base = arg;
    (void)what;
    if (sig == SIGHUP) {
        mc_info("received SIGHUP: nothing to reload, carrying on");
        return;
    }
    mc_info("received %s, shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    event_base_loopbreak(base);
}

int main(int argc, char **argv)
{
    static const int sigs[] = {SIGTERM, SIGINT, SIGHUP};
    meta_opts_t o = {.host      = "0.0.0.0",
                     .port      = 8080,
                     .level     = MC_LOG_INFO,
                     .max_value = MC_META_DEFAULT_MAX_VALUE,
                     .quota     = MC_META_DEFAULT_QUOTA};
    struct event *sig_ev[MC_ARRAY_SIZE(sigs)] = {NULL};
    struct event_base *base   = NULL;
    mc_meta_server_t *srv     = NULL;
    mc_auth_t *auth           = NULL;
    char err[512];
    int rc = 1;

    if (parse_args(&o, argc, argv, err, sizeof(err)) != 0) {
        usage(stderr);
        fprintf(stderr, PROG ": error: %s\n", err);
        return MC_EXIT_USAGE;
    }
    if (o.help) {
        usage(stdout);
        return 0;
    }
    if (o.version) {
        printf(PROG " %s\n", mc_version_string());
        return 0;
    }
    mc_log_set_level(o.level);

    base = event_base_new();
    if (base == NULL) {
        mc_error("cannot create the event loop");
        goto out;
    }
    for (size_t i = 0; i < MC_ARRAY_SIZE(sigs); i++) {
        sig_ev[i] = evsignal_new(base, sigs[i], signal_cb, base);
        if ((sig_ev[i] == NULL) || (event_add(sig_ev[i], NULL) != 0)) {
            mc_error("cannot install the signal handlers");
            goto out;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (mc_meta_server_create(base, MC_META_DIALECT_STANDALONE, o.host, (uint16_t)o.port,
                              &srv) != MC_OK)
        goto out;
    mc_meta_server_set_limits(srv, o.max_value, o.quota);
    if (o.auth_file != NULL) {
        if (mc_auth_load(o.auth_file, &auth) != MC_OK) {
            mc_error("--auth-token-file: %s", mc_last_error_detail());
            goto out;
        }
        if (mc_auth_signing_key(auth, NULL) == NULL) {
            mc_error("--auth-token-file: %s has no cluster secret", o.auth_file);
            goto out;
        }
        if (mc_meta_server_set_auth(srv, auth) != 0)
            goto out;
        mc_info("metadata writes need a signature (%u secrets from %s)", auth->nkeys,
                o.auth_file);
    }
    mc_info(PROG " %s listening on %s", mc_version_string(), mc_meta_server_bound(srv));
    if (event_base_dispatch(base) < 0) {
        mc_error("event loop failed");
        goto out;
    }
    rc = 0;
    mc_info(PROG " stopped");

out:
    mc_meta_server_destroy(srv);
    mc_auth_destroy(auth);
    for (size_t i = 0; i < MC_ARRAY_SIZE(sigs); i++) {
        if (sig_ev[i] != NULL)
            event_free(sig_ev[i]);
    }
    if (base != NULL)
        event_base_free(base);
    return rc;
}
