-- The access-log fields the Pingora edge writes and the Prometheus text
-- (names of protocol section 7, as on the Pingora edge and the origin).
local counters = require("shorturl.counters")
local pages = require("shorturl.pages")
local clients = require("shorturl.clients")
local respond = require("shorturl.respond")
local inval = require("shorturl.inval")
local clicks_stats = require("shorturl.clicks_stats")

local var, header, now, update_time = ngx.var, ngx.header, ngx.now, ngx.update_time
local floor, format, sub = math.floor, string.format, string.sub
local state = ngx.shared.shorturl_state

local M = {}

local BUCKETS = { 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0 }
local OUTCOMES = { "HIT", "NEG", "REDIS", "ORIGIN", "FAIL", "BAD", "LIMIT", "FWD", "LOCAL", "PAGE" }

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
    local client = var.su_client
    if client == "" then
        local ok, c = pcall(clients.client)
        client = ok and c or var.remote_addr
    end
    var.su_client = clients.logged(client)
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

-- Prometheus text, named as docs/protocol.md section 7 says (the same
-- names as the Pingora edge and the origin).
function M.metrics()
    local out = {
        "# HELP shorturl_status_total The /shorturl_status counters, by dimension and result.",
        "# TYPE shorturl_status_total counter",
    }
    for _, s in ipairs(counters.STATS) do
        local dim, res = s:match("^(%a+)_(%a+)$")
        out[#out + 1] = format('shorturl_status_total{dimension="%s",result="%s"} %d', dim, res, counters.get(s))
    end
    out[#out + 1] = "# HELP shorturl_request_duration_seconds Time to answer a request, by lookup outcome."
    out[#out + 1] = "# TYPE shorturl_request_duration_seconds histogram"
    for _, o in ipairs(OUTCOMES) do
        local cum = 0
        for i = 1, #BUCKETS + 1 do
            cum = cum + (state:get("h:" .. o .. ":" .. i) or 0)
            local le = BUCKETS[i] and format("%g", BUCKETS[i]) or "+Inf"
            out[#out + 1] = format('shorturl_request_duration_seconds_bucket{outcome="%s",le="%s"} %d', o, le, cum)
        end
        out[#out + 1] = format('shorturl_request_duration_seconds_sum{outcome="%s"} %.9g', o,
            state:get("h:" .. o .. ":sum") or 0)
        out[#out + 1] = format('shorturl_request_duration_seconds_count{outcome="%s"} %d', o, cum)
    end
    out[#out + 1] = "# HELP shorturl_limits_refused_total Requests answered 429 by a per-client limit, by limit."
    out[#out + 1] = "# TYPE shorturl_limits_refused_total counter"
    for _, l in ipairs({ "unknown", "creations", "refused_creations" }) do
        out[#out + 1] = format('shorturl_limits_refused_total{limit="%s"} %d', l, counters.metric("limit:" .. l))
    end
    out[#out + 1] = "# HELP shorturl_limits_evictions_total Entries evicted from the bounded per-client limits table."
    out[#out + 1] = "# TYPE shorturl_limits_evictions_total counter"
    out[#out + 1] = format("shorturl_limits_evictions_total %d", counters.metric("evictions"))
    out[#out + 1] = "# HELP shorturl_inval_subscribed Workers subscribed to the invalidation channel right now."
    out[#out + 1] = "# TYPE shorturl_inval_subscribed gauge"
    out[#out + 1] = format("shorturl_inval_subscribed %d", inval.subscribed_workers())
    out[#out + 1] = "# HELP shorturl_inval_subscriptions_total Subscriptions established (each one empties that "
        .. "worker's cache)."
    out[#out + 1] = "# TYPE shorturl_inval_subscriptions_total counter"
    out[#out + 1] = format("shorturl_inval_subscriptions_total %d", counters.metric("inval_subscriptions"))
    out[#out + 1] = "# HELP shorturl_inval_messages_total Invalidation messages received, summed over workers "
        .. "(legacy: the form without a domain, ignored)."
    out[#out + 1] = "# TYPE shorturl_inval_messages_total counter"
    for _, r in ipairs({ "applied", "invalid", "legacy" }) do
        out[#out + 1] = format('shorturl_inval_messages_total{result="%s"} %d', r, counters.metric("inval_" .. r))
    end
    out[#out + 1] = "# HELP shorturl_inval_dropped_total Cache entries dropped by a message, by cache "
        .. "(worker: a worker's LRU; node: the shared dict)."
    out[#out + 1] = "# TYPE shorturl_inval_dropped_total counter"
    for _, c in ipairs({ "worker", "node" }) do
        out[#out + 1] = format('shorturl_inval_dropped_total{cache="%s"} %d', c, counters.metric("inval_drop_" .. c))
    end
    out[#out + 1] = "# HELP shorturl_inval_superseded_total Lookups whose answer was older than a message received "
        .. "meanwhile (looked up once more, not stored)."
    out[#out + 1] = "# TYPE shorturl_inval_superseded_total counter"
    out[#out + 1] = format("shorturl_inval_superseded_total %d", counters.metric("inval_superseded"))
    out[#out + 1] = "# HELP shorturl_edge_pages_cache_total Page requests (QR codes, previews) by proxy_cache result."
    out[#out + 1] = "# TYPE shorturl_edge_pages_cache_total counter"
    for _, r in ipairs(pages.RESULTS) do
        out[#out + 1] = format('shorturl_edge_pages_cache_total{result="%s"} %d', r, counters.metric("pages_" .. r))
    end
    out[#out + 1] = "# HELP shorturl_edge_pages_cache_removed_total Page-cache generations bumped: purge (a code, "
        .. "per worker and message), flush (everything, per subscription)."
    out[#out + 1] = "# TYPE shorturl_edge_pages_cache_removed_total counter"
    for _, r in ipairs({ "purge", "flush" }) do
        out[#out + 1] = format('shorturl_edge_pages_cache_removed_total{reason="%s"} %d', r,
            counters.metric("pages_" .. r))
    end
    out[#out + 1] = "# HELP shorturl_redis_topology_total Redis topology events: a cluster's redirections (moved, "
        .. "ask) and slot-map fetches (slots), a Sentinel master resolution (master)."
    out[#out + 1] = "# TYPE shorturl_redis_topology_total counter"
    for _, e in ipairs({ "moved", "ask", "slots", "master" }) do
        out[#out + 1] = format('shorturl_redis_topology_total{event="%s"} %d', e, counters.metric("redis_" .. e))
    end
    out[#out + 1] = "# HELP shorturl_tls_store_plaintext_total Private keys read from the shared store in plaintext "
        .. "(stored before sealing)."
    out[#out + 1] = "# TYPE shorturl_tls_store_plaintext_total counter"
    out[#out + 1] = format("shorturl_tls_store_plaintext_total %d", counters.metric("tls_store_plaintext"))
    out[#out + 1] = "# HELP shorturl_tls_store_refused_total Sealed shared-store values refused, by reason "
        .. "(malformed, unknown_key, undecryptable)."
    out[#out + 1] = "# TYPE shorturl_tls_store_refused_total counter"
    for _, r in ipairs({ "malformed", "unknown_key", "undecryptable" }) do
        out[#out + 1] = format('shorturl_tls_store_refused_total{reason="%s"} %d', r,
            counters.metric("tls_store_refused_" .. r))
    end
    clicks_stats.metrics(out)
    local body = table.concat(out, "\n") .. "\n"
    ngx.status = 200
    header["Content-Type"] = "text/plain; version=0.0.4"
    header["Content-Length"] = #body
    return respond.finish(body)
end

return M
