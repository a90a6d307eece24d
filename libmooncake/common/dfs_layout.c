/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The DFS tier's layout (dfs_layout.h): parsing and checking the root and
 * the MOONCAKE_DFS_* variables, shard names, record spans.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/dfs_layout.h"
#include "common/log.h"
#include "common/util.h"

/* A size from @p name (default @p def) in [lo, hi]; -1 with the detail
 * set for any other value (mc_env_size). */
static int env_size(const char *name, uint64_t def, uint64_t lo, uint64_t hi, uint64_t *out)
{
    *out = def;
    return mc_env_size(name, lo, hi, out);
}

mc_status_t mc_dfs_layout_init(mc_dfs_layout_t *out, const char *root, const char *what)
{
    struct stat sb;
    uint64_t count, cap, align;
    size_t len;

    memset(out, 0, sizeof(*out));
    if ((root == NULL) || (root[0] != '/')) {
        mc_set_error_detail("%s \"%s\" must be an absolute path", what, root ? root : "");
        return MC_INVALID_PARAMS;
    }
    len = strlen(root);
    while ((len > 1) && (root[len - 1] == '/'))
        len--;
    if (len >= sizeof(out->root) - 64) {
        mc_set_error_detail("%s is too long", what);
        return MC_INVALID_PARAMS;
    }
    if (strstr(root, "/..") != NULL) {
        mc_set_error_detail("%s \"%s\" must not contain \"..\"", what, root);
        return MC_INVALID_PARAMS;
    }
    errno = 0;
    if ((stat(root, &sb) != 0) || !S_ISDIR(sb.st_mode)) {
        mc_set_error_detail("%s \"%s\" is not an existing directory%s%s", what, root,
                            errno ? ": " : "", errno ? strerror(errno) : "");
        return MC_INVALID_PARAMS;
    }
    if ((env_size("MOONCAKE_DFS_SHARD_COUNT", MC_DFS_DEFAULT_SHARD_COUNT, 1,
                  MC_DFS_MAX_SHARD_COUNT, &count) != 0) ||
        (env_size("MOONCAKE_DFS_SHARD_CAPACITY", MC_DFS_DEFAULT_SHARD_CAPACITY, 4096,
                  MC_DFS_MAX_SHARD_CAPACITY, &cap) != 0) ||
        (env_size("MOONCAKE_DFS_ALIGNMENT", MC_DFS_DEFAULT_ALIGNMENT, 1, MC_DFS_MAX_ALIGNMENT,
                  &align) != 0))
        return MC_INVALID_PARAMS;
    if ((align & (align - 1)) != 0) {
        mc_set_error_detail("MOONCAKE_DFS_ALIGNMENT=%llu is not a power of two",
                            (unsigned long long)align);
        return MC_INVALID_PARAMS;
    }
    if (cap % align != 0) {
        mc_set_error_detail("MOONCAKE_DFS_SHARD_CAPACITY=%llu is not a multiple of "
                            "MOONCAKE_DFS_ALIGNMENT=%llu",
                            (unsigned long long)cap, (unsigned long long)align);
        return MC_INVALID_PARAMS;
    }
    memcpy(out->root, root, len);
    out->root[len]      = '\0';
    out->shard_count    = (uint32_t)count;
    out->shard_capacity = cap;
    out->alignment      = (uint32_t)align;
    return MC_OK;
}

void mc_dfs_shard_name(uint32_t idx, char *out, size_t cap)
{
    snprintf(out, cap, "mooncake-dfs-%05u.shard", (unsigned)idx);
}

uint64_t mc_dfs_record_span(uint64_t klen, uint64_t vlen, uint32_t alignment)
{
    uint64_t n = MC_DFS_RECORD_HDR + klen;

    if ((alignment == 0) || (vlen > UINT64_MAX - n - alignment))
        return 0;
    n += vlen;
    return (n + alignment - 1) & ~((uint64_t)alignment - 1);
}
