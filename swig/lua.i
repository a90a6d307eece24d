/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lua specifics of the SWIG interface (included from mooncake.i when SWIG
 * runs with -lua).  The generated C module is mooncake_core; people use
 * the hand-written module in front of it (bindings/lua/mooncake.lua,
 * `require "mooncake"`), which turns statuses into the Lua error style
 * (nil, message, code).
 *
 *   - (const void *data, size_t len) takes a Lua string;
 *   - every integer type goes in and comes out as a Lua integer (never a
 *     float: object sizes, addresses and statuses stay exact);
 *   - the calls that hand back variable amounts of data (get, batches,
 *     replica descriptors, the tensor header codec) are plain Lua C
 *     functions (store_*, tensor_*) taking the Store object first.
 */

%{
#include <lua.h>
#include <lauxlib.h>

SWIGEXPORT int luaopen_mooncake_core(lua_State *L);
%}

/* ---- integers as integers ------------------------------------------------ */

%fragment("mooncake_lua_int", "header") {
/* The integer at @p idx: a Lua integer, or a float with an exact integer
 * value; raises otherwise. */
static lua_Integer mooncake_lua_int(lua_State *L, int idx)
{
    int ok = 0;
    lua_Integer v = lua_tointegerx(L, idx, &ok);
    if (!ok)
        luaL_error(L, "argument %d: an integer is expected", idx);
    return v;
}
}

%typemap(in, checkfn="lua_isnumber", fragment="mooncake_lua_int")
    int, short, long, long long, signed char, int8_t, int16_t, int32_t, int64_t
%{ $1 = ($type)mooncake_lua_int(L, $input); %}

%typemap(in, checkfn="lua_isnumber", fragment="mooncake_lua_int")
    unsigned int, unsigned short, unsigned long, unsigned long long, unsigned char,
    uint8_t, uint16_t, uint32_t, uint64_t, size_t
%{ if (mooncake_lua_int(L, $input) < 0)
        SWIG_fail_arg("$symname", $argnum, "non-negative integer");
   $1 = ($type)mooncake_lua_int(L, $input); %}

%typemap(out)
    int, short, long, long long, signed char, int8_t, int16_t, int32_t, int64_t,
    unsigned int, unsigned short, unsigned long, unsigned long long, unsigned char,
    uint8_t, uint16_t, uint32_t, uint64_t, size_t
%{ lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}

%typemap(out) enum SWIGTYPE
%{ lua_pushinteger(L, (lua_Integer)$1); SWIG_arg++; %}

/* Constants (status codes, dtype codes, sizes) as integers too. */
%typemap(consttab) int, unsigned int, long, unsigned long, enum SWIGTYPE
    { SWIG_LUA_CONSTTAB_INT("$symname", $value) }

/* ---- (pointer, length) and string lists ---------------------------------- */

%typemap(in, checkfn="lua_isstring") (const void *data, size_t len)
%{ {
    size_t n_ = 0;
    $1 = (void *)lua_tolstring(L, $input, &n_);
    $2 = n_;
} %}

/* A Lua sequence of strings; the strings stay anchored in the table, which
 * stays on the stack for the whole call. */
%typemap(in, checkfn="lua_istable") (const char *const *strs, size_t n)
%{ {
    lua_Integer i_, n_ = (lua_Integer)luaL_len(L, $input);
    $2 = (size_t)n_;
    $1 = ($1_ltype)lua_newuserdatauv(L, ((size_t)n_ + 1) * sizeof(char *), 0);
    for (i_ = 1; i_ <= n_; i_++) {
        lua_geti(L, $input, i_);
        if (!lua_isstring(L, -1))
            SWIG_fail_arg("$symname", $argnum, "table of strings");
        ((const char **)$1)[i_ - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
} %}

/* Requests travel packed (see mooncake_te_requests_); "local" is a Lua keyword. */
%ignore mc_te_request;
%rename(c_local) mc_te_request::local;

/* ---- native helpers --------------------------------------------------------- */

%{
/* The store handle of the Store object at index 1, or a Lua error. */
static mc_store_h mooncake_lua_store(lua_State *L)
{
    mooncake_store_t *s = NULL;
    if (!SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&s, SWIGTYPE_p_mooncake_store, 0)) ||
        (s == NULL))
        luaL_error(L, "argument 1: a Store is expected");
    return s->h;
}

/* The strings of the sequence at @p idx, in a userdata left on the stack
 * (freed by the collector); the strings stay anchored in the table. */
static const char **mooncake_lua_keys(lua_State *L, int idx, size_t *n_p)
{
    lua_Integer i, n;
    const char **v;
    luaL_checktype(L, idx, LUA_TTABLE);
    n = (lua_Integer)luaL_len(L, idx);
    v = lua_newuserdatauv(L, ((size_t)n + 1) * sizeof(*v), 0);
    for (i = 1; i <= n; i++) {
        lua_geti(L, idx, i);
        if (lua_type(L, -1) != LUA_TSTRING)
            luaL_error(L, "argument %d: item %d is not a string", idx, (int)i);
        v[i - 1] = lua_tostring(L, -1);
        lua_pop(L, 1);
    }
    *n_p = (size_t)n;
    return v;
}

/* A scratch array of @p n elements of @p size bytes, freed by the collector. */
static void *mooncake_lua_scratch(lua_State *L, size_t n, size_t size)
{
    void *p = lua_newuserdatauv(L, (n + 1) * size, 0);
    memset(p, 0, (n + 1) * size);
    return p;
}

/* Pushes the value of @p q (a string) or, on failure, its status. */
static void mooncake_lua_push_read(lua_State *L, mc_store_h h, mc_store_query_h q)
{
    uint64_t size = mc_store_query_size(q);
    mc_status_t st;
    char *buf;
    if (size == 0) {
        lua_pushliteral(L, "");
        return;
    }
    buf = malloc((size_t)size);
    if (buf == NULL) {
        lua_pushinteger(L, MC_INTERNAL_ERROR);
        return;
    }
    st = mc_store_query_read(h, q, 0, buf, (size_t)size);
    if (st == MC_OK)
        lua_pushlstring(L, buf, (size_t)size);
    else
        lua_pushinteger(L, st);
    free(buf);
}

/* store_get(s, key): the value as a string, or the negative status. */
static int mooncake_lua_get(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    const char *key = luaL_checkstring(L, 2);
    mc_store_query_h q = NULL;
    mc_status_t st = mc_store_query(h, key, &q);
    if (st != MC_OK) {
        lua_pushinteger(L, st);
        return 1;
    }
    mooncake_lua_push_read(L, h, q);
    mc_store_query_release(q);
    return 1;
}

/* store_get_batch(s, keys): per key its value, or its negative status. */
static int mooncake_lua_get_batch(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    size_t i, n;
    const char **keys = mooncake_lua_keys(L, 2, &n);
    mc_store_query_h *qs = mooncake_lua_scratch(L, n, sizeof(*qs));
    mc_status_t *sts = mooncake_lua_scratch(L, n, sizeof(*sts));
    mc_status_t st = (n > 0) ? mc_store_batch_query(h, keys, n, qs, sts) : MC_OK;
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        if ((qs[i] != NULL) && (sts[i] == MC_OK))
            mooncake_lua_push_read(L, h, qs[i]);
        else
            lua_pushinteger(L, (sts[i] != MC_OK) ? sts[i] : ((st != MC_OK) ? st : MC_INTERNAL_ERROR));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
        mc_store_query_release(qs[i]);
    }
    return 1;
}

/* store_put_batch(s, keys, values, upsert): the call's status and a table
 * of per-key statuses. */
static int mooncake_lua_put_batch(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    size_t i, n;
    const char **keys = mooncake_lua_keys(L, 2, &n);
    mc_iov_t *iovs;
    mc_status_t *sts;
    mc_status_t st = MC_OK;
    int upsert = lua_toboolean(L, 4);
    luaL_checktype(L, 3, LUA_TTABLE);
    if ((size_t)luaL_len(L, 3) != n)
        return luaL_error(L, "put_batch: %d keys but %d values", (int)n, (int)luaL_len(L, 3));
    iovs = mooncake_lua_scratch(L, n, sizeof(*iovs));
    sts = mooncake_lua_scratch(L, n, sizeof(*sts));
    for (i = 0; i < n; i++) {
        lua_geti(L, 3, (lua_Integer)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "put_batch: value %d is not a string", (int)i + 1);
        iovs[i].base = lua_tolstring(L, -1, &iovs[i].len);
        lua_pop(L, 1); /* the table keeps the string alive */
    }
    if (n > 0)
        st = upsert ? mc_store_upsert_batch(h, keys, iovs, n, NULL, sts)
                    : mc_store_put_batch(h, keys, iovs, n, NULL, sts);
    lua_pushinteger(L, st);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, sts[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

/* store_batch_exist(s, keys): the call's status and per key 1, 0 or a
 * negative status. */
static int mooncake_lua_batch_exist(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    size_t i, n;
    const char **keys = mooncake_lua_keys(L, 2, &n);
    int *res = mooncake_lua_scratch(L, n, sizeof(*res));
    mc_status_t st = (n > 0) ? mc_store_batch_exist(h, keys, n, res) : MC_OK;
    lua_pushinteger(L, st);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, (st == MC_OK) ? res[i] : st);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

/* store_batch_get_size(s, keys): per key its size or negative status. */
static int mooncake_lua_batch_get_size(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    size_t i, n;
    const char **keys = mooncake_lua_keys(L, 2, &n);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        uint64_t size = 0;
        mc_status_t st = mc_store_get_size(h, keys[i], &size);
        lua_pushinteger(L, (st == MC_OK) ? (lua_Integer)size : st);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 1;
}

/* store_batch_remove(s, keys, force): the call's status and per-key ones. */
static int mooncake_lua_batch_remove(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    size_t i, n;
    const char **keys = mooncake_lua_keys(L, 2, &n);
    int force = lua_toboolean(L, 3);
    mc_status_t *sts = mooncake_lua_scratch(L, n, sizeof(*sts));
    mc_status_t st = (n > 0) ? mc_store_batch_remove(h, keys, n, force, sts) : MC_OK;
    lua_pushinteger(L, st);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, sts[i]);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

/* store_remove_by_regex(s, regex, force) and store_remove_all(s, force):
 * the number removed, or the negative status. */
static int mooncake_lua_remove_by_regex(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    const char *re = luaL_checkstring(L, 2);
    int64_t count = 0;
    mc_status_t st = mc_store_remove_by_regex(h, re, lua_toboolean(L, 3), &count);
    lua_pushinteger(L, (st == MC_OK) ? (lua_Integer)count : st);
    return 1;
}

static int mooncake_lua_remove_all(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    int64_t count = 0;
    mc_status_t st = mc_store_remove_all(h, lua_toboolean(L, 2), &count);
    lua_pushinteger(L, (st == MC_OK) ? (lua_Integer)count : st);
    return 1;
}

/* store_replicas(s, key): a sequence of descriptor tables, or the status. */
static int mooncake_lua_replicas(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    const char *key = luaL_checkstring(L, 2);
    mc_store_query_h q = NULL;
    mc_status_t st = mc_store_query(h, key, &q);
    size_t i, n;
    if (st != MC_OK) {
        lua_pushinteger(L, st);
        return 1;
    }
    n = mc_store_query_replica_count(q);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        mc_replica_desc_t d;
        memset(&d, 0, sizeof(d));
        if (mc_store_query_replica(q, i, &d) != MC_OK)
            continue;
        lua_createtable(L, 0, 10);
        lua_pushinteger(L, (lua_Integer)d.status);
        lua_setfield(L, -2, "status");
        lua_pushinteger(L, (lua_Integer)d.is_memory); /* mc_replica_kind_t */
        lua_setfield(L, -2, "kind");
        lua_pushboolean(L, d.is_memory == MC_REPLICA_KIND_MEMORY);
        lua_setfield(L, -2, "is_memory");
        lua_pushboolean(L, d.is_memory == MC_REPLICA_KIND_NOF);
        lua_setfield(L, -2, "is_nof");
        lua_pushboolean(L, d.is_memory == MC_REPLICA_KIND_DISK); /* DFS tier */
        lua_setfield(L, -2, "is_disk");
        lua_pushboolean(L, d.is_memory == MC_REPLICA_KIND_LOCAL_DISK); /* SSD-offload tier */
        lua_setfield(L, -2, "is_local_disk");
        lua_pushinteger(L, (lua_Integer)d.addr);
        lua_setfield(L, -2, "addr");
        lua_pushinteger(L, (lua_Integer)d.size);
        lua_setfield(L, -2, "size");
        lua_pushstring(L, d.segment);
        lua_setfield(L, -2, "segment");
        lua_pushstring(L, d.protocol);
        lua_setfield(L, -2, "protocol");
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    mc_store_query_release(q);
    return 1;
}

/* tensor_encode(dtype, shape): the MC_TENSOR_HEADER_SIZE-byte header of a
 * contiguous tensor, or the negative status. */
static int mooncake_lua_tensor_encode(lua_State *L)
{
    int64_t shape[MC_TENSOR_MAX_DIMS];
    char out[MC_TENSOR_HEADER_SIZE];
    mc_tensor_meta_t m;
    lua_Integer dtype = luaL_checkinteger(L, 1);
    lua_Integer i, ndim;
    luaL_checktype(L, 2, LUA_TTABLE);
    ndim = (lua_Integer)luaL_len(L, 2);
    if ((ndim > MC_TENSOR_MAX_DIMS) || (dtype < INT32_MIN) || (dtype > INT32_MAX)) {
        lua_pushinteger(L, MC_INVALID_PARAMS);
        return 1;
    }
    for (i = 1; i <= ndim; i++) {
        lua_geti(L, 2, i);
        shape[i - 1] = (int64_t)luaL_checkinteger(L, -1);
        lua_pop(L, 1);
    }
    if (mc_tensor_meta_init(&m, (int32_t)dtype, shape, (int32_t)ndim) != MC_OK) {
        lua_pushinteger(L, MC_INVALID_PARAMS);
        return 1;
    }
    mc_tensor_header_encode(&m, out);
    lua_pushlstring(L, out, sizeof(out));
    return 1;
}

/* tensor_decode(object): {dtype, ndim, shape, global_shape, data_offset,
 * data_bytes} of a whole serialized tensor object, or the status. */
static int mooncake_lua_tensor_decode(lua_State *L)
{
    size_t len = 0;
    const char *obj = luaL_checklstring(L, 1, &len);
    mc_tensor_meta_t m;
    mc_status_t st = mc_tensor_header_decode(obj, (uint64_t)len, &m);
    int i;
    if (st != MC_OK) {
        lua_pushinteger(L, st);
        return 1;
    }
    lua_createtable(L, 0, 6);
    lua_pushinteger(L, m.dtype);
    lua_setfield(L, -2, "dtype");
    lua_pushinteger(L, m.ndim);
    lua_setfield(L, -2, "ndim");
    lua_pushinteger(L, (lua_Integer)m.data_offset);
    lua_setfield(L, -2, "data_offset");
    lua_pushinteger(L, (lua_Integer)m.data_bytes);
    lua_setfield(L, -2, "data_bytes");
    lua_createtable(L, m.ndim, 0);
    for (i = 0; i < m.ndim; i++) {
        lua_pushinteger(L, m.local_shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "shape");
    lua_createtable(L, m.ndim, 0);
    for (i = 0; i < m.ndim; i++) {
        lua_pushinteger(L, m.global_shape[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setfield(L, -2, "global_shape");
    return 1;
}
%}

%native(store_get) int mooncake_lua_get(lua_State *L);
%native(store_get_batch) int mooncake_lua_get_batch(lua_State *L);
%native(store_put_batch) int mooncake_lua_put_batch(lua_State *L);
%native(store_batch_exist) int mooncake_lua_batch_exist(lua_State *L);
%native(store_batch_get_size) int mooncake_lua_batch_get_size(lua_State *L);
%native(store_batch_remove) int mooncake_lua_batch_remove(lua_State *L);
%native(store_remove_by_regex) int mooncake_lua_remove_by_regex(lua_State *L);
%native(store_remove_all) int mooncake_lua_remove_all(lua_State *L);
%native(store_replicas) int mooncake_lua_replicas(lua_State *L);
%native(tensor_encode) int mooncake_lua_tensor_encode(lua_State *L);
%native(tensor_decode) int mooncake_lua_tensor_decode(lua_State *L);
