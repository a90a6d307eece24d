-- SPDX-License-Identifier: Apache-2.0
-- The Lua bindings against a real mooncake_master (busted; `make check-lua`).
local helpers = require "helpers"
local mc = require "mooncake"

local MiB = 1024 * 1024

describe("mooncake Lua bindings", function()
    local master, s

    setup(function()
        master = helpers.start_master()
        s = mc.Store()
        assert.are.equal(0, s:setup("localhost", "P2PHANDSHAKE", 32 * MiB, 8 * MiB, "tcp", "",
                                    master.addr))
    end)

    teardown(function()
        if s then s:close() end
        if master then master.stop() end
    end)

    it("puts and gets a value as a string", function()
        assert.are.equal(0, s:put("lua_k1", "hello\0world"))
        assert.are.equal("hello\0world", s:get("lua_k1"))
        assert.matches("^localhost:%d+$", s:get_hostname())
    end)

    it("returns integers, not floats", function()
        assert.are.equal(0, s:put("lua_int", string.rep("x", 1000)))
        local size = s:get_size("lua_int")
        assert.are.equal(1000, size)
        assert.are.equal("integer", math.type(size))
        assert.are.equal("integer", math.type(s:is_exist("lua_int")))
        assert.are.equal("integer", math.type(mc.TENSOR_HEADER_SIZE))
    end)

    it("reports errors as nil, message, code", function()
        local v, msg, code = s:get("lua_missing")
        assert.is_nil(v)
        assert.are.equal("integer", math.type(code))
        assert.are.equal("OBJECT_NOT_FOUND", mc.status_name(code))
        assert.matches("get: .*OBJECT_NOT_FOUND", msg)
        local ok, err = pcall(function() assert(s:get("lua_missing")) end)
        assert.is_false(ok)
        assert.matches("OBJECT_NOT_FOUND", err)
    end)

    it("tells whether keys exist, and removes them", function()
        assert.are.equal(0, s:put("lua_rm", "v"))
        assert.is_true(s:exists("lua_rm"))
        assert.are.equal(1, s:is_exist("lua_rm"))
        -- a fresh read lease blocks a plain remove; force removes anyway
        assert.are.equal(0, s:remove("lua_rm", true))
        assert.is_false(s:exists("lua_rm"))
        assert.are.equal(0, s:is_exist("lua_rm"))
        local r, _, code = s:remove("lua_rm")
        assert.is_nil(r)
        assert.are.equal("OBJECT_NOT_FOUND", mc.status_name(code))
    end)

    it("writes, reads, sizes and removes batches", function()
        local keys = { "lua_b1", "lua_b2", "lua_b3" }
        local sts = s:put_batch(keys, { "one", "two!", string.rep("3", 300) })
        assert.are.same({ 0, 0, 0 }, sts)
        local values, codes = s:get_batch({ "lua_b1", "lua_nope", "lua_b3" })
        assert.are.equal("one", values[1])
        assert.is_false(values[2])
        assert.are.equal(string.rep("3", 300), values[3])
        assert.are.equal(0, codes[1])
        assert.are.equal("OBJECT_NOT_FOUND", mc.status_name(codes[2]))
        assert.are.same({ 1, 0, 1 }, s:batch_is_exist({ "lua_b1", "lua_nope", "lua_b2" }))
        local sizes = s:batch_get_size({ "lua_b1", "lua_b2", "lua_b3", "lua_nope" })
        assert.are.same({ 3, 4, 300 }, { sizes[1], sizes[2], sizes[3] })
        assert.is_true(sizes[4] < 0)
        assert.are.same({ 0, 0, 0 }, s:batch_remove(keys, true))
        assert.are.same({ 0, 0, 0 }, s:batch_is_exist(keys))
        assert.has_error(function() s:put_batch({ "a" }, { "x", "y" }) end)
    end)

    it("commits a batch by its last key", function()
        local keys = { "lua_c/a", "lua_c/b", "lua_c/manifest" }
        assert.are.same({ 0, 0, 0 }, s:put_batch_commit(keys, { "pa", "pb", "m" }))
        assert.are.same({ 1, 1, 1 }, s:batch_is_exist(keys))
        -- a payload in the way: nothing of the call stays, the other's value does
        local keys2 = { "lua_c2/a", "lua_c/b", "lua_c2/manifest" }
        local sts = s:put_batch_commit(keys2, { "qa", "qb", "m2" })
        assert.are.equal(0, sts[1])
        assert.are.equal("OBJECT_ALREADY_EXISTS", mc.status_name(sts[2]))
        assert.are.equal("OBJECT_ALREADY_EXISTS", mc.status_name(sts[3]))
        assert.are.same({ 0, 1, 0 }, s:batch_is_exist(keys2))
        assert.are.equal("pb", s:get("lua_c/b"))
        assert.are.same({ 0, 0, 0 }, s:batch_remove(keys, true))
    end)

    it("removes by regex", function()
        assert.are.same({ 0, 0, 0 }, s:put_batch({ "lua_re_1", "lua_re_2", "lua_other" },
                                                 { "a", "b", "c" }))
        assert.are.equal(2, s:remove_by_regex("^lua_re_", true))
        assert.is_true(s:exists("lua_other"))
        assert.are.equal(0, s:remove("lua_other", true))
    end)

    it("describes replicas", function()
        assert.are.equal(0, s:put("lua_rep", string.rep("r", 4096)))
        local reps = assert(s:get_replica_desc("lua_rep"))
        assert.are.equal(1, #reps)
        assert.are.equal(4096, reps[1].size)
        assert.are.equal(s:get_hostname(), reps[1].segment)
        assert.are.equal("tcp", reps[1].protocol)
        assert.is_true(reps[1].is_memory)
        assert.are.equal(1, reps[1].kind)       -- MC_REPLICA_KIND_MEMORY
        assert.is_false(reps[1].is_disk)
        assert.is_false(reps[1].is_local_disk)
        assert.is_false(reps[1].is_nof)
        assert.are.equal("integer", math.type(reps[1].addr))
        local none, _, code = s:get_replica_desc("lua_nope")
        assert.is_nil(none)
        assert.are.equal("OBJECT_NOT_FOUND", mc.status_name(code))
    end)

    it("writes with a replication configuration", function()
        local cfg = mc.ReplicateConfig()
        assert.are.equal(1, cfg.replica_num)
        assert.are.equal("integer", math.type(cfg.replica_num))
        assert.are.equal(0, cfg:set_preferred_segment(s:get_hostname()))
        assert.are.equal(s:get_hostname(), cfg:get_preferred_segment())
        cfg.with_hard_pin = 1
        assert.are.equal(0, s:put("lua_cfg", "pinned", cfg))
        local reps = assert(s:get_replica_desc("lua_cfg"))
        assert.are.equal(s:get_hostname(), reps[1].segment)
        assert.are.equal("pinned", s:get("lua_cfg"))
        assert.are.equal(0, s:remove("lua_cfg", true))
    end)

    it("encodes and decodes tensor headers, and stores tensors", function()
        local hdr = assert(mc.tensor_header("float32", { 2, 3 }))
        assert.are.equal(mc.TENSOR_HEADER_SIZE, #hdr)
        local data = string.pack("<ffffff", 1, 2, 3, 4, 5, 6)
        local meta = assert(mc.tensor_decode(hdr .. data))
        assert.are.equal("float32", meta.dtype_name)
        assert.are.same({ 2, 3 }, meta.shape)
        assert.are.equal(24, meta.data_bytes)
        -- the data length must match the shape
        local bad, _, code = mc.tensor_decode(hdr .. "short")
        assert.is_nil(bad)
        assert.are.equal("INVALID_PARAMS", mc.status_name(code))
        assert.is_nil((mc.tensor_header("no_such_dtype", { 1 })))

        assert.are.equal(0, s:put_tensor("lua_tensor", mc.dtype.float32, { 2, 3 }, data))
        local m2, d2 = s:get_tensor("lua_tensor")
        assert.are.same({ 2, 3 }, m2.shape)
        assert.are.equal(data, d2)
        assert.are.same({ 1.0, 2.0, 3.0, 4.0, 5.0, 6.0 },
                        { table.unpack({ string.unpack("<ffffff", d2) }, 1, 6) })
    end)

    it("runs examples/hello.lua", function()
        local srcdir = os.getenv("MC_SRCDIR") or "../.."
        local p = io.popen(("%s %s/examples/hello.lua %s 2>&1"):format(
            os.getenv("MC_LUA") or "lua5.4", srcdir, master.addr))
        local out = p:read("a")
        local ok = p:close()
        assert.is_true(ok, out)
        assert.are.equal("Hello, Mooncake Store!\n", out)
    end)
end)

describe("a store that is not set up", function()
    it("fails with a message and a code", function()
        local s = mc.Store()
        local r, msg, code = s:put("k", "v")
        assert.is_nil(r)
        assert.is_string(msg)
        assert.is_true(code < 0)
    end)
end)
