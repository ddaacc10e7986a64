-- A tiny HTTP/1.1 client over cosockets for the requests the edge makes
-- itself (record fetch, status fetch) and the origin health check. Connections
-- are pooled per origin like the Pingora connector does, each at most
-- origin.pool_idle_timeout_ms.
local tcp = ngx.socket.tcp
local lower, find, sub = string.lower, string.find, string.sub
local now, update_time = ngx.now, ngx.update_time

local M = {}

local MAX_BODY = 64 * 1024

-- One GET on a connection from `pool` (nil: a fresh connection, closed
-- after use). Returns the answer, or nil, err, and whether it failed on a
-- reused connection before any byte of an answer (the origin closed it
-- while it sat idle).
local function attempt(o, path, host_header, auth, deadline, connect_ms, budget_ms, pool)
    local function left()
        update_time()
        return math.max(1, math.floor((deadline - now()) * 1000))
    end
    local sock = tcp()
    sock:settimeouts(math.min(connect_ms, budget_ms), left(), left())
    local ok, err = sock:connect(o.host, o.port, { pool = pool or (o.pool .. "#fresh") })
    if not ok then
        return nil, "connect: " .. tostring(err)
    end
    local reused = pool ~= nil and (sock:getreusedtimes() or 0) > 0
    local fail = function(e, early)
        sock:close()
        return nil, e, early and reused and e ~= "timeout"
    end
    sock:settimeouts(left(), left(), left())
    ok, err = sock:send({ "GET ", path, " HTTP/1.1\r\nHost: ", host_header,
        auth and "\r\nAuthorization: " or "", auth or "",
        "\r\nUser-Agent: shorturl-edge-lua\r\n\r\n" })
    if not ok then
        return fail(err, true)
    end
    sock:settimeouts(left(), left(), left())
    local line, partial
    line, err, partial = sock:receive("*l")
    if not line then
        return fail(err, partial == nil or partial == "")
    end
    local status = tonumber(line:match("^HTTP/1%.[01] (%d%d%d)"))
    if not status then
        return fail("bad status line")
    end
    local headers = {}
    while true do
        line, err = sock:receive("*l")
        if not line then
            return fail(err)
        end
        if line == "" then
            break
        end
        local k, v = line:match("^([^:]+):%s*(.-)%s*$")
        if k then
            headers[lower(k)] = v
        end
    end
    local body = ""
    local te = headers["transfer-encoding"]
    local close = pool == nil or (headers["connection"] and lower(headers["connection"]) == "close")
    if te and find(lower(te), "chunked", 1, true) then
        local parts, total = {}, 0
        while true do
            sock:settimeouts(left(), left(), left())
            line, err = sock:receive("*l")
            if not line then
                return fail(err)
            end
            local size = tonumber(line:match("^%x+"), 16)
            if not size then
                return fail("bad chunk size")
            end
            if size == 0 then
                repeat
                    line, err = sock:receive("*l")
                    if not line then
                        return fail(err)
                    end
                until line == ""
                break
            end
            total = total + size
            if total > MAX_BODY then
                return fail("body too large")
            end
            local data
            data, err = sock:receive(size + 2)
            if not data then
                return fail(err)
            end
            parts[#parts + 1] = sub(data, 1, size)
        end
        body = table.concat(parts)
    elseif headers["content-length"] then
        local n = tonumber(headers["content-length"])
        if not n or n > MAX_BODY then
            return fail("bad content-length")
        end
        if n > 0 then
            sock:settimeouts(left(), left(), left())
            body, err = sock:receive(n)
            if not body then
                return fail(err)
            end
        end
    elseif status ~= 204 and status ~= 304 then
        sock:settimeouts(left(), left(), left())
        body, err = sock:receive("*a")
        if not body then
            return fail(err)
        end
        close = true
    end
    if close then
        sock:close()
    else
        -- Pooled at most origin.pool_idle_timeout_ms: well under the time
        -- the origin keeps an idle connection.
        sock:setkeepalive(o.pool_idle_ms, 64)
    end
    return { status = status, headers = headers, body = body }
end

-- GET path from host:port with a whole-request budget, on a pooled
-- connection; `auth`: the Authorization value (the internal token) or nil.
-- When that connection fails before any byte of an answer (the origin
-- closed it while it sat idle), the GET is made once more on a fresh
-- connection, as the Pingora edge does (its internal GETs).
-- Returns {status=, headers={lowercased}, body=} or nil, err.
function M.get(o, path, host_header, budget_ms, connect_ms, auth)
    update_time()
    local deadline = now() + budget_ms / 1000
    local r, err, stale = attempt(o, path, host_header, auth, deadline, connect_ms, budget_ms, o.pool)
    if not r and stale then
        r, err = attempt(o, path, host_header, auth, deadline, connect_ms, budget_ms, nil)
    end
    return r, err
end

-- `max-age=N` from a Cache-Control value, in seconds.
function M.max_age(v)
    if not v then
        return nil
    end
    for d in v:gmatch("[^,]+") do
        local n = d:match("^%s*max%-age=%s*(%d+)%s*$")
        if n then
            return tonumber(n)
        end
    end
    return nil
end

return M
