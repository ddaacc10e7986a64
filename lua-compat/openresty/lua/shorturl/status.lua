-- GET /shorturl_status: the node's counters plus the origin's `mysql` and
-- `issuer` (protocol section 6). The origin's part costs an origin request,
-- so it is shared: fetched at most once a second per node.
local http = require("shorturl.http")
local json = require("shorturl.json")
local counters = require("shorturl.counters")
local origins = require("shorturl.origins")
local inval = require("shorturl.inval")
local clicks_stats = require("shorturl.clicks_stats")
local geo = require("shorturl.geo")

local now, update_time = ngx.now, ngx.update_time
local format = string.format
local state = ngx.shared.shorturl_state

local M = {}

local cfg

function M.init(c)
    cfg = c
end

-- docs/protocol.md's version (PROTOCOL_VERSION in common/).
local PROTOCOL = 3

-- How long one fetch of the origin's status part serves the whole node.
local ORIGIN_PART_TTL = 1

-- The origin's `mysql` and `issuer` (JSON) and whether it answered.
local function fetch_origin_part()
    local o = origins.select()
    if o then
        local r, err = http.get(o, "/shorturl_status", cfg.default_domain, cfg.origin.status_timeout_ms,
            cfg.origin.connect_timeout_ms, cfg.origin_auth)
        if r then
            origins.note_status(r.status, "/shorturl_status")
        end
        if r and r.status == 200 then
            local v = json.decode(r.body)
            if v ~= nil then
                local mysql, issuer = json.null, json.null
                if type(v) == "table" then
                    mysql = v.mysql == nil and json.null or v.mysql
                    issuer = v.issuer == nil and json.null or v.issuer
                end
                return format('"mysql":%s,"issuer":%s,"origin_reachable":true', json.encode(mysql),
                    json.encode(issuer))
            end
        else
            ngx.log(ngx.INFO, "shorturl: origin status unavailable: ", err or r.status)
        end
    end
    return '"mysql":null,"issuer":null,"origin_reachable":false'
end

-- The origin's part, fetched at most once per ORIGIN_PART_TTL per node
-- (a failed fetch included): one request fetches, concurrent ones wait.
local function origin_part()
    local part = state:get("st:part")
    if part then
        return part
    end
    local wait = cfg.origin.status_timeout_ms / 1000 + cfg.origin.connect_timeout_ms / 1000 + 1
    if state:add("st:lock", true, wait) then
        part = state:get("st:part")
        if not part then
            local ok, got = pcall(fetch_origin_part)
            part = ok and got or '"mysql":null,"issuer":null,"origin_reachable":false'
            state:set("st:part", part, ORIGIN_PART_TTL)
        end
        state:delete("st:lock")
        return part
    end
    local deadline = now() + wait
    local pause = 0.001
    while now() < deadline do
        ngx.sleep(pause)
        pause = math.min(pause * 2, 0.02)
        update_time()
        part = state:get("st:part")
        if part then
            return part
        end
        if not state:get("st:lock") then
            break
        end
    end
    return '"mysql":null,"issuer":null,"origin_reachable":false'
end

-- The `inval` section, node-wide (the same fields as the Pingora edge's):
-- subscribed when every worker is; messages as heard by one worker (each
-- worker hears every message; the ignored legacy form included); entries
-- dropped from the shared dict; re-subscriptions beyond each worker's first.
local function inval_part()
    local m = counters.metric
    local workers = ngx.worker.count()
    local subscribed = inval.subscribed_workers() == workers
    local messages = math.floor((m("inval_applied") + m("inval_invalid") + m("inval_legacy")) / workers)
    local reconnects = math.max(0, m("inval_subscriptions") - workers)
    return format('"inval":{"subscribed":%s,"messages":%d,"dropped":%d,"superseded":%d,"reconnects":%d}',
        subscribed and "true" or "false", messages, m("inval_drop_node"), m("inval_superseded"), reconnects)
end

-- The status document.
function M.document()
    local c = counters.get
    return format('{"protocol":%d,"service":"edge","local":{"hit":%d,"miss":%d},'
        .. '"redis":{"hit":%d,"miss":%d,"error":%d},"origin":{"forward":%d,"error":%d},'
        .. '"lock":{"get":%d,"error":%d},%s,%s,%s%s}',
        PROTOCOL, c("local_hit"), c("local_miss"), c("redis_hit"), c("redis_miss"), c("redis_error"),
        c("origin_forward"), c("origin_error"), c("lock_get"), c("lock_error"), inval_part(), clicks_stats.status_part(),
        origin_part(), geo.status_part())
end

return M
