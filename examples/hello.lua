-- SPDX-License-Identifier: Apache-2.0
-- Hello world of the Lua bindings:
--   lua5.4 examples/hello.lua [MASTER_ADDR [METADATA_SERVER]]
-- against a running mooncake_master (default localhost:50051, P2P metadata).
local mc = require "mooncake"

local master = arg[1] or "localhost:50051"
local metadata = arg[2] or "P2PHANDSHAKE"

-- 1. Create the store and connect: 64 MiB of this process serve the cluster.
local s = mc.Store()
assert(s:setup("localhost", metadata, 64 * 1024 * 1024, 16 * 1024 * 1024, "tcp", "", master))

-- 2. Store data, 3. read it back.
assert(s:put("hello_key", "Hello, Mooncake Store!"))
print(assert(s:get("hello_key")))

-- 4. Clean up.
s:remove("hello_key")
s:close()
