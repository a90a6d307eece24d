/* SPDX-License-Identifier: Apache-2.0 */
/* RDMA NIC discovery from sysfs and selection (nic.h). */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "transfer/rdma/nic.h"

#define MC_RDMA_MAX_PORTS 16

/* First line of a small sysfs file, without its newline; 0 or -1. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    size_t len;
    if (f == NULL)
        return -1;
    if (fgets(buf, (int)cap, f) == NULL) {
        fclose(f);
        return -1;
    }
    fclose(f);
    len = strlen(buf);
    while ((len > 0) && ((buf[len - 1] == '\n') || (buf[len - 1] == ' ')))
        buf[--len] = '\0';
    return 0;
}

static int name_ok(const char *s, size_t len)
{
    if ((len == 0) || (len >= MC_RDMA_NIC_NAME_MAX))
        return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && (c != '_') && (c != '-') && (c != '.'))
            return 0;
    }
    return 1;
}

/* Fill port, ethernet and numa_node of @p nic from <dir>. */
static void nic_probe(const char *dir, mc_rdma_nic_t *nic)
{
    char path[1024], line[64];
    nic->numa_node = -1;
    nic->port      = 0;
    nic->ethernet  = 0;
    snprintf(path, sizeof(path), "%s/device/numa_node", dir);
    if (read_line(path, line, sizeof(line)) == 0) {
        char *end;
        long v = strtol(line, &end, 10);
        if ((end != line) && (*end == '\0') && (v >= 0) && (v < 4096))
            nic->numa_node = (int)v;
    }
    for (int p = 1; p <= MC_RDMA_MAX_PORTS; p++) {
        /* "4: ACTIVE" */
        snprintf(path, sizeof(path), "%s/ports/%d/state", dir, p);
        if (read_line(path, line, sizeof(line)) != 0)
            continue;
        if (strstr(line, "ACTIVE") == NULL)
            continue;
        nic->port = p;
        snprintf(path, sizeof(path), "%s/ports/%d/link_layer", dir, p);
        if ((read_line(path, line, sizeof(line)) == 0) && (strcmp(line, "Ethernet") == 0))
            nic->ethernet = 1;
        break;
    }
}

static int nic_cmp(const void *a, const void *b)
{
    return strcmp(((const mc_rdma_nic_t *)a)->name, ((const mc_rdma_nic_t *)b)->name);
}

mc_status_t mc_rdma_nic_scan(const char *root, mc_rdma_nic_t *out, size_t cap, size_t *n_p)
{
    char dir[512], sub[800];
    DIR *d;
    struct dirent *e;
    size_t n = 0;

    *n_p = 0;
    if ((root == NULL) || (*root == '\0'))
        root = MC_RDMA_SYSFS_ROOT;
    snprintf(dir, sizeof(dir), "%.400s/class/infiniband", root);
    d = opendir(dir);
    if (d == NULL) {
        mc_debug("rdma: %s: %s (no RDMA device)", dir, strerror(errno));
        return MC_OK;
    }
    while ((e = readdir(d)) != NULL) {
        if ((e->d_name[0] == '.') || !name_ok(e->d_name, strlen(e->d_name)))
            continue;
        if (n == cap) {
            mc_warn("rdma: more than %zu devices under %s; %s and later ones are not used",
                    cap, dir, e->d_name);
            break;
        }
        memset(&out[n], 0, sizeof(out[n]));
        strcpy(out[n].name, e->d_name);
        snprintf(sub, sizeof(sub), "%s/%s", dir, e->d_name);
        nic_probe(sub, &out[n]);
        n++;
    }
    closedir(d);
    qsort(out, n, sizeof(out[0]), nic_cmp);
    *n_p = n;
    return MC_OK;
}

mc_status_t mc_rdma_nic_list_parse(const char *list, const char *what,
                                   char (*names)[MC_RDMA_NIC_NAME_MAX], size_t cap,
                                   size_t *n_p)
{
    const char *p = list;
    size_t n = 0;

    *n_p = 0;
    if ((list == NULL) || (*list == '\0'))
        return MC_OK;
    for (;;) {
        const char *end = strchr(p, ',');
        const char *a = p, *b = (end != NULL) ? end : p + strlen(p);
        while ((a < b) && isspace((unsigned char)*a))
            a++;
        while ((b > a) && isspace((unsigned char)b[-1]))
            b--;
        if (!name_ok(a, (size_t)(b - a))) {
            mc_set_error_detail("%s: \"%.*s\" is not a NIC name (comma-separated names such "
                                "as mlx5_0,mlx5_1)",
                                what, (int)((b - a) > 80 ? 80 : (b - a)), a);
            return MC_INVALID_PARAMS;
        }
        if (n == cap) {
            mc_set_error_detail("%s: more than %zu NICs", what, cap);
            return MC_INVALID_PARAMS;
        }
        memcpy(names[n], a, (size_t)(b - a));
        names[n][b - a] = '\0';
        for (size_t i = 0; i < n; i++) {
            if (strcmp(names[i], names[n]) == 0) {
                mc_set_error_detail("%s: NIC %s is listed twice", what, names[n]);
                return MC_INVALID_PARAMS;
            }
        }
        n++;
        if (end == NULL)
            break;
        p = end + 1;
    }
    *n_p = n;
    return MC_OK;
}

/* "mlx5_0, mlx5_1" of the scanned NICs, for messages. */
static void nic_names(const mc_rdma_nic_t *nics, size_t n, char *buf, size_t cap)
{
    size_t off = 0;
    buf[0] = '\0';
    for (size_t i = 0; (i < n) && (off < cap); i++) {
        int w = snprintf(buf + off, cap - off, "%s%s", (i > 0) ? ", " : "", nics[i].name);
        if (w < 0)
            break;
        off += (size_t)w;
    }
    if (n == 0)
        snprintf(buf, cap, "none");
}

mc_status_t mc_rdma_nic_select(const char *root, const char *devices, const char *auto_disc,
                               const char *filters, mc_rdma_nic_t *out, size_t *n_p)
{
    char (*want)[MC_RDMA_NIC_NAME_MAX] = NULL;
    mc_rdma_nic_t all[MC_RDMA_MAX_NICS];
    char seen[512];
    size_t nall = 0, nwant = 0, n = 0;
    int discover;
    mc_status_t st;

    *n_p = 0;
    if ((auto_disc == NULL) || (*auto_disc == '\0'))
        discover = ((devices == NULL) || (*devices == '\0'));
    else if (strcmp(auto_disc, "1") == 0)
        discover = 1;
    else if (strcmp(auto_disc, "0") == 0)
        discover = 0;
    else {
        mc_set_error_detail("MC_MS_AUTO_DISC=\"%.32s\" is not valid (use 1 to force NIC "
                            "auto-discovery or 0 to require rdma_devices)", auto_disc);
        return MC_INVALID_PARAMS;
    }
    if (!discover && ((devices == NULL) || (*devices == '\0'))) {
        mc_set_error_detail("rdma_devices is required when MC_MS_AUTO_DISC=0 (e.g. "
                            "\"mlx5_0,mlx5_1\")");
        return MC_INVALID_PARAMS;
    }
    if (discover && (devices != NULL) && (*devices != '\0'))
        mc_warn("rdma: MC_MS_AUTO_DISC=1: rdma_devices \"%.200s\" is not used", devices);
    if (!discover && (filters != NULL) && (*filters != '\0'))
        mc_warn("rdma: MC_MS_FILTERS applies to auto-discovery only; rdma_devices \"%.200s\" "
                "is used as given", devices);
    want = calloc(MC_RDMA_MAX_NICS, sizeof(*want));
    if (want == NULL)
        return MC_INTERNAL_ERROR;
    st = discover ? mc_rdma_nic_list_parse(filters, "MC_MS_FILTERS", want, MC_RDMA_MAX_NICS,
                                           &nwant)
                  : mc_rdma_nic_list_parse(devices, "rdma_devices", want, MC_RDMA_MAX_NICS,
                                           &nwant);
    if (st != MC_OK)
        goto out;
    st = mc_rdma_nic_scan(root, all, MC_RDMA_MAX_NICS, &nall);
    if (st != MC_OK)
        goto out;
    nic_names(all, nall, seen, sizeof(seen));

    if (!discover) {
        for (size_t i = 0; i < nwant; i++) {
            size_t j;
            for (j = 0; j < nall; j++)
                if (strcmp(all[j].name, want[i]) == 0)
                    break;
            if (j == nall) {
                mc_set_error_detail("RDMA device %s (rdma_devices) was not found; NICs on "
                                    "this host: %s", want[i], seen);
                st = MC_INVALID_PARAMS;
                goto out;
            }
            if (all[j].port == 0) {
                mc_set_error_detail("RDMA device %s (rdma_devices) has no ACTIVE port",
                                    want[i]);
                st = MC_INVALID_PARAMS;
                goto out;
            }
            out[n++] = all[j];
        }
        qsort(out, n, sizeof(out[0]), nic_cmp);
    } else {
        for (size_t j = 0; j < nall; j++) {
            int keep = (nwant == 0);
            for (size_t i = 0; (i < nwant) && !keep; i++)
                keep = (strcmp(all[j].name, want[i]) == 0);
            if (keep && (all[j].port != 0))
                out[n++] = all[j];
        }
        if (n == 0) {
            const char *r = ((root != NULL) && (*root != '\0')) ? root : MC_RDMA_SYSFS_ROOT;
            if (nwant > 0)
                mc_set_error_detail("no RDMA device found for protocol rdma: none with an "
                                    "ACTIVE port matches MC_MS_FILTERS=%.200s (NICs on this "
                                    "host: %s)",
                                    filters, seen);
            else
                mc_set_error_detail("no RDMA device found for protocol rdma (no NIC with an "
                                    "ACTIVE port under %s/class/infiniband; NICs: %s); use "
                                    "protocol tcp",
                                    r, seen);
            st = MC_NOT_SUPPORTED;
            goto out;
        }
    }
    *n_p = n;
    st   = MC_OK;
out:
    free(want);
    return st;
}

void mc_rdma_nic_order(const mc_rdma_nic_t *nics, size_t n, int numa, size_t *order)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((numa < 0) || (nics[i].numa_node == numa))
            order[k++] = i;
    if (numa < 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (nics[i].numa_node != numa)
            order[k++] = i;
}

int mc_rdma_addr_numa(const void *addr)
{
#ifdef SYS_move_pages
    long psz = sysconf(_SC_PAGESIZE);
    void *page = (void *)((uintptr_t)addr & ~(uintptr_t)(psz - 1));
    int status = -1;
    /* nodes NULL: only report where the page is */
    if (syscall(SYS_move_pages, 0, 1UL, &page, NULL, &status, 0) != 0)
        return -1;
    return (status >= 0) ? status : -1;
#else
    (void)addr;
    return -1;
#endif
}
