-- The origin pool: a health check (worker 0, every
-- health_check_interval_ms; any HTTP answer means up, as on the Pingora
-- edge) and round-robin selection of a healthy origin.
local http = require("shorturl.http")

local state = ngx.shared.shorturl_state

local M = {}

local cfg
local rr = 0 -- per-worker round-robin position

local function check_origins()
    local interval = cfg.origin.health_check_interval_ms
    for i, o in ipairs(cfg.origins) do
        -- Any HTTP answer means the process is up (as on the Pingora edge).
        local r = http.get(o, cfg.origin.health_check_path, cfg.default_domain, math.max(interval, 200),
            cfg.origin.connect_timeout_ms)
        state:set("down:" .. i, r == nil)
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
