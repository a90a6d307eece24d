/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gflags-compatible command line of mooncake_master.
 *
 * The descriptor table is generated from MC_MASTER_FLAGS (flags.h): for
 * each flag its kind, the offset of its field in mc_master_config_t, its
 * default string, validator, attributes and help.  Defaults are applied by
 * parsing the default strings through the same code as user input, so the
 * value --help prints is the value the daemon uses.
 *
 * Nothing here prints or exits: errors come back as one line in the
 * caller's buffer, and main() decides (exit code 2 for a bad command line).
 *
 * --config_path names a JSON object keyed by flag names.  It is read once
 * the whole command line is parsed, and a key only fills a flag the
 * command line did not set, so explicit flags win whatever their position.
 * File values go through the same parsers and validators as argv text:
 * a JSON string is parsed exactly like the command-line spelling, numbers
 * and booleans are converted to that spelling first.
 *
 * Owns: the parsing of the command line and of --config_path, and the
 *   descriptor table.
 * May call: flags.h and libmooncake's common/, coord/redis.h and wire/; no
 *   folder of the master.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "common/dfs_layout.h"
#include "common/log.h"
#include "common/util.h"
#include "coord/redis.h"
#include "flags.h"
#include "wire/wire.h"

typedef int (*mc_flag_validate_func_t)(const void *value, char *why, size_t whylen);

typedef struct mc_flag_desc {
    const char *name;
    mc_flag_kind_t kind;
    size_t offset;
    const char *def;
    mc_flag_validate_func_t validate;
    unsigned attrs;
    const char *help;
} mc_flag_desc_t;

/* ---- validators: 0 accepts, -1 rejects with a reason in why ---------- */

static int v_none(const void *value, char *why, size_t whylen)
{
    (void)value;
    (void)why;
    (void)whylen;
    return 0;
}

static int v_port(const void *value, char *why, size_t whylen)
{
    int64_t v = *(const int64_t *)value;
    if ((v < 0) || (v > 65535)) {
        snprintf(why, whylen, "a port must be between 0 and 65535");
        return -1;
    }
    return 0;
}

static int v_nonneg(const void *value, char *why, size_t whylen)
{
    if (*(const int64_t *)value < 0) {
        snprintf(why, whylen, "must not be negative");
        return -1;
    }
    return 0;
}

static int v_positive(const void *value, char *why, size_t whylen)
{
    if (*(const int64_t *)value <= 0) {
        snprintf(why, whylen, "must be greater than 0");
        return -1;
    }
    return 0;
}

static int v_positive_duration(const void *value, char *why, size_t whylen)
{
    if (*(const uint64_t *)value == 0) {
        snprintf(why, whylen, "must be greater than 0");
        return -1;
    }
    return 0;
}

static int v_positive_size(const void *value, char *why, size_t whylen)
{
    if (*(const uint64_t *)value == 0) {
        snprintf(why, whylen, "must be greater than 0");
        return -1;
    }
    return 0;
}

static int v_batch_frame_size(const void *value, char *why, size_t whylen)
{
    uint64_t v = *(const uint64_t *)value;
    if ((v < 4096) || (v > MC_WIRE_MAX_BODY)) {
        snprintf(why, whylen, "must be between 4 KiB and 64 MiB (the frame format's limit)");
        return -1;
    }
    return 0;
}

static int v_ratio(const void *value, char *why, size_t whylen)
{
    double v = *(const double *)value;
    if (!((v >= 0.0) && (v <= 1.0))) {
        snprintf(why, whylen, "a ratio must be between 0.0 and 1.0");
        return -1;
    }
    return 0;
}

static int v_nonneg_double(const void *value, char *why, size_t whylen)
{
    if (!(*(const double *)value >= 0.0)) {
        snprintf(why, whylen, "must not be negative");
        return -1;
    }
    return 0;
}

static int v_nonempty(const void *value, char *why, size_t whylen)
{
    if (**(char *const *)value == '\0') {
        snprintf(why, whylen, "must not be empty");
        return -1;
    }
    return 0;
}

/* Upstream's rule: the id becomes part of etcd keys and directory names. */
static int v_cluster_id(const void *value, char *why, size_t whylen)
{
    const char *s = *(char *const *)value;
    size_t n = strlen(s);
    if ((n == 0) || (n > 128)) {
        snprintf(why, whylen, "must be 1 to 128 characters long");
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!(((c >= '0') && (c <= '9')) || ((c >= 'a') && (c <= 'z')) ||
              ((c >= 'A') && (c <= 'Z')) || (c == '_') || (c == '.') || (c == '-'))) {
            snprintf(why, whylen, "may only contain 0-9, A-Z, a-z, '_', '.' and '-'");
            return -1;
        }
    }
    return 0;
}

static int one_of(const char *s, const char *const *allowed, size_t n, char *why, size_t whylen)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(s, allowed[i]) == 0)
            return 0;
    }
    off += (size_t)snprintf(why, whylen, "must be one of:");
    for (size_t i = 0; (i < n) && (off < whylen); i++)
        off += (size_t)snprintf(why + off, whylen - off, " %s", allowed[i]);
    return -1;
}

static int v_memory_allocator(const void *value, char *why, size_t whylen)
{
    static const char *const allowed[] = {"offset"};
    const char *s = *(char *const *)value;
    if (strcmp(s, "cachelib") == 0) {
        snprintf(why, whylen, "the cachelib allocator is not available; use offset");
        return -1;
    }
    return one_of(s, allowed, MC_ARRAY_SIZE(allowed), why, whylen);
}

static int v_snapshot_store(const void *value, char *why, size_t whylen)
{
    static const char *const allowed[] = {"", "local"};
    const char *s = *(char *const *)value;
    if (strcmp(s, "s3") == 0) {
        snprintf(why, whylen, "the s3 snapshot store is not available; use local");
        return -1;
    }
    return one_of(s, allowed, MC_ARRAY_SIZE(allowed), why, whylen);
}

static int v_log_level(const void *value, char *why, size_t whylen)
{
    const char *s = *(char *const *)value;
    int level;
    if ((*s == '\0') || (mc_log_parse_level(s, &level) == 0))
        return 0;
    snprintf(why, whylen, "must be error, warn, info, debug, trace or 0..4");
    return -1;
}

/* ---- the descriptor table ---------------------------------------------- */

static const mc_flag_desc_t flag_table[MC_MASTER_FLAG_COUNT] = {
#define MC_MASTER_FLAG_DESC_(KIND, fname, fdef, fvalid, fattrs, fhelp)                    \
    {.name     = #fname,                                                                 \
     .kind     = MC_FLAG_KIND_##KIND,                                                    \
     .offset   = offsetof(mc_master_config_t, fname),                                    \
     .def      = fdef,                                                                   \
     .validate = fvalid,                                                                 \
     .attrs    = fattrs,                                                                 \
     .help     = fhelp},
    MC_MASTER_FLAGS(MC_MASTER_FLAG_DESC_)
#undef MC_MASTER_FLAG_DESC_
};

/* Deprecated spellings upstream still accepts. */
static const struct {
    const char *alias;
    const char *name;
} flag_aliases[] = {
    {"snapshot_payload_store_type", "snapshot_object_store_type"},
    {"snapshot_payload_backend_type", "snapshot_object_store_type"},
    {"snapshot_catalog_backend_type", "snapshot_catalog_store_type"},
    {"snapshot_catalog_backend_connstring", "snapshot_catalog_store_connstring"},
};

static const char *kind_name(mc_flag_kind_t kind)
{
    switch (kind) {
    case MC_FLAG_KIND_BOOL:
        return "bool";
    case MC_FLAG_KIND_INT:
        return "int";
    case MC_FLAG_KIND_DOUBLE:
        return "double";
    case MC_FLAG_KIND_STRING:
        return "string";
    case MC_FLAG_KIND_DURATION:
        return "duration";
    case MC_FLAG_KIND_SIZE:
        return "size";
    }
    return "?";
}

int mc_master_flag_find(const char *name)
{
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        if (strcmp(flag_table[i].name, name) == 0)
            return i;
    }
    for (size_t i = 0; i < MC_ARRAY_SIZE(flag_aliases); i++) {
        if (strcmp(flag_aliases[i].alias, name) == 0)
            return mc_master_flag_find(flag_aliases[i].name);
    }
    return -1;
}

/* Same as mc_master_flag_find but for a name that is not NUL-terminated. */
static int flag_find_n(const char *name, size_t n)
{
    char buf[128];
    if (n >= sizeof(buf))
        return -1;
    memcpy(buf, name, n);
    buf[n] = '\0';
    return mc_master_flag_find(buf);
}

/*
 * Convert @p text to the flag's C type in @p out (storage of at least 8
 * bytes, or a char * for strings).  The caller validates and stores.
 */
static int parse_value(const mc_flag_desc_t *d, const char *text, void *out, char *why,
                       size_t whylen)
{
    switch (d->kind) {
    case MC_FLAG_KIND_BOOL:
        if (mc_parse_bool(text, (int *)out) != 0) {
            snprintf(why, whylen, "expected true or false");
            return -1;
        }
        return 0;
    case MC_FLAG_KIND_INT:
        if (mc_parse_i64(text, (int64_t *)out) != 0) {
            snprintf(why, whylen, "not an integer");
            return -1;
        }
        return 0;
    case MC_FLAG_KIND_DOUBLE:
        if (mc_parse_double(text, (double *)out) != 0) {
            snprintf(why, whylen, "not a number");
            return -1;
        }
        return 0;
    case MC_FLAG_KIND_DURATION:
        if (mc_parse_duration_ms(text, (uint64_t *)out) != 0) {
            snprintf(why, whylen, "not a duration (milliseconds, or a number with ms, s, m or h)");
            return -1;
        }
        return 0;
    case MC_FLAG_KIND_SIZE:
        if (mc_parse_size(text, (uint64_t *)out) != 0) {
            snprintf(why, whylen, "not a size (bytes, or a number with KB, MB, GB, TB)");
            return -1;
        }
        return 0;
    case MC_FLAG_KIND_STRING: {
        char *copy = mc_strdup(text);
        if (copy == NULL) {
            snprintf(why, whylen, "out of memory");
            return -1;
        }
        *(char **)out = copy;
        return 0;
    }
    }
    snprintf(why, whylen, "unknown flag kind");
    return -1;
}

static size_t kind_size(mc_flag_kind_t kind)
{
    switch (kind) {
    case MC_FLAG_KIND_BOOL:
        return sizeof(int);
    case MC_FLAG_KIND_INT:
        return sizeof(int64_t);
    case MC_FLAG_KIND_DOUBLE:
        return sizeof(double);
    case MC_FLAG_KIND_STRING:
        return sizeof(char *);
    case MC_FLAG_KIND_DURATION:
    case MC_FLAG_KIND_SIZE:
        return sizeof(uint64_t);
    }
    return 0;
}

/*
 * Parse, validate and store one value.  The old string (if any) is freed
 * only once the new value is accepted, so a rejected value leaves the
 * configuration unchanged.
 */
/* Would set_flag accept @p text for flag @p id?  Stores nothing. */
static int check_flag(int id, const char *text, char *err, size_t errlen)
{
    const mc_flag_desc_t *d = &flag_table[id];
    union {
        int b;
        int64_t i;
        double f;
        uint64_t u;
        char *s;
    } v;
    char why[200] = "";
    int rc = 0;

    memset(&v, 0, sizeof(v));
    if ((parse_value(d, text, &v, why, sizeof(why)) != 0) ||
        (d->validate(&v, why, sizeof(why)) != 0)) {
        snprintf(err, errlen, "invalid value '%s' for flag '%s': %s", text, d->name, why);
        rc = -1;
    }
    if (d->kind == MC_FLAG_KIND_STRING)
        free(v.s);
    return rc;
}

static int set_flag(mc_master_config_t *cfg, int id, const char *text, char *err, size_t errlen)
{
    const mc_flag_desc_t *d = &flag_table[id];
    union {
        int b;
        int64_t i;
        double f;
        uint64_t u;
        char *s;
    } v;
    char why[200] = "";
    void *field = (char *)cfg + d->offset;

    memset(&v, 0, sizeof(v));
    if ((parse_value(d, text, &v, why, sizeof(why)) != 0) ||
        (d->validate(&v, why, sizeof(why)) != 0)) {
        snprintf(err, errlen, "invalid value '%s' for flag '%s': %s", text, d->name, why);
        if (d->kind == MC_FLAG_KIND_STRING)
            free(v.s);
        return -1;
    }
    if (d->kind == MC_FLAG_KIND_STRING)
        free(*(char **)field);
    memcpy(field, &v, kind_size(d->kind));
    return 0;
}

mc_status_t mc_master_config_init(mc_master_config_t *cfg)
{
    char err[256];
    memset(cfg, 0, sizeof(*cfg));
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        /* A default that fails its own validator is a bug in the table;
         * the unit tests catch it, here it can only be out of memory. */
        if (set_flag(cfg, i, flag_table[i].def, err, sizeof(err)) != 0) {
            mc_error("flag defaults: %s", err);
            mc_master_config_cleanup(cfg);
            return MC_INTERNAL_ERROR;
        }
    }
    return MC_OK;
}

void mc_master_config_cleanup(mc_master_config_t *cfg)
{
    if (cfg == NULL)
        return;
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        if (flag_table[i].kind == MC_FLAG_KIND_STRING) {
            char **field = (char **)(void *)((char *)cfg + flag_table[i].offset);
            free(*field);
            *field = NULL;
        }
    }
}

static mc_status_t parse_fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mc_status_t parse_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return MC_INVALID_PARAMS;
}

/* Keys a config file may not set: they only make sense on a command line. */
static int file_key_forbidden(int id)
{
    return (id == MC_MASTER_FLAG_config_path) || (id == MC_MASTER_FLAG_help) ||
           (id == MC_MASTER_FLAG_version);
}

/* Flag of a config-file key: a flag name, a deprecated alias, or the
 * upstream config-file spelling client_live_ttl_sec of client_ttl. */
static int file_key_find(const char *key)
{
    if (strcmp(key, "client_live_ttl_sec") == 0)
        return MC_MASTER_FLAG_client_ttl;
    return mc_master_flag_find(key);
}

static const char *json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown value";
}

/*
 * The command-line spelling of a config-file value, in @p buf (strings are
 * used as they are).  Which JSON types a flag takes: strings always;
 * booleans for bool flags; integers for int, duration, size and double
 * flags; real numbers for double flags.  NULL with @p why set otherwise.
 */
static const char *file_value_text(const mc_flag_desc_t *d, const json_t *v, char *buf,
                                   size_t buflen, char *why, size_t whylen)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return json_string_value(v);
    case JSON_TRUE:
    case JSON_FALSE:
        if (d->kind == MC_FLAG_KIND_BOOL)
            return json_is_true(v) ? "true" : "false";
        break;
    case JSON_INTEGER:
        if ((d->kind == MC_FLAG_KIND_INT) || (d->kind == MC_FLAG_KIND_DOUBLE) ||
            (d->kind == MC_FLAG_KIND_DURATION) || (d->kind == MC_FLAG_KIND_SIZE)) {
            snprintf(buf, buflen, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
            return buf;
        }
        break;
    case JSON_REAL:
        if (d->kind == MC_FLAG_KIND_DOUBLE) {
            snprintf(buf, buflen, "%.17g", json_real_value(v));
            return buf;
        }
        break;
    default:
        break;
    }
    snprintf(why, whylen, "wrong type: %s flag cannot take %s", kind_name(d->kind),
             json_type_name(v));
    return NULL;
}

/*
 * Apply the JSON object in @p path to every flag the command line left
 * unset.  All keys are checked before the first one is applied, so a bad
 * file changes nothing.  Errors name the file, and the key or the
 * line/column jansson reports.
 */
static mc_status_t load_config_file(mc_master_config_t *cfg, const char *path, char *err,
                                    size_t errlen)
{
    uint8_t from_file[MC_MASTER_FLAG_COUNT];
    const char *first_key[MC_MASTER_FLAG_COUNT];
    json_error_t jerr;
    json_t *root = NULL;
    const char *key;
    json_t *value;
    struct stat st;
    mc_status_t status = MC_INVALID_PARAMS;
    size_t plen = strlen(path);

    memset(from_file, 0, sizeof(from_file));
    memset(first_key, 0, sizeof(first_key));
    if (stat(path, &st) != 0) {
        parse_fail(err, errlen, "config file '%s': cannot read it: %s", path, strerror(errno));
        goto cleanup;
    }
    if (S_ISDIR(st.st_mode)) {
        parse_fail(err, errlen, "config file '%s': is a directory", path);
        goto cleanup;
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        const char *hint = "";
        if (((plen > 5) && (strcmp(path + plen - 5, ".yaml") == 0)) ||
            ((plen > 4) && (strcmp(path + plen - 4, ".yml") == 0)))
            hint = " (YAML is not supported; write the same keys as a JSON object)";
        if (jerr.line > 0)
            parse_fail(err, errlen, "config file '%s': invalid JSON at line %d, column %d: %s%s",
                       path, jerr.line, jerr.column, jerr.text, hint);
        else
            parse_fail(err, errlen, "config file '%s': %s%s", path, jerr.text, hint);
        goto cleanup;
    }
    if (!json_is_object(root)) {
        parse_fail(err, errlen, "config file '%s': must hold a JSON object, not %s", path,
                   json_type_name(root));
        goto cleanup;
    }

    /* Pass 1: every key known, allowed, once, and of a usable type. */
    json_object_foreach(root, key, value) {
        char buf[64];
        char why[200];
        int id = file_key_find(key);
        if (id < 0) {
            parse_fail(err, errlen, "config file '%s': unknown key '%s'", path, key);
            goto cleanup;
        }
        if (file_key_forbidden(id)) {
            parse_fail(err, errlen, "config file '%s': key '%s' is only valid on the command line",
                       path, key);
            goto cleanup;
        }
        if (first_key[id] != NULL) {
            parse_fail(err, errlen, "config file '%s': key '%s' sets the same flag as '%s'", path,
                       key, first_key[id]);
            goto cleanup;
        }
        first_key[id] = key;
        if (file_value_text(&flag_table[id], value, buf, sizeof(buf), why, sizeof(why)) == NULL) {
            parse_fail(err, errlen, "config file '%s': key '%s': %s", path, key, why);
            goto cleanup;
        }
    }

    /* Pass 2 validates every value (even those the command line
     * overrides: a broken file is an error either way), so that pass 3,
     * which stores, can only fail for lack of memory. */
    for (int pass = 2; pass <= 3; pass++) {
        json_object_foreach(root, key, value) {
            char buf[64];
            char why[200];
            char msg[400];
            int id = file_key_find(key);
            const char *text;
            int rc;
            if ((pass == 3) && (cfg->is_set[id] == MC_FLAG_SET_ARGV))
                continue; /* the command line wins */
            text = file_value_text(&flag_table[id], value, buf, sizeof(buf), why, sizeof(why));
            rc = (pass == 2) ? check_flag(id, text, msg, sizeof(msg))
                             : set_flag(cfg, id, text, msg, sizeof(msg));
            if (rc != 0) {
                parse_fail(err, errlen, "config file '%s': key '%s': %s", path, key, msg);
                goto cleanup;
            }
            if (pass == 3)
                from_file[id] = 1;
        }
    }
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        if (from_file[i])
            cfg->is_set[i] = MC_FLAG_SET_FILE;
    }
    status = MC_OK;
cleanup:
    json_decref(root);
    return status;
}

static mc_status_t parse_argv(mc_master_config_t *cfg, int argc, char **argv, char *err,
                              size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *name;
        const char *eq;
        size_t nlen;
        int id;

        if (strcmp(arg, "--") == 0) {
            if (i + 1 < argc)
                return parse_fail(err, errlen, "unexpected argument '%s'", argv[i + 1]);
            break;
        }
        if ((arg[0] != '-') || (arg[1] == '\0'))
            return parse_fail(err, errlen, "unexpected argument '%s' (flags start with --)", arg);
        name = arg + 1;
        if (*name == '-')
            name++;
        if (strcmp(name, "h") == 0) {
            cfg->help = 1;
            continue;
        }
        eq   = strchr(name, '=');
        nlen = eq ? (size_t)(eq - name) : strlen(name);
        if (nlen == 0)
            return parse_fail(err, errlen, "malformed flag '%s'", arg);

        id = flag_find_n(name, nlen);
        if (id < 0) {
            /* --noflag for booleans */
            if ((nlen > 2) && (strncmp(name, "no", 2) == 0)) {
                int bid = flag_find_n(name + 2, nlen - 2);
                if ((bid >= 0) && (flag_table[bid].kind == MC_FLAG_KIND_BOOL)) {
                    if (eq != NULL)
                        return parse_fail(err, errlen,
                                          "flag '--%.*s' does not take a value", (int)nlen, name);
                    *(int *)(void *)((char *)cfg + flag_table[bid].offset) = 0;
                    cfg->is_set[bid] = MC_FLAG_SET_ARGV;
                    continue;
                }
            }
            return parse_fail(err, errlen, "unknown command line flag '%.*s'", (int)nlen, name);
        }

        const char *value;
        if (eq != NULL) {
            value = eq + 1;
        } else if (flag_table[id].kind == MC_FLAG_KIND_BOOL) {
            value = "true"; /* a bare boolean never consumes the next argument */
        } else if (i + 1 < argc) {
            value = argv[++i];
        } else {
            return parse_fail(err, errlen, "flag '%s' is missing its argument",
                              flag_table[id].name);
        }
        if (set_flag(cfg, id, value, err, errlen) != 0)
            return MC_INVALID_PARAMS;
        cfg->is_set[id] = MC_FLAG_SET_ARGV;
    }
    return MC_OK;
}

mc_status_t mc_master_flags_parse(mc_master_config_t *cfg, int argc, char **argv, char *err,
                                  size_t errlen)
{
    mc_status_t status = parse_argv(cfg, argc, argv, err, errlen);
    if (status != MC_OK)
        return status;
    /* --help and --version answer even when the file is broken. */
    if ((cfg->config_path[0] == '\0') || cfg->help || cfg->version)
        return MC_OK;
    return load_config_file(cfg, cfg->config_path, err, errlen);
}

static int flag_is_default(const mc_master_config_t *cfg, int i);

/*
 * Upstream's start-up rules for the HA backend (docs/ha.md), read only
 * with --enable_ha, in upstream's order: the connection string is
 * --ha_backend_connstring, else --etcd_endpoints for etcd only, and must be
 * set (upstream's FATAL text, then our hint; checked before the type, as
 * upstream's main does before its supervisor parses it); then the type
 * must be one upstream knows (else INVALID_PARAMS) and built here (else
 * UNAVAILABLE_IN_CURRENT_MODE).
 */
static mc_status_t check_ha_backend(const mc_master_config_t *cfg, char *err, size_t errlen)
{
    const char *type = cfg->ha_backend_type;
    const char *conn = cfg->ha_backend_connstring;
    char host[256];
    uint16_t port;

    if ((conn[0] == '\0') && (strcmp(type, "etcd") == 0))
        conn = cfg->etcd_endpoints;
    if (conn[0] == '\0')
        return parse_fail(err, errlen,
                          "HA backend connection string must be set when enable_ha is true, "
                          "backend_type=%s (--ha_backend_connstring%s)",
                          type,
                          (strcmp(type, "etcd") == 0)    ? ", or --etcd_endpoints=host:port"
                                                           "[;host:port]"
                          : (strcmp(type, "redis") == 0) ? "=[redis://]host[:port]"
                                                         : "");
    if ((strcmp(type, "etcd") != 0) && (strcmp(type, "redis") != 0) &&
        (strcmp(type, "k8s") != 0))
        return parse_fail(err, errlen,
                          "--ha_backend_type=%s: INVALID_PARAMS (-600): unknown HA backend "
                          "type (etcd, redis or k8s)",
                          type);
    if (strcmp(type, "k8s") == 0) {
        (void)parse_fail(err, errlen,
                         "--ha_backend_type=k8s: UNAVAILABLE_IN_CURRENT_MODE (-1011): the k8s "
                         "backend elects the leader with a Lease in a Kubernetes API server, "
                         "which this build has no backend for (and these machines cannot "
                         "run); use --ha_backend_type=etcd or redis (docs/ha.md)");
        return MC_UNAVAILABLE_IN_CURRENT_MODE;
    }
    if ((strcmp(type, "redis") == 0) && !mc_redis_available()) {
        (void)parse_fail(err, errlen,
                         "--ha_backend_type=redis: UNAVAILABLE_IN_CURRENT_MODE (-1011): this "
                         "build has no redis client (configure --with-redis with "
                         "libhiredis-dev)");
        return MC_UNAVAILABLE_IN_CURRENT_MODE;
    }
    if ((strcmp(type, "redis") == 0) &&
        (mc_redis_parse_connstring(conn, host, sizeof(host), &port) != MC_OK))
        return parse_fail(err, errlen, "--ha_backend_type=redis: INVALID_PARAMS (-600): %s",
                          mc_last_error_detail());
    if ((strcmp(type, "etcd") != 0) && cfg->enable_snapshot_restore)
        return parse_fail(err, errlen,
                          "--enable_snapshot_restore with --enable_ha ships the operation log "
                          "through etcd, which needs --ha_backend_type=etcd (not %s)",
                          type);
    return MC_OK;
}

mc_status_t mc_master_config_check(const mc_master_config_t *cfg, char *err, size_t errlen)
{
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        const mc_flag_desc_t *d = &flag_table[i];
        if ((d->attrs & MC_FLAG_REFUSE) && !flag_is_default(cfg, i))
            return parse_fail(err, errlen,
                              "--%s is not implemented in this build (%s); only its default "
                              "(%s%s%s) is accepted",
                              d->name, d->help, (d->kind == MC_FLAG_KIND_STRING) ? "\"" : "",
                              d->def, (d->kind == MC_FLAG_KIND_STRING) ? "\"" : "");
    }
    if (cfg->enable_ha) {
        mc_status_t st = check_ha_backend(cfg, err, errlen);
        if (st != MC_OK)
            return st;
        if ((cfg->ha_lease_ttl_sec < 2) || (cfg->ha_lease_ttl_sec > 3600))
            return parse_fail(err, errlen, "--ha_lease_ttl_sec must be 2 to 3600 seconds");
        /* --enable_snapshot_restore with --enable_ha ships the operation
         * log through etcd (ship.c): a new leader takes over with the full
         * index, never with a standby's own stale log (docs/ha.md). */
    }
#ifndef MC_HAVE_ZMQ
    if (cfg->enable_kv_events)
        return parse_fail(err, errlen,
                          "--enable_kv_events needs libzmq, which this build was configured "
                          "without (install libzmq3-dev and configure --with-zmq)");
#endif
    if (cfg->max_kv_soft_pin_ttl < cfg->default_kv_soft_pin_ttl)
        return parse_fail(err, errlen,
                          "--default_kv_soft_pin_ttl (%" PRIu64 " ms) exceeds "
                          "--max_kv_soft_pin_ttl (%" PRIu64 " ms)",
                          cfg->default_kv_soft_pin_ttl, cfg->max_kv_soft_pin_ttl);
    if ((uint64_t)cfg->client_ttl > UINT64_MAX / 1000 / 2)
        return parse_fail(err, errlen, "--client_ttl is too large");
    if ((uint64_t)cfg->put_start_discard_timeout_sec > UINT64_MAX / 1000 / 2 ||
        (uint64_t)cfg->put_start_release_timeout_sec > UINT64_MAX / 1000 / 2)
        return parse_fail(err, errlen, "--put_start_*_timeout_sec is too large");
    if (cfg->put_start_release_timeout_sec <= cfg->put_start_discard_timeout_sec)
        return parse_fail(err, errlen,
                          "--put_start_release_timeout_sec (%" PRId64 ") must be greater than "
                          "--put_start_discard_timeout_sec (%" PRId64 ")",
                          cfg->put_start_release_timeout_sec, cfg->put_start_discard_timeout_sec);
    if ((uint64_t)cfg->put_reservation_ttl_sec > 86400)
        return parse_fail(err, errlen, "--put_reservation_ttl_sec is too large (at most 86400)");
    if (cfg->rpc_conn_timeout_seconds > 86400 * 365)
        return parse_fail(err, errlen, "--rpc_conn_timeout_seconds is too large");
    if (cfg->enable_snapshot && (cfg->snapshot_backup_dir[0] == '\0'))
        return parse_fail(err, errlen,
                          "--enable_snapshot needs --snapshot_backup_dir (where the operation "
                          "log and the snapshots live)");
    if (cfg->enable_snapshot_restore && !cfg->enable_snapshot)
        return parse_fail(err, errlen,
                          "--enable_snapshot_restore needs --enable_snapshot (a restored master "
                          "that logs nothing would lose its state at the next restart)");
    if (!cfg->enable_snapshot && (cfg->snapshot_backup_dir[0] != '\0'))
        return parse_fail(err, errlen,
                          "--snapshot_backup_dir is set but --enable_snapshot is off");
    if ((uint64_t)cfg->snapshot_interval_seconds > UINT64_MAX / 1000 / 2 ||
        (uint64_t)cfg->snapshot_child_timeout_seconds > UINT64_MAX / 1000 / 2 ||
        (uint64_t)cfg->snapshot_restore_grace_seconds > UINT64_MAX / 1000 / 2)
        return parse_fail(err, errlen, "--snapshot_*_seconds is too large");
    if (cfg->offload_on_evict && !cfg->enable_offload)
        return parse_fail(err, errlen,
                          "--offload_on_evict needs --enable_offload (eviction would wait for "
                          "disk copies that no client may report)");
    if (cfg->promotion_on_hit && !cfg->enable_offload)
        return parse_fail(err, errlen,
                          "--promotion_on_hit needs --enable_offload (without disk replicas "
                          "there is nothing to promote)");
    if (cfg->root_fs_dir[0] != '\0') {
        mc_dfs_layout_t layout;
        if (mc_dfs_layout_init(&layout, cfg->root_fs_dir, "--root_fs_dir") != MC_OK)
            return parse_fail(err, errlen, "%s", mc_last_error_detail());
    }
    return MC_OK;
}

uint16_t mc_master_config_rpc_port(const mc_master_config_t *cfg)
{
    return (uint16_t)(cfg->rpc_port > 0 ? cfg->rpc_port : cfg->port);
}

static void print_default(FILE *out, const mc_flag_desc_t *d)
{
    if (d->kind == MC_FLAG_KIND_STRING)
        fprintf(out, "\"%s\"", d->def);
    else if (d->kind == MC_FLAG_KIND_DURATION)
        fprintf(out, "%s ms", d->def);
    else
        fprintf(out, "%s", d->def);
}

static void print_flag(FILE *out, const mc_flag_desc_t *d)
{
    fprintf(out, "  --%s (%s) default: ", d->name, kind_name(d->kind));
    print_default(out, d);
    fprintf(out, "\n      %s", d->help);
    if (d->attrs & MC_FLAG_REFUSE)
        fprintf(out, " (not implemented yet%s: any value but the default refuses to start)",
                (d->attrs & MC_FLAG_LATER) ? ", arrives in a later release" : "");
    fprintf(out, "\n");
}

void mc_master_flags_print_help(FILE *out, const char *argv0)
{
    fprintf(out,
            "Usage: %s [--flag=value ...]\n"
            "mooncake_master: metadata service of the Mooncake store (objects, segments,\n"
            "leases, client liveness) and, optionally, the HTTP metadata server.\n"
            "\n"
            "Flags take --flag=value, --flag value or -flag=value; booleans also take\n"
            "--flag and --noflag.  Durations are milliseconds or carry ms/s/m/h.\n"
            "\n",
            argv0);
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        const mc_flag_desc_t *d = &flag_table[i];
        if (d->attrs & (MC_FLAG_HIDDEN | MC_FLAG_COMPAT))
            continue;
        print_flag(out, d);
    }
    fprintf(out, "\n%s\n", MC_MASTER_COMPAT_HEADING);
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        const mc_flag_desc_t *d = &flag_table[i];
        if ((d->attrs & MC_FLAG_COMPAT) && !(d->attrs & MC_FLAG_HIDDEN))
            print_flag(out, d);
    }
    fprintf(out, "\nDeprecated aliases:");
    for (size_t i = 0; i < MC_ARRAY_SIZE(flag_aliases); i++)
        fprintf(out, "%s --%s (= --%s)", i ? "," : "", flag_aliases[i].alias,
                flag_aliases[i].name);
    fprintf(out, "\n");
}

/* Is the current value of flag @p i its default? */
static int flag_is_default(const mc_master_config_t *cfg, int i)
{
    const mc_flag_desc_t *d = &flag_table[i];
    const void *field = (const char *)cfg + d->offset;
    union {
        int b;
        int64_t i;
        double f;
        uint64_t u;
        char *s;
    } v;
    char why[200];
    int same;

    memset(&v, 0, sizeof(v));
    if (parse_value(d, d->def, &v, why, sizeof(why)) != 0)
        return 0;
    switch (d->kind) {
    case MC_FLAG_KIND_STRING:
        same = strcmp(*(char *const *)field, v.s) == 0;
        free(v.s);
        return same;
    case MC_FLAG_KIND_DOUBLE:
        return *(const double *)field == v.f;
    default:
        return memcmp(field, &v, kind_size(d->kind)) == 0;
    }
}

void mc_master_flags_warn_unimplemented(const mc_master_config_t *cfg)
{
    for (int i = 0; i < MC_MASTER_FLAG_COUNT; i++) {
        if ((flag_table[i].attrs & MC_FLAG_COMPAT) && !flag_is_default(cfg, i) &&
            (i != MC_MASTER_FLAG_max_threads) && (i != MC_MASTER_FLAG_rpc_thread_num))
            mc_warn("flag --%s is accepted for compatibility only; it has no effect here",
                    flag_table[i].name);
    }
    if (cfg->is_set[MC_MASTER_FLAG_port] && (cfg->rpc_port > 0))
        mc_warn("both --rpc_port and --port are set; using --rpc_port=%" PRId64, cfg->rpc_port);
    else if (cfg->is_set[MC_MASTER_FLAG_port])
        mc_warn("--port is deprecated, use --rpc_port");
    if (cfg->is_set[MC_MASTER_FLAG_max_threads] || cfg->is_set[MC_MASTER_FLAG_rpc_thread_num])
        mc_info("--max_threads/--rpc_thread_num are accepted; the master runs one event loop");
    /* upstream command lines pass the endpoints with HA off too */
    if (!cfg->enable_ha &&
        ((cfg->etcd_endpoints[0] != '\0') || (cfg->ha_backend_connstring[0] != '\0')))
        mc_warn("--etcd_endpoints/--ha_backend_connstring are used only with --enable_ha=true; "
                "this master runs alone");
    if (cfg->enable_ha && (cfg->ha_backend_connstring[0] != '\0') &&
        (cfg->etcd_endpoints[0] != '\0') &&
        (strcmp(cfg->ha_backend_connstring, cfg->etcd_endpoints) != 0))
        mc_warn("--ha_backend_connstring=%s differs from --etcd_endpoints=%s; using "
                "--ha_backend_connstring",
                cfg->ha_backend_connstring, cfg->etcd_endpoints);
    /* upstream: an unknown or case-mismatched strategy is a warning and
     * random, not a refusal; cxl and ssd_free_ratio_first have no CXL or
     * SSD pool to rank here and place as random */
    if ((strcmp(cfg->allocation_strategy, "random") != 0) &&
        (strcmp(cfg->allocation_strategy, "free_ratio_first") != 0) &&
        (strcmp(cfg->allocation_strategy, "local_first") != 0))
        mc_warn("--allocation_strategy=%s: %s; using random", cfg->allocation_strategy,
                ((strcmp(cfg->allocation_strategy, "cxl") == 0) ||
                 (strcmp(cfg->allocation_strategy, "ssd_free_ratio_first") == 0))
                    ? "no CXL or SSD pool to place on in this build"
                    : "unknown strategy");
    /* upstream: an unknown dynamic replication mode is off */
    if ((strcmp(cfg->dynamic_replication_mode, "off") != 0) &&
        (strcmp(cfg->dynamic_replication_mode, "observe") != 0) &&
        (strcmp(cfg->dynamic_replication_mode, "enforce") != 0))
        mc_warn("--dynamic_replication_mode=%s is unknown (off, observe, enforce); off",
                cfg->dynamic_replication_mode);
}
