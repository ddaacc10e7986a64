-- The invalidation subscriber (protocol section 3.2): every worker holds
-- its own subscription to su:1:inval on its own Redis connection, in a
-- timer, and applies each `<version> <code> <domain>` (protocol 3.5) to its
-- LRU and to the shared dict (cache.invalidate). Per worker rather than one
-- agent feeding the others through the shared dict: a message reaches each
-- worker's LRU the moment it arrives (no polling, no lock on the hit
-- path), and each worker's subscription state covers exactly the entries
-- it serves.
--
-- The connection is watched: PING after `ping_every` of silence, and no
-- frame at all for `dead_after` means it is gone (a cut without a reset);
-- the disconnect then dates from the last frame. Reconnects back off from
-- 50 ms to 1 s (jittered).
local redis = require("shorturl.redis")
local proto = require("shorturl.proto")
local cache = require("shorturl.cache")
local counters = require("shorturl.counters")
local pages = require("shorturl.pages")

local now, update_time = ngx.now, ngx.update_time
local min, max, floor = math.min, math.max, math.floor
local state = ngx.shared.shorturl_state

local M = {}

local cfg
local ping_every, dead_after -- seconds
local FRAME_TIMEOUT_MS = 1000 -- rest of a frame once its first byte arrived
local BACKOFF_MIN, BACKOFF_MAX = 0.05, 1

local PING = "*1\r\n$4\r\nPING\r\n"

-- Whether this worker is subscribed, for the node-wide gauge.
local function publish_state(up)
    state:set("inval:sub:" .. ngx.worker.id(), up and 1 or 0)
end

-- Connects and subscribes (single: the server; sentinel: the master as
-- the Sentinels name it now; cluster: the next node in turn, since any
-- node delivers every message); returns the socket and the node's
-- host:port, or nil, err.
local function subscribe()
    local r = cfg.redis_conn
    local node, nerr = redis.pubsub_node(r)
    if not node then
        return nil, nerr
    end
    local where = node.host .. ":" .. node.port
    local sock = ngx.socket.tcp()
    sock:settimeouts(cfg.redis.connect_timeout_ms, FRAME_TIMEOUT_MS, FRAME_TIMEOUT_MS)
    local ok, err = sock:connect(node.host, node.port)
    if not ok then
        return nil, "connect " .. where .. ": " .. tostring(err)
    end
    local req, setup = redis.setup_commands(r, false)
    req[#req + 1] = redis.command("SUBSCRIBE", proto.INVAL_CHANNEL)
    ok, err = sock:send(req)
    if not ok then
        sock:close()
        return nil, where .. ": " .. tostring(err)
    end
    for _ = 1, setup do
        local v, e = redis.read_reply(sock)
        if v == nil then
            sock:close()
            return nil, where .. ": " .. tostring(e)
        end
    end
    local v, e = redis.read_reply(sock)
    if type(v) ~= "table" or v[1] ~= "subscribe" then
        sock:close()
        return nil, where .. ": " .. tostring(e or "unexpected answer to SUBSCRIBE")
    end
    ngx.log(ngx.INFO, "shorturl: subscribed to ", proto.INVAL_CHANNEL, " on ", where)
    return sock, where
end

local function on_message(payload)
    local v, code, domain = proto.decode_inval(payload)
    if not v then
        counters.inc("inval_invalid")
        ngx.log(ngx.WARN, "shorturl: malformed invalidation message: ", payload:sub(1, 64))
        return
    elseif not domain then
        -- `<version> <code>`: still published during an upgrade for edges
        -- of the previous version; the same change comes with its domain.
        counters.inc("inval_legacy")
        ngx.log(ngx.DEBUG, "shorturl: legacy invalidation message ignored: ", payload)
        return
    end
    cache.invalidate(proto.cache_key(domain, code), v)
    -- Pages are purged by code, on every domain (their keys carry the host).
    pages.purge(code)
    counters.inc("inval_applied")
end

-- The next frame; nil, "idle" when nothing arrived within `ping_every`.
local function next_frame(sock)
    sock:settimeout(floor(ping_every * 1000))
    local line, err, partial = sock:receive("*l")
    if not line then
        if err ~= "timeout" then
            return nil, err
        elseif partial == nil or partial == "" then
            return nil, "idle"
        end
        -- A frame began: finish its first line.
        sock:settimeout(FRAME_TIMEOUT_MS)
        local rest
        rest, err = sock:receive("*l")
        if not rest then
            return nil, err
        end
        line = partial .. rest
    end
    sock:settimeout(FRAME_TIMEOUT_MS)
    return redis.read_value(sock, line)
end

-- Reads messages until the connection fails; returns when it was last
-- known alive and why it ended.
local function listen(sock)
    update_time()
    local last_seen = now()
    local pinged = false
    while not ngx.worker.exiting() do
        local frame, err = next_frame(sock)
        update_time()
        if frame ~= nil then
            last_seen = now()
            pinged = false
            if type(frame) == "table" and frame[1] == "message" and type(frame[3]) == "string" then
                on_message(frame[3])
            end
        elseif err == "idle" then
            local quiet = now() - last_seen
            if quiet >= dead_after then
                return last_seen, "no answer to PING for " .. floor(quiet * 1000) .. " ms"
            elseif not pinged then
                local ok, serr = sock:send(PING)
                if not ok then
                    return now(), "send: " .. tostring(serr)
                end
                pinged = true
            end
        else
            -- Closed or broken: it was alive until now.
            return now(), tostring(err)
        end
    end
    return now(), "worker exiting"
end

local function run(premature)
    if premature then
        return
    end
    local backoff = BACKOFF_MIN
    local failures = 0
    while not ngx.worker.exiting() do
        local sock, what = subscribe() -- the node's host:port, or why not
        if sock then
            cache.subscribed()
            pages.flush()
            publish_state(true)
            counters.inc("inval_subscriptions")
            backoff, failures = BACKOFF_MIN, 0
            local since, why = listen(sock)
            sock:close()
            cache.unsubscribed(since)
            publish_state(false)
            if not ngx.worker.exiting() then
                ngx.log(ngx.WARN, "shorturl: invalidation subscription on ", what, " lost (", why, "); reconnecting")
            end
        else
            -- The first failure in a row at warn, the retries at info.
            failures = failures + 1
            ngx.log(failures == 1 and ngx.WARN or ngx.INFO, "shorturl: cannot subscribe to ", proto.INVAL_CHANNEL,
                ": ", what)
            ngx.sleep(backoff * (0.75 + math.random() / 2))
            backoff = min(backoff * 2, BACKOFF_MAX)
        end
    end
end

-- Starts this worker's subscriber (only when the module caches anything).
function M.init_worker(c)
    cfg = c
    publish_state(false)
    if not cache.enabled then
        return
    end
    -- PING after a fifth of the grace (at most 1 s), so a silent cut is
    -- noticed well within it.
    ping_every = max(0.05, min(1, cfg.cache.unsubscribed_grace_ms / 5000))
    dead_after = 3 * ping_every
    math.randomseed(ngx.worker.pid() * 1000 + floor(now() * 1000) % 1000)
    local ok, err = ngx.timer.at(0, run)
    if not ok then
        ngx.log(ngx.ERR, "shorturl: invalidation subscriber timer: ", err)
    end
end

-- Workers subscribed right now (node-wide), for /metrics.
function M.subscribed_workers()
    local n = 0
    for i = 0, ngx.worker.count() - 1 do
        n = n + (state:get("inval:sub:" .. i) or 0)
    end
    return n
end

return M
