/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The Lua C functions of the Lua binding (swig/lua_glue.h), compiled into
 * the mooncake_core module next to the SWIG wrapper (bindings/lua/local.mk);
 * swig/lua.i registers each one under its module name with %native.  They
 * are the calls that hand back variable amounts of data: get, the batches,
 * the replica descriptors and the tensor header codec.  The batches that
 * answer the call's status and one integer per key share one body,
 * mooncake_lua_batch(), each giving its library call and how a result
 * reads in a constant mooncake_lua_batch_t.
 *
 * Owns: nothing beyond a call: scratch arrays are userdata left on the Lua
 * stack, freed by the collector, so a Lua error (luaL_error() longjmps)
 * leaks nothing.  May call: libmooncake's public store and tensor API, the
 * Lua C API, and mooncake_lua_store() (swig/lua.i: the one function that
 * knows the SWIG runtime, to find the handle of a Store object).
 *
 * Lua has no interpreter lock to drop: the calls block the calling Lua
 * state for as long as the library call takes.
 */
#include "lua_glue.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

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

/* lua_glue.h says what it pushes. */
int mooncake_lua_batch(lua_State *L, const mooncake_lua_batch_t *b)
{
    mc_store_h h = mooncake_lua_store(L);
    size_t i, n;
    const char **keys = mooncake_lua_keys(L, 2, &n);
    void *out = mooncake_lua_scratch(L, n, b->size);
    mc_status_t st = b->call(L, h, keys, n, out);
    lua_pushinteger(L, st);
    lua_createtable(L, (int)n, 0);
    for (i = 0; i < n; i++) {
        lua_pushinteger(L, b->result(out, i, st));
        lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return 2;
}

/* A per-key status, as the library left it. */
static lua_Integer mooncake_lua_status_at(const void *out, size_t i, mc_status_t st)
{
    (void)st;
    return ((const mc_status_t *)out)[i];
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
int mooncake_lua_get(lua_State *L)
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
int mooncake_lua_get_batch(lua_State *L)
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

static mc_status_t mooncake_lua_put_batch_call(lua_State *L, mc_store_h h, const char **keys,
                                              size_t n, void *sts)
{
    size_t i;
    mc_iov_t *iovs;
    int upsert = lua_toboolean(L, 4);
    int commit = lua_toboolean(L, 5);
    luaL_checktype(L, 3, LUA_TTABLE);
    if ((size_t)luaL_len(L, 3) != n)
        return luaL_error(L, "put_batch: %d keys but %d values", (int)n, (int)luaL_len(L, 3));
    iovs = mooncake_lua_scratch(L, n, sizeof(*iovs));
    for (i = 0; i < n; i++) {
        lua_geti(L, 3, (lua_Integer)i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            return luaL_error(L, "put_batch: value %d is not a string", (int)i + 1);
        iovs[i].base = lua_tolstring(L, -1, &iovs[i].len);
        lua_pop(L, 1); /* the table keeps the string alive */
    }
    if (commit) {
        const mc_iov_t **bufs = mooncake_lua_scratch(L, n, sizeof(*bufs));
        size_t *counts = mooncake_lua_scratch(L, n, sizeof(*counts));
        for (i = 0; i < n; i++) {
            bufs[i] = &iovs[i];
            counts[i] = 1;
        }
        return mc_store_batch_put_parts_commit(h, keys, bufs, counts, n, NULL, sts);
    }
    if (n == 0)
        return MC_OK;
    return upsert ? mc_store_upsert_batch(h, keys, iovs, n, NULL, sts)
                  : mc_store_put_batch(h, keys, iovs, n, NULL, sts);
}

/* store_put_batch(s, keys, values, upsert, commit): the call's status and
 * a table of per-key statuses; with @p commit (and not upsert) the last key
 * is the commit key (mc_store_batch_put_parts_commit). */
int mooncake_lua_put_batch(lua_State *L)
{
    static const mooncake_lua_batch_t b = {sizeof(mc_status_t), mooncake_lua_put_batch_call,
                                           mooncake_lua_status_at};
    return mooncake_lua_batch(L, &b);
}

static mc_status_t mooncake_lua_exist_call(lua_State *L, mc_store_h h, const char **keys,
                                          size_t n, void *res)
{
    (void)L;
    return (n > 0) ? mc_store_batch_exist(h, keys, n, res) : MC_OK;
}

/* 1 or 0 while the call succeeded; else the call's status for every key. */
static lua_Integer mooncake_lua_exist_at(const void *res, size_t i, mc_status_t st)
{
    return (st == MC_OK) ? ((const int *)res)[i] : st;
}

/* store_batch_exist(s, keys): the call's status and per key 1, 0 or a
 * negative status. */
int mooncake_lua_batch_exist(lua_State *L)
{
    static const mooncake_lua_batch_t b = {sizeof(int), mooncake_lua_exist_call,
                                           mooncake_lua_exist_at};
    return mooncake_lua_batch(L, &b);
}

/* store_batch_get_size(s, keys): per key its size or negative status. */
int mooncake_lua_batch_get_size(lua_State *L)
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

static mc_status_t mooncake_lua_remove_call(lua_State *L, mc_store_h h, const char **keys,
                                           size_t n, void *sts)
{
    int force = lua_toboolean(L, 3);
    return (n > 0) ? mc_store_batch_remove(h, keys, n, force, sts) : MC_OK;
}

/* store_batch_remove(s, keys, force): the call's status and per-key ones. */
int mooncake_lua_batch_remove(lua_State *L)
{
    static const mooncake_lua_batch_t b = {sizeof(mc_status_t), mooncake_lua_remove_call,
                                           mooncake_lua_status_at};
    return mooncake_lua_batch(L, &b);
}

/* store_remove_by_regex(s, regex, force) and store_remove_all(s, force):
 * the number removed, or the negative status. */
int mooncake_lua_remove_by_regex(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    const char *re = luaL_checkstring(L, 2);
    int64_t count = 0;
    mc_status_t st = mc_store_remove_by_regex(h, re, lua_toboolean(L, 3), &count);
    lua_pushinteger(L, (st == MC_OK) ? (lua_Integer)count : st);
    return 1;
}

int mooncake_lua_remove_all(lua_State *L)
{
    mc_store_h h = mooncake_lua_store(L);
    int64_t count = 0;
    mc_status_t st = mc_store_remove_all(h, lua_toboolean(L, 2), &count);
    lua_pushinteger(L, (st == MC_OK) ? (lua_Integer)count : st);
    return 1;
}

/* store_replicas(s, key): a sequence of descriptor tables, or the status. */
int mooncake_lua_replicas(lua_State *L)
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
int mooncake_lua_tensor_encode(lua_State *L)
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
int mooncake_lua_tensor_decode(lua_State *L)
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
