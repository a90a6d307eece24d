/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Tenant registration and quotas (--enable_multi_tenants; tenants.h).
 *
 * The policy is a short list (operators name a handful of tenants), kept
 * as an array searched linearly: a put looks its tenant up once.  Usage is
 * counted for every tenant that holds bytes, registered or not, so a
 * restored object of a tenant since removed from the file still gives its
 * charge back when it goes (an "orphan", as upstream calls it).
 *
 * The file connector reads upstream's YAML:
 *
 *     version: 1
 *     tenants:
 *       - name: team-a
 *         quota: 10GB
 *
 * with a parser for exactly that shape (block list of name/quota maps,
 * comments, optional quotes), and writes it back the same way when the
 * admin API changes the policy.  The state lives in one record per
 * master, found through tenants_of(): mc_master_t has no slot for it yet
 * (docs: a field there is the natural home).
 *
 * Owns: the tenant policy and quotas.
 * May call: tenants.h and libmooncake's common/ only.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "tenants.h"

#define TENANT_NAME_MAX 255

typedef struct tenant {
    char *name;
    uint64_t quota;     /* requested bytes; 0 = not registered (usage only) */
    uint64_t charged;   /* value bytes of its objects */
} tenant_t;

typedef struct mc_tenants {
    mc_master_t *m;
    tenant_t *v;
    uint32_t n, cap;
} mc_tenants_t;

static mc_tenants_t *tenants_of(mc_master_t *m)
{
    return m->tenants;
}

static tenant_t *tenant_find(mc_tenants_t *t, const char *name, size_t len)
{
    for (uint32_t i = 0; i < t->n; i++) {
        if ((strlen(t->v[i].name) == len) && (memcmp(t->v[i].name, name, len) == 0))
            return &t->v[i];
    }
    return NULL;
}

static tenant_t *tenant_add(mc_tenants_t *t, const char *name, size_t len)
{
    tenant_t *e = tenant_find(t, name, len);
    if (e != NULL)
        return e;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? 2 * t->cap : 8;
        tenant_t *v  = realloc(t->v, (size_t)cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        t->v   = v;
        t->cap = cap;
    }
    e       = &t->v[t->n];
    e->name = strndup(name, len);
    if (e->name == NULL)
        return NULL;
    e->quota   = 0;
    e->charged = 0;
    t->n++;
    return e;
}

/* Upstream's tenant name rule: non-empty, no leading '_', no control bytes. */
static int name_valid(const char *s, size_t len)
{
    if ((len == 0) || (len > TENANT_NAME_MAX) || (s[0] == '_'))
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (((unsigned char)s[i] < 0x20) || (s[i] == 0x7f))
            return 0;
    }
    return 1;
}

/* ---- the YAML file ----------------------------------------------------- */

/* Trim blanks and a trailing comment, drop matching quotes; in place. */
static char *yaml_scalar(char *s)
{
    char *end;
    while (isspace((unsigned char)*s))
        s++;
    if ((*s == '"') || (*s == '\'')) {
        char q = *s++;
        end    = strchr(s, q);
        if (end != NULL)
            *end = '\0';
        return s;
    }
    end = strstr(s, " #");
    if (end != NULL)
        *end = '\0';
    end = s + strlen(s);
    while ((end > s) && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Split "key: value" of @p line into *key_p and *val_p; -1 when no colon. */
static int yaml_pair(char *line, char **key_p, char **val_p)
{
    char *colon = strchr(line, ':');
    if (colon == NULL)
        return -1;
    *colon = '\0';
    *key_p = yaml_scalar(line);
    *val_p = yaml_scalar(colon + 1);
    return 0;
}

static int policy_fail(const char *path, int line, const char *why)
{
    mc_error("--tenant_quota_connector_uri=%s: line %d: %s", path, line, why);
    return -1;
}

/* Read the policy file into @p t (quota of each tenant named). */
static int policy_load(mc_tenants_t *t, const char *path)
{
    char buf[1024];
    int lineno = 0, in_list = 0, version = 0;
    tenant_t *cur = NULL;
    FILE *f       = fopen(path, "r");

    if (f == NULL) {
        mc_error("--tenant_quota_connector_uri=%s: cannot open: %m", path);
        return -1;
    }
    while (fgets(buf, sizeof(buf), f) != NULL) {
        char *s = buf, *key, *val;
        int item;
        lineno++;
        buf[strcspn(buf, "\r\n")] = '\0';
        while (isspace((unsigned char)*s))
            s++;
        if ((*s == '\0') || (*s == '#'))
            continue;
        item = (s[0] == '-') && ((s[1] == ' ') || (s[1] == '\0'));
        if (item) {
            if (!in_list)
                goto bad_item;
            s++;
            cur = NULL;
            if (*yaml_scalar(s) == '\0')
                continue; /* "-" alone: the map follows on the next lines */
        }
        if (yaml_pair(s, &key, &val) != 0) {
            fclose(f);
            return policy_fail(path, lineno, "expected \"key: value\"");
        }
        if (!in_list && (strcmp(key, "version") == 0)) {
            if (strcmp(val, "1") != 0) {
                fclose(f);
                return policy_fail(path, lineno, "only version 1 is known");
            }
            version = 1;
        } else if (!in_list && (strcmp(key, "tenants") == 0)) {
            if ((*val != '\0') && (strcmp(val, "[]") != 0)) {
                fclose(f);
                return policy_fail(path, lineno, "tenants must be a block list");
            }
            in_list = 1;
        } else if (in_list && (strcmp(key, "name") == 0)) {
            if (!name_valid(val, strlen(val))) {
                fclose(f);
                return policy_fail(path, lineno, "invalid tenant name");
            }
            if (tenant_find(t, val, strlen(val)) != NULL) {
                fclose(f);
                return policy_fail(path, lineno, "tenant named twice");
            }
            if (cur != NULL) {
                fclose(f);
                return policy_fail(path, lineno, "two names in one entry");
            }
            cur = tenant_add(t, val, strlen(val));
            if (cur == NULL) {
                fclose(f);
                return policy_fail(path, lineno, "out of memory");
            }
        } else if (in_list && (strcmp(key, "quota") == 0) && (cur != NULL)) {
            uint64_t q;
            /* mc_parse_size takes B/KB/MB/GB/TB (powers of 1024, as upstream) */
            if ((mc_parse_size(val, &q) != 0) || (q == 0) || (q > (uint64_t)INT64_MAX)) {
                fclose(f);
                return policy_fail(path, lineno, "quota must be a positive size");
            }
            cur->quota = q;
        } else {
            fclose(f);
            return policy_fail(path, lineno, "unknown key (a quota before its name?)");
        }
        continue;
    bad_item:
        fclose(f);
        return policy_fail(path, lineno, "list item outside tenants:");
    }
    fclose(f);
    if (version != 1)
        return policy_fail(path, lineno, "missing \"version: 1\"");
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->v[i].quota == 0) {
            mc_error("--tenant_quota_connector_uri=%s: tenant %s has no quota", path,
                     t->v[i].name);
            return -1;
        }
    }
    return 0;
}

/* Write the policy back (admin API changes), atomically by rename. */
static int policy_save(mc_tenants_t *t, const char *path)
{
    char tmp[4096];
    FILE *f;

    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return -1;
    f = fopen(tmp, "w");
    if (f == NULL) {
        mc_error("tenant quota policy: cannot write %s: %m", tmp);
        return -1;
    }
    fprintf(f, "version: 1\ntenants:\n");
    for (uint32_t i = 0; i < t->n; i++) {
        if (t->v[i].quota > 0)
            fprintf(f, "  - name: \"%s\"\n    quota: %" PRIu64 "\n", t->v[i].name,
                    t->v[i].quota);
    }
    if ((fflush(f) != 0) || (fclose(f) != 0) || (rename(tmp, path) != 0)) {
        mc_error("tenant quota policy: cannot replace %s: %m", path);
        return -1;
    }
    return 0;
}

/* ---- life cycle -------------------------------------------------------- */

mc_status_t mc_master_tenants_start(mc_master_t *m)
{
    const mc_master_config_t *cfg = m->cfg;
    mc_tenants_t *t;

    if (!cfg->enable_multi_tenants)
        return MC_OK;
    if (strcmp(cfg->tenant_quota_connector_type, "file") != 0) {
        mc_error("--tenant_quota_connector_type=%s is not available: this build reads the "
                 "quota policy from a YAML file only (file)",
                 cfg->tenant_quota_connector_type);
        return MC_INVALID_PARAMS;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return MC_INTERNAL_ERROR;
    t->m = m;
    /* an empty URI is an empty policy: no tenant may write until the admin
     * API registers one (and then it cannot be saved: the API refuses) */
    if ((cfg->tenant_quota_connector_uri[0] != '\0') &&
        (policy_load(t, cfg->tenant_quota_connector_uri) != 0)) {
        m->tenants = t;
        mc_master_tenants_stop(m);
        return MC_INVALID_PARAMS;
    }
    m->tenants = t;
    mc_info("multi-tenant mode: %u tenants registered%s%s", t->n,
            cfg->tenant_quota_connector_uri[0] ? " from " : "",
            cfg->tenant_quota_connector_uri);
    return MC_OK;
}

void mc_master_tenants_stop(mc_master_t *m)
{
    mc_tenants_t *t = tenants_of(m);
    if (t == NULL)
        return;
    for (uint32_t i = 0; i < t->n; i++)
        free(t->v[i].name);
    free(t->v);
    free(t);
    m->tenants = NULL;
}

/* ---- admission and accounting ----------------------------------------- */

int32_t mc_master_tenant_admit(mc_master_t *m, mc_str_t tenant, uint64_t bytes)
{
    mc_tenants_t *t = tenants_of(m);
    tenant_t *e;

    if (t == NULL)
        return MC_OK;
    e = tenant_find(t, tenant.ptr, tenant.len);
    if ((e == NULL) || (e->quota == 0))
        return MC_TENANT_NOT_REGISTERED;
    if ((bytes > e->quota) || (e->charged > e->quota - bytes))
        return MC_TENANT_QUOTA_EXCEEDED;
    return MC_OK;
}

void mc_master_tenant_charge(mc_master_t *m, mc_str_t tenant, int64_t delta)
{
    mc_tenants_t *t = tenants_of(m);
    tenant_t *e;

    if ((t == NULL) || (delta == 0))
        return;
    e = tenant_add(t, tenant.ptr, tenant.len);
    if (e == NULL) {
        mc_error("out of memory: the quota charge of tenant %.*s is lost", (int)tenant.len,
                 tenant.ptr);
        return;
    }
    if (delta > 0) {
        e->charged += (uint64_t)delta;
    } else if ((uint64_t)-delta > e->charged) {
        mc_error("tenant %s: quota release of %" PRId64 " bytes exceeds its charge %" PRIu64,
                 e->name, -delta, e->charged);
        e->charged = 0;
    } else {
        e->charged -= (uint64_t)-delta;
    }
}

/* ---- the admin API ----------------------------------------------------- */

static json_t *snapshot_json(const tenant_t *e)
{
    return json_pack("{s:s, s:I, s:I, s:I, s:b, s:b, s:b}", "tenant_id", e->name,
                     "requested_quota_bytes", (json_int_t)e->quota, "effective_quota_bytes",
                     (json_int_t)e->quota, "charged_bytes", (json_int_t)e->charged,
                     "admission_closed", (e->quota == 0) || (e->charged >= e->quota),
                     "over_quota", (e->quota > 0) && (e->charged > e->quota),
                     "has_explicit_policy", e->quota > 0);
}

static int api_error(int http, int32_t code, const char *msg, json_t **body_p)
{
    *body_p = json_pack("{s:b, s:i, s:s}", "success", 0, "error_code", (int)code,
                        "error_message", msg);
    return http;
}

static int api_ok(json_t *data, json_t **body_p)
{
    *body_p = json_pack("{s:b, s:o}", "success", 1, "data", data ? data : json_null());
    return 200;
}

static mc_tenants_t *api_tenants(mc_master_t *m, const char **why)
{
    mc_tenants_t *t = tenants_of(m);
    if (t == NULL)
        *why = "multi-tenant mode is off (--enable_multi_tenants=false)";
    return t;
}

int mc_master_tenant_quota_get(mc_master_t *m, const char *tenant, json_t **body_p)
{
    const char *why;
    mc_tenants_t *t = api_tenants(m, &why);
    json_t *list;

    if (t == NULL)
        return api_error(409, MC_UNAVAILABLE_IN_CURRENT_MODE, why, body_p);
    if ((tenant != NULL) && (tenant[0] != '\0')) {
        tenant_t *e = tenant_find(t, tenant, strlen(tenant));
        if (e == NULL)
            return api_error(404, MC_OBJECT_NOT_FOUND, "tenant not found", body_p);
        return api_ok(snapshot_json(e), body_p);
    }
    list = json_array();
    for (uint32_t i = 0; (list != NULL) && (i < t->n); i++)
        json_array_append_new(list, snapshot_json(&t->v[i]));
    return api_ok(list, body_p);
}

int mc_master_tenant_quota_put(mc_master_t *m, const char *tenant, const char *body,
                               json_t **body_p)
{
    const char *why, *uri = m->cfg->tenant_quota_connector_uri;
    mc_tenants_t *t = api_tenants(m, &why);
    json_t *j, *q;
    json_int_t bytes;
    tenant_t *e;
    uint64_t old;

    if (t == NULL)
        return api_error(409, MC_UNAVAILABLE_IN_CURRENT_MODE, why, body_p);
    if ((tenant == NULL) || !name_valid(tenant, strlen(tenant)))
        return api_error(400, MC_INVALID_PARAMS, "invalid tenant_id", body_p);
    j = json_loads(body ? body : "", 0, NULL);
    q = json_object_get(j, "requested_quota_bytes");
    if (!json_is_integer(q) || ((bytes = json_integer_value(q)) <= 0)) {
        json_decref(j);
        return api_error(400, MC_INVALID_PARAMS,
                         "body must be {\"requested_quota_bytes\": 1..2^63-1}", body_p);
    }
    json_decref(j);
    if (uri[0] == '\0')
        return api_error(500, MC_PERSISTENT_FAIL,
                         "no --tenant_quota_connector_uri to save the policy to", body_p);
    e = tenant_add(t, tenant, strlen(tenant));
    if (e == NULL)
        return api_error(500, MC_INTERNAL_ERROR, "out of memory", body_p);
    old      = e->quota;
    e->quota = (uint64_t)bytes;
    if (policy_save(t, uri) != 0) {
        e->quota = old;
        return api_error(500, MC_PERSISTENT_FAIL, "cannot save the tenant quota policy",
                         body_p);
    }
    mc_info("tenant %s: quota %" PRIu64 " bytes (admin API)", e->name, e->quota);
    return api_ok(snapshot_json(e), body_p);
}

int mc_master_tenant_quota_delete(mc_master_t *m, const char *tenant, json_t **body_p)
{
    const char *why, *uri = m->cfg->tenant_quota_connector_uri;
    mc_tenants_t *t = api_tenants(m, &why);
    tenant_t *e;
    uint64_t old;

    if (t == NULL)
        return api_error(409, MC_UNAVAILABLE_IN_CURRENT_MODE, why, body_p);
    if ((tenant == NULL) || !name_valid(tenant, strlen(tenant)))
        return api_error(400, MC_INVALID_PARAMS, "invalid tenant_id", body_p);
    e = tenant_find(t, tenant, strlen(tenant));
    if ((e == NULL) || (e->quota == 0))
        return api_error(404, MC_OBJECT_NOT_FOUND, "tenant has no quota policy", body_p);
    if (e->charged > 0)
        return api_error(409, MC_TENANT_NOT_EMPTY, "tenant still holds objects", body_p);
    old      = e->quota;
    e->quota = 0;
    if ((uri[0] != '\0') && (policy_save(t, uri) != 0)) {
        e->quota = old;
        return api_error(500, MC_PERSISTENT_FAIL, "cannot save the tenant quota policy",
                         body_p);
    }
    mc_info("tenant %s: quota policy deleted (admin API)", e->name);
    return api_ok(NULL, body_p);
}
