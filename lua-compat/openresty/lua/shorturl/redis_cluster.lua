-- Redis Cluster routing for the module's RESP client (redis.lua): a key's
-- slot (CRC16/XMODEM of the key, or of its `{hash tag}`, mod 16384), the
-- master serving it from a slot map fetched with CLUSTER SLOTS, and the
-- cluster's redirections:
--
-- * `-MOVED <slot> <host:port>`: the slot has a new owner for good; the
--   command goes there at once, the map takes that slot, and a full refresh
--   runs in the background;
-- * `-ASK <slot> <host:port>`: the slot is being migrated and this key is
--   already on the target; the command goes there once, after ASKING, and
--   the map stays as it is;
-- * a node that cannot be reached (killed master, before or after its
--   replica's promotion): the map is refreshed at once (or, when a refresh
--   is under way or one that answered just ran, after it and at most
--   REFRESH_MIN_INTERVAL later: Cluster:remap) and the command is retried
--   once if the slot now has another owner.
--
-- At most MAX_REDIRECTS redirections per command. The map is per worker
-- (fetched by a timer at start, refreshed on the events above and in the
-- background once older than MAP_MAX_AGE; at most one refresh per
-- REFRESH_MIN_INTERVAL), each node has its own keepalive pool.
local redis = require("shorturl.redis")
local counters = require("shorturl.counters")
local bit = require("bit")

local band, bxor, lshift, rshift = bit.band, bit.bxor, bit.lshift, bit.rshift
local byte, find = string.byte, string.find
local now, update_time = ngx.now, ngx.update_time

local M = {}

local SLOTS = 16384
local MAX_REDIRECTS = 3
local REFRESH_MIN_INTERVAL = 0.1 -- seconds
local MAP_MAX_AGE = 30 -- seconds
local REFRESH_STUCK = 2 -- seconds

local CLUSTER_SLOTS = redis.command("CLUSTER", "SLOTS")

-- CRC16/XMODEM (polynomial 0x1021, initial 0), as Redis Cluster uses.
local TABLE = {}
for i = 0, 255 do
    local c = lshift(i, 8)
    for _ = 1, 8 do
        if band(c, 0x8000) ~= 0 then
            c = band(bxor(lshift(c, 1), 0x1021), 0xffff)
        else
            c = band(lshift(c, 1), 0xffff)
        end
    end
    TABLE[i] = c
end

local function crc16(s, i, j)
    local crc = 0
    for k = i, j do
        crc = band(bxor(lshift(crc, 8), TABLE[bxor(rshift(crc, 8), byte(s, k))]), 0xffff)
    end
    return crc
end
M.crc16 = crc16

-- The slot of `key`: only the part between the first `{` and the next
-- `}` when that part is not empty (a hash tag).
function M.slot(key)
    local i, j = 1, #key
    local open = find(key, "{", 1, true)
    if open then
        local close = find(key, "}", open + 1, true)
        if close and close > open + 1 then
            i, j = open + 1, close - 1
        end
    end
    return band(crc16(key, i, j), SLOTS - 1)
end

local Cluster = {}
Cluster.__index = Cluster

-- `spec.seeds`: the configured nodes ({ host, port }).
function M.new(spec)
    local c = setmetatable({
        prefix = spec.pool_prefix,
        nodes = {},
        seeds = {},
        map = nil, -- slot + 1 -> node
        masters = {},
        fetched = 0,
        last_try = -1,
        refreshing = false,
        queued = false,
        rr = nil, -- the subscriber's last node (a random start per worker)
    }, Cluster)
    for i, s in ipairs(spec.seeds) do
        c.seeds[i] = c:node(s.host, s.port)
    end
    return c
end

-- The node object of host:port (one per address, with its pool name).
function Cluster:node(host, port)
    local addr = (find(host, ":", 1, true) and ("[" .. host .. "]") or host) .. ":" .. port
    local n = self.nodes[addr]
    if not n then
        n = { host = host, port = tonumber(port), addr = addr, pool = self.prefix .. addr }
        self.nodes[addr] = n
    end
    return n
end

-- A CLUSTER SLOTS answer (from node `from`) as the new map.
function Cluster:load(v, from)
    local map, masters, seen = {}, {}, {}
    for _, r in ipairs(v) do
        local lo, hi, m = r[1], r[2], r[3]
        if type(lo) ~= "number" or type(hi) ~= "number" or type(m) ~= "table" or type(m[2]) ~= "number"
            or lo < 0 or hi >= SLOTS then
            return nil, "malformed CLUSTER SLOTS answer"
        end
        local host = m[1]
        if type(host) ~= "string" or host == "" or host == "?" then
            host = from.host -- "the node you asked", in Redis's words
        end
        local n = self:node(host, m[2])
        for s = lo + 1, hi + 1 do
            map[s] = n
        end
        if not seen[n] then
            seen[n] = true
            masters[#masters + 1] = n
        end
    end
    update_time()
    self.map, self.masters, self.fetched = map, masters, now()
    counters.inc("redis_slots")
    return true
end

-- Fetches the map from the first node that answers (the current masters,
-- then the seeds). Returns whether the map was replaced.
function Cluster:fetch(conn)
    local tried, err = {}, "no node to ask"
    local lists = { self.masters, self.seeds }
    for _, list in ipairs(lists) do
        for _, n in ipairs(list) do
            if not tried[n] then
                tried[n] = true
                local replies, e = redis.exec(conn, n, { CLUSTER_SLOTS })
                local v = replies and replies[1]
                if type(v) == "table" and not v.err and #v > 0 then
                    local ok, lerr = self:load(v, n)
                    if ok then
                        self.failing = false
                        return true
                    end
                    err = lerr
                else
                    err = e or (type(v) == "table" and v.err) or "empty CLUSTER SLOTS answer"
                end
            end
        end
    end
    -- The first failure in a row at warn, the next ones at info.
    ngx.log(self.failing and ngx.INFO or ngx.WARN, "shorturl: cannot fetch the redis cluster slot map: ", err)
    self.failing = true
    return false
end

-- A refresh now, unless one runs or ran within REFRESH_MIN_INTERVAL.
-- Returns whether the map was replaced, and whether a fetch ran.
function Cluster:refresh(conn)
    update_time()
    local t = now()
    -- A fetch whose request was aborted never clears its mark: one older
    -- than REFRESH_STUCK no longer holds the others back.
    if (self.refreshing and t - self.refreshing < REFRESH_STUCK) or t - self.last_try < REFRESH_MIN_INTERVAL then
        return false, false
    end
    self.refreshing, self.last_try = t, t
    local ok, replaced = pcall(self.fetch, self, conn)
    self.refreshing = false
    return ok and replaced, true
end

-- A refresh in a timer (off the request's path).
function Cluster:refresh_later(conn)
    if self.queued then
        return
    end
    self.queued = true
    local ok = ngx.timer.at(0, function(premature)
        self.queued = false
        if not premature then
            self:refresh(conn)
        end
    end)
    if not ok then
        self.queued = false
    end
end

-- Per-worker start: the first map.
function Cluster:start(conn)
    self:refresh_later(conn)
end

-- Phases where a request may wait (ngx.sleep yields).
local CAN_WAIT = { rewrite = true, access = true, content = true, timer = true, ssl_cert = true }

-- The first map, when a fetch is already under way (the worker's start
-- timer, or another request's): wait for it rather than fail. A request
-- that arrived while a new worker was fetching its map used to fail at once
-- ("no node known"), and fell back to the origin.
function Cluster:await_map(timeout_ms)
    if self.map or not CAN_WAIT[ngx.get_phase()] then
        return
    end
    update_time()
    local deadline = now() + timeout_ms / 1000
    while not self.map and self.refreshing and now() < deadline do
        ngx.sleep(0.002)
        update_time()
    end
end

-- After `node` could not be reached for `slot`: the slot's owner in a map
-- that no longer names `node`, or nil. A refresh held back by another one
-- (under way, or run less than REFRESH_MIN_INTERVAL ago and answered)
-- may have taken its map a moment before a replica's promotion: the
-- request waits for the one under way, or for the interval to pass, and
-- asks once more, rather than failing on a map about to be replaced (a
-- worker that fetched during a failover then failed its lookups for the
-- first 100 ms after the promotion). Never waits when no node answered
-- the last fetch (Redis down: the origin answers at once), and costs only
-- lookups on an unreachable node.
function Cluster:remap(conn, slot, node)
    local _, ran = self:refresh(conn)
    local again = self.map and self.map[slot]
    if again ~= node then
        return again
    end
    if ran or self.failing or not CAN_WAIT[ngx.get_phase()] then
        return nil
    end
    update_time()
    local deadline = now() + (conn.timeout_ms or 1000) / 1000
    while self.refreshing and now() < deadline do
        ngx.sleep(0.002)
        update_time()
    end
    again = self.map and self.map[slot]
    if again ~= node or self.failing then
        return again ~= node and again or nil
    end
    local wait = self.last_try + REFRESH_MIN_INTERVAL - now()
    if wait > 0 then
        ngx.sleep(wait)
    end
    self:refresh(conn)
    again = self.map and self.map[slot]
    return again ~= node and again or nil
end

-- "MOVED"/"ASK" and the target's host and port of the first redirection
-- among `replies`, else nil.
local function redirection(replies)
    for _, v in ipairs(replies) do
        if type(v) == "table" and v.err then
            local kind, host, port = v.err:match("^redis: (%u+) %d+ (%S+):(%d+)$")
            if kind == "MOVED" or kind == "ASK" then
                return kind, host:gsub("^%[(.*)%]$", "%1"), port
            end
        end
    end
end

-- The pipeline `cmds` on `key`'s master, following redirections.
function Cluster:run(conn, key, cmds, read_timeout_ms)
    local slot = M.slot(key) + 1
    if not self.map then
        self:refresh(conn)
        self:await_map(read_timeout_ms or conn.timeout_ms or 1000)
    elseif now() - self.fetched > MAP_MAX_AGE then
        self:refresh_later(conn)
    end
    local node = self.map and self.map[slot]
    if not node then
        -- A map taken during a failover may lack the slot: ask again.
        self:refresh(conn)
        node = self.map and self.map[slot]
        if not node then
            return nil, "redis cluster: no node known for slot " .. (slot - 1)
        end
    end
    local asking, retried = false, false
    for _ = 0, MAX_REDIRECTS do
        local replies, err = redis.exec(conn, node, cmds, asking, read_timeout_ms)
        if not replies then
            -- Unreachable: a failover may have moved the slot.
            if retried then
                return nil, err
            end
            retried = true
            local again = self:remap(conn, slot, node)
            if not again then
                return nil, err
            end
            node, asking = again, false
        else
            local kind, host, port = redirection(replies)
            if not kind then
                return replies
            end
            local target = self:node(host, port)
            if kind == "MOVED" then
                counters.inc("redis_moved")
                if self.map then
                    self.map[slot] = target
                end
                self:refresh_later(conn)
                asking = false
            else
                counters.inc("redis_ask")
                asking = true
            end
            node = target
        end
    end
    return nil, "redis cluster: too many redirections for slot " .. (slot - 1)
end

-- The next node to subscribe on: the seeds and the known masters in turn
-- (any node delivers every PUBLISH of the cluster).
function Cluster:pubsub_node()
    local list = {}
    local seen = {}
    for _, l in ipairs({ self.seeds, self.masters }) do
        for _, n in ipairs(l) do
            if not seen[n] then
                seen[n] = true
                list[#list + 1] = n
            end
        end
    end
    if #list == 0 then
        return nil, "no redis cluster node known"
    end
    self.rr = (self.rr or math.random(0, #list - 1)) % #list + 1
    return list[self.rr]
end

return M
