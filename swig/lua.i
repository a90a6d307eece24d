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
 *     functions (store_*, tensor_*) taking the Store object first; their
 *     code is in swig/lua_glue.c (swig/lua_glue.h), compiled into the
 *     module, and this file only registers them.
 */

%{
#include <lua.h>
#include <lauxlib.h>

SWIGEXPORT int luaopen_mooncake_core(lua_State *L);

/* The Lua C functions registered below with %native (swig/lua_glue.c). */
#include "lua_glue.h"
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

/* ---- native helpers --------------------------------------------------------- *
 * The code lives in swig/lua_glue.c; only the handle lookup stays here,
 * because it needs the SWIG runtime (SWIG_ConvertPtr, the Store's type). */

%{
/* The store handle of the Store object at index 1, or a Lua error. */
mc_store_h mooncake_lua_store(lua_State *L)
{
    mooncake_store_t *s = NULL;
    if (!SWIG_IsOK(SWIG_ConvertPtr(L, 1, (void **)&s, SWIGTYPE_p_mooncake_store, 0)) ||
        (s == NULL))
        luaL_error(L, "argument 1: a Store is expected");
    return s->h;
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
