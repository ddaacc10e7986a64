-- A Sentinel-managed master for the module's RESP client (redis.lua): the
-- master's address from `SENTINEL get-master-addr-by-name <name>`, asking
-- each Sentinel in turn (the one that answered first next time), kept per
-- worker for MASTER_TTL, and resolved again at once when the master cannot
-- be reached or answers `-READONLY` (a former master, now a replica); the
-- command is then retried once on the new master. At most one resolution
-- per RESOLVE_MIN_INTERVAL per worker, so an outage does not turn every
-- request into a Sentinel round trip.
local redis = require("shorturl.redis")
local counters = require("shorturl.counters")

local now, update_time = ngx.now, ngx.update_time
local find = string.find

local M = {}

local MASTER_TTL = 5 -- seconds
local RESOLVE_MIN_INTERVAL = 0.1 -- seconds

local Sentinel = {}
Sentinel.__index = Sentinel

local function node(prefix, host, port)
    local addr = (find(host, ":", 1, true) and ("[" .. host .. "]") or host) .. ":" .. port
    return { host = host, port = tonumber(port), addr = addr, pool = prefix .. addr }
end

-- `spec.sentinels` ({ host, port }), `spec.master_name`.
function M.new(spec)
    local s = setmetatable({
        prefix = spec.pool_prefix,
        name = spec.master_name,
        sentinels = {},
        master = nil,
        expires = 0,
        last_try = -1,
        -- Sentinels take no AUTH/SELECT of the data nodes.
        sconn = {
            mode = "sentinel",
            timeout_ms = spec.timeout_ms,
            connect_timeout_ms = math.min(spec.connect_timeout_ms, spec.timeout_ms),
            pool_size = 4,
            keepalive_ms = spec.keepalive_ms,
        },
        cmd = redis.command("SENTINEL", "get-master-addr-by-name", spec.master_name),
    }, Sentinel)
    for i, a in ipairs(spec.sentinels) do
        s.sentinels[i] = node(spec.pool_prefix .. "sentinel:", a.host, a.port)
    end
    return s
end

-- Asks the Sentinels; returns the master node or nil, err.
function Sentinel:resolve()
    local err = "no sentinel answered"
    for i, s in ipairs(self.sentinels) do
        local replies, e = redis.exec(self.sconn, s, { self.cmd })
        local v = replies and replies[1]
        if type(v) == "table" and type(v[1]) == "string" and tonumber(v[2]) then
            if i > 1 then
                table.remove(self.sentinels, i)
                table.insert(self.sentinels, 1, s)
            end
            counters.inc("redis_master")
            local m = self.master
            if not (m and m.host == v[1] and m.port == tonumber(v[2])) then
                m = node(self.prefix, v[1], v[2])
            end
            return m
        elseif v == false then
            err = "sentinel " .. s.addr .. " knows no master " .. self.name
        else
            err = "sentinel " .. s.addr .. ": " .. tostring(e or (type(v) == "table" and v.err) or "bad answer")
        end
    end
    return nil, err
end

-- The current master: the cached one unless expired or `force`d (at most
-- once per RESOLVE_MIN_INTERVAL); the last known one when no Sentinel
-- answers.
function Sentinel:current(force)
    update_time()
    local t = now()
    local m = self.master
    if m and not force and t < self.expires then
        return m
    end
    if m and t - self.last_try < RESOLVE_MIN_INTERVAL then
        return m
    end
    self.last_try = t
    local got, err = self:resolve()
    if got then
        if not (m and m.addr == got.addr) then
            ngx.log(ngx.WARN, "shorturl: redis master ", self.name, " is ", got.addr)
        end
        self.master, self.expires, self.failing = got, t + MASTER_TTL, false
        return got
    end
    -- The first failure in a row at warn, the next ones at info.
    ngx.log(self.failing and ngx.INFO or ngx.WARN, "shorturl: cannot resolve redis master ", self.name, ": ", err)
    self.failing = true
    if m then
        return m
    end
    return nil, err
end

local function readonly(replies)
    for _, v in ipairs(replies) do
        if type(v) == "table" and v.err and find(v.err, "^redis: READONLY") then
            return true
        end
    end
    return false
end

-- The pipeline `cmds` on the master, once more on a new master when it
-- failed or refused it as a replica.
function Sentinel:run(conn, _, cmds, read_timeout_ms)
    local m, err = self:current(false)
    if not m then
        return nil, err
    end
    local replies
    replies, err = redis.exec(conn, m, cmds, false, read_timeout_ms)
    if replies and not readonly(replies) then
        return replies
    end
    local again = self:current(true)
    if not again or again == m then
        return replies, err
    end
    return redis.exec(conn, again, cmds, false, read_timeout_ms)
end

-- The subscriber follows the master, resolved afresh for every attempt.
function Sentinel:pubsub_node()
    return self:current(true)
end

function Sentinel:start() end

return M
