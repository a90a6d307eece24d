-- SPDX-License-Identifier: Apache-2.0
--
-- mooncake: Lua bindings of the Mooncake Store (libmooncake).
--
--   local mc = require "mooncake"
--   local s = mc.Store()
--   assert(s:setup("localhost", "P2PHANDSHAKE", 64 << 20, 16 << 20, "tcp", "",
--                  "127.0.0.1:50051"))
--   s:put("key", "value")          --> 0
--   s:get("key")                   --> "value"
--
-- Errors follow the Lua convention: a failing call returns nil, a message
-- and the numeric status (mooncake's negative error code), so
-- `assert(s:put(k, v))` raises with the message.  Integers (sizes,
-- addresses, statuses) are Lua integers.  Values are Lua strings: any bytes.

local core = require "mooncake_core"

local M = {}

M.VERSION = core.mc_version_string()

--- The upstream name of status @p code ("OBJECT_NOT_FOUND", ...).
function M.status_name(code)
    return core.mc_status_name(code)
end

--- The description of status @p code.
function M.status_string(code)
    return core.mc_status_string(code)
end

-- nil, message, code for a negative status; the library's detail of the
-- last failure on this thread is added when there is one.
local function fail(code, what)
    local msg = ("%s: %s (%s, %d)"):format(what, core.mc_status_string(code),
                                           core.mc_status_name(code), code)
    local detail = core.mc_last_error_detail()
    if detail ~= nil and detail ~= "" then
        msg = msg .. ": " .. detail
    end
    return nil, msg, code
end

-- A status (0 or negative) as Lua results.
local function status(code, what)
    if code < 0 then
        return fail(code, what)
    end
    return code
end

local function check_keys(keys, what)
    if type(keys) ~= "table" then
        error(what .. ": a table of keys is expected", 3)
    end
end

-- Tensor dtype codes by name (mc.dtype.float32, ...), and the reverse.
M.dtype = {}
M.dtype_name = {}
for k, v in pairs(core) do
    if type(k) == "string" and math.type(v) == "integer" then
        local name = k:match("^MC_TENSOR_(%u[%u%d]*)$")
        if name and name ~= "HEADER_SIZE" and name ~= "MAX_DIMS" and name ~= "MAX_AXES"
            and not name:match("^DTYPE_") and not name:match("^LAYOUT")
            and not name:match("^WRITE") then
            M.dtype[name:lower()] = v
            M.dtype_name[v] = name:lower()
        end
    end
end
M.TENSOR_HEADER_SIZE = core.MC_TENSOR_HEADER_SIZE

--- The serialized header of a contiguous tensor of @p dtype (a code or a
--- name such as "float32") and @p shape (a sequence of integers): a string
--- of TENSOR_HEADER_SIZE bytes; the object is the header followed by the
--- data in row-major order.
function M.tensor_header(dtype, shape)
    if type(dtype) == "string" then
        dtype = M.dtype[dtype]
        if dtype == nil then
            return fail(core.MC_INVALID_PARAMS, "tensor_header")
        end
    end
    local r = core.tensor_encode(dtype, shape)
    if type(r) ~= "string" then
        return fail(r, "tensor_header")
    end
    return r
end

--- Decode the header of a whole serialized tensor object: a table
--- {dtype, dtype_name, ndim, shape, global_shape, data_offset, data_bytes}.
function M.tensor_decode(object)
    local r = core.tensor_decode(object)
    if type(r) ~= "table" then
        return fail(r, "tensor_decode")
    end
    r.dtype_name = M.dtype_name[r.dtype]
    return r
end

--- A replication configuration holding upstream's defaults: fields
--- replica_num, with_hard_pin, soft_pin_action, prefer_alloc_in_same_node,
--- ...; set_preferred_segment("host:port"), set_group_ids({...}).
M.ReplicateConfig = core.mc_replicate_config_t

local Store = {}
Store.__index = Store
Store.__name = "mooncake.Store"

--- A new store client; call setup() next.
function M.Store()
    return setmetatable({ _s = core.Store() }, Store)
end

--- Connect to the master and mount @p segment_size bytes of this process's
--- memory.  Returns 0, or nil, message, code.
function Store:setup(local_hostname, metadata_server, segment_size, buffer_size,
                     protocol, devices, master)
    return status(self._s:setup(local_hostname, metadata_server, segment_size,
                                buffer_size, protocol or "tcp", devices or "",
                                master), "setup")
end

--- Unmount this client's segments; its objects disappear.
function Store:close()
    return status(self._s:close(), "close")
end

--- "host:port" of this client's transfer engine ("" before setup).
function Store:get_hostname()
    return self._s:hostname()
end

--- Store @p value (a string) under @p key; an existing key keeps its value.
--- @p config (optional) is a ReplicateConfig.
function Store:put(key, value, config)
    return status(self._s:put(key, value, config), "put")
end

--- The value of @p key as a string.
function Store:get(key)
    local r = core.store_get(self._s, key)
    if type(r) ~= "string" then
        return fail(r, "get")
    end
    return r
end

--- 1 when @p key exists, 0 when it does not.
function Store:is_exist(key)
    return status(self._s:exist(key), "is_exist")
end

--- true when @p key exists, false when it does not.
function Store:exists(key)
    local r, msg, code = self:is_exist(key)
    if r == nil then
        return nil, msg, code
    end
    return r == 1
end

--- The size of @p key in bytes.
function Store:get_size(key)
    return status(self._s:get_size(key), "get_size")
end

--- Remove @p key (a leased key only with @p force).  Returns 0.
function Store:remove(key, force)
    return status(self._s:remove(key, force and 1 or 0), "remove")
end

--- Remove every key matching the POSIX extended regular expression;
--- returns the number removed.
function Store:remove_by_regex(regex, force)
    return status(core.store_remove_by_regex(self._s, regex, force and true or false),
                  "remove_by_regex")
end

--- Remove every key of this tenant; returns the number removed.
function Store:remove_all(force)
    return status(core.store_remove_all(self._s, force and true or false), "remove_all")
end

-- put_batch / upsert_batch / put_batch_commit: per key 0 or the negative status.
local function write_batch(self, keys, values, upsert, what, commit)
    check_keys(keys, what)
    local st, sts = core.store_put_batch(self._s, keys, values, upsert, commit)
    if st < 0 then
        -- the whole call failed (not set up, master unreachable): no key stored
        for i = 1, #sts do
            if sts[i] == 0 then
                return sts
            end
        end
        return fail(st, what)
    end
    return sts
end

--- Store several values; returns a table of per-key statuses (0 = stored).
function Store:put_batch(keys, values)
    return write_batch(self, keys, values, false, "put_batch")
end

--- Like put_batch, but existing keys get the new values.
function Store:upsert_batch(keys, values)
    return write_batch(self, keys, values, true, "upsert_batch")
end

--- Like put_batch, but the last key is the commit key: it is published only
--- once every other key is, and when it is not, the others this call stored
--- are removed again (mc_store_batch_put_parts_commit).  Every key must be
--- new (OBJECT_ALREADY_EXISTS otherwise); the commit value must not be empty.
--- Returns the per-key statuses; the last is 0 exactly when committed.
function Store:put_batch_commit(keys, values)
    return write_batch(self, keys, values, false, "put_batch_commit", true)
end

--- Read several keys: a table of values (false where the read failed) and
--- a table of per-key statuses (0, or the negative status).
function Store:get_batch(keys)
    check_keys(keys, "get_batch")
    local r = core.store_get_batch(self._s, keys)
    local values, codes = {}, {}
    for i = 1, #keys do
        if type(r[i]) == "string" then
            values[i], codes[i] = r[i], 0
        else
            values[i], codes[i] = false, r[i]
        end
    end
    return values, codes
end

--- Per key 1 (exists), 0 (absent) or the negative status.
function Store:batch_is_exist(keys)
    check_keys(keys, "batch_is_exist")
    local st, res = core.store_batch_exist(self._s, keys)
    if st < 0 then
        return fail(st, "batch_is_exist")
    end
    return res
end

--- Per key its size in bytes, or the negative status.
function Store:batch_get_size(keys)
    check_keys(keys, "batch_get_size")
    return core.store_batch_get_size(self._s, keys)
end

--- Remove several keys; per key 0 or the negative status.
function Store:batch_remove(keys, force)
    check_keys(keys, "batch_remove")
    local _, sts = core.store_batch_remove(self._s, keys, force and true or false)
    return sts
end

--- The replicas of @p key: a sequence of {status, kind, is_memory, is_nof, is_disk,
--- is_local_disk, addr, size, segment, protocol} as the master reports them.
--- kind is the C library's mc_replica_kind_t (upstream's ReplicaType):
--- is_local_disk for a record in a client's SSD-offload tier (LOCAL_DISK),
--- is_disk for one in the shared DFS tier (DISK).
function Store:get_replica_desc(key)
    local r = core.store_replicas(self._s, key)
    if type(r) ~= "table" then
        return fail(r, "get_replica_desc")
    end
    return r
end

--- A tensor object (header + data) stored under @p key: @p data is the
--- row-major contents as a string of exactly the expected size.
function Store:put_tensor(key, dtype, shape, data)
    local hdr, msg, code = M.tensor_header(dtype, shape)
    if hdr == nil then
        return nil, msg, code
    end
    local meta = core.tensor_decode(hdr .. data)
    if type(meta) ~= "table" then
        return fail(meta, "put_tensor")
    end
    return self:put(key, hdr .. data)
end

--- The tensor stored under @p key: its decoded header (see tensor_decode)
--- and its data as a string.
function Store:get_tensor(key)
    local obj, msg, code = self:get(key)
    if obj == nil then
        return nil, msg, code
    end
    local meta
    meta, msg, code = M.tensor_decode(obj)
    if meta == nil then
        return nil, msg, code
    end
    return meta, obj:sub(meta.data_offset + 1)
end

return M
