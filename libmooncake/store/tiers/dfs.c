/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The client side of the DFS tier (docs/tiers.md §6).
 *
 * A client that sets MOONCAKE_DFS_ROOT_DIR (the shared file system's
 * mount, the same path as the master's --root_fs_dir) writes and reads
 * DFS replicas.  At every HELLO it compares the master's announced root
 * and shard layout with its own and refuses a master that differs, so
 * two sides never disagree about where a record is.
 *
 * Writing: PUT_START (or UPSERT_START) hands out a DFS replica -- a shard
 * file under the root and an offset -- beside the memory replicas; after
 * the memory transfer the writer writes one record there (the SSD tier's
 * record: header with the value's CRC32C and a header CRC, key, value)
 * with a single pwritev, then seals the write.  No fsync, as upstream
 * promises.  Reading: a reader that finds no memory replica it can read
 * opens the shard and reads the record with one preadv; the header's CRC
 * and the value's CRC are checked, so a torn, truncated, corrupted or
 * reused record is a miss, never bytes (disk.c mc_store_disk_read_record).
 *
 * May call: dfs.h and disk.h (this folder: the SSD tier's record format),
 * common/dfs_layout.h.  Called by: tiers.c (the hooks), store.c (setup: the
 * layout, the HELLO check).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/dfs_layout.h"
#include "common/log.h"
#include "store/store_internal.h"
#include "store/tiers/dfs.h"
#include "store/tiers/disk.h"
#include "store/tiers/tiers.h"

mc_status_t mc_store_dfs_init(mc_store_h s)
{
    const char *root = getenv("MOONCAKE_DFS_ROOT_DIR");
    mc_dfs_layout_t *l;
    mc_status_t st;

    s->dfs = NULL;
    if ((root == NULL) || (*root == '\0'))
        return MC_OK;
    l = calloc(1, sizeof(*l));
    if (l == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    st = mc_dfs_layout_init(l, root, "MOONCAKE_DFS_ROOT_DIR");
    if (st != MC_OK) {
        free(l);
        return st;
    }
    s->dfs = l;
    return MC_OK;
}

void mc_store_dfs_cleanup(mc_store_h s)
{
    free(s->dfs);
    s->dfs = NULL;
}

mc_status_t mc_store_dfs_on_hello(void *arg, const mc_wire_hello_resp_t *resp)
{
    mc_store_h s             = arg;
    const mc_dfs_layout_t *l = s->dfs;

    if (l == NULL)
        return MC_OK;
    if (resp->dfs_root.len == 0) {
        mc_set_error_detail("MOONCAKE_DFS_ROOT_DIR is set (%s) but the master has no DFS tier "
                            "(start it with --root_fs_dir=%s)", l->root, l->root);
        return MC_INVALID_PARAMS;
    }
    if (!mc_str_eq(resp->dfs_root, mc_str_from_cstr(l->root)) ||
        (resp->dfs_shard_count != l->shard_count) ||
        (resp->dfs_shard_capacity != l->shard_capacity) ||
        (resp->dfs_alignment != l->alignment)) {
        mc_set_error_detail(
            "DFS layout differs from the master's: master --root_fs_dir=%.*s, %u shards of "
            "%llu bytes, alignment %u; this client MOONCAKE_DFS_ROOT_DIR=%s, "
            "MOONCAKE_DFS_SHARD_COUNT=%u, MOONCAKE_DFS_SHARD_CAPACITY=%llu, "
            "MOONCAKE_DFS_ALIGNMENT=%u",
            (int)MC_MIN(resp->dfs_root.len, 1024u), resp->dfs_root.ptr,
            (unsigned)resp->dfs_shard_count, (unsigned long long)resp->dfs_shard_capacity,
            (unsigned)resp->dfs_alignment, l->root, (unsigned)l->shard_count,
            (unsigned long long)l->shard_capacity, (unsigned)l->alignment);
        return MC_INVALID_PARAMS;
    }
    return MC_OK;
}

mc_status_t mc_store_dfs_config_check(mc_store_h s, const mc_replicate_config_t *cfg)
{
    if ((cfg == NULL) || (cfg->dfs_replica_num == 0))
        return MC_OK;
    if (cfg->replica_num == 0) {
        mc_set_error_detail("dfs_replica_num=1 needs replica_num >= 1 (DFS-only placement is "
                            "not supported)");
        return MC_INVALID_PARAMS;
    }
    if (strcmp(s->target.tenant_id, "default") != 0) {
        mc_set_error_detail("DFS replicas support only the default tenant (this client's "
                            "tenant is \"%s\")", s->target.tenant_id);
        return MC_INVALID_PARAMS;
    }
    if (s->dfs == NULL) {
        mc_set_error_detail("dfs_replica_num=1 needs a DFS tier on this client: set "
                            "MOONCAKE_DFS_ROOT_DIR to the master's --root_fs_dir");
        return MC_NOT_SUPPORTED;
    }
    return MC_OK;
}

/* 1 when @p r's shard file name is the one its shard index gives. */
static int shard_name_ok(const mc_wire_replica_t *r, char *name, size_t cap)
{
    mc_dfs_shard_name(r->shard_idx, name, cap);
    return (r->file_path.len == strlen(name)) &&
           (memcmp(r->file_path.ptr, name, r->file_path.len) == 0);
}

/* @p r fits this client's layout: a known shard, its extent inside it,
 * aligned, big enough for a record of @p klen + @p size bytes. */
static int extent_ok(const mc_dfs_layout_t *l, const mc_wire_replica_t *r, uint64_t klen,
                     uint64_t size)
{
    uint64_t need = mc_dfs_record_span(klen, size, l->alignment);
    return (need != 0) && (r->shard_idx < l->shard_count) && (r->addr % l->alignment == 0) &&
           (r->aligned_size >= need) && (r->addr <= l->shard_capacity) &&
           (r->aligned_size <= l->shard_capacity - r->addr);
}

int mc_store_dfs_replica_path(mc_store_h s, const mc_wire_replica_t *r, uint64_t size,
                              char *path, size_t cap)
{
    char name[64];

    if ((s->dfs == NULL) || (r->type != MC_WIRE_REPLICA_DFS) ||
        (r->status != MC_REPLICA_COMPLETE) || (r->size != size) ||
        !shard_name_ok(r, name, sizeof(name)) || !extent_ok(s->dfs, r, 0, size))
        return 0;
    return snprintf(path, cap, "%s/%s", s->dfs->root, name) < (int)cap;
}

mc_status_t mc_store_dfs_write(mc_store_h s, const mc_wire_replica_t *r, mc_str_t key,
                               const mc_iov_t *parts, size_t n, uint64_t total)
{
    uint8_t hdr[MC_STORE_DISK_HDR];
    char name[64], path[PATH_MAX + 80];
    struct iovec *iov;
    uint32_t crc = 0;
    size_t k = 0;
    ssize_t w;
    int fd, err;

    if ((s->dfs == NULL) || (r->size != total) || !shard_name_ok(r, name, sizeof(name)) ||
        !extent_ok(s->dfs, r, key.len, total) || (n > (size_t)IOV_MAX - 2)) {
        mc_set_error_detail("master returned an unusable DFS replica (shard %u, offset %llu, "
                            "%llu bytes reserved for a %llu-byte value)",
                            (unsigned)r->shard_idx, (unsigned long long)r->addr,
                            (unsigned long long)r->aligned_size, (unsigned long long)total);
        return MC_INVALID_REPLICA;
    }
    iov = malloc((n + 2) * sizeof(*iov));
    if (iov == NULL) {
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    for (size_t i = 0; i < n; i++)
        crc = mc_crc32c(crc, parts[i].base, parts[i].len);
    mc_store_disk_record_header(hdr, key, total, crc);
    iov[k].iov_base   = hdr;
    iov[k++].iov_len  = sizeof(hdr);
    iov[k].iov_base   = (void *)key.ptr;
    iov[k++].iov_len  = key.len;
    for (size_t i = 0; i < n; i++) {
        if (parts[i].len == 0)
            continue;
        iov[k].iov_base  = (void *)parts[i].base;
        iov[k++].iov_len = parts[i].len;
    }
    snprintf(path, sizeof(path), "%s/%s", s->dfs->root, name);
    fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = errno;
        free(iov);
        mc_set_error_detail("cannot open DFS shard %s: %s", path, strerror(err));
        return (err == EACCES || err == EPERM) ? MC_DFS_PERMISSION_DENIED
                                               : MC_DFS_SERVICE_UNAVAILABLE;
    }
    /* pwritev may write less than asked (a large record, a signal): the
     * rest follows from where it stopped */
    {
        uint64_t want = MC_STORE_DISK_HDR + key.len + total, done = 0;
        struct iovec *v = iov;
        int nv          = (int)k;
        w               = 0;
        while (done < want) {
            do {
                w = pwritev(fd, v, nv, (off_t)(r->addr + done));
            } while ((w < 0) && (errno == EINTR));
            if (w <= 0)
                break;
            done += (uint64_t)w;
            while ((nv > 0) && ((size_t)w >= v->iov_len)) {
                w -= (ssize_t)v->iov_len;
                v++;
                nv--;
            }
            if (nv > 0) {
                v->iov_base = (uint8_t *)v->iov_base + w;
                v->iov_len -= (size_t)w;
            }
        }
        err = errno;
        close(fd);
        free(iov);
        if (done < want) {
            mc_set_error_detail("write of %llu bytes to DFS shard %s at %llu failed: %s",
                                (unsigned long long)want, path, (unsigned long long)r->addr,
                                (w < 0) ? strerror(err) : "short write");
            return MC_DFS_PARTIAL_WRITE;
        }
    }
    return MC_OK;
}
