-- The client of a request and its limits, as on the Pingora edge
-- (edge/src/net.rs, limits.rs): the client behind trusted proxies (realip
-- semantics), keyed by address (IPv6 by prefix), with exact counts in
-- per-client windows (lua_shared_dict shorturl_limits: bounded, least
-- recently used entries evicted when full).
local net = require("shorturl.net")
local counters = require("shorturl.counters")

local var = ngx.var
local limits = ngx.shared.shorturl_limits

local M = {}

local cfg

function M.init(c)
    cfg = c
end

-- The client (realip semantics: the peer, or the rightmost untrusted
-- X-Forwarded-For hop when the peer is a trusted proxy) and the hops that
-- led to it; computed once per request.
function M.client()
    local ctx = ngx.ctx
    local c = ctx.su_client
    if c then
        return c, ctx.su_used
    end
    local peer = var.remote_addr
    local used
    if #cfg.trusted > 0 then
        c, used = net.client_of(peer, ngx.req.get_headers()["x-forwarded-for"], cfg.trusted)
    else
        c, used = peer, {}
    end
    ctx.su_client, ctx.su_used = c, used
    return c, used
end

-- The client `c` as the access log writes it: cut to its network with
-- access_log.truncate_addresses (as the Pingora edge's log).
function M.logged(c)
    if cfg.access_log.truncate_addresses then
        return net.truncated(c)
    end
    return c
end

-- What the client's limits count under (IPv6 by its prefix).
function M.key()
    local ctx = ngx.ctx
    if not ctx.su_key then
        ctx.su_key = net.client_key(M.client(), cfg.limits.ipv6_prefix_len)
    end
    return ctx.su_key
end

-- `by` more events (default 1) in `key`'s window of `secs`: windows start
-- at the client's first event (the entry's TTL), counts are exact, and a
-- full dictionary evicts its least recently used entries.
local function count(key, secs, by)
    local n, _, forcible = limits:incr(key, by or 1, 0, secs)
    if forcible then
        counters.inc("evictions")
    end
    return n or 0
end

-- True when the client has already had too many unknown-code answers in
-- its current one-second window.
function M.unknown_exceeded()
    local max = cfg.limits.unknown_per_ip_per_sec
    return max > 0 and (limits:get("u:" .. M.key()) or 0) >= max
end

-- Counts one unknown-code answer for the client.
function M.count_unknown()
    if cfg.limits.unknown_per_ip_per_sec > 0 then
        count("u:" .. M.key(), 1)
    end
end

-- The limit that refuses any creation from the client now, whatever its
-- size (its refused-creation budget or its creations this second are
-- spent), or nil; spends nothing (Limits::creation_blocked: a batch is
-- refused before its body is read).
function M.creation_blocked()
    local l = cfg.limits
    if l.refused_creations_per_ip_per_min > 0
        and (limits:get("r:" .. M.key()) or 0) >= l.refused_creations_per_ip_per_min then
        return "refused_creations"
    end
    if l.creations_per_ip_per_sec > 0 and (limits:get("c:" .. M.key()) or 0) >= l.creations_per_ip_per_sec then
        return "creations"
    end
    return nil
end

-- Decides `items` creations (default 1; a batch's count) before they are
-- forwarded: refused while the client's refused-creation budget is spent,
-- or when they do not all fit in what is left of its per-second limit
-- (then nothing is spent: the increment is taken back); else all are
-- counted. Returns the limit that refuses them, or nil.
function M.creation_refusal(items)
    items = items or 1
    local l = cfg.limits
    if l.refused_creations_per_ip_per_min > 0
        and (limits:get("r:" .. M.key()) or 0) >= l.refused_creations_per_ip_per_min then
        return "refused_creations"
    end
    if l.creations_per_ip_per_sec > 0 then
        local key = "c:" .. M.key()
        if count(key, 1, items) > l.creations_per_ip_per_sec then
            limits:incr(key, -items)
            return "creations"
        end
    end
    return nil
end

-- Counts a creation the origin refused (401/403) for the client `key`.
function M.count_refused(key)
    if cfg.limits.refused_creations_per_ip_per_min > 0 then
        count("r:" .. key, 60)
    end
end

-- What limit_conn counts concurrent requests under: the peer (IPv6 by
-- prefix), never the X-Forwarded-For client (as on the Pingora edge, which
-- counts connections before any request); "" (not counted) for a trusted
-- proxy, which carries many clients.
function M.conn_key()
    local peer = var.remote_addr
    if net.contains(cfg.trusted, peer) then
        return ""
    end
    return net.client_key(peer, cfg.limits.ipv6_prefix_len)
end

return M
