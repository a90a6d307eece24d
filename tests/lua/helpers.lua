-- SPDX-License-Identifier: Apache-2.0
-- Test helpers of the busted specs: a real mooncake_master ($MC_MASTER_BIN)
-- on free loopback ports, started and stopped with bounded waits.
local M = {}

local function sh(cmd)
    local p = assert(io.popen(cmd))
    local out = p:read("a")
    p:close()
    return out
end

--- Poll @p cond until it returns a truthy value; error after @p timeout s.
function M.wait_until(cond, timeout, what)
    local deadline = os.time() + timeout
    while true do
        local v = cond()
        if v then
            return v
        end
        if os.time() > deadline then
            error(("timed out after %ds waiting for %s"):format(timeout, what), 2)
        end
        os.execute("sleep 0.05")
    end
end

--- Three ports that were free on 127.0.0.1 a moment ago.
function M.free_ports(n)
    local out = sh("/usr/bin/python3 -c 'import socket\n" ..
                   "ss=[socket.socket() for _ in range(" .. n .. ")]\n" ..
                   "[s.bind((\"127.0.0.1\",0)) for s in ss]\n" ..
                   "print(\" \".join(str(s.getsockname()[1]) for s in ss))'")
    local ports = {}
    for p in out:gmatch("%d+") do
        ports[#ports + 1] = tonumber(p)
    end
    assert(#ports == n, "cannot find free ports: " .. out)
    return ports
end

function M.port_accepts(port)
    return os.execute(("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>/dev/null"):format(port)) == true
end

local function alive(pid)
    return os.execute(("kill -0 %d 2>/dev/null"):format(pid)) == true
end

--- Start a master; returns {addr, metrics_port, pid, stop = function}.
function M.start_master(bin)
    bin = bin or os.getenv("MC_MASTER_BIN")
    assert(bin and bin ~= "", "MC_MASTER_BIN is not set; run the specs with `make check-lua`")
    local ports = M.free_ports(2)
    local log = os.tmpname()
    local pid = tonumber(sh(("%s --rpc_port=%d --rpc_address=127.0.0.1 --metrics_host=127.0.0.1 " ..
                             "--metrics_port=%d --default_kv_lease_ttl=500 >%s 2>&1 & echo $!")
                            :format(bin, ports[1], ports[2], log)))
    local m = { pid = pid, port = ports[1], metrics_port = ports[2], log = log,
                addr = ("127.0.0.1:%d"):format(ports[1]) }
    function m.stop()
        if alive(pid) then
            os.execute(("kill -TERM %d"):format(pid))
            local ok = pcall(M.wait_until, function() return not alive(pid) end, 10,
                             "the master to exit")
            if not ok then
                os.execute(("kill -KILL %d"):format(pid))
            end
        end
        os.remove(log)
    end
    local ok, err = pcall(M.wait_until, function()
        return (not alive(pid)) or (M.port_accepts(ports[1]) and M.port_accepts(ports[2]))
    end, 10, "the master to accept connections")
    if not ok or not alive(pid) then
        local f = io.open(log)
        local text = f and f:read("a") or ""
        if f then f:close() end
        m.stop()
        error("mooncake_master did not start: " .. tostring(err) .. "\n" .. text)
    end
    return m
end

return M
