/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one SWIG interface of libmooncake.
 *
 * Every language binding is generated from this file: it sees only the
 * installed public headers (<mooncake/mooncake.h>), and it turns the C
 * handles into objects any target language can hold:
 *
 *   - a store handle becomes the class Store, whose constructor is
 *     mc_store_create() and whose destructor is mc_store_destroy(); its
 *     methods are the store calls with the handle as receiver.  mc_store_h
 *     stays opaque.
 *   - mc_replicate_config_t becomes a value class that owns the strings it
 *     points to (preferred_segment, group_ids), so a binding never hands the
 *     library a pointer into a garbage-collected object.
 *   - the status table (MC_STATUS_TABLE) is exported as constants and can be
 *     enumerated with mooncake_status_count()/mooncake_status_value(), so the
 *     error codes of every language are generated, never copied by hand.
 *
 * The module is private: people use the hand-written package in front of it
 * (for Python, mooncake.store; for Lua, the module "mooncake").
 * Language-specific typemaps and helpers live in <language>.i, included
 * from here before the declarations they apply to.
 *
 * Threads: the Python module is generated with -threads, so every wrapped
 * call below releases the interpreter lock while libmooncake runs.  Nothing
 * in this file touches interpreter state from C, which is what makes that
 * safe; the helpers that must (python.i) manage the lock themselves.
 */
%module(package="mooncake",
        docstring="Private low-level binding of libmooncake; use mooncake.store.") capi

%{
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <mooncake/mooncake.h>
#include <mooncake/reshard.h>

/* The binding's store object (see "store" below). */
typedef struct mooncake_store {
    mc_store_h h;
} mooncake_store_t;
%}

%include <stdint.i>
%include <exception.i>

/* One wrapper per function; omitted trailing arguments take their defaults. */
%feature("compactdefaultargs");

/* ---- language-specific typemaps and helpers ----------------------------- */
#if defined(SWIGPYTHON)
%include "python.i"
#elif defined(SWIGLUA)
%include "lua.i"
#endif

/* ---- status table -------------------------------------------------------- */

/* A binding-side helper, not API: mc_status_is_err() is trivial everywhere. */
%ignore mc_status_is_err;

%include <mooncake/visibility.h>
%include <mooncake/status.h>

%{
/* The status values in table order; bindings build their ErrorCode
 * enumerations from this so no language keeps its own copy of the numbers. */
static const int mooncake_status_values_[] = {
#define MC_SWIG_STATUS_VALUE_(name, value, desc) (value),
    MC_STATUS_TABLE(MC_SWIG_STATUS_VALUE_)
#undef MC_SWIG_STATUS_VALUE_
};
%}

%inline %{
/* Number of entries in MC_STATUS_TABLE. */
static int mooncake_status_count(void)
{
    return (int)(sizeof(mooncake_status_values_) / sizeof(mooncake_status_values_[0]));
}

/* Value of entry @p i of MC_STATUS_TABLE; MC_INTERNAL_ERROR when out of range. */
static int mooncake_status_value(int i)
{
    if ((i < 0) || (i >= mooncake_status_count()))
        return MC_INTERNAL_ERROR;
    return mooncake_status_values_[i];
}
%}

%include <mooncake/mooncake.h>

/* ---- replication configuration ------------------------------------------ */

/*
 * The pointer fields are owned by the wrapper object and set through the
 * methods below; assigning them directly would let the library keep a
 * pointer into memory the target language frees.
 */
%ignore mc_replicate_config::preferred_segment;
%ignore mc_replicate_config::group_ids;
%immutable mc_replicate_config::group_ids_count;
%ignore mc_replicate_config::preferred_nof_segments;
%immutable mc_replicate_config::preferred_nof_segments_count;
%ignore mc_replicate_config_init;


%{
static void mooncake_rc_free_group_ids_(mc_replicate_config_t *cfg)
{
    size_t i;
    if (cfg->group_ids != NULL) {
        for (i = 0; i < cfg->group_ids_count; i++)
            free((char *)cfg->group_ids[i]);
        free((void *)cfg->group_ids);
    }
    cfg->group_ids = NULL;
    cfg->group_ids_count = 0;
}

static void mooncake_rc_free_pref_nof_(mc_replicate_config_t *cfg)
{
    size_t i;
    if (!(cfg->field_mask & MC_RC_FIELD_PREFERRED_NOF))
        return; /* the fields are not initialised without the bit */
    if (cfg->preferred_nof_segments != NULL) {
        for (i = 0; i < cfg->preferred_nof_segments_count; i++)
            free((char *)cfg->preferred_nof_segments[i]);
        free((void *)cfg->preferred_nof_segments);
    }
    cfg->preferred_nof_segments = NULL;
    cfg->preferred_nof_segments_count = 0;
    cfg->field_mask &= ~(uint64_t)MC_RC_FIELD_PREFERRED_NOF;
}

static void mooncake_rc_clear_strings_(mc_replicate_config_t *cfg)
{
    free((char *)cfg->preferred_segment);
    cfg->preferred_segment = NULL;
    mooncake_rc_free_group_ids_(cfg);
    mooncake_rc_free_pref_nof_(cfg);
}
%}

/* A constructor that returns NULL ran out of memory: raise, never hand the
 * target language an object without a handle. */
%exception mc_replicate_config::mc_replicate_config {
    $action
    if (result == NULL)
        SWIG_exception(SWIG_MemoryError, "cannot allocate a replicate config");
}

%extend mc_replicate_config {
    /* A configuration holding the upstream defaults. */
    mc_replicate_config()
    {
        mc_replicate_config_t *cfg = calloc(1, sizeof(*cfg));
        if (cfg != NULL)
            mc_replicate_config_init(cfg);
        return cfg;
    }

    ~mc_replicate_config()
    {
        mooncake_rc_clear_strings_($self);
        free($self);
    }

    /* Preferred segment "host:port"; "" (or NULL) for none.  Copies @p seg.
     * Returns MC_OK or MC_INTERNAL_ERROR when memory runs out. */
    int set_preferred_segment(const char *seg)
    {
        char *copy = NULL;
        if ((seg != NULL) && (seg[0] != '\0')) {
            copy = strdup(seg);
            if (copy == NULL)
                return MC_INTERNAL_ERROR;
        }
        free((char *)$self->preferred_segment);
        $self->preferred_segment = copy;
        return MC_OK;
    }

    /* The preferred segment, "" when none is set. */
    const char *get_preferred_segment()
    {
        return ($self->preferred_segment != NULL) ? $self->preferred_segment : "";
    }

    /* One group id per key written ("" = ungrouped); sets
     * MC_RC_FIELD_GROUP_IDS.  Copies every string.  Returns MC_OK or
     * MC_INTERNAL_ERROR when memory runs out (the old list is kept then). */
    int set_group_ids(const char *const *strs, size_t n)
    {
        char **copy = calloc((n > 0) ? n : 1, sizeof(*copy));
        size_t i;
        if (copy == NULL)
            return MC_INTERNAL_ERROR;
        for (i = 0; i < n; i++) {
            copy[i] = strdup((strs[i] != NULL) ? strs[i] : "");
            if (copy[i] == NULL) {
                while (i > 0)
                    free(copy[--i]);
                free(copy);
                return MC_INTERNAL_ERROR;
            }
        }
        mooncake_rc_free_group_ids_($self);
        $self->group_ids = (const char *const *)copy;
        $self->group_ids_count = n;
        $self->field_mask |= MC_RC_FIELD_GROUP_IDS;
        return MC_OK;
    }

    /* NoF segments to place the nof replicas on first, in order; sets
     * MC_RC_FIELD_PREFERRED_NOF.  Copies every string.  Returns MC_OK or
     * MC_INTERNAL_ERROR when memory runs out (the old list is kept then). */
    int set_preferred_nof_segments(const char *const *strs, size_t n)
    {
        char **copy = calloc((n > 0) ? n : 1, sizeof(*copy));
        size_t i;
        if (copy == NULL)
            return MC_INTERNAL_ERROR;
        for (i = 0; i < n; i++) {
            copy[i] = strdup((strs[i] != NULL) ? strs[i] : "");
            if (copy[i] == NULL) {
                while (i > 0)
                    free(copy[--i]);
                free(copy);
                return MC_INTERNAL_ERROR;
            }
        }
        mooncake_rc_free_pref_nof_($self);
        $self->preferred_nof_segments = (const char *const *)copy;
        $self->preferred_nof_segments_count = n;
        $self->field_mask |= MC_RC_FIELD_PREFERRED_NOF;
        return MC_OK;
    }

    /* Drop the group ids and clear MC_RC_FIELD_GROUP_IDS. */
    void clear_group_ids()
    {
        mooncake_rc_free_group_ids_($self);
        $self->field_mask &= ~(uint64_t)MC_RC_FIELD_GROUP_IDS;
    }
}

%include <mooncake/config.h>

/* ---- transfer engine ------------------------------------------------------ */

/* The functions are bound as methods of the Engine class below; the
 * constants (MC_TE_READ, MC_TE_WRITE, ...) stay visible. */
%rename("$ignore", regextarget=1) "^mc_te_";
%include <mooncake/transfer.h>

%{
/* The binding's engine object: a handle, NULL until create(). */
typedef struct mooncake_engine {
    mc_te_h h;
} mooncake_engine_t;

/* Requests of one direction to one segment from @p len bytes of packed
 * native uint64 triples (local address, remote address, length): the
 * address lists of the language side travel as one flat buffer, so no
 * per-language list code is needed here.  NULL with *st_p set when the
 * buffer is malformed or memory runs out. */
static mc_te_request_t *mooncake_te_requests_(int op, uint64_t seg, const void *data,
                                              size_t len, size_t *n_p, mc_status_t *st_p)
{
    const uint64_t *v = data;
    mc_te_request_t *reqs;
    size_t n = len / (3 * sizeof(uint64_t));
    if ((len % (3 * sizeof(uint64_t)) != 0) || (n == 0) ||
        ((op != MC_TE_READ) && (op != MC_TE_WRITE))) {
        *st_p = MC_INVALID_PARAMS;
        return NULL;
    }
    reqs = calloc(n, sizeof(*reqs));
    if (reqs == NULL) {
        *st_p = MC_INTERNAL_ERROR;
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        reqs[i].op      = (mc_te_op_t)op;
        reqs[i].local   = (void *)(uintptr_t)v[3 * i];
        reqs[i].remote  = v[3 * i + 1];
        reqs[i].length  = v[3 * i + 2];
        reqs[i].segment = seg;
    }
    *n_p = n;
    return reqs;
}
%}

%rename(Engine) mooncake_engine;
%newobject mooncake_engine::name;

struct mooncake_engine {
};

%exception mooncake_engine::mooncake_engine {
    $action
    if (result == NULL)
        SWIG_exception(SWIG_MemoryError, "cannot allocate an engine object");
}

/*
 * A transfer engine (mooncake.engine.TransferEngine is in front of it).
 * Addresses are plain integers; batches are packed uint64 triples (see
 * mooncake_te_requests_).  Every method returns a status unless noted.
 */
%extend mooncake_engine {
    mooncake_engine()
    {
        return calloc(1, sizeof(mooncake_engine_t));
    }

    ~mooncake_engine()
    {
        mc_te_destroy($self->h);
        free($self);
    }

    /* mc_te_protocol_built(): 1 when this build has the transport. */
    static int protocol_built(const char *protocol)
    {
        return mc_te_protocol_built(protocol);
    }

    /* mc_te_create(); INVALID_PARAMS when already created. */
    int create(const char *local_hostname, const char *metadata_server,
               const char *protocol, const char *devices)
    {
        mc_te_params_t p;
        if ($self->h != NULL)
            return MC_INVALID_PARAMS;
        memset(&p, 0, sizeof(p));
        p.field_mask = MC_TE_PARAM_LOCAL_HOSTNAME | MC_TE_PARAM_METADATA_SERVER |
                       MC_TE_PARAM_PROTOCOL | MC_TE_PARAM_DEVICES;
        p.local_hostname  = local_hostname;
        p.metadata_server = metadata_server;
        p.protocol        = protocol;
        p.devices         = devices;
        return mc_te_create(&p, &$self->h);
    }

    /* mc_te_destroy(); the object can be created again. */
    void destroy()
    {
        mc_te_destroy($self->h);
        $self->h = NULL;
    }

    /* "host:port", "" before create(). */
    char *name()
    {
        return strdup(($self->h != NULL) ? mc_te_local_name($self->h) : "");
    }

    /* The mc_te_h as an integer (0 before create()). */
    uint64_t ptr()
    {
        return (uint64_t)(uintptr_t)$self->h;
    }

    /* Register for remote access. */
    int mem_reg(uint64_t addr, uint64_t len, const char *location)
    {
        if ($self->h == NULL)
            return MC_UNAVAILABLE_IN_CURRENT_STATUS;
        return mc_te_mem_reg($self->h, (void *)(uintptr_t)addr, (size_t)len, location,
                             MC_TE_MEM_REMOTE_ACCESS);
    }

    int mem_dereg(uint64_t addr)
    {
        if ($self->h == NULL)
            return MC_UNAVAILABLE_IN_CURRENT_STATUS;
        return mc_te_mem_dereg($self->h, (void *)(uintptr_t)addr);
    }

    /* Segment id (>= 0) or a negative status. */
    int64_t segment_open(const char *name)
    {
        mc_te_segment_id_t seg = 0;
        mc_status_t st;
        if ($self->h == NULL)
            return MC_UNAVAILABLE_IN_CURRENT_STATUS;
        st = mc_te_segment_open($self->h, name, &seg);
        return (st == MC_OK) ? (int64_t)seg : (int64_t)st;
    }

    int segment_refresh(uint64_t seg)
    {
        if ($self->h == NULL)
            return MC_UNAVAILABLE_IN_CURRENT_STATUS;
        return mc_te_segment_refresh($self->h, seg);
    }

    /* Start address of buffer @p index of the segment, 0 when none. */
    uint64_t segment_buffer(uint64_t seg, uint64_t index)
    {
        uint64_t addr = 0;
        if (($self->h == NULL) ||
            (mc_te_segment_buffer_query($self->h, seg, (size_t)index, &addr, NULL) != MC_OK))
            return 0;
        return addr;
    }

    /* mc_te_transfer() of packed requests, all @p op to @p seg. */
    int transfer(int op, uint64_t seg, const void *data, size_t len)
    {
        mc_status_t st = MC_OK;
        size_t n       = 0;
        mc_te_request_t *reqs;
        if ($self->h == NULL)
            return MC_UNAVAILABLE_IN_CURRENT_STATUS;
        reqs = mooncake_te_requests_(op, seg, data, len, &n, &st);
        if (reqs == NULL)
            return st;
        st = mc_te_transfer($self->h, reqs, n, NULL);
        free(reqs);
        return st;
    }

    /* mc_te_transfer_submit() of packed requests: the job as an integer
     * for job_wait/job_release, or 0 on failure.  The language package
     * keeps these integers private. */
    uint64_t submit(int op, uint64_t seg, const void *data, size_t len)
    {
        mc_status_t st = MC_OK;
        mc_te_job_h job = NULL;
        size_t n        = 0;
        mc_te_request_t *reqs;
        if ($self->h == NULL)
            return 0;
        reqs = mooncake_te_requests_(op, seg, data, len, &n, &st);
        if (reqs == NULL)
            return 0;
        st = mc_te_transfer_submit($self->h, reqs, n, &job);
        free(reqs);
        return (st == MC_OK) ? (uint64_t)(uintptr_t)job : 0;
    }

    /* 1 finished and every request succeeded, 0 still running at the
     * deadline (timeout_ms: 0 polls, < 0 waits), else the negative status
     * of the first failed request. */
    int job_wait(uint64_t job, int timeout_ms)
    {
        int done        = 0;
        mc_status_t st  = mc_te_job_wait((mc_te_job_h)(uintptr_t)job, timeout_ms, &done, NULL);
        if ((st == MC_OK) && !done)
            return 0;
        return (st == MC_OK) ? 1 : st;
    }

    void job_release(uint64_t job)
    {
        mc_te_job_release((mc_te_job_h)(uintptr_t)job);
    }
}

/* ---- store ------------------------------------------------------------------ */

/* The free functions are bound as methods of the Store class below. */
%rename("$ignore", regextarget=1) "^mc_store_";
%ignore mc_iov;
/* Bound through the address-based helpers of the language files. */
%ignore mc_host_mem_alloc;
%ignore mc_host_mem_alloc_lazy;
%ignore mc_host_mem_free;
%ignore mc_host_mem_pluggable_alloc;
%ignore mc_host_mem_pluggable_free;
%ignore mc_replica_desc;
/* Bound through the task helpers of the language files. */
%ignore mc_store_task_info;
%ignore mc_task_id;
%include <mooncake/store.h>

/* ---- tensor objects ------------------------------------------------------- */

/* The constants (header size, dtype codes, ...) are bound; the functions
 * are reached through the Store methods of the language files. */
%rename("$ignore", %$isfunction, regextarget=1) "^mc_tensor_";
%ignore mc_tensor_axis;
%ignore mc_tensor_meta;
%ignore mc_tensor_slab;
%include <mooncake/tensor.h>

/* ---- gathering copy ----------------------------------------------------------- */

/* mc_fastcopy_gather(dst, dst_size, sources, nthreads) -> [status, bytes]:
 * the language files map the address, the source list and the count out. */
%include <mooncake/fastcopy.h>

/* ---- typed-ragged codec ------------------------------------------------------ */

/* The language files map the rows (a sequence of arrays or None), the
 * output arrays (addresses) and the counts out; the row struct itself is
 * never built by a caller. */
%ignore mc_codec_row;
/* SWIG's int64_t (long long) differs from LP64 C's for const pointers;
 * the readers' checks are done in numpy, so these two stay C-only. */
%ignore mc_codec_ragged_check;
%ignore mc_codec_ragged_select;
/* python.i's column builders (swig/pyhelpers.c) call it from C */
%ignore mc_codec_blob_check;
/* python.i's stage_json (swig/pyhelpers.c) calls it with descriptors made from
 * Python objects; the structs are C-only */
%ignore mc_codec_stage_json;
%ignore mc_codec_member;
%ignore mc_codec_chunk;
%ignore mc_codec_stage_out;
#if !defined(SWIGPYTHON)
/* only python.i maps a sequence of arrays to rows */
%ignore mc_codec_ragged_measure;
%ignore mc_codec_ragged_pack;
%ignore mc_codec_ragged_describe;
#endif
%include <mooncake/codec.h>

/* ---- resharding planner core ------------------------------------------------- */

/* The Python package (mooncake.reshard.weight.planner) lays the parameter
 * structs out itself (ctypes) and passes their address; python.i maps the
 * addresses, the table handle and the refusal.  The structs are never
 * wrapped. */
%ignore mc_reshard_frags;
%ignore mc_reshard_plan_params;
%ignore mc_reshard_plan_error;
/* SWIG's int64_t (long long) differs from LP64 C's for const pointers:
 * Python calls lowering through mooncake_reshard_plan_lower() below. */
%ignore mc_reshard_plan_lower;
%ignore mc_reshard_plan_lower_blocks;
%ignore mc_reshard_boxes_tile;
#if !defined(SWIGPYTHON)
%ignore mc_reshard_plan_create;
%ignore mc_reshard_table_rows;
%ignore mc_reshard_table_width;
%ignore mc_reshard_table_column;
%ignore mc_reshard_table_destroy;
#endif
%include <mooncake/reshard.h>
#if defined(SWIGPYTHON)
%inline %{
/* sizeof(mc_reshard_plan_params_t): the Python layout is checked against it. */
static size_t mooncake_reshard_params_size(void)
{
    return sizeof(mc_reshard_plan_params_t);
}

/* mc_reshard_plan_lower() with the int64 columns as plain addresses. */
static mc_status_t mooncake_reshard_plan_lower(mc_reshard_table_h plan,
                                               const mc_reshard_plan_params_t *params,
                                               unsigned long long keys_addr,
                                               unsigned long long offsets_addr,
                                               const uint8_t *target_selected,
                                               mc_reshard_table_h *table_p)
{
    return mc_reshard_plan_lower(plan, params, (const int64_t *)(uintptr_t)keys_addr,
                                 (const int64_t *)(uintptr_t)offsets_addr, target_selected,
                                 table_p);
}

/* mc_reshard_plan_lower_blocks() with the int64 columns as plain addresses. */
static mc_status_t mooncake_reshard_plan_lower_blocks(mc_reshard_table_h plan,
                                                      const mc_reshard_plan_params_t *params,
                                                      unsigned long long keys_addr,
                                                      unsigned long long offsets_addr,
                                                      const uint8_t *target_selected,
                                                      mc_reshard_table_h *table_p)
{
    return mc_reshard_plan_lower_blocks(plan, params, (const int64_t *)(uintptr_t)keys_addr,
                                        (const int64_t *)(uintptr_t)offsets_addr,
                                        target_selected, table_p);
}

/* mc_reshard_boxes_tile() with its columns as plain addresses. */
static mc_status_t mooncake_reshard_boxes_tile(size_t n, size_t width,
                                               unsigned long long group_addr,
                                               unsigned long long offsets_addr,
                                               unsigned long long shapes_addr,
                                               unsigned long long extents_addr,
                                               size_t n_groups, unsigned long long ok_addr)
{
    return mc_reshard_boxes_tile(n, width, (const int64_t *)(uintptr_t)group_addr,
                                 (const int64_t *)(uintptr_t)offsets_addr,
                                 (const int64_t *)(uintptr_t)shapes_addr,
                                 (const int64_t *)(uintptr_t)extents_addr, n_groups,
                                 (uint8_t *)(uintptr_t)ok_addr);
}
%}
#endif

/*
 * The binding's store object.  It wraps the handle in a struct of its own so
 * the methods SWIG generates (named <struct>_<method>) cannot collide with
 * the library's mc_store_* functions.
 */
%rename(Store) mooncake_store;
%newobject mooncake_store::hostname;

struct mooncake_store {
};

%exception mooncake_store::mooncake_store {
    $action
    if (result == NULL)
        SWIG_exception(SWIG_MemoryError, "cannot create a store handle");
}

%extend mooncake_store {
    /* An unconfigured store; call setup() next. */
    mooncake_store()
    {
        mooncake_store_t *s = calloc(1, sizeof(*s));
        if (s == NULL)
            return NULL;
        if (mc_store_create(&s->h) != MC_OK) {
            free(s);
            return NULL;
        }
        return s;
    }

    /* Closes the store if it is open and frees it. */
    ~mooncake_store()
    {
        mc_store_destroy($self->h);
        free($self);
    }
    /*
     * mc_store_setup() with every field given: strings may be "" but not
     * NULL, except tenant_id (NULL or "" = "default").
     */
    int setup(const char *local_hostname, const char *metadata_server,
              uint64_t global_segment_size, uint64_t local_buffer_size,
              const char *protocol, const char *rdma_devices,
              const char *master_server_addr, const char *tenant_id = NULL,
              struct mooncake_engine *engine = NULL, int rpc_timeout_ms = -1,
              int client_http_port = -1, const char *auth_token_file = NULL)
    {
        mc_store_params_t p;
        memset(&p, 0, sizeof(p));
        p.field_mask = MC_STORE_PARAM_LOCAL_HOSTNAME | MC_STORE_PARAM_METADATA_SERVER |
                       MC_STORE_PARAM_GLOBAL_SEGMENT_SIZE |
                       MC_STORE_PARAM_LOCAL_BUFFER_SIZE | MC_STORE_PARAM_PROTOCOL |
                       MC_STORE_PARAM_RDMA_DEVICES | MC_STORE_PARAM_MASTER_SERVER_ADDR;
        p.local_hostname = local_hostname;
        p.metadata_server = metadata_server;
        p.global_segment_size = global_segment_size;
        p.local_buffer_size = local_buffer_size;
        p.protocol = protocol;
        p.rdma_devices = rdma_devices;
        p.master_server_addr = master_server_addr;
        if ((tenant_id != NULL) && (tenant_id[0] != '\0')) {
            p.field_mask |= MC_STORE_PARAM_TENANT_ID;
            p.tenant_id = tenant_id;
        }
        if (engine != NULL) {
            /* borrowed: the store registers on it and never destroys it */
            p.field_mask |= MC_STORE_PARAM_ENGINE;
            p.engine = engine->h;
        }
        if (rpc_timeout_ms >= 0) {
            /* < 0: MC_STORE_RPC_TIMEOUT_MS or the default */
            p.field_mask |= MC_STORE_PARAM_RPC_TIMEOUT_MS;
            p.rpc_timeout_ms = (uint32_t)rpc_timeout_ms;
        }
        if ((client_http_port >= 0) && (client_http_port <= 65535)) {
            /* < 0: no client HTTP server */
            p.field_mask |= MC_STORE_PARAM_CLIENT_HTTP_PORT;
            p.client_http_port = (uint16_t)client_http_port;
        }
        if (auth_token_file != NULL) {
            /* NULL: MC_AUTH_TOKEN_FILE; "": authentication off */
            p.field_mask |= MC_STORE_PARAM_AUTH_TOKEN_FILE;
            p.auth_token_file = auth_token_file;
        }
        return mc_store_setup($self->h, &p);
    }

    /* Unmount this client's segments; its objects disappear.  The store can
     * be set up again. */
    int close()
    {
        return mc_store_close($self->h);
    }

    /* "host:port" of the transfer engine, "" before setup.  A copy, so a
     * concurrent close() cannot pull the string away from the caller. */
    char *hostname()
    {
        const char *h = mc_store_hostname($self->h);
        return strdup((h != NULL) ? h : "");
    }

    /* Store @p len bytes; an existing key keeps its value and reports 0. */
    int put(const char *key, const void *data, size_t len,
            const mc_replicate_config_t *config = NULL)
    {
        return mc_store_put($self->h, key, data, len, config);
    }

    /* 1 present, 0 absent, negative status on error (grants a lease). */
    int exist(const char *key)
    {
        return mc_store_exist($self->h, key);
    }

    /* Object size, or a negative status (grants a lease). */
    int64_t get_size(const char *key)
    {
        uint64_t size = 0;
        mc_status_t st = mc_store_get_size($self->h, key, &size);
        if (st != MC_OK)
            return (int64_t)st;
        if (size > (uint64_t)INT64_MAX)
            return (int64_t)MC_INTERNAL_ERROR;
        return (int64_t)size;
    }

    /* MC_OK, MC_OBJECT_NOT_FOUND, MC_OBJECT_HAS_LEASE (unless force), ... */
    int remove(const char *key, int force = 0)
    {
        return mc_store_remove($self->h, key, force);
    }
}

/* ---- completion queue (Python: mooncake.async_store) ------------------------ */

#if defined(SWIGPYTHON)
%{
/* The binding's completion queue: mc_store_aq_open() on a Store.  The
 * language package keeps the Store alive while the queue lives. */
typedef struct mooncake_aq {
    mc_store_aq_h q;
} mooncake_aq_t;

/* @p len bytes of packed native uint64 pairs (address, length) as @p n
 * mc_iov_t, malloc'd; NULL when the buffer does not hold n pairs. */
static mc_iov_t *mooncake_aq_iovs_(const void *data, size_t len, size_t n)
{
    const uint64_t *v = data;
    mc_iov_t *iov;
    if ((n > 0) && ((data == NULL) || (len != n * 2 * sizeof(uint64_t))))
        return NULL;
    iov = malloc((n > 0) ? n * sizeof(*iov) : 1);
    for (size_t i = 0; (iov != NULL) && (i < n); i++) {
        iov[i].base = (const void *)(uintptr_t)v[2 * i];
        iov[i].len  = (size_t)v[2 * i + 1];
    }
    return iov;
}
%}

%rename(AsyncQueue) mooncake_aq;
%ignore mc_store_aq_done;
/* The ops of batch_zc() (MC_STORE_AQ_* is hidden with the mc_store_ enum). */
%constant int AQ_BATCH_GET_INTO = MC_STORE_AQ_BATCH_GET_INTO;
%constant int AQ_BATCH_PUT_FROM = MC_STORE_AQ_BATCH_PUT_FROM;
%constant int AQ_BATCH_UPSERT_FROM = MC_STORE_AQ_BATCH_UPSERT_FROM;
%constant int AQ_BATCH_GET_INTO_LOCAL = MC_STORE_AQ_BATCH_GET_INTO_LOCAL;

struct mooncake_aq {
};

%exception mooncake_aq::mooncake_aq {
    $action
    if (result == NULL)
        SWIG_exception(SWIG_RuntimeError, mc_last_error_detail());
}

/* Queuing and reaping never block: they keep the interpreter lock. */
%feature("nothread") mooncake_aq::get;
%feature("nothread") mooncake_aq::get_into;
%feature("nothread") mooncake_aq::write;
%feature("nothread") mooncake_aq::write_from;
%feature("nothread") mooncake_aq::exist;
%feature("nothread") mooncake_aq::remove;
%feature("nothread") mooncake_aq::get_size;
%feature("nothread") mooncake_aq::get_batch;
%feature("nothread") mooncake_aq::batch_exist;
%feature("nothread") mooncake_aq::batch_zc;
%feature("nothread") mooncake_aq::reap;
%feature("nothread") mooncake_aq::fd;
%feature("nothread") mooncake_aq::plug;
%feature("nothread") mooncake_aq::unplug;

/*
 * A completion queue of a Store (mc_store_aq_*).  Submissions return a
 * status (0: queued); addresses are ints; batch buffers are packed native
 * uint64 (address, length) pairs.  reap() is typemapped in python.i.
 */
%extend mooncake_aq {
    mooncake_aq(struct mooncake_store *store, unsigned workers = 0)
    {
        mooncake_aq_t *a = calloc(1, sizeof(*a));
        if (a == NULL)
            return NULL;
        if (mc_store_aq_open(store->h, workers, &a->q) != MC_OK) {
            free(a);
            return NULL;
        }
        return a;
    }

    /* Waits for the batch calls in flight (without the interpreter lock). */
    ~mooncake_aq()
    {
        mc_store_aq_close($self->q);
        free($self);
    }

    int fd()
    {
        return mc_store_aq_fd($self->q);
    }

    void plug()
    {
        mc_store_aq_plug($self->q);
    }

    void unplug()
    {
        mc_store_aq_unplug($self->q);
    }

    int get(const char *key, uint64_t tag)
    {
        return mc_store_aq_get($self->q, key, tag);
    }

    int get_into(const char *key, uint64_t addr, uint64_t cap, uint64_t tag)
    {
        return mc_store_aq_get_into($self->q, key, (void *)(uintptr_t)addr, (size_t)cap, tag);
    }

    /* put (@p upsert 0) or upsert (1) of the bytes at @p data. */
    int write(int upsert, const char *key, const void *data, size_t len,
              const mc_replicate_config_t *config, uint64_t tag)
    {
        return upsert ? mc_store_aq_upsert($self->q, key, data, len, config, tag)
                      : mc_store_aq_put($self->q, key, data, len, config, tag);
    }

    /* put_from (@p upsert 0) or upsert_from (1) of registered memory. */
    int write_from(int upsert, const char *key, uint64_t addr, uint64_t len,
                   const mc_replicate_config_t *config, uint64_t tag)
    {
        const void *buf = (const void *)(uintptr_t)addr;
        return upsert ? mc_store_aq_upsert_from($self->q, key, buf, (size_t)len, config, tag)
                      : mc_store_aq_put_from($self->q, key, buf, (size_t)len, config, tag);
    }

    int exist(const char *key, uint64_t tag)
    {
        return mc_store_aq_exist($self->q, key, tag);
    }

    int remove(const char *key, int force, uint64_t tag)
    {
        return mc_store_aq_remove($self->q, key, force, tag);
    }

    int get_size(const char *key, uint64_t tag)
    {
        return mc_store_aq_get_size($self->q, key, tag);
    }

    int get_batch(const char *const *strs, size_t n, uint64_t tag)
    {
        return mc_store_aq_get_batch($self->q, strs, n, tag);
    }

    int batch_exist(const char *const *strs, size_t n, uint64_t tag)
    {
        return mc_store_aq_batch_exist($self->q, strs, n, tag);
    }

    /* MC_STORE_AQ_BATCH_GET_INTO(_LOCAL), _PUT_FROM or _UPSERT_FROM of @p strs,
     * one (address, length) pair a key packed in @p data. */
    int batch_zc(int op, const char *const *strs, size_t n, const void *data, size_t len,
                 const mc_replicate_config_t *config, uint64_t tag)
    {
        mc_iov_t *iov = mooncake_aq_iovs_(data, len, n);
        int st;
        if (iov == NULL)
            return (len != n * 2 * sizeof(uint64_t)) ? MC_INVALID_PARAMS : MC_INTERNAL_ERROR;
        switch (op) {
        case MC_STORE_AQ_BATCH_GET_INTO:
            st = mc_store_aq_batch_get_into($self->q, strs, iov, n, tag);
            break;
        case MC_STORE_AQ_BATCH_GET_INTO_LOCAL:
            st = mc_store_aq_batch_get_into_local($self->q, strs, iov, n, tag);
            break;
        case MC_STORE_AQ_BATCH_PUT_FROM:
            st = mc_store_aq_batch_put_from($self->q, strs, iov, n, config, tag);
            break;
        case MC_STORE_AQ_BATCH_UPSERT_FROM:
            st = mc_store_aq_batch_upsert_from($self->q, strs, iov, n, config, tag);
            break;
        default:
            st = MC_INVALID_PARAMS;
            break;
        }
        free(iov);
        return st;
    }

    size_t reap(mc_store_aq_done_t *done, size_t max)
    {
        return mc_store_aq_reap($self->q, done, max);
    }

    /* Copies the rest of this queue's local reads in progress (without the
     * interpreter lock); the pieces copied. */
    size_t help()
    {
        return mc_store_aq_help($self->q);
    }
}
#endif
