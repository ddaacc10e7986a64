-- The short-link edge as an nginx/Lua module: the same routes, answers,
-- counters and access-log lines as the Pingora edge (edge/src/proxy.rs).
--
-- Lookup: per-worker LRU -> lua_shared_dict (node-wide) -> Redis -> origin
-- record endpoint. Concurrent misses for one code on a node are coalesced
-- with a shared-dict lock: the first request (leader) looks up and publishes
-- its answer under a token; the others wait for it (the old "lock" counter).
local proto = require("shorturl.proto")
local config = require("shorturl.config")
local redis = require("shorturl.redis")
local http = require("shorturl.http")
local json = require("shorturl.json")

local ngx = ngx
local var, header, now, update_time = ngx.var, ngx.header, ngx.now, ngx.update_time
local floor, format, sub = math.floor, string.format, string.sub
local NEG, UNAV = proto.NEG, proto.UNAV

local M = {}

local RETRY_AFTER = 1
local NOT_FOUND_BODY = '{"error":"not_found","message":"no such short link"}'

local cfg          -- validated config (set in init, inherited by workers)
local lru          -- per-worker resty.lrucache, nil when disabled
local cache_dict   -- ngx.shared.shorturl_cache, nil when disabled
local state        -- ngx.shared.shorturl_state: counters, locks, health
local limits       -- ngx.shared.shorturl_limits: per-IP windows
local rr = 0       -- per-worker round-robin position
local token_seq = 0

-- Counters of /shorturl_status (node-wide, like the Pingora process's).
local STATS = { "local_hit", "local_miss", "redis_hit", "redis_miss", "redis_error", "origin_forward",
    "origin_error", "lock_get", "lock_error" }

local function stat(name)
    state:incr("s:" .. name, 1, 0)
end

local function counter(name)
    return state:get("s:" .. name) or 0
end

function M.init(path)
    require("resty.core")
    local ok, c = pcall(config.load, path)
    if not ok then
        error("shorturl: " .. tostring(c), 0)
    end
    cfg = c
end

local function check_origins()
    local interval = cfg.origin.health_check_interval_ms
    for i, o in ipairs(cfg.origins) do
        -- Any HTTP answer means the process is up (as on the Pingora edge).
        local r = http.get(o, cfg.origin.health_check_path, cfg.default_domain, math.max(interval, 200),
            cfg.origin.connect_timeout_ms)
        state:set("down:" .. i, r == nil)
    end
end

function M.init_worker()
    if cfg.die_with_master then
        local ffi = require("ffi")
        pcall(ffi.cdef, "int prctl(int option, unsigned long arg2);")
        pcall(ffi.C.prctl, 1, 9) -- PR_SET_PDEATHSIG, SIGKILL
    end
    state = ngx.shared.shorturl_state
    limits = ngx.shared.shorturl_limits
    if cfg.cache.shared then
        cache_dict = ngx.shared.shorturl_cache
    end
    if cfg.cache.lru then
        local err
        lru, err = require("resty.lrucache").new(cfg.cache.lru_items)
        if not lru then
            ngx.log(ngx.ERR, "shorturl: lrucache: ", err)
        end
    end
    if ngx.worker.id() == 0 then
        local ok, err = ngx.timer.every(cfg.origin.health_check_interval_ms / 1000, function(premature)
            if not premature then
                check_origins()
            end
        end)
        if not ok then
            ngx.log(ngx.ERR, "shorturl: health check timer: ", err)
        end
    end
end

-- The next healthy origin, round robin; nil when all are down.
local function select_origin()
    local n = #cfg.origins
    for _ = 1, n do
        rr = rr % n + 1
        if not state:get("down:" .. rr) then
            return cfg.origins[rr]
        end
    end
    return nil
end

---------------------------------------------------------------- responses

local function finish(body)
    if body ~= "" and ngx.req.get_method() ~= "HEAD" then
        ngx.print(body)
    else
        ngx.send_headers()
    end
    return ngx.exit(ngx.HTTP_OK)
end

local function json_response(status, body, cache_control, retry_after)
    ngx.status = status
    header["Content-Type"] = "application/json"
    header["Content-Length"] = #body
    header["Cache-Control"] = cache_control
    if retry_after then
        header["Retry-After"] = retry_after
    end
    return finish(body)
end

local function error_response(status, kind, message, retry_after)
    local body = '{"error":' .. json.encode(kind) .. ',"message":' .. json.encode(message) .. "}"
    return json_response(status, body, "no-store", retry_after)
end

local function not_found()
    return json_response(404, NOT_FOUND_BODY, cfg.redirect.not_found_cache_control)
end

local function redirect(url)
    ngx.status = cfg.redirect.status
    header["Location"] = url
    header["Content-Length"] = 0
    header["Cache-Control"] = cfg.redirect.cache_control
    return finish("")
end

---------------------------------------------------------------- caches

local function local_get(code)
    if lru then
        local v = lru:get(code)
        if v then
            return v
        end
    end
    if cache_dict then
        local s = cache_dict:get(code)
        if s then
            local bar = s:find("|", 1, true)
            local ttl = tonumber(sub(s, 1, bar - 1)) - now()
            local ans = proto.decode_cached(sub(s, bar + 1))
            if ans and ttl > 0 then
                if lru then
                    lru:set(code, ans, ttl)
                end
                return ans
            end
        end
    end
    return nil
end

local function local_put(code, ans, ttl)
    if ttl <= 0 then
        return
    end
    if lru then
        lru:set(code, ans, ttl)
    end
    if cache_dict then
        cache_dict:set(code, format("%.3f|%s", now() + ttl, proto.encode(ans)), ttl)
    end
end

-- How long an answer may stay in the node's caches (Resolver::ttl_for).
local function ttl_for(ans, max_age)
    local c = cfg.cache
    local ttl
    if ans.kind == "found" then
        ttl = math.min(c.positive_ttl_secs, math.max(0, ans.exp - floor(now())))
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

---------------------------------------------------------------- lookups

local function fetch_record(code)
    local o = select_origin()
    if not o then
        return nil, nil, "no healthy origin"
    end
    local r, err = http.get(o, "/internal/v1/records/" .. code, cfg.default_domain, cfg.origin.record_timeout_ms,
        cfg.origin.connect_timeout_ms)
    if not r then
        return nil, nil, err
    end
    if r.status ~= 200 and r.status ~= 404 then
        return nil, nil, "origin answered " .. r.status
    end
    local ans = proto.decode((r.body:gsub("%s+$", "")))
    if not ans or (r.status == 404 and ans ~= NEG) then
        return nil, nil, "origin answer is malformed"
    end
    return ans, http.max_age(r.headers["cache-control"])
end

-- Redis, then the origin. Never fails: failure is UNAV.
local function lookup(code)
    local v, err = redis.get(cfg.redis_conn, proto.link_key(code))
    if v then
        local ans = proto.decode(v)
        if ans then
            stat("redis_hit")
            return ans, "REDIS"
        end
        ngx.log(ngx.WARN, "shorturl: malformed record in redis for ", code)
        stat("redis_error")
    elseif v == false then
        stat("redis_miss")
    else
        ngx.log(ngx.INFO, "shorturl: redis lookup failed: ", err)
        stat("redis_error")
    end
    stat("origin_forward")
    local ans, max_age, ferr = fetch_record(code)
    if ans then
        return ans, "ORIGIN", max_age
    end
    ngx.log(ngx.WARN, "shorturl: origin record fetch failed for ", code, ": ", ferr)
    stat("origin_error")
    return UNAV, "FAIL"
end

local function lock_secs()
    return (cfg.redis.timeout_ms + cfg.origin.record_timeout_ms) / 1000 + 1
end

-- After a local miss: join an in-flight lookup of `code` or lead one.
local function resolve(code)
    if not cache_dict then
        -- Redis-only mode: no node cache, nothing to coalesce into.
        local ans, source, max_age = lookup(code)
        if lru then
            local_put(code, ans, ttl_for(ans, max_age))
        end
        return ans, source
    end
    local lock_key = "l:" .. code
    local exptime = lock_secs()
    for _ = 1, 3 do
        token_seq = token_seq + 1
        local token = ngx.worker.pid() .. ":" .. token_seq
        local ok = state:add(lock_key, token, exptime)
        if ok then
            -- The previous leader may have finished between our miss and the lock.
            local cached = local_get(code)
            if cached then
                state:delete(lock_key)
                return cached, cached == UNAV and "FAIL" or "HIT"
            end
            local pok, ans, source, max_age = pcall(lookup, code)
            if not pok then
                ngx.log(ngx.ERR, "shorturl: lookup failed: ", ans)
                ans, source, max_age = UNAV, "FAIL", nil
            end
            local_put(code, ans, ttl_for(ans, max_age))
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
                    local ans = proto.decode_cached(sub(r, sp + 1)) or UNAV
                    if ans == UNAV then
                        stat("lock_error")
                    end
                    return ans, sub(r, 1, sp - 1)
                end
                update_time()
                if now() >= deadline or not state:get(lock_key) and not state:get("r:" .. leader) then
                    stat("lock_error")
                    return UNAV, "FAIL"
                end
                ngx.sleep(pause)
                pause = math.min(pause * 2, 0.01)
            end
        end
        -- The lock vanished between add and get: its answer is cached now.
        local cached = local_get(code)
        if cached then
            return cached, cached == UNAV and "FAIL" or "HIT"
        end
    end
    return lookup(code)
end

---------------------------------------------------------------- limits

local function window_key(prefix, ip)
    return prefix .. ip .. ":" .. floor(now())
end

local function unknown_exceeded(ip)
    local max = cfg.limits.unknown_per_ip_per_sec
    return max > 0 and (limits:get(window_key("u:", ip)) or 0) >= max
end

local function count_unknown(ip)
    if cfg.limits.unknown_per_ip_per_sec > 0 then
        limits:incr(window_key("u:", ip), 1, 0, 2)
    end
end

local function allow_creation(ip)
    local max = cfg.limits.creations_per_ip_per_sec
    return max == 0 or (limits:incr(window_key("c:", ip), 1, 0, 2) or 0) <= max
end

local function too_many(message)
    var.su_outcome = "LIMIT"
    return error_response(429, "rate_limited", message, RETRY_AFTER)
end

---------------------------------------------------------------- routes

-- The request's domain: normalised Host (or absolute-form authority); nil
-- when absent or malformed, which resolves nothing (as at the origin).
local function request_host()
    local h = var.http_host
    if h then
        return proto.normalize_host(h)
    end
    local authority = (var.request_line or ""):match("^%S+%s+%a[%w+.-]*://([^/?#%s]*)")
    if authority then
        return proto.normalize_host(authority)
    end
    return nil
end

local OUTCOME_OF = { found = "HIT", neg = "NEG", unav = "FAIL" }

local function redirect_or_404(code, host)
    local ip = var.remote_addr
    local ans = local_get(code)
    if ans then
        stat("local_hit")
        var.su_outcome = OUTCOME_OF[ans.kind]
        if ans.kind ~= "found" and unknown_exceeded(ip) then
            return too_many("too many requests for unknown links")
        end
    else
        stat("local_miss")
        if unknown_exceeded(ip) then
            return too_many("too many requests for unknown links")
        end
        local source
        ans, source = resolve(code)
        var.su_outcome = source
    end
    if ans.kind == "found" and ans.exp > floor(now()) and host == ans.domain then
        return redirect(ans.url)
    elseif ans == UNAV then
        return error_response(503, "unavailable", "link lookup temporarily unavailable", RETRY_AFTER)
    end
    count_unknown(ip)
    return not_found()
end

local function forward(method, path)
    if method == "POST" and sub(path, 1, 13) == "/api/v1/links" then
        if not allow_creation(var.remote_addr) then
            return too_many("too many creations")
        end
    end
    var.su_outcome = "FWD"
    local o = select_origin()
    if not o then
        stat("origin_error")
        return error_response(503, "unavailable", "no origin available", RETRY_AFTER)
    end
    stat("origin_forward")
    var.su_upstream = o.proxy
    return ngx.exec("@shorturl_origin")
end

local function status()
    local mysql, issuer, reachable = json.null, json.null, false
    local o = select_origin()
    if o then
        local r, err = http.get(o, "/shorturl_status", cfg.default_domain, cfg.origin.status_timeout_ms,
            cfg.origin.connect_timeout_ms)
        if r and r.status == 200 then
            local v = json.decode(r.body)
            if v ~= nil then
                reachable = true
                if type(v) == "table" then
                    mysql = v.mysql == nil and json.null or v.mysql
                    issuer = v.issuer == nil and json.null or v.issuer
                end
            end
        else
            ngx.log(ngx.INFO, "shorturl: origin status unavailable: ", err or r.status)
        end
    end
    local c = counter
    local body = format('{"protocol":1,"service":"edge","local":{"hit":%d,"miss":%d},'
        .. '"redis":{"hit":%d,"miss":%d,"error":%d},"origin":{"forward":%d,"error":%d},'
        .. '"lock":{"get":%d,"error":%d},"mysql":%s,"issuer":%s,"origin_reachable":%s}',
        c("local_hit"), c("local_miss"), c("redis_hit"), c("redis_miss"), c("redis_error"),
        c("origin_forward"), c("origin_error"), c("lock_get"), c("lock_error"),
        json.encode(mysql), json.encode(issuer), reachable and "true" or "false")
    return json_response(200, body, "no-store")
end

local function header_bytes()
    local total = 0
    for k, v in pairs(ngx.req.get_headers(0, true)) do
        if type(v) == "table" then
            for _, one in ipairs(v) do
                total = total + #k + #one + 4
            end
        else
            total = total + #k + #v + 4
        end
    end
    return total
end

-- Routes one request (first match wins), like Edge::request_filter.
local function route(host_known, host)
    local uri = var.request_uri
    local method = ngx.req.get_method()
    var.su_outcome = "LOCAL"
    if uri == nil then
        var.su_outcome = "BAD"
        return error_response(400, "bad_request", "malformed request")
    end
    -- Absolute-form: keep the path and query only (Pingora's path_and_query).
    local rest = uri:match("^%a[%w+.-]*://[^/]*(.*)$")
    if rest then
        uri = rest == "" and "/" or rest
    end
    if #uri > cfg.limits.max_uri_bytes then
        var.su_outcome = "BAD"
        return error_response(414, "uri_too_long", "request URI too long")
    end
    if header_bytes() > cfg.limits.max_header_bytes then
        var.su_outcome = "BAD"
        return error_response(431, "headers_too_large", "request headers too large")
    end
    local path = uri:match("^[^?]*")
    var.su_path = path
    local get_or_head = method == "GET" or method == "HEAD"
    if get_or_head and path == "/shorturl_status" then
        return status()
    elseif get_or_head and path == "/healthz" then
        return json_response(200, '{"status":"ok"}', "no-store")
    end
    local code = proto.code_from_path(path)
    if code then
        if not get_or_head then
            var.su_outcome = "BAD"
            return error_response(405, "method_not_allowed", "only GET and HEAD resolve a short link")
        end
        if not host_known then
            host = request_host()
        end
        return redirect_or_404(code, host)
    end
    if path == "/api" or sub(path, 1, 5) == "/api/" then
        return forward(method, path)
    end
    var.su_outcome = "BAD"
    return not_found()
end

-- content_by_lua of `location /`.
function M.handle()
    return route(false)
end

-- error_page 400: nginx refuses some Hosts the Pingora edge reads as merely
-- invalid (`a..b`, `a/b`, a missing Host on HTTP/1.1, duplicates). Answer
-- what the Pingora edge answers: route with no usable Host.
function M.bad_request()
    return route(true, nil)
end

-- error_page 502/504 of the proxied API location.
function M.origin_failed()
    stat("origin_error")
    var.su_outcome = "FWD"
    return error_response(502, "bad_gateway", "origin failed to answer", RETRY_AFTER)
end

---------------------------------------------------------------- log & metrics

local BUCKETS = { 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0 }
local OUTCOMES = { "HIT", "NEG", "REDIS", "ORIGIN", "FAIL", "BAD", "LIMIT", "FWD", "LOCAL" }

-- log_by_lua: the access-log fields the Pingora edge writes, and the latency
-- histogram behind /metrics.
function M.log()
    update_time()
    local t = now()
    local took = math.max(0, t - ngx.req.start_time())
    local outcome = var.su_outcome
    if outcome == nil or outcome == "" then
        outcome = "LOCAL"
    end
    var.su_ms = format("%d", floor(t * 1000))
    var.su_us = format("%dus", floor(took * 1e6))
    local path = var.su_path
    if path == nil or path == "" then
        path = ((var.request_uri or ""):match("^[^?]*"))
    end
    -- Up to 256 bytes, control characters and spaces as '?'.
    var.su_path = sub(path, 1, 256):gsub("[%c ]", "?")
    local b = #BUCKETS + 1
    for i, le in ipairs(BUCKETS) do
        if took <= le then
            b = i
            break
        end
    end
    state:incr("h:" .. outcome .. ":" .. b, 1, 0)
    state:incr("h:" .. outcome .. ":sum", took, 0)
end

-- Prometheus text with the Pingora edge's metric names.
function M.metrics()
    local out = {
        "# HELP shorturl_edge_status_total The /shorturl_status counters, by dimension and result.",
        "# TYPE shorturl_edge_status_total counter",
    }
    for _, s in ipairs(STATS) do
        local dim, res = s:match("^(%a+)_(%a+)$")
        out[#out + 1] = format('shorturl_edge_status_total{dimension="%s",result="%s"} %d', dim, res, counter(s))
    end
    out[#out + 1] = "# HELP shorturl_edge_request_duration_seconds Time to answer a request, by lookup outcome."
    out[#out + 1] = "# TYPE shorturl_edge_request_duration_seconds histogram"
    for _, o in ipairs(OUTCOMES) do
        local cum = 0
        for i = 1, #BUCKETS + 1 do
            cum = cum + (state:get("h:" .. o .. ":" .. i) or 0)
            local le = BUCKETS[i] and format("%g", BUCKETS[i]) or "+Inf"
            out[#out + 1] = format('shorturl_edge_request_duration_seconds_bucket{outcome="%s",le="%s"} %d', o, le,
                cum)
        end
        out[#out + 1] = format('shorturl_edge_request_duration_seconds_sum{outcome="%s"} %.9g', o,
            state:get("h:" .. o .. ":sum") or 0)
        out[#out + 1] = format('shorturl_edge_request_duration_seconds_count{outcome="%s"} %d', o, cum)
    end
    local body = table.concat(out, "\n") .. "\n"
    ngx.status = 200
    header["Content-Type"] = "text/plain; version=0.0.4"
    header["Content-Length"] = #body
    return finish(body)
end

return M
