-- Node-wide counters (lua_shared_dict shorturl_state): the /shorturl_status
-- dimensions, like the Pingora process's, and the other metrics.
local state = ngx.shared.shorturl_state

local M = {}

-- The status counters, `<dimension>_<result>`.
M.STATS = { "local_hit", "local_miss", "redis_hit", "redis_miss", "redis_error", "origin_forward",
    "origin_error", "lock_get", "lock_error" }

-- Adds one to the status counter `name`.
function M.stat(name)
    state:incr("s:" .. name, 1, 0)
end

-- The status counter `name`.
function M.get(name)
    return state:get("s:" .. name) or 0
end

-- Adds one to the metric `name` (not a status dimension).
function M.inc(name)
    state:incr("m:" .. name, 1, 0)
end

-- The metric `name`.
function M.metric(name)
    return state:get("m:" .. name) or 0
end

return M
