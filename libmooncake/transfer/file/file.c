/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The "file" backend of file segments (file.h): a regular file or a block
 * device, moved with pread/pwrite.  The file is opened O_RDWR once and
 * kept; positioned I/O needs no lock, so served connections share it.
 * Short transfers (a signal, a pipe-sized kernel chunk) are continued;
 * end of file inside the range (someone truncated the file under us) is
 * an error, never zero bytes passed off as data.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <linux/fs.h> /* BLKGETSIZE64 */
#endif

#include "common/log.h"
#include "transfer/file/file.h"

typedef struct posix_file {
    int fd;
} posix_file_t;

static mc_status_t posix_open(const char *path, uint64_t size, void **priv_p)
{
    posix_file_t *f;
    struct stat sb;
    uint64_t have = 0;
    int fd;

    if ((path == NULL) || (path[0] != '/')) {
        mc_set_error_detail("file segment: the path must be absolute");
        return MC_INVALID_PARAMS;
    }
    if ((size == 0) || (size > (uint64_t)INT64_MAX)) {
        mc_set_error_detail("file segment: size must be between 1 and 2^63-1 bytes");
        return MC_INVALID_PARAMS;
    }
    fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        mc_set_error_detail("file segment: cannot open %s: %s", path, strerror(errno));
        return (errno == ENOENT || errno == EACCES || errno == EISDIR) ? MC_INVALID_PARAMS
                                                                       : MC_INTERNAL_ERROR;
    }
    if (fstat(fd, &sb) != 0)
        goto io_fail;
    if (S_ISREG(sb.st_mode)) {
        have = (uint64_t)sb.st_size;
        if ((have < size) && (ftruncate(fd, (off_t)size) != 0))
            goto io_fail;
    } else if (S_ISBLK(sb.st_mode)) {
#ifdef BLKGETSIZE64
        if (ioctl(fd, BLKGETSIZE64, &have) != 0)
            goto io_fail;
#endif
        if (have < size) {
            close(fd);
            mc_set_error_detail("file segment: block device %s holds %llu bytes, fewer than %llu",
                                path, (unsigned long long)have, (unsigned long long)size);
            return MC_INVALID_PARAMS;
        }
    } else {
        close(fd);
        mc_set_error_detail("file segment: %s is neither a regular file nor a block device",
                            path);
        return MC_INVALID_PARAMS;
    }
    f = malloc(sizeof(*f));
    if (f == NULL) {
        close(fd);
        mc_set_error_detail("out of memory");
        return MC_INTERNAL_ERROR;
    }
    f->fd   = fd;
    *priv_p = f;
    return MC_OK;

io_fail:
    mc_set_error_detail("file segment: %s: %s", path, strerror(errno));
    close(fd);
    return MC_INTERNAL_ERROR;
}

/* Move exactly @p len bytes at @p off, continuing short transfers. */
static mc_status_t posix_io(posix_file_t *f, int write, uint8_t *p, size_t len, uint64_t off)
{
    while (len > 0) {
        ssize_t n = write ? pwrite(f->fd, p, len, (off_t)off) : pread(f->fd, p, len, (off_t)off);
        if ((n < 0) && (errno == EINTR))
            continue;
        if (n <= 0) {
            if (n == 0)
                mc_warn("file segment: end of file at %llu (truncated under us?)",
                        (unsigned long long)off);
            else
                mc_warn("file segment: %s of %zu bytes at %llu failed: %m",
                        write ? "pwrite" : "pread", len, (unsigned long long)off);
            return write ? MC_INVALID_WRITE : MC_INVALID_READ;
        }
        p += n;
        off += (uint64_t)n;
        len -= (size_t)n;
    }
    return MC_OK;
}

static mc_status_t posix_read(void *priv, void *buf, size_t len, uint64_t off)
{
    return posix_io(priv, 0, buf, len, off);
}

static mc_status_t posix_write(void *priv, const void *buf, size_t len, uint64_t off)
{
    return posix_io(priv, 1, (uint8_t *)(uintptr_t)buf, len, off);
}

static void posix_close(void *priv)
{
    posix_file_t *f = priv;
    if (f == NULL)
        return;
    close(f->fd);
    free(f);
}

const mc_te_file_ops_t mc_te_file_posix_ops = {
    .size  = sizeof(mc_te_file_ops_t),
    .name  = "file",
    .open  = posix_open,
    .read  = posix_read,
    .write = posix_write,
    .close = posix_close,
};

const mc_te_file_ops_t *mc_te_file_ops_find(const char *name)
{
    if ((name == NULL) || (strcmp(name, mc_te_file_posix_ops.name) == 0))
        return &mc_te_file_posix_ops;
    return NULL;
}
