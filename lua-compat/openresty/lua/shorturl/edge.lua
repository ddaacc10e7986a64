-- The short-link edge as an nginx/Lua module: the same routes, answers,
-- counters and access-log lines as the Pingora edge (edge/src/proxy.rs).
-- This file is the request flow (protocol 2.1, routing, redirects, API
-- forwarding, password links' gate and form posts); lookups, clients and
-- limits, status, responses and metrics have their own modules.
local proto = require("shorturl.proto")
local rules = require("shorturl.rules")
local net = require("shorturl.net")
local config = require("shorturl.config")
local counters = require("shorturl.counters")
local origins = require("shorturl.origins")
local lookup = require("shorturl.lookup")
local cache = require("shorturl.cache")
local inval = require("shorturl.inval")
local clients = require("shorturl.clients")
local status_doc = require("shorturl.status")
local respond = require("shorturl.respond")
local metrics = require("shorturl.metrics")
local clicks = require("shorturl.clicks")
local clicks_stats = require("shorturl.clicks_stats")
local pages = require("shorturl.pages")
local accept = require("shorturl.accept")
local batch = require("shorturl.batch")
local link_rules = require("shorturl.link_rules")
local unlock = require("shorturl.unlock")
local geo = require("shorturl.geo")

local ngx = ngx
local var, header, now = ngx.var, ngx.header, ngx.now
local floor, format, sub, find = math.floor, string.format, string.sub, string.find
local stat = counters.stat
local error_response, not_found = respond.error, respond.not_found

local M = {}

local RETRY_AFTER = 1

local cfg -- validated config (set in init, inherited by workers)

-- `nginx_limits`: the limits start.sh rendered as nginx directives.
function M.init(path, nginx_limits)
    require("resty.core")
    local ok, c = pcall(config.load, path, nginx_limits)
    if not ok then
        error("shorturl: " .. tostring(c), 0)
    end
    cfg = c
    respond.init(cfg)
    clients.init(cfg)
    status_doc.init(cfg)
    clicks.init(cfg)
    clicks_stats.init(cfg)
    link_rules.init(cfg)
    unlock.init(cfg)
    geo.init(cfg)
end

-- The validated `redis` section as a connection spec (tls.lua builds its
-- own connections from it).
function M.redis_spec()
    return cfg.redis_spec
end

-- The shared TLS store's keys (config.lua `tls`), for tls.lua.
function M.store_keys()
    return cfg.store_keys
end

function M.init_worker()
    if cfg.die_with_master then
        local ffi = require("ffi")
        pcall(ffi.cdef, "int prctl(int option, unsigned long arg2);")
        pcall(ffi.C.prctl, 1, 9) -- PR_SET_PDEATHSIG, SIGKILL
    end
    require("shorturl.redis").init_worker(cfg.redis_conn)
    origins.init_worker(cfg)
    cache.init_worker(cfg)
    lookup.init_worker(cfg)
    inval.init_worker(cfg)
    clicks.init_worker()
    geo.init_worker()
end

---------------------------------------------------------------- routes

local LIMIT_MESSAGE = {
    unknown = "too many requests for unknown links",
    creations = "too many creations",
    refused_creations = "too many refused creations",
}

local function too_many(limit)
    var.su_outcome = "LIMIT"
    counters.inc("limit:" .. limit)
    return error_response(429, "rate_limited", LIMIT_MESSAGE[limit], RETRY_AFTER)
end

local OUTCOME_OF = { found = "HIT", neg = "NEG", unav = "FAIL" }

-- The answer for a request without a Host (HTTP/1.0): it is for no domain,
-- so no record is its; answered as a cached `- 0`, nothing looked up or
-- stored (protocol 3.5). Never modified.
local NO_DOMAIN = { kind = "neg", v = 0 }

-- The record lookup every code route shares, redirects and pages
-- (Edge::look_up), keyed by (host, code) (protocol 3.5): the node's caches,
-- else Redis and the origin (coalesced, stored, negatives included), with
-- the client's unknown-code budget checked before any work that is not a
-- cached record. Returns the answer, or nil when the client is over its
-- budget (429).
local function look_up(host, code)
    local key, ans
    if host then
        key = proto.cache_key(host, code)
        ans = cache.get(key)
    else
        ans = NO_DOMAIN
    end
    if ans then
        stat("local_hit")
        var.su_outcome = OUTCOME_OF[ans.kind]
        if ans.kind ~= "found" and clients.unknown_exceeded() then
            return nil
        end
        return ans
    end
    stat("local_miss")
    if clients.unknown_exceeded() then
        return nil
    end
    local source
    -- An exiting worker's last click flush waits for lookups in flight.
    clicks.lookup_started()
    ans, source = lookup.resolve(host, code, key)
    clicks.lookup_ended()
    var.su_outcome = source
    return ans
end

-- What a looked-up code is for this request (Edge::decide): "live" (a live
-- record bound to `host`), "unav" (the lookup failed), or "not_found" (the
-- protocol 404: unknown, expired, disabled (`d`), another domain's), which
-- spends the client's unknown-code budget.
local function decide(ans, host)
    if ans.kind == "found" and ans.exp > floor(now()) and host == ans.domain and not (ans.opts and ans.opts.d) then
        return "live"
    elseif ans.kind == "unav" then
        return "unav"
    end
    clients.count_unknown()
    return "not_found"
end

-- The origin `o` a proxied request goes to, with the X-Forwarded-For of
-- its client (the page, API and password-entry locations alike).
local function to_upstream(o)
    var.su_upstream = o.proxy
    local c, used = clients.client()
    var.su_xff = net.forwarded_for(var.remote_addr, used)
    var.su_client = c
end

-- Proxies the request to an origin for its answer, through the page
-- location: `key` caches it (a page), nil does not (a browser's 404 page).
local function to_page_origin(o, key)
    if key then
        var.su_page_key = key
    else
        var.su_page_nocache = "1"
    end
    to_upstream(o)
    return ngx.exec("@shorturl_page")
end

-- The protocol 404 of a code or page path: JSON, or for a browser the
-- origin's 404 page (protocol 4.2), proxied uncached; the JSON 404 when no
-- origin is up or none answers (page_failed).
local function not_found_code(head)
    if accept.prefers_html(head.accept) then
        local o = origins.select()
        if o then
            stat("origin_forward")
            var.su_html404 = "1"
            return to_page_origin(o, nil)
        end
        stat("origin_error")
    end
    return not_found()
end

local function unavailable()
    return error_response(503, "unavailable", "link lookup temporarily unavailable", RETRY_AFTER)
end

-- The request's country (geo.lua: the header a trusted proxy sent, else
-- the database for the client's address), for the rules' `cc` and the
-- clicks' `country` dimension; `headers`: ngx.req.get_headers(). None
-- without a source (the client's address not even worked out).
local function request_country(headers)
    if not geo.configured() then
        return nil
    end
    return geo.country(headers, var.remote_addr, (clients.client()))
end

-- The link rules' view of a request (link_rules.choose), each part read
-- only when a rule asks for it.
local function visitor_country(v)
    return request_country(v.headers)
end

-- The client's city (geo.lua, the database only), for the clicks' `city`
-- dimension: asked only with clicks.city on.
local function request_city()
    return geo.city((clients.client()))
end

-- The client's split key (the rules' splits; and the client key of a
-- click's unique visitor, protocol 3.4).
local function visitor_key()
    return link_rules.split_key((clients.client()))
end

local function visitor(head, pq)
    local q = find(pq, "?", 1, true)
    local headers = head.headers
    local lang = headers and headers["accept-language"]
    if type(lang) == "table" then
        lang = lang[1]
    end
    return { ua = head.ua, lang = lang, query = q and sub(pq, q + 1) or nil, headers = headers,
        country = visitor_country, key = visitor_key }
end

-- Answers `/{code}` with the code's page of `kind`: the origin's
-- `/{code}.<kind>[?args]` through the page cache (outcome PAGE), and
-- `no-store` to the client, as every page answered on `/{code}` itself (the
-- same URL redirects others; the cached copy keeps the origin's headers).
-- proxy_pass without a URI part sends the request's URI once it was
-- changed, so the query is replaced too.
local function page_instead(code, host, kind, args)
    var.su_outcome = "PAGE"
    var.su_page_nostore = "1"
    local key = pages.key(host, kind, code, args)
    ngx.req.set_uri("/" .. code .. "." .. kind)
    ngx.req.set_uri_args(args or "")
    return to_page_origin(origins.select() or cfg.origins[1], key)
end

-- A link-preview crawler on a live link with a social card (protocol 4.4,
-- Verdict::Card on the Pingora edge): instead of the redirect, the page
-- `/{code}.card` through the page cache, exactly as the page path would be
-- served (kind `card`, no query in the key nor upstream). Counted as a
-- redirect of the link to its own URL would be (destination `link`; every
-- crawler is also a bot of bots.txt). `no-store` to the client, as every
-- page answered on `/{code}` itself: the same URL redirects others.
local function card(code, host, head, url, pq)
    clicks.count(code, host, head.method == "HEAD", head.ua, head.referer, "link", url, pq, head.headers,
        request_country, visitor_key, request_city)
    return page_instead(code, host, "card", nil)
end

-- A visitor without a valid unlock token on a live password link
-- (protocol 4.5): for a client that prefers HTML (4.2) the origin's form
-- `/{code}.password` through the page cache, as card() serves the card
-- (kind `password`, no query in the key nor upstream), but answered with
-- `Cache-Control: no-store` (page_header; the cached copy keeps the
-- origin's): the same URL redirects once the visitor holds a token. Any
-- other client: 401 `password_required`. Neither is a click.
local function password_required(code, host, head)
    if not accept.prefers_html(head.accept) then
        return error_response(401, "password_required", "this link needs a password")
    end
    return page_instead(code, host, "password", nil)
end

-- A visitor whose in-app browser is one of a live link's `b` (protocol
-- 4.6, Verdict::Guide on the Pingora edge): instead of the redirect, the
-- origin's `/{code}.guide?lang=<l>` through the page cache, as card()
-- serves the card (kind `guide`, the key's parameter `<l>`: `zh` for a
-- visitor whose language is `zh`, else `en`; upstream, the request's query
-- replaced by `lang=<l>` alone), `no-store` to the client as the card. Not
-- a click (the visit in the system browser will be).
local function guide(code, host, head)
    local lang = head.headers and head.headers["accept-language"]
    if type(lang) == "table" then
        lang = lang[1]
    end
    return page_instead(code, host, "guide", "lang=" .. link_rules.guide_language(lang))
end

-- The 403 of a screened link for a client that does not prefer HTML
-- (protocol 4.7), by `w`: the error kind and its message.
local SCREENED = {
    block = { "destination_blocked", "this link's destination is blocked" },
    warn = { "destination_flagged", "this link's destination was flagged as unsafe" },
}

-- A live link with `w` (protocol 4.7, Verdict::Screened on the Pingora
-- edge), for every visitor: a client that prefers HTML (4.2) gets the
-- origin's `/{code}.warning` through the page cache, as the password form
-- is served (kind `warning`, no query in the key nor upstream, `no-store`
-- to the client); any other client the 403 of `screen` ("warn" or
-- "block"), JSON and `no-store` as the password's 401, outcome LOCAL (as
-- the Pingora edge logs it). Neither is a click.
local function screened(code, host, head, screen)
    if not accept.prefers_html(head.accept) then
        local e = SCREENED[screen]
        var.su_outcome = "LOCAL"
        return error_response(403, e[1], e[2])
    end
    return page_instead(code, host, "warning", nil)
end

-- A record with options bound to `host` (protocol 3.1.1): a live link
-- with `w` first gets its warning (4.7: before everything else of the
-- link); then an in-app browser of `b` gets its guidance page (4.6: a
-- password entered there would be asked again in the system browser);
-- then a live password link (`p`) asks for an unlock token (4.5); then a
-- crawler's card (a live link with `g`, never one with `p`); else the
-- rules' destination, or for an expired or disabled link its fallback (no
-- warning, password, card nor guidance), else the protocol 404.
local function redirect_by_rules(code, ans, head, pq)
    local t = floor(now())
    local o = ans.opts
    local expired = ans.exp <= t
    -- ans.domain: the request's host (redirect_or_404 checked). The token
    -- is checked only for a password link (link_rules.gate).
    local gate, screen = link_rules.gate(o, expired, head.ua, unlock.request_opens, head.headers, ans.domain,
        code, ans.v, t)
    if gate == "screened" then
        return screened(code, ans.domain, head, screen)
    elseif gate == "guide" then
        return guide(code, ans.domain, head)
    elseif gate == "locked" then
        return password_required(code, ans.domain, head)
    elseif gate == "card" then
        return card(code, ans.domain, head, ans.url, pq)
    end
    local v = visitor(head, pq)
    local url, dest = link_rules.choose(o, ans.url, expired, code, v, t)
    if url then
        -- ans.domain: the request's host (redirect_or_404 checked). The
        -- country as the rules found it, if they asked (v.country: the
        -- memo, or still the function).
        clicks.count(code, ans.domain, head.method == "HEAD", head.ua, head.referer, dest, url, pq, head.headers,
            v.country == visitor_country and request_country or v.country, visitor_key, request_city)
        return respond.redirect(url, o.p)
    end
    clients.count_unknown()
    return not_found_code(head)
end

-- `head`: the request head (read_head), `pq` its path and query; a
-- redirect answered is a click.
local function redirect_or_404(code, host, head, pq)
    local ans = look_up(host, code)
    if not ans then
        return too_many("unknown")
    end
    if ans.opts and host == ans.domain then
        return redirect_by_rules(code, ans, head, pq)
    end
    local verdict = decide(ans, host)
    if verdict == "live" then
        clicks.count(code, host, head.method == "HEAD", head.ua, head.referer, nil, ans.url, pq, head.headers,
            request_country, visitor_key, request_city)
        return respond.redirect(ans.url)
    elseif verdict == "unav" then
        return unavailable()
    end
    return not_found_code(head)
end

local function method_not_allowed()
    var.su_outcome = "BAD"
    return error_response(405, "method_not_allowed", "only GET and HEAD resolve a short link")
end

-- The largest form a password link's POST carries (protocol 4.5: the
-- origin reads no more).
local MAX_UNLOCK_BODY = 4096

-- Proxies a POST /{code} to an origin's own POST /{code}, uncached, path,
-- query and body unchanged (location @shorturl_unlock): a password link's
-- form (`html404` false: the origin's 303 with the token, or its
-- 400/403/429 form, passed on as it is; 503 when no origin is up, 502
-- when none answers), or for a browser a code that is not one (`html404`:
-- the origin's 404 page, else the JSON 404). The body is bounded before
-- anything is read or an origin chosen: a larger Content-Length is
-- refused here, a larger chunked body by the location's
-- client_max_body_size (unlock_too_large); a 404 never sends it on.
local function to_unlock_origin(html404)
    local len = tonumber(var.content_length or "")
    if len and len > MAX_UNLOCK_BODY then
        if html404 then
            return not_found()
        end
        return M.unlock_too_large()
    end
    local o = origins.select()
    if not o then
        stat("origin_error")
        if html404 then
            return not_found()
        end
        var.su_outcome = "FWD"
        return error_response(503, "unavailable", "no origin available", RETRY_AFTER)
    end
    stat("origin_forward")
    if html404 then
        var.su_html404 = "1"
    else
        var.su_outcome = "FWD"
    end
    to_upstream(o)
    -- Whether the visitor came over TLS (the origin then marks the cookie
    -- Secure): this edge's TLS, or a trusted proxy's X-Forwarded-Proto
    -- (TLS ended in front of the edge); a client's own never passes.
    local xfp = ngx.req.get_headers()["x-forwarded-proto"]
    if type(xfp) == "table" then
        xfp = xfp[1]
    end
    local proxied_https = net.contains(cfg.trusted, var.remote_addr)
        and type(xfp) == "string" and xfp:lower() == "https"
    var.su_xfp = (var.https == "on" or proxied_https) and "https" or ""
    return ngx.exec("@shorturl_unlock")
end

-- POST /{code} (protocol 4.5): the code looked up and decided as for GET
-- (the same 429, 404 and 503); a live password link bound to the host is
-- proxied to the origin with the visitor's form, unless its warning (`w`,
-- 4.7) or, for an in-app browser of `b`, its guidance (4.6) comes before
-- the password (no form is shown then); any other record that answers GET (a live link, or one
-- kept for its fallback `x`) is the 405 every other method gets.
local function unlock_post(code, host, head)
    local ans = look_up(host, code)
    if not ans then
        return too_many("unknown")
    end
    if ans.kind == "found" and host == ans.domain then
        local o = ans.opts
        if not (o and o.d) and ans.exp > floor(now()) then
            -- As decide() on the Pingora edge: a warning or a guidance
            -- page comes before the form, so no entry is taken then.
            local gate = o and o.p and link_rules.gate(o, false, head.ua, function()
                return false
            end)
            if gate == "locked" then
                return to_unlock_origin(false)
            end
            return method_not_allowed()
        elseif o and o.x then
            return method_not_allowed()
        end
    end
    if decide(ans, host) == "unav" then
        return unavailable()
    end
    -- The protocol 404 (decide counted it against the unknown-code limit).
    if accept.prefers_html(head.accept) then
        return to_unlock_origin(true)
    end
    return not_found()
end

local function forward(method, path)
    if method == "POST" and sub(path, 1, 13) == "/api/v1/links" then
        local items = 1
        if path == "/api/v1/links/batch" then
            -- One creation per item (batch.lua): refused before the body
            -- is read when not even one would be admitted.
            local blocked = clients.creation_blocked()
            if blocked then
                return too_many(blocked)
            end
            items = batch.count_request_body()
            if not items then
                var.su_outcome = "FWD"
                return error_response(503, "unavailable", "request body unavailable", RETRY_AFTER)
            end
        end
        local limit = clients.creation_refusal(items)
        if limit then
            return too_many(limit)
        end
        -- origin_header() counts it if the origin refuses it.
        var.su_creation = clients.key()
    end
    var.su_outcome = "FWD"
    local o = origins.select()
    if not o then
        stat("origin_error")
        return error_response(503, "unavailable", "no origin available", RETRY_AFTER)
    end
    stat("origin_forward")
    to_upstream(o)
    return ngx.exec("@shorturl_origin")
end

-- A page (QR code, preview, social card, password form, guidance, warning): its code looked up and decided exactly as a
-- redirect's (404, 429, 503 alike); a live record's page is proxied through
-- nginx's proxy_cache (pages.lua). Any configured origin is used when none
-- is healthy: a cached page is still served (stale), an uncached one fails
-- into page_failed().
local function page(host, kind, code, pq, head)
    local ans = look_up(host, code)
    if not ans then
        return too_many("unknown")
    end
    local verdict = decide(ans, host)
    if verdict == "unav" then
        return unavailable()
    elseif verdict == "not_found" then
        return not_found_code(head)
    end
    var.su_outcome = "PAGE"
    local q = find(pq, "?", 1, true)
    local key = pages.key(host or nil, kind, code, q and sub(pq, q + 1) or nil)
    return to_page_origin(origins.select() or cfg.origins[1], key)
end

local function status_route()
    if not net.contains(cfg.status_cidrs, clients.client()) then
        var.su_outcome = "BAD"
        return not_found()
    end
    return respond.json(200, status_doc.document(), "no-store")
end

-- The request head as the rules see it: the raw request line ($request,
-- never nginx's decoded $uri) and the header fields nginx parsed (none when
-- it refused the request line).
local function read_head()
    local method, target, vtoken = rules.parse_line(var.request or "")
    local hosts, fields, bytes = {}, 0, 0
    local ua, referer, accept_v, repeated_single
    local ok, headers = pcall(ngx.req.get_headers, 0)
    if ok and headers then
        for k, v in pairs(headers) do
            if type(v) == "table" then
                for _, one in ipairs(v) do
                    fields = fields + 1
                    bytes = bytes + #k + #one + 4
                end
                if #v > 1 and rules.SINGLE_FIELDS[k] then
                    repeated_single = true
                end
                if k == "host" then
                    hosts = v
                elseif k == "user-agent" then
                    ua = v[1]
                elseif k == "referer" then
                    referer = v[1]
                elseif k == "accept" then
                    accept_v = v[1]
                end
            else
                fields = fields + 1
                bytes = bytes + #k + #v + 4
                if k == "host" then
                    hosts = { v }
                elseif k == "user-agent" then
                    ua = v
                elseif k == "referer" then
                    referer = v
                elseif k == "accept" then
                    accept_v = v
                end
            end
        end
    end
    return { method = method, target = target, version = rules.version(vtoken), hosts = hosts, fields = fields,
        bytes = bytes, ua = ua, referer = referer, accept = accept_v, repeated_single = repeated_single,
        headers = ok and headers or nil }
end

-- For a refused head: its status and whether the answer is Pingora's bare
-- one (empty body). For an accepted one: nil, nil, then its host (false:
-- no domain), path and path-and-query.
local function judge(head)
    local st = rules.pingora_refusal(head)
    if st then
        return st, true
    end
    local reason, host, path, pq = rules.check(head)
    if reason then
        return rules.status(reason), false
    end
    return nil, nil, host, path, pq
end

local REASON = {
    [400] = { "bad_request", "malformed request" },
    [405] = { "method_not_allowed", "method not allowed" },
    [414] = { "uri_too_long", "request URI too long" },
    [431] = { "headers_too_large", "request headers too large" },
}

-- Answers a refused head: Pingora's bare answer or the protocol's JSON.
local function refuse(status, bare)
    var.su_outcome = "BAD"
    if ngx.req.http_version() == 0.9 then
        -- nginx would answer without a status line: write Pingora's answer
        -- on the raw connection, then close it.
        local sock = ngx.req.socket(true)
        if sock then
            sock:send(format("HTTP/1.1 %d Bad Request\r\nContent-Length: 0\r\n"
                .. "Cache-Control: private, no-store\r\nConnection: close\r\n\r\n", status))
        end
        return ngx.exit(444)
    end
    if bare then
        ngx.status = status
        header["Content-Length"] = 0
        header["Cache-Control"] = "private, no-store"
        return respond.finish("")
    end
    local r = REASON[status] or REASON[400]
    return error_response(status, r[1], r[2])
end

-- Routes an accepted request (first match wins), like Edge::request_filter.
local function route(head, host, path, pq)
    local method = head.method
    var.su_outcome = "LOCAL"
    if #pq > cfg.limits.max_uri_bytes then
        var.su_outcome = "BAD"
        return error_response(414, "uri_too_long", "request URI too long")
    end
    if head.bytes > cfg.limits.max_header_bytes then
        var.su_outcome = "BAD"
        return error_response(431, "headers_too_large", "request headers too large")
    end
    var.su_path = path
    local get_or_head = method == "GET" or method == "HEAD"
    if get_or_head and path == "/shorturl_status" then
        return status_route()
    elseif get_or_head and path == "/healthz" then
        return respond.json(200, '{"status":"ok"}', "no-store")
    end
    local code = proto.code_from_path(path)
    if code then
        -- `/shorturl_status` and `/healthz` have code shapes but no form.
        if method == "POST" and path ~= "/shorturl_status" and path ~= "/healthz" then
            return unlock_post(code, host, head)
        elseif not get_or_head then
            return method_not_allowed()
        end
        return redirect_or_404(code, host, head, pq)
    end
    if path == "/api" or sub(path, 1, 5) == "/api/" then
        return forward(method, path)
    end
    local kind, pcode = pages.of_path(path)
    if kind then
        if not get_or_head then
            return method_not_allowed()
        end
        return page(host, kind, pcode, pq, head)
    end
    var.su_outcome = "BAD"
    return not_found()
end

-- content_by_lua of `location /`: protocol 2.1, then routing.
function M.handle()
    local head = read_head()
    local status, bare, host, path, pq = judge(head)
    if not status then
        return route(head, host, path, pq)
    elseif status == 400 and ngx.req.http_version() ~= 0.9 then
        -- Through error_page (bad_request below), so nginx closes the
        -- connection after the answer, as the Pingora edge does.
        return ngx.exit(400)
    end
    return refuse(status, bare)
end

-- error_page 400 405 414 494 501 505: requests nginx refused itself
-- (their line, a header nginx cannot parse, TRACE), and the 400s of
-- handle(). Answer what the Pingora edge answers to the same bytes. Reached
-- from outside, the location is an ordinary path.
function M.bad_request()
    if not ngx.req.is_internal() then
        return M.handle()
    end
    local nginx_status = tonumber(var.status)
    if nginx_status == 414 then
        return refuse(414, false)
    elseif nginx_status == 494 then
        return refuse(431, false)
    end
    local head = read_head()
    local status, bare, host, path, pq = judge(head)
    if not status and nginx_status == 405 then
        -- A method nginx will not serve (TRACE): Pingora routes it.
        return route(head, host, path, pq)
    elseif not status then
        -- Something nginx's parser refuses and the rules do not see (a
        -- malformed header line, conflicting framing): so does Pingora's.
        status, bare = 400, true
    end
    return refuse(status, bare)
end

-- set_by_lua of the server: the key limit_conn counts requests under.
function M.conn_key()
    return clients.conn_key()
end

-- header_filter of the proxied API location: a creation the origin
-- refused (401/403) spends the client's refused-creation budget.
function M.origin_header()
    local key = var.su_creation
    if key and key ~= "" and (ngx.status == 401 or ngx.status == 403) then
        clients.count_refused(key)
    end
end

-- error_page 502/504 of the proxied API location.
function M.origin_failed()
    stat("origin_error")
    var.su_outcome = "FWD"
    return error_response(502, "bad_gateway", "origin failed to answer", RETRY_AFTER)
end

-- error_page 502/504 of the page location: no origin answered and nothing
-- cached to serve instead; a browser's 404 page gets the JSON 404.
function M.page_failed()
    stat("origin_error")
    if var.su_html404 == "1" then
        var.su_outcome = "FWD"
        return not_found()
    end
    var.su_outcome = "PAGE"
    return error_response(503, "unavailable", "no origin available", RETRY_AFTER)
end

-- header_filter of the page location: a page answered on `/{code}` itself
-- (page_instead: the card, password form, guidance, warning) is never
-- kept by the client, so the same URL redirects others (a password link
-- once the visitor holds a token). Only the client's
-- copy: proxy_cache stores the origin's answer as the origin sent it.
function M.page_header()
    if var.su_page_nostore == "1" then
        header["Cache-Control"] = "no-store"
    end
end

-- error_page 502/503/504 of the unlock location (nginx's own, never the
-- origin's: proxy_intercept_errors is off): no origin answered a form post
-- (502, as for the API), or for a browser's 404 page the JSON 404.
function M.unlock_failed()
    stat("origin_error")
    var.su_outcome = "FWD"
    if var.su_html404 == "1" then
        return not_found()
    end
    return error_response(502, "bad_gateway", "origin failed to answer", RETRY_AFTER)
end

-- A form post over MAX_UNLOCK_BODY bytes (a Content-Length over it, or
-- error_page 413 of the unlock location for a chunked body that grew past
-- it): refused by the edge, as the origin's API refuses a body too large.
function M.unlock_too_large()
    var.su_outcome = "BAD"
    if var.su_html404 == "1" then
        return not_found()
    end
    return error_response(413, "body_too_large", "body is larger than " .. MAX_UNLOCK_BODY .. " bytes")
end

-- log_by_lua of the page location: the page-cache result (pages only, not
-- a browser's 404 page), then the log.
function M.page_log()
    if var.su_html404 ~= "1" then
        pages.count(var.upstream_cache_status, var.status)
    end
    return metrics.log()
end

---------------------------------------------------------------- log & metrics

-- log_by_lua: the access-log fields and the latency histogram.
M.log = metrics.log

-- content_by_lua of the metrics server.
M.metrics = metrics.metrics

return M
