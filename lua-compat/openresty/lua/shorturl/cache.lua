-- The node's answer caches and what invalidation (protocol section 3.2)
-- needs from them: a per-worker LRU (resty.lrucache: no lock, no syscall)
-- in front of the node-wide lua_shared_dict, answers that carry their row
-- version and the time they were stored, per-worker tombstones, and this
-- worker's subscription state (driven by inval.lua). Every entry,
-- tombstone included, is keyed by (domain, code) (protocol 3.5): `key` is
-- proto.cache_key(domain, code), so an answer only ever serves its domain.
--
-- Rules (lua-compat/README.md, "Invalidation"):
-- * a message `<v> <code> <domain>` drops that key's entries older than
--   `v` and leaves a tombstone `key -> v` for cache.tombstone_ttl_ms: an answer
--   older than a tombstone is neither stored nor served;
-- * while this worker is not subscribed (since `down_since`: the last time
--   the connection was known alive), an entry is served at most
--   cache.unsubscribed_grace_ms past max(its store time, down_since), and
--   what is stored meanwhile lives at most that long;
-- * every (re)subscription empties this worker's LRU and starts a new
--   epoch: a lookup begun before it is not stored, and shared entries stored
--   before it are dropped when this worker reads them.
local proto = require("shorturl.proto")
local counters = require("shorturl.counters")

local now, update_time = ngx.now, ngx.update_time
local format, sub, find = string.format, string.sub, string.find
local max, min, tonumber = math.max, math.min, tonumber

local M = {}

local lru   -- per-worker resty.lrucache, nil when disabled
local dict  -- ngx.shared.shorturl_cache, nil when disabled
local tombs -- per-worker resty.lrucache: key -> newest announced version
local grace, tomb_ttl

-- This worker's subscription (set by inval.lua through subscribed() and
-- unsubscribed()). Not subscribed until the first subscription succeeds.
local down = true
local down_since = 0 -- last proof the subscription was alive
local down_until = 0 -- down_since + grace
local epoch = 0      -- +1 at every (re)subscription
local epoch_start = 0 -- wall time of the current subscription

-- True when the module caches anything (and so subscribes).
M.enabled = false

function M.init_worker(cfg)
    local lrucache = require("resty.lrucache")
    grace = cfg.cache.unsubscribed_grace_ms / 1000
    tomb_ttl = cfg.cache.tombstone_ttl_ms / 1000
    if cfg.cache.shared then
        dict = ngx.shared.shorturl_cache
    end
    if cfg.cache.lru then
        local err
        lru, err = lrucache.new(cfg.cache.lru_items)
        if not lru then
            ngx.log(ngx.ERR, "shorturl: lrucache: ", err)
        end
    end
    M.enabled = lru ~= nil or dict ~= nil
    if M.enabled then
        tombs = lrucache.new(cfg.cache.lru_items)
    end
    update_time()
    down_since = now()
    down_until = down_since + grace
end

-- True when a tombstone announces a newer version than `ans` carries.
local function superseded(key, ans)
    if not tombs or ans.kind == "unav" then
        return false
    end
    local tv = tombs:get(key)
    return tv ~= nil and ans.v < tv
end
M.superseded = superseded

-- A shared-dict value: "<fresh until>|<stored at>|<cached answer>".
local function parse_shared(s)
    local b1 = find(s, "|", 1, true)
    local b2 = find(s, "|", b1 + 1, true)
    return tonumber(sub(s, 1, b1 - 1)), tonumber(sub(s, b1 + 1, b2 - 1)), sub(s, b2 + 1)
end

-- A shared entry, when this worker may trust it; copied into the LRU.
local function from_shared(key, s)
    local fresh_until, at, cached = parse_shared(s)
    local t = now()
    local ttl = fresh_until - t
    if ttl <= 0 then
        return nil
    end
    if at < epoch_start then
        -- Stored before this worker's subscription: it may have missed a message.
        dict:delete(key)
        return nil
    end
    if down then
        local limit = max(at, down_since) + grace
        if t >= limit then
            return nil
        end
        ttl = min(ttl, limit - t)
    end
    local ans = proto.decode_cached(cached)
    if not ans then
        return nil
    end
    if superseded(key, ans) then
        dict:delete(key)
        return nil
    end
    ans.at = at
    if lru then
        lru:set(key, ans, ttl)
    end
    return ans
end

-- The answer cached for `key` in this worker or on this node, or nil.
-- The hot path: one LRU get and, while subscribed, one more test.
function M.get(key)
    if lru then
        local e = lru:get(key)
        if e and (not down or e.at >= down_since or now() < down_until) then
            return e
        end
    end
    if dict then
        local s = dict:get(key)
        if s then
            return from_shared(key, s)
        end
    end
    return nil
end

-- The current epoch: pass it to put() to store a lookup begun now.
function M.epoch()
    return epoch
end

-- Stores `ans` for `ttl` seconds, unless a resubscription happened since
-- the lookup began (`ep`) or a tombstone announces a newer version.
function M.put(key, ans, ttl, ep)
    if ep ~= epoch or superseded(key, ans) then
        return
    end
    if down then
        ttl = min(ttl, grace)
    end
    if ttl <= 0 then
        return
    end
    local t = now()
    ans.at = t
    if lru then
        lru:set(key, ans, ttl)
    end
    if dict then
        dict:set(key, format("%.3f|%.3f|%s", t + ttl, t, proto.encode(ans)), ttl)
    end
end

-- The version a cached answer holds (-1 for a failure: always dropped).
local function version_of(ans)
    return ans and ans.v or -1
end

-- A message `<v> <code> <domain>` (`key`: their cache key): tombstone,
-- then drop this worker's entry and the node's unless they already hold
-- version v or newer.
function M.invalidate(key, v)
    local tv = tombs:get(key)
    if not tv or tv < v then
        tombs:set(key, v, tomb_ttl)
    end
    if lru then
        local e, stale = lru:get(key)
        if e and version_of(e) < v then
            lru:delete(key)
            counters.inc("inval_drop_worker")
        elseif stale then
            lru:delete(key)
        end
    end
    if dict then
        local s = dict:get(key)
        if s then
            local _, _, cached = parse_shared(s)
            if version_of(proto.decode_cached(cached)) < v then
                dict:delete(key)
                counters.inc("inval_drop_node")
            end
        end
    end
end

-- The subscription is (re)established: nothing cached before is trusted.
function M.subscribed()
    update_time()
    if lru then
        lru:flush_all()
    end
    epoch = epoch + 1
    epoch_start = now()
    down = false
end

-- The subscription is lost; `since`: when it was last known alive.
function M.unsubscribed(since)
    if down then
        return
    end
    down = true
    down_since = since
    down_until = since + grace
end

-- Whether this worker is subscribed.
function M.is_subscribed()
    return not down
end

return M
