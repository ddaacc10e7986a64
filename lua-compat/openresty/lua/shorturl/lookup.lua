-- Lookups: the node's caches (cache.lua: per-worker LRU, then the
-- lua_shared_dict) -> Redis -> origin record endpoint, all keyed by (domain,
-- code) (protocol 3.5). Concurrent misses for one (domain, code) on a node
-- are coalesced with a shared-dict lock: the first request
-- (leader) looks up and publishes its answer under a token; the others wait
-- for it (the old "lock" counter). An answer older than an invalidation
-- that arrived meanwhile (a tombstone) is looked up once more, never stored.
local proto = require("shorturl.proto")
local redis = require("shorturl.redis")
local http = require("shorturl.http")
local counters = require("shorturl.counters")
local origins = require("shorturl.origins")
local cache = require("shorturl.cache")

local now, update_time = ngx.now, ngx.update_time
local floor, sub = math.floor, string.sub
local stat = counters.stat
local state = ngx.shared.shorturl_state

local M = {}

local cfg
local coalesce -- the node cache is on: misses are coalesced node-wide
local token_seq = 0

function M.init_worker(c)
    cfg = c
    coalesce = cfg.cache.shared
end

-- How long an answer may stay in the node's caches (Resolver::ttl_for).
local function ttl_for(ans, max_age)
    local c = cfg.cache
    local ttl
    if ans.kind == "found" then
        -- Expiry is checked on every answer, so a record may outlive its
        -- expiry here: from then on it answers 404 like a negative entry,
        -- for at most the negative TTL (as the Pingora edge).
        ttl = math.min(c.positive_ttl_secs,
            math.max(0, ans.exp - floor(now())) + c.negative_ttl_secs)
    elseif ans.kind == "neg" then
        ttl = c.negative_ttl_secs
    else
        return c.unavailable_ttl_ms / 1000
    end
    if max_age then
        ttl = math.min(ttl, max_age)
    end
    return ttl
end

-- A record bound to another domain than its key's is no link there (should
-- never happen): the negative `- 0` (Lookup::for_domain).
local function for_domain(ans, domain)
    if ans.kind == "found" and ans.domain ~= domain then
        ngx.log(ngx.WARN, "shorturl: record for ", domain, " names domain ", ans.domain, ": answered as - 0")
        return { kind = "neg", v = 0 }
    end
    return ans
end

-- `?domain=` as the Pingora edge writes it (OriginPool::fetch_record): a
-- name as it is, an IPv6 literal's brackets and colons percent-encoded.
local DOMAIN_ESCAPES = { ["["] = "%5B", ["]"] = "%5D", [":"] = "%3A" }

local function fetch_record(domain, code)
    local o = origins.select()
    if not o then
        return nil, nil, "no healthy origin"
    end
    local q = domain:gsub("[%[%]:]", DOMAIN_ESCAPES)
    local r, err = http.get(o, "/internal/v1/records/" .. code .. "?domain=" .. q, cfg.default_domain,
        cfg.origin.record_timeout_ms, cfg.origin.connect_timeout_ms, cfg.origin_auth)
    if not r then
        return nil, nil, err
    end
    origins.note_status(r.status, "/internal/v1/records/")
    if r.status ~= 200 and r.status ~= 404 then
        return nil, nil, "origin answered " .. r.status
    end
    local ans = proto.decode((r.body:gsub("%s+$", "")))
    if not ans or (r.status == 404 and ans.kind ~= "neg") then
        return nil, nil, "origin answer is malformed"
    end
    return for_domain(ans, domain), http.max_age(r.headers["cache-control"])
end

-- Redis, then the origin. Never fails: failure is an "unav" answer.
local function lookup(domain, code)
    local v, err = redis.get(cfg.redis_conn, proto.link_key(domain, code))
    if v then
        local ans = proto.decode(v)
        if ans then
            stat("redis_hit")
            return for_domain(ans, domain), "REDIS"
        end
        ngx.log(ngx.WARN, "shorturl: malformed record in redis for ", domain, "/", code)
        stat("redis_error")
    elseif v == false then
        stat("redis_miss")
    else
        ngx.log(ngx.INFO, "shorturl: redis lookup failed: ", err)
        stat("redis_error")
    end
    stat("origin_forward")
    local ans, max_age, ferr = fetch_record(domain, code)
    if ans then
        return ans, "ORIGIN", max_age
    end
    ngx.log(ngx.WARN, "shorturl: origin record fetch failed for ", domain, "/", code, ": ", ferr)
    stat("origin_error")
    return proto.unav(), "FAIL"
end

-- lookup(), once more when a message announced a newer version while it
-- ran (Redis already holds that version: the origin writes before it
-- publishes).
local function fresh_lookup(domain, code, key)
    local ok, ans, source, max_age = pcall(lookup, domain, code)
    if not ok then
        ngx.log(ngx.ERR, "shorturl: lookup failed: ", ans)
        return proto.unav(), "FAIL"
    end
    if cache.superseded(key, ans) then
        counters.inc("inval_superseded")
        ok, ans, source, max_age = pcall(lookup, domain, code)
        if not ok then
            ngx.log(ngx.ERR, "shorturl: lookup failed: ", ans)
            return proto.unav(), "FAIL"
        end
    end
    return ans, source, max_age
end

-- Looks (domain, code) up and stores the answer under `key` (cache.put
-- refuses what a resubscription or a tombstone made doubtful).
local function lookup_and_store(domain, code, key)
    local ep = cache.epoch()
    local ans, source, max_age = fresh_lookup(domain, code, key)
    cache.put(key, ans, ttl_for(ans, max_age), ep)
    return ans, source
end

-- How long followers wait for a leader: two lookups (a superseded answer
-- is looked up once more) and a margin.
local function lock_secs()
    return 2 * (cfg.redis.timeout_ms + cfg.origin.record_timeout_ms) / 1000 + 1
end

local function from_cache(cached)
    return cached, cached.kind == "unav" and "FAIL" or "HIT"
end

-- After a local miss: join an in-flight lookup of `code` on `domain` (a
-- normalised host; `key`: proto.cache_key(domain, code)) or lead one.
function M.resolve(domain, code, key)
    if not coalesce then
        -- No node cache (Redis-only mode, or LRU only): nothing to coalesce into.
        return lookup_and_store(domain, code, key)
    end
    local lock_key = "l:" .. key
    local exptime = lock_secs()
    for _ = 1, 3 do
        token_seq = token_seq + 1
        local token = ngx.worker.pid() .. ":" .. token_seq
        local ok = state:add(lock_key, token, exptime)
        if ok then
            -- The previous leader may have finished between our miss and the lock.
            local cached = cache.get(key)
            if cached then
                state:delete(lock_key)
                return from_cache(cached)
            end
            local ans, source = lookup_and_store(domain, code, key)
            state:set("r:" .. token, source .. " " .. proto.encode(ans), exptime)
            state:delete(lock_key)
            return ans, source
        end
        local leader = state:get(lock_key)
        if leader then
            stat("lock_get")
            local deadline = now() + exptime
            local pause = 0.001
            while true do
                local r = state:get("r:" .. leader)
                if r then
                    local sp = r:find(" ", 1, true)
                    local ans = proto.decode_cached(sub(r, sp + 1)) or proto.unav()
                    if ans.kind == "unav" then
                        stat("lock_error")
                    elseif cache.superseded(key, ans) then
                        -- This worker heard of a newer version than the
                        -- leader's answer: look it up itself.
                        counters.inc("inval_superseded")
                        return lookup_and_store(domain, code, key)
                    end
                    return ans, sub(r, 1, sp - 1)
                end
                update_time()
                if now() >= deadline or not state:get(lock_key) and not state:get("r:" .. leader) then
                    stat("lock_error")
                    return proto.unav(), "FAIL"
                end
                ngx.sleep(pause)
                pause = math.min(pause * 2, 0.01)
            end
        end
        -- The lock vanished between add and get: its answer is cached now.
        local cached = cache.get(key)
        if cached then
            return from_cache(cached)
        end
    end
    return lookup_and_store(domain, code, key)
end

return M
