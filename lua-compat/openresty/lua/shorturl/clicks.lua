-- Click counting on the OpenResty edge (protocol section 3.4), the twin of
-- the Pingora edge's: every redirect answered is counted in per-worker Lua
-- tables (no shared-dict lock, no I/O per request), and a per-worker timer
-- flushes the counts every `clicks.flush_interval_ms` as batches appended
-- to the Redis Stream su:1:clicks. A batch keeps its id across retries
-- (the origin applies an id once); while Redis is unreachable unsent
-- batches wait in a bounded per-worker buffer (oldest dropped and counted
-- beyond it); a worker that exits (nginx -s quit, reload) flushes first.
-- A flush encodes in steps, yielding to the requests between them after
-- 100 µs of work (new_pace), like the Pingora edge's flusher (pace.rs).
--
-- With `clicks.dimensions` (protocol 3.7, the default) a human click is
-- also counted by its dimensions (clicks_dims.lua: country, browser, OS,
-- language, source, UTM; and with `clicks.city` the city, geo.city), the
-- batches' `x` lines; a bot is in none. And
-- its visitor (clicks_uniq.lua: an HMAC of its client key and user agent
-- under the day's fleet-wide salt) goes into its link-day's sketch of
-- unique visitors, the `u` lines; the salts are fetched by the flush
-- timer, never on a request (a click with an address whose day's salt the
-- worker does not have is in no sketch: counted, `unsalted`).
--
-- Node-wide figures (status, metrics) are added to the shared dict by each
-- worker at flush time, not per request.
local clicks_ua = require("shorturl.clicks_ua")
local clicks_ref = require("shorturl.clicks_ref")
local clicks_dims = require("shorturl.clicks_dims")
local clicks_batch = require("shorturl.clicks_batch")
local clicks_uniq = require("shorturl.clicks_uniq")
local proto = require("shorturl.proto")
local redis = require("shorturl.redis")

local ngx = ngx
local ngx_time, now, update_time = ngx.time, ngx.now, ngx.update_time
local format, find, sub = string.format, string.find, string.sub
local state = ngx.shared.shorturl_state

local M = {}

local STREAM = "su:1:clicks"
local STREAM_MAXLEN = 1000000
-- One XADD (a batch up to 8 MiB) may take longer than a cache GET.
local SEND_TIMEOUT_MS = 2000
-- How long an exiting worker waits for lookups in flight and retries Redis.
local EXIT_GRACE = 3
local UA_CACHE_ITEMS, REF_CACHE_ITEMS = 10000, 10000
local BOT = clicks_ua.BOT

M.enabled = false
-- Whether human clicks are counted by their dimensions (clicks.dimensions).
M.dimensions = false
-- And by their city (clicks.city, which needs dimensions).
M.city = false
local cfg
local device_class, ref_host = clicks_ua.device_class, clicks_ref.host
local families, lang_of, has_qr, utm_of = clicks_dims.families, clicks_dims.lang, clicks_dims.has_qr,
    clicks_dims.utm
local click_key = proto.click_key
local uniq_salt, uniq_new, uniq_add = clicks_uniq.salt, clicks_uniq.new, clicks_uniq.add

-- Per worker.
-- resty.lrucache: user agent -> { class, browser, os, ua = the user agent, and the memo of its last
-- visitor: mk = client key, ms = salt, mv = visitor }, referer -> host
local ua_cache, ref_cache
-- link key -> { h = {[hour] = {human, bot}}, d = {[day] = {r = {[host] = n}, t = {[dest] = n}, routed,
-- 5 classes, x = nil or {[dim index] = {[value] = n}} (clicks_dims.DIMS order, defaults not kept),
-- u = nil or the sketch of its visitors (clicks_uniq)}} }
local links = {}
local human_new, bot_new = 0, 0 -- counted since the last flush (reported then)
local unsalted_new = 0       -- human clicks with an address in no sketch for want of their day's salt
local queue, q_first, q_last = {}, 1, 0 -- unsent batches, oldest first
local buffered = 0           -- clicks in `queue`
local buffered_bytes = 0     -- bytes of the bodies in `queue`
local id_prefix, seq = nil, 0
local lookups = 0            -- redirect lookups in flight (they count when they end)
local flushing = false

---------------------------------------------------------------- counting

-- What a missing user agent is: a bot.
local NO_UA = { BOT }

-- The facts of user agent `v` (a header value, a table when repeated: its
-- first, or nil: a bot): { class, browser, os, ua = the value } (browser
-- and OS families nil for `other`, and for a bot or with dimensions off),
-- cached per worker; the entry also keeps the user agent's last visitor
-- (count_visitor).
local function classify(v)
    if type(v) == "table" then
        v = v[1]
    end
    if v == nil then
        return NO_UA
    end
    local c = ua_cache:get(v)
    if c then
        return c
    end
    local class = device_class(v)
    c = { class, ua = v }
    if class ~= BOT and M.dimensions then
        c[2], c[3] = families(v)
    end
    ua_cache:set(v, c)
    return c
end

local function referrer(v)
    if type(v) == "table" then
        v = v[1]
    end
    if v == nil then
        return "-"
    end
    local h = ref_cache:get(v)
    if h then
        return h
    end
    h = ref_host(v)
    ref_cache:set(v, h)
    return h
end

local function bump(x, i, value)
    local m = x[i]
    if not m then
        m = {}
        x[i] = m
    end
    m[value] = (m[value] or 0) + 1
end

-- Counts the dimensions of one human click in link-day counts `dc`
-- (Dims::read, DayDims::count): `facts` the user agent's (classify), the
-- rest as M.count takes them.
local function count_dims(dc, facts, location, pq, headers, country, city)
    if type(country) == "function" then
        country = country(headers)
    end
    if not M.city then
        city = nil
    elseif type(city) == "function" then
        city = city()
    end
    local lang = headers and headers["accept-language"]
    if type(lang) == "table" then
        lang = lang[1]
    end
    lang = lang_of(lang)
    local qr = false
    if pq and find(pq, "qr=1", 1, true) then
        local qm = find(pq, "?", 1, true)
        qr = qm ~= nil and has_qr(sub(pq, qm + 1))
    end
    local us, um, uc = utm_of(location)
    local browser, os = facts[2], facts[3]
    if not (country or browser or os or lang or qr or us or um or uc or city) then
        return -- every default: nothing kept
    end
    local x = dc.x
    if not x then
        x = {}
        dc.x = x
    end
    if country then
        bump(x, 1, country)
    end
    if browser then
        bump(x, 2, browser)
    end
    if os then
        bump(x, 3, os)
    end
    if lang then
        bump(x, 4, lang)
    end
    if qr then
        bump(x, 5, "qr")
    end
    if us then
        bump(x, 6, us)
    end
    if um then
        bump(x, 7, um)
    end
    if uc then
        bump(x, 8, uc)
    end
    if city then
        bump(x, 9, city)
    end
end

-- Adds the visitor of one human click to its link-day counts `dc` at
-- `day`, `facts` its user agent's (classify), `client` its client key
-- (link_rules.split_key) or a function answering it (nil: no address,
-- no visitor). A click with an address whose day's salt the worker does
-- not know is counted `unsalted` (as record.rs counts it). The visitor is
-- memoised in the user agent's cache entry: the same browser again (same
-- client key, same salt) costs no HMAC.
local function count_visitor(dc, day, facts, client)
    if type(client) == "function" then
        client = client()
    end
    if not client then
        return
    end
    local salt = uniq_salt(day)
    if not salt then
        unsalted_new = unsalted_new + 1
        return
    end
    local v
    if facts.mk == client and facts.ms == salt then
        v = facts.mv
    else
        v = clicks_uniq.visitor(salt, client, facts.ua) -- (through the module: the tests count the calls)
        facts.mk, facts.ms, facts.mv = client, salt, v
    end
    local sk = dc.u
    if not sk then
        sk = uniq_new()
        dc.u = sk
    end
    uniq_add(sk, v)
end

-- Counts one redirect answered for `code` on `domain` (the request's
-- normalised host, which is the link's record domain), under its link key
-- (protocol 3.6: a custom code is one link per domain): `head` for a HEAD
-- request, the User-Agent and Referer header values (nil when absent), and
-- for a link with options the label of the destination that answered (nil
-- for a plain link: no destination lines; a human click without one is
-- `link`).
--
-- The dimensions of a human click (read only with clicks.dimensions on):
-- `location` the redirect's Location, `pq` the request's raw path and
-- query (its query: after the first `?`), `headers` the request's
-- (ngx.req.get_headers(): Accept-Language) and `country` the client's
-- (two upper-case letters; nil or false: none), or a function of
-- `headers` answering it, called only then (geo.lua is not asked for a
-- bot's click). `client`: the client's split key (link_rules.split_key:
-- the client behind trusted proxies, IPv6 by /64; nil without an
-- address), or a function answering it, called only for a human click
-- with dimensions on: its unique visitor. `city`: the client's city
-- (geo.city; nil: none), or a function answering it, called only for a
-- human click with clicks.city on (else never: no lookup).
function M.count(code, domain, head, ua, referer, dest, location, pq, headers, country, client, city)
    if not M.enabled then
        return
    end
    local facts = head and NO_UA or classify(ua)
    local class = facts[1]
    local host = referrer(referer)
    local t = ngx_time()
    local key = click_key(code, domain)
    local link = links[key]
    if not link then
        link = { h = {}, d = {} }
        links[key] = link
    end
    local hour = t - t % 3600
    local hc = link.h[hour]
    if not hc then
        hc = { 0, 0 }
        link.h[hour] = hc
    end
    local day = t - t % 86400
    local dc = link.d[day]
    if not dc then
        dc = { r = {}, t = {}, routed = false, 0, 0, 0, 0, 0 }
        link.d[day] = dc
    end
    if dest then
        dc.routed = true
    end
    if class == BOT then
        hc[2] = hc[2] + 1
        bot_new = bot_new + 1
    else
        hc[1] = hc[1] + 1
        human_new = human_new + 1
        local label = dest or "link"
        local tc = dc.t
        tc[label] = (tc[label] or 0) + 1
        if M.dimensions then
            count_dims(dc, facts, location, pq, headers, country, city)
            count_visitor(dc, day, facts, client)
        end
    end
    dc[class] = dc[class] + 1
    local r = dc.r
    r[host] = (r[host] or 0) + 1
end

-- A redirect lookup (which may yield) starts / ends: an exiting worker
-- waits for them before its last flush.
function M.lookup_started()
    lookups = lookups + 1
end

function M.lookup_ended()
    lookups = lookups - 1
end

---------------------------------------------------------------- sending

local function next_id()
    local id = id_prefix .. seq
    seq = seq + 1
    return id
end

-- How long the flush works at most before it lets the requests in (as the
-- Pingora edge's flusher, edge/src/clicks/pace.rs STINT): 100 µs, on
-- CLOCK_MONOTONIC read through the FFI (ngx.now() counts milliseconds).
local STINT_NS = 100000
local YIELD_EVERY = 4 -- without that clock: a yield every 4 calls of the pace (256 links)
local mono_ns
do
    local ffi = require("ffi")
    pcall(ffi.cdef, "typedef struct { long tv_sec; long tv_nsec; } shorturl_timespec_t;")
    pcall(ffi.cdef, "int clock_gettime(int clk_id, shorturl_timespec_t *tp);")
    local ts = ffi.new("shorturl_timespec_t")
    local CLOCK_MONOTONIC = 1 -- (Linux)
    local function read()
        ffi.C.clock_gettime(CLOCK_MONOTONIC, ts)
        return tonumber(ts.tv_sec) * 1e9 + tonumber(ts.tv_nsec)
    end
    if pcall(read) then
        mono_ns = read
    end
end

local semaphore = require("ngx.semaphore")

local function wake(_, sema)
    sema:post(1)
end

-- Gives the event loop back for one turn, the flush resuming once the
-- events ready meanwhile (the requests queued) have been handled: a timer
-- of 0 ms posts to `sema`, this flush's semaphore. (ngx.sleep(0) does the
-- same, but without OpenResty's delayed-events patch, as with Debian's
-- libnginx-mod-http-lua, it logs a warning at every call; ngx.sleep(0.001)
-- would idle a millisecond at every yield.)
local function yield(sema)
    -- (The wait's timeout counts from nginx's cached time: brought up to date.)
    update_time()
    if ngx.timer.at(0, wake, sema) then
        sema:wait(10)
    else
        ngx.sleep(0.001) -- (no timer: lua_max_pending_timers)
    end
end

-- A new pace for one flush (clicks_batch.build calls it between steps of
-- its work, every 64 links): once the work has lasted STINT_NS since the
-- last yield, it yields (a sched_yield in the Pingora edge). An exiting
-- worker does not: its flush ends as soon as it can.
local function new_pace()
    local started = mono_ns and mono_ns()
    local calls = 0
    local sema
    return function()
        if mono_ns then
            if mono_ns() - started < STINT_NS then
                return
            end
        else
            calls = calls + 1
            if calls < YIELD_EVERY then
                return
            end
            calls = 0
        end
        if not ngx.worker.exiting() then
            sema = sema or semaphore.new()
            yield(sema)
        end
        if mono_ns then
            started = mono_ns()
        end
    end
end

-- The counts so far as batches at the end of the queue. The counts are
-- detached first: clicks counted while a paced encoding lets requests in
-- go into a new table, for the next flush (none lost, none twice). `pace`:
-- new_pace()'s, or nil (the exiting worker's last take).
local function take(pace)
    if next(links) == nil then
        return
    end
    local counted = links
    links = {}
    local batches = clicks_batch.build(counted, next_id, M.dimensions, pace)
    for _, b in ipairs(batches) do
        q_last = q_last + 1
        queue[q_last] = b
        buffered = buffered + b.human + b.bot
        buffered_bytes = buffered_bytes + #b.body
    end
end

-- Removes the oldest unsent batch (sent or dropped) from the queue and its
-- figures; returns it and its clicks.
local function pop_oldest()
    local b = queue[q_first]
    queue[q_first] = nil
    q_first = q_first + 1
    local n = b.human + b.bot
    buffered = buffered - n
    buffered_bytes = buffered_bytes - #b.body
    return b, n
end

-- XLEN and the XADD of batch `b` in one pipeline (on the node serving the
-- stream's key in a cluster); returns whether the batch was appended and
-- the stream's length before it, or nil, err.
local function xadd(b)
    local replies, err = redis.run(cfg.redis_conn, STREAM, {
        redis.command("XLEN", STREAM),
        redis.command("XADD", STREAM, "MAXLEN", "~", tostring(STREAM_MAXLEN), "*", "id", b.id, "v", b.v, "b",
            b.body),
    }, SEND_TIMEOUT_MS)
    if not replies then
        return nil, err
    end
    local len, added = replies[1], replies[2]
    if type(added) ~= "string" then
        return nil, type(added) == "table" and added.err or "unexpected reply to XADD"
    end
    return true, type(len) == "number" and len or 0
end

local report = { sent = 0, sent_batches = 0, retried = 0, drop_buffer = 0, drop_stream = 0, drop_exit = 0 }

-- Sends the queue oldest first, stopping at the first failure (the rest
-- waits for the next tick, in order). Returns whether it is empty.
local function send_queue()
    while q_first <= q_last do
        local b = queue[q_first]
        local ok, len = xadd(b)
        if not ok then
            report.retried = report.retried + 1
            ngx.log(ngx.WARN, "shorturl: click batch ", b.id, " not sent (", len, "); kept for the next flush")
            return false
        end
        local n = b.human + b.bot
        if len >= STREAM_MAXLEN then
            -- At its bound the stream trims old entries, possibly unread.
            report.drop_stream = report.drop_stream + n
        end
        pop_oldest()
        report.sent = report.sent + n
        report.sent_batches = report.sent_batches + 1
    end
    return true
end

-- Beyond the bound, the oldest batches go (counted), never the newest: a
-- take while Redis was down can alone hold more clicks than the bound (a
-- line carries a count), and dropping it would keep nothing and lose the
-- newest clicks (its bytes are at most one batch's, under the bytes bound).
local function enforce_bound()
    -- This worker's shares of clicks.max_buffered_clicks and _bytes (the
    -- memory bound of an outage: a click is up to ~400 bytes of lines).
    local workers = ngx.worker.count()
    local max_clicks = math.max(1, math.ceil(cfg.clicks.max_buffered_clicks / workers))
    local max_bytes = math.max(1, math.ceil(cfg.clicks.max_buffered_bytes / workers))
    while (buffered > max_clicks or buffered_bytes > max_bytes) and q_first < q_last do
        local b, n = pop_oldest()
        report.drop_buffer = report.drop_buffer + n
        ngx.log(ngx.ERR, "shorturl: click buffer full: dropped batch ", b.id, " (", n, " clicks)")
    end
end

-- Adds this worker's figures since the last report to the node's.
local function publish(empty)
    local wid = ngx.worker.id() or 0
    local function add(key, n)
        if n ~= 0 then
            state:incr(key, n, 0)
        end
    end
    add("ck:human", human_new)
    add("ck:bot", bot_new)
    add("ck:unsalted", unsalted_new)
    human_new, bot_new, unsalted_new = 0, 0, 0
    add("ck:sent", report.sent)
    add("ck:batches:sent", report.sent_batches)
    add("ck:batches:retried", report.retried)
    add("ck:drop:buffer_full", report.drop_buffer)
    add("ck:drop:stream_full", report.drop_stream)
    add("ck:drop:shutdown", report.drop_exit)
    for k in pairs(report) do
        report[k] = 0
    end
    state:set("ck:buffered:" .. wid, buffered)
    state:set("ck:buffered_bytes:" .. wid, buffered_bytes)
    if empty then
        update_time()
        local t = ngx_time()
        if t > (state:get("ck:last_flush") or 0) then
            state:set("ck:last_flush", t)
        end
    end
end

-- One flush: take the counts, send what is queued, bound the rest.
-- `paced`: the counts are encoded in steps, letting the requests in
-- between them (a tick's flush; the exiting worker's are not).
local function flush(paced)
    take(paced and new_pace() or nil)
    local empty = send_queue()
    enforce_bound()
    publish(empty)
end

-- Makes sure the worker knows today's and tomorrow's salts of unique
-- visitors (clicks_uniq.refresh: asked of Redis only when unknown), with
-- dimensions on; from a timer only.
local refreshing = false
local function refresh_salts()
    if not M.dimensions or refreshing then
        return
    end
    refreshing = true
    update_time()
    local ok, err = pcall(clicks_uniq.refresh, cfg.redis_conn, ngx_time())
    refreshing = false
    if not ok then
        ngx.log(ngx.ERR, "shorturl: unique visitors' salts: ", err)
    end
end

-- The last flush of an exiting worker: after the lookups in flight have
-- counted, retrying Redis for a short while; what is left is lost (counted).
local function final_flush()
    local deadline = now() + EXIT_GRACE
    flush()
    while (lookups > 0 or q_first <= q_last) and now() < deadline do
        ngx.sleep(0.05)
        update_time()
        flush()
    end
    take()
    if q_first <= q_last then
        report.drop_exit = buffered
        ngx.log(ngx.ERR, "shorturl: exiting with ", buffered, " clicks not sent")
        queue, q_first, q_last, buffered, buffered_bytes = {}, 1, 0, 0, 0
    end
    publish(false)
end

local function tick(premature)
    if premature then
        -- Let a flush in progress end first.
        local deadline = now() + EXIT_GRACE
        while flushing and now() < deadline do
            ngx.sleep(0.01)
            update_time()
        end
    elseif flushing then
        return
    end
    flushing = true
    local ok, err
    if premature then
        ok, err = pcall(final_flush)
    else
        ok, err = pcall(flush, true)
    end
    if not premature then
        refresh_salts()
    end
    flushing = false
    if not ok then
        ngx.log(ngx.ERR, "shorturl: click flush failed: ", err)
    end
end

---------------------------------------------------------------- set-up

-- In the master (init_by_lua): loads the bot list once (workers inherit it).
-- With dimensions, the browser and OS family file too.
function M.init(c)
    cfg = c
    M.enabled = c.clicks.enabled
    M.dimensions = c.clicks.enabled and c.clicks.dimensions
    M.city = M.dimensions and c.clicks.city or false
    if ua_cache then
        ua_cache:flush_all() -- a worker's (tests): its facts were read with the old setting
    end
    if not M.enabled then
        return
    end
    local n, err = clicks_ua.load(c.clicks.bots_file)
    if not n then
        error("clicks.bots_file: " .. tostring(err), 0)
    end
    if n == 0 then
        error("clicks.bots_file " .. c.clicks.bots_file .. " holds no pattern", 0)
    end
    if M.dimensions then
        n, err = clicks_dims.load(c.clicks.families_file)
        if not n then
            error("clicks.families_file: " .. tostring(err), 0)
        end
        if n == 0 then
            error("clicks.families_file " .. c.clicks.families_file .. " holds no family", 0)
        end
    end
end

-- A nonce new at every worker start: its pid and 8 random bytes.
local function nonce()
    local rnd = ""
    local f = io.open("/dev/urandom", "rb")
    if f then
        rnd = f:read(8) or ""
        f:close()
    end
    local hex = rnd:gsub(".", function(ch)
        return format("%02x", ch:byte())
    end)
    if hex == "" then
        hex = format("%x", math.floor(now() * 1000000) % 0x7fffffff)
    end
    return format("%d-%s", ngx.worker.pid(), hex)
end

-- In each worker: its caches, batch ids and flush timer.
function M.init_worker()
    state:set("ck:buffered:" .. (ngx.worker.id() or 0), 0)
    state:set("ck:buffered_bytes:" .. (ngx.worker.id() or 0), 0)
    if not M.enabled then
        return
    end
    local lrucache = require("resty.lrucache")
    ua_cache = lrucache.new(UA_CACHE_ITEMS)
    ref_cache = lrucache.new(REF_CACHE_ITEMS)
    id_prefix = cfg.clicks.edge_name .. ":" .. nonce() .. ":"
    local ok, err = ngx.timer.every(cfg.clicks.flush_interval_ms / 1000, tick)
    if not ok then
        ngx.log(ngx.ERR, "shorturl: click flush timer: ", err)
    end
    -- The salts at once, not at the first flush.
    ok, err = ngx.timer.at(0, function(premature)
        if not premature then
            refresh_salts()
        end
    end)
    if not ok then
        ngx.log(ngx.ERR, "shorturl: unique visitors' salt timer: ", err)
    end
end

return M
