/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The hand-written Lua C functions of the Lua binding (swig/lua_glue.c),
 * compiled into the mooncake_core module next to the SWIG wrapper.
 * swig/lua.i includes this header, registers each function with %native
 * under its module name (store_get, tensor_decode, ...), and defines
 * mooncake_lua_store(), the one function that needs the SWIG runtime.
 * Nothing here is visible outside the module (hidden visibility).
 *
 * Each mooncake_lua_<name>() is a lua_CFunction taking the Store object
 * first (the store_* ones); its comment in lua_glue.c says what it
 * returns.  A bad argument raises a Lua error; a failed call returns its
 * negative status.
 */
#ifndef MOONCAKE_SWIG_LUA_GLUE_H
#define MOONCAKE_SWIG_LUA_GLUE_H

#include <lua.h>

#include <mooncake/mooncake.h>

#pragma GCC visibility push(hidden)

/* The store handle of the Store object at index 1, or a Lua error
 * (swig/lua.i: it converts the object with the SWIG runtime). */
mc_store_h mooncake_lua_store(lua_State *L);

/*
 * A Store method that sends a batch of keys and answers the call's status
 * and a table of one integer per key (put_batch, batch_exist,
 * batch_remove), as a constant table entry.
 */
typedef struct mooncake_lua_batch {
    size_t size; /* bytes of one per-key result */
    /* The library call on the @p n keys, filling @p out (n zeroed
     * results); called for no keys too, so that it checks its own
     * arguments (read from the stack; a bad one raises a Lua error). */
    mc_status_t (*call)(lua_State *L, mc_store_h h, const char **keys, size_t n, void *out);
    /* Result @p i of @p out as the table holds it, @p st the call's. */
    lua_Integer (*result)(const void *out, size_t i, mc_status_t st);
} mooncake_lua_batch_t;

/* The body of such a method: the Store at index 1, its keys (a sequence
 * of strings) at index 2, then @p b->call; pushes the call's status and
 * the table of results and returns 2, the values pushed. */
int mooncake_lua_batch(lua_State *L, const mooncake_lua_batch_t *b);

int mooncake_lua_get(lua_State *L);
int mooncake_lua_get_batch(lua_State *L);
int mooncake_lua_put_batch(lua_State *L);
int mooncake_lua_batch_exist(lua_State *L);
int mooncake_lua_batch_get_size(lua_State *L);
int mooncake_lua_batch_remove(lua_State *L);
int mooncake_lua_remove_by_regex(lua_State *L);
int mooncake_lua_remove_all(lua_State *L);
int mooncake_lua_replicas(lua_State *L);
int mooncake_lua_tensor_encode(lua_State *L);
int mooncake_lua_tensor_decode(lua_State *L);

#pragma GCC visibility pop

#endif /* MOONCAKE_SWIG_LUA_GLUE_H */
