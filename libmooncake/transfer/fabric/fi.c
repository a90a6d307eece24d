/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libfabric through dlopen (fi.h).
 *
 * Opened once, RTLD_NOW | RTLD_LOCAL, and kept for the process: providers
 * start threads and keep state of their own.  dlsym binds the default
 * symbol version, the one a program linked with -lfabric against the same
 * library would use; libfabric only appends to the structs behind them,
 * and every fi_info we read is allocated by the library itself
 * (dupinfo(NULL) in place of fi_allocinfo), so a newer library than our
 * headers is fine and an older one is refused.
 *
 * rdma/ibv.c loads libibverbs with the same few lines of state and the
 * same dlsym helper; they stay apart because what they say differs (two
 * paths tried here, the AWS build among them, and a version check; one
 * path and the package to install there), and a shared helper would take
 * more arguments than it saves lines.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "transfer/fabric/fi.h"

static pthread_once_t fi_once = PTHREAD_ONCE_INIT;
static mc_fi_t fi_fns;
static int fi_ready;
static char fi_reason[768];

static void *sym(void *lib, const char *name, const char *path)
{
    void *p = dlsym(lib, name);
    if ((p == NULL) && (fi_reason[0] == '\0'))
        snprintf(fi_reason, sizeof(fi_reason), "%s has no %s: it is not a usable libfabric",
                 path, name);
    return p;
}

static void fi_load_once(void)
{
    const char *env = getenv("MC_LIBFABRIC_PATH");
    const char *tried[2];
    char why[2][256];
    size_t ntried = 0;
    const char *path = NULL;
    void *lib        = NULL;
    uint32_t v, want = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);

    if ((env != NULL) && (*env != '\0')) {
        tried[ntried++] = env;
    } else {
        tried[ntried++] = MC_FI_SONAME;
        tried[ntried++] = MC_FI_AWS_LIB;
    }
    for (size_t i = 0; (i < ntried) && (lib == NULL); i++) {
        const char *e;
        lib = dlopen(tried[i], RTLD_NOW | RTLD_LOCAL);
        e   = (lib == NULL) ? dlerror() : NULL;
        snprintf(why[i], sizeof(why[i]), "%s", (e != NULL) ? e : "");
        if (lib != NULL)
            path = tried[i];
    }
    if (lib == NULL) {
        snprintf(fi_reason, sizeof(fi_reason),
                 "%s%s cannot be loaded (%s%s%s): install %s (apt-get install %s), or put "
                 "the AWS EFA installer's libfabric on LD_LIBRARY_PATH or in "
                 "MC_LIBFABRIC_PATH, or use tcp",
                 (env != NULL && *env != '\0') ? "MC_LIBFABRIC_PATH=" : "", tried[0], why[0],
                 (ntried > 1) ? "; " : "", (ntried > 1) ? why[1] : "", MC_FI_PACKAGE,
                 MC_FI_PACKAGE);
        return;
    }
    *(void **)&fi_fns.getinfo  = sym(lib, "fi_getinfo", path);
    *(void **)&fi_fns.freeinfo = sym(lib, "fi_freeinfo", path);
    *(void **)&fi_fns.dupinfo  = sym(lib, "fi_dupinfo", path);
    *(void **)&fi_fns.fabric   = sym(lib, "fi_fabric", path);
    *(void **)&fi_fns.strerror = sym(lib, "fi_strerror", path);
    *(void **)&fi_fns.version  = sym(lib, "fi_version", path);
    if (fi_reason[0] == '\0') {
        v = fi_fns.version();
        if (FI_VERSION_LT(v, want))
            snprintf(fi_reason, sizeof(fi_reason),
                     "%s is libfabric %u.%u, older than the %u.%u this library was built "
                     "with: put a newer one first on LD_LIBRARY_PATH or in MC_LIBFABRIC_PATH",
                     path, FI_MAJOR(v), FI_MINOR(v), FI_MAJOR(want), FI_MINOR(want));
    }
    if (fi_reason[0] != '\0') {
        dlclose(lib);
        memset(&fi_fns, 0, sizeof(fi_fns));
        return;
    }
    mc_debug("fabric: %s loaded (libfabric %u.%u)", path, FI_MAJOR(fi_fns.version()),
             FI_MINOR(fi_fns.version()));
    fi_ready = 1; /* published by pthread_once; the library stays loaded */
}

const mc_fi_t *mc_fi_load(mc_status_t *st_p)
{
    pthread_once(&fi_once, fi_load_once);
    if (fi_ready) {
        *st_p = MC_OK;
        return &fi_fns;
    }
    mc_set_error_detail("fabric: %s", fi_reason);
    *st_p = MC_NOT_SUPPORTED;
    return NULL;
}
