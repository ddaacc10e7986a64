-- The origin pool: a health check (worker 0, every
-- health_check_interval_ms; any HTTP answer means up, except one saying
-- `Shorturl-Health: draining`, as on the Pingora edge) and round-robin
-- selection of a healthy origin.
local http = require("shorturl.http")

local state = ngx.shared.shorturl_state

local M = {}

local cfg
local rr = 0 -- per-worker round-robin position

-- Whether a health-check answer (or nil: none) means the origin may get
-- requests (origin::health_verdict): any HTTP answer, a 503 included (an
-- origin whose MySQL is down still serves records from Redis), except one
-- carrying `Shorturl-Health: draining` (it is stopping).
local function healthy(r)
    if not r then
        return false
    end
    local h = r.headers["shorturl-health"]
    return not (h and h:lower() == "draining")
end

local function check_origins()
    local interval = cfg.origin.health_check_interval_ms
    for i, o in ipairs(cfg.origins) do
        local r = http.get(o, cfg.origin.health_check_path, cfg.default_domain, math.max(interval, 200),
            cfg.origin.connect_timeout_ms)
        state:set("down:" .. i, not healthy(r))
    end
end

-- Starts the health check (in worker 0 only: the result is node-wide).
function M.init_worker(c)
    cfg = c
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

local refused_logged = 0 -- per worker: when a refused token was last logged

-- An origin answered one of the module's own requests 401: the internal
-- token is missing or wrong. Logged at error level at most every 10 s per
-- worker, naming the setting, never the token.
function M.note_status(status, path)
    if status ~= 401 then
        return
    end
    local t = ngx.now()
    if t - refused_logged >= 10 then
        refused_logged = t
        ngx.log(ngx.ERR, "shorturl: the origin refused the internal token (401) on ", path,
            ": set origin.internal_token (start.sh: SU_ORIGIN_INTERNAL_TOKEN) to the token whose SHA-256 ",
            "is the origin's internal.token_sha256")
    end
end

-- The next healthy origin, round robin; nil when all are down.
function M.select()
    local n = #cfg.origins
    for _ = 1, n do
        rr = rr % n + 1
        if not state:get("down:" .. rr) then
            return cfg.origins[rr]
        end
    end
    return nil
end

return M
