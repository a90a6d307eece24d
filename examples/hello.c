/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hello: the smallest complete mooncake store client.
 *
 *   hello [options]                 put "hello_key", read it back, print it
 *   hello [options] put KEY VALUE   store VALUE, then keep serving it until
 *                                   stdin is closed (the bytes live in this
 *                                   process's segment; close() removes them)
 *   hello [options] get KEY         print the value stored under KEY
 *   hello [options] exist KEY       print 1 or 0
 *   hello [options] remove KEY      remove KEY (ignoring read leases)
 *
 * Options (environment variable in brackets):
 *   --master HOST:PORT   master address [MC_MASTER_SERVER, 127.0.0.1:50051]
 *   --metadata URL       "P2PHANDSHAKE" or http://HOST:PORT/metadata
 *                        [MC_METADATA_SERVER, P2PHANDSHAKE]
 *   --hostname HOST      this client's address [MC_LOCAL_HOSTNAME, localhost]
 *   --segment BYTES      memory contributed to the store (default 64 MiB)
 *
 * Start a master first, e.g.
 *   mooncake_master --port=50051 --enable_http_metadata_server
 */
#ifdef HAVE_CONFIG_H
#include "config.h" /* only when built in the source tree */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mooncake/mooncake.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: hello [--master HOST:PORT] [--metadata URL] [--hostname HOST]\n"
               "             [--segment BYTES] [put KEY VALUE | get KEY | exist KEY |"
               " remove KEY]\n");
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return (v != NULL && *v != '\0') ? v : def;
}

/* Report a failed call with the library's own explanation. */
static int fail(const char *what, int st)
{
    fprintf(stderr, "hello: %s failed: %s (%d): %s\n", what, mc_status_name(st), st,
            mc_last_error_detail());
    return 1;
}

static int do_get(mc_store_h store, const char *key)
{
    uint64_t size = 0;
    char *buf;
    int st;

    /* Ask for the size first, then read into a buffer of exactly that size. */
    st = mc_store_get_size(store, key, &size);
    if (st != MC_OK)
        return fail("get_size", st);
    buf = malloc(size ? size : 1);
    if (buf == NULL)
        return fail("malloc", MC_INTERNAL_ERROR);
    st = mc_store_get(store, key, buf, size, &size);
    if (st != MC_OK) {
        free(buf);
        return fail("get", st);
    }
    printf("%s = %.*s\n", key, (int)size, buf);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *master   = env_or("MC_MASTER_SERVER", "127.0.0.1:50051");
    const char *metadata = env_or("MC_METADATA_SERVER", "P2PHANDSHAKE");
    const char *hostname = env_or("MC_LOCAL_HOSTNAME", "localhost");
    unsigned long long segment = 64ull << 20;
    mc_store_params_t params;
    mc_store_h store = NULL;
    int argi, st, rc = 0;

    for (argi = 1; argi < argc && strncmp(argv[argi], "--", 2) == 0; argi++) {
        if (argi + 1 >= argc) {
            usage(stderr);
            return 2;
        }
        if (strcmp(argv[argi], "--master") == 0)
            master = argv[++argi];
        else if (strcmp(argv[argi], "--metadata") == 0)
            metadata = argv[++argi];
        else if (strcmp(argv[argi], "--hostname") == 0)
            hostname = argv[++argi];
        else if (strcmp(argv[argi], "--segment") == 0)
            segment = strtoull(argv[++argi], NULL, 0);
        else {
            usage(stderr);
            return 2;
        }
    }

    /* 1. create a handle and set it up: engine, segment, master connection */
    st = mc_store_create(&store);
    if (st != MC_OK)
        return fail("create", st);
    memset(&params, 0, sizeof(params));
    params.field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                        MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE | MC_STORE_PARAM_MASTER_SERVER_ADDR;
    params.local_hostname      = hostname;
    params.metadata_server     = metadata;
    params.global_segment_size = segment;
    params.master_server_addr  = master;
    st = mc_store_setup(store, &params);
    if (st != MC_OK) {
        rc = fail("setup", st);
        goto out;
    }
    fprintf(stderr, "hello: client %s connected to master %s\n", mc_store_hostname(store),
            master);

    /* 2. do what was asked */
    if (argi == argc) {
        static const char value[] = "Hello, Mooncake Store!";
        st = mc_store_put(store, "hello_key", value, sizeof(value) - 1, NULL);
        if (st != MC_OK)
            rc = fail("put", st);
        else
            rc = do_get(store, "hello_key");
    } else if (strcmp(argv[argi], "put") == 0 && argi + 2 < argc) {
        mc_replicate_config_t cfg;
        mc_replicate_config_init(&cfg); /* one replica, no pinning */
        st = mc_store_put(store, argv[argi + 1], argv[argi + 2], strlen(argv[argi + 2]), &cfg);
        if (st != MC_OK) {
            rc = fail("put", st);
        } else {
            printf("stored %s\n", argv[argi + 1]);
            fflush(stdout);
            /* Objects live in this process's memory: serve until stdin closes. */
            while (getchar() != EOF)
                ;
        }
    } else if (strcmp(argv[argi], "get") == 0 && argi + 1 < argc) {
        rc = do_get(store, argv[argi + 1]);
    } else if (strcmp(argv[argi], "exist") == 0 && argi + 1 < argc) {
        st = mc_store_exist(store, argv[argi + 1]);
        if (st < 0)
            rc = fail("exist", st);
        else
            printf("%d\n", st);
    } else if (strcmp(argv[argi], "remove") == 0 && argi + 1 < argc) {
        st = mc_store_remove(store, argv[argi + 1], 1);
        if (st != MC_OK)
            rc = fail("remove", st);
        else
            printf("removed %s\n", argv[argi + 1]);
    } else {
        usage(stderr);
        rc = 2;
    }

    /* 3. close: this client's segment (and the objects in it) leave the store */
    st = mc_store_close(store);
    if ((st != MC_OK) && (rc == 0))
        rc = fail("close", st);
out:
    mc_store_destroy(store);
    return rc;
}
