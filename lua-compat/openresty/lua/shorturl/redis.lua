-- A small RESP client over cosockets (Debian has no lua-resty-redis): one
-- GET per call, connections back to nginx's keepalive pool, so a lookup
-- costs one round trip (AUTH/SELECT run only on fresh connections); and the
-- reply reader the invalidation subscriber (inval.lua) uses.
--
-- A connection setting ("conn", built by M.new) is one of three modes:
-- `single` (host, port: GET has its own straight path below), `cluster`
-- (redis_cluster.lua: the slot map, MOVED/ASK) and `sentinel`
-- (redis_sentinel.lua: the master named by the Sentinels). Every command
-- goes through M.get or M.run with the key it touches, so the topology
-- sends it to the node that serves that key.
local tcp = ngx.socket.tcp
local sub, byte = string.sub, string.byte

local M = {}

-- Parses redis://[[user]:password@]host[:port][/db] into a table (host
-- nil when empty: cluster and sentinel URLs carry only credentials).
function M.parse_url(url)
    local rest = url:match("^redis://(.*)$")
    if not rest then
        return nil, "redis url must start with redis://"
    end
    local auth, hostpart = rest:match("^(.*)@([^@]*)$")
    if not auth then
        hostpart = rest
    end
    local user, password
    if auth then
        user, password = auth:match("^([^:]*):(.*)$")
        if not user then
            password = auth
        end
        if user == "" then
            user = nil
        end
    end
    local hostport, db = hostpart:match("^([^/]*)/?(%d*)/?$")
    if not hostport then
        return nil, "bad redis url " .. url
    end
    local host, port = hostport:match("^%[(.+)%]:?(%d*)$")
    if not host then
        host, port = hostport:match("^([^:]+):?(%d*)$")
    end
    if not host and hostport ~= "" then
        return nil, "bad redis host in " .. url
    end
    return {
        host = host,
        port = tonumber(port) or 6379,
        db = tonumber(db),
        user = user,
        password = password and ngx.unescape_uri(password) or nil,
    }
end

-- One command in RESP (a table of strings, for sock:send).
local function command(...)
    local args = { ... }
    local out = { "*", #args, "\r\n" }
    for _, a in ipairs(args) do
        out[#out + 1] = "$"
        out[#out + 1] = #a
        out[#out + 1] = "\r\n"
        out[#out + 1] = a
        out[#out + 1] = "\r\n"
    end
    return out
end
M.command = command

local read_reply

-- The reply whose first line is `line`: a string, a number, false for a
-- nil bulk, a table for an array; or nil, err.
local function read_value(sock, line)
    local t, rest = byte(line, 1), sub(line, 2)
    if t == 36 then -- '$' bulk string
        local n = tonumber(rest)
        if not n then
            return nil, "bad bulk length"
        end
        if n < 0 then
            return false
        end
        local data, e = sock:receive(n + 2)
        if not data then
            return nil, e
        end
        return sub(data, 1, n)
    elseif t == 43 then -- '+'
        return rest
    elseif t == 45 then -- '-'
        return nil, "redis: " .. rest
    elseif t == 58 then -- ':'
        return tonumber(rest)
    elseif t == 42 then -- '*' array (pub/sub frames)
        local n = tonumber(rest)
        if not n then
            return nil, "bad array length"
        end
        local items = {}
        for i = 1, n do
            local v, e = read_reply(sock)
            if v == nil then
                return nil, e
            end
            items[i] = v
        end
        return items
    end
    return nil, "unexpected reply " .. line
end
M.read_value = read_value

-- Reads one reply (see read_value).
read_reply = function(sock)
    local line, err = sock:receive("*l")
    if not line then
        return nil, err
    end
    return read_value(sock, line)
end
M.read_reply = read_reply

-- AUTH (and SELECT, when `db`) for a fresh connection, as commands to send
-- before the first real one; returns them and how many replies they give.
function M.setup_commands(cfg, with_db)
    local req = {}
    if cfg.password then
        if cfg.user then
            req[#req + 1] = command("AUTH", cfg.user, cfg.password)
        else
            req[#req + 1] = command("AUTH", cfg.password)
        end
    end
    if with_db and cfg.db and cfg.db ~= 0 then
        req[#req + 1] = command("SELECT", tostring(cfg.db))
    end
    return req, #req
end

-- Sends the commands `cmds` (each from M.command) in one pipeline to
-- `node` ({ host, port, pool }) with the AUTH/SELECT of `conn` on a fresh
-- connection; with `asking`, each is preceded by ASKING (a cluster's ASK
-- redirection). Returns the replies in order, an error reply as
-- { err = "redis: ..." }; or nil, err when the node could not be used.
function M.exec(conn, node, cmds, asking, read_timeout_ms)
    local sock = tcp()
    local rt = read_timeout_ms or conn.timeout_ms
    sock:settimeouts(conn.connect_timeout_ms, rt, rt)
    local ok, err = sock:connect(node.host, node.port, { pool = node.pool, pool_size = conn.pool_size })
    if not ok then
        return nil, "connect " .. node.host .. ":" .. node.port .. ": " .. tostring(err)
    end
    local req, setup = {}, 0
    if sock:getreusedtimes() == 0 then
        req, setup = M.setup_commands(conn, conn.mode ~= "cluster")
    end
    for _, c in ipairs(cmds) do
        if asking then
            req[#req + 1] = command("ASKING")
        end
        req[#req + 1] = c
    end
    ok, err = sock:send(req)
    if not ok then
        sock:close()
        return nil, "send: " .. tostring(err)
    end
    for _ = 1, setup do
        local v, e = read_reply(sock)
        if v == nil then
            sock:close()
            return nil, e
        end
    end
    local replies = {}
    for i = 1, #cmds do
        if asking then
            local a, e = read_reply(sock)
            if a == nil and not (e and e:find("^redis: ")) then
                sock:close()
                return nil, e
            end
        end
        local v, e = read_reply(sock)
        if v == nil then
            -- A protocol error leaves the stream usable, a transport error does not.
            if not (e and e:find("^redis: ")) then
                sock:close()
                return nil, e
            end
            v = { err = e }
        end
        replies[i] = v
    end
    sock:setkeepalive(conn.keepalive_ms, conn.pool_size)
    return replies
end

-- The pipeline `cmds`, all on `key` (one slot), on the node serving it;
-- replies as M.exec.
function M.run(conn, key, cmds, read_timeout_ms)
    local topo = conn.topo
    if topo then
        return topo:run(conn, key, cmds, read_timeout_ms)
    end
    return M.exec(conn, conn, cmds, false, read_timeout_ms)
end

-- GET through the topology (cluster, sentinel).
local function routed_get(conn, key)
    local replies, err = conn.topo:run(conn, key, { command("GET", key) })
    if not replies then
        return nil, err
    end
    local v = replies[1]
    if type(v) == "table" then
        return nil, v.err or "unexpected reply type"
    elseif type(v) == "number" then
        return nil, "unexpected reply type"
    end
    return v
end

-- GET key within cfg.timeout_ms. Returns value, or false on a miss, or nil, err.
function M.get(cfg, key)
    if cfg.topo then
        return routed_get(cfg, key)
    end
    local sock = tcp()
    sock:settimeouts(cfg.connect_timeout_ms, cfg.timeout_ms, cfg.timeout_ms)
    local ok, err = sock:connect(cfg.host, cfg.port, { pool = cfg.pool, pool_size = cfg.pool_size })
    if not ok then
        return nil, "connect: " .. tostring(err)
    end
    local req, setup = {}, 0
    if sock:getreusedtimes() == 0 then
        req, setup = M.setup_commands(cfg, true)
    end
    req[#req + 1] = command("GET", key)
    local sent
    sent, err = sock:send(req)
    if not sent then
        sock:close()
        return nil, err
    end
    for _ = 1, setup do
        local r, e = read_reply(sock)
        if r == nil then
            sock:close()
            return nil, e
        end
    end
    local v, e = read_reply(sock)
    if v == nil then
        -- A protocol error leaves the stream usable, a transport error does not.
        if e and e:find("^redis: ") then
            sock:setkeepalive(cfg.keepalive_ms, cfg.pool_size)
        else
            sock:close()
        end
        return nil, e
    end
    sock:setkeepalive(cfg.keepalive_ms, cfg.pool_size)
    if type(v) == "number" or type(v) == "table" then
        return nil, "unexpected reply type"
    end
    return v
end

-- Where the invalidation subscriber (inval.lua) subscribes next: the
-- server (single), the current master (sentinel), or the next node of the
-- cluster (PUBLISH reaches every node). Returns { host, port } or nil, err.
function M.pubsub_node(conn)
    if conn.topo then
        return conn.topo:pubsub_node(conn)
    end
    return conn
end

-- Per-worker start (init_worker): a cluster fetches its slot map.
function M.init_worker(conn)
    if conn.topo then
        conn.topo:start(conn)
    end
end

-- A connection setting from a validated spec: `mode`; single: host, port,
-- db; cluster: `seeds`, sentinel: `sentinels` (lists of { host, port }) and
-- `master_name`; always user, password, timeout_ms, connect_timeout_ms,
-- pool_size, keepalive_ms and `pool_prefix` (keepalive pools are per node
-- and per prefix).
function M.new(spec)
    local conn = {}
    for k, v in pairs(spec) do
        conn[k] = v
    end
    -- One GET is bounded by timeout_ms, connection wait included.
    conn.connect_timeout_ms = math.min(conn.connect_timeout_ms, conn.timeout_ms)
    if spec.mode == "cluster" then
        conn.topo = require("shorturl.redis_cluster").new(spec)
    elseif spec.mode == "sentinel" then
        conn.topo = require("shorturl.redis_sentinel").new(spec)
    else
        conn.pool = spec.pool_prefix .. spec.host .. ":" .. spec.port
    end
    return conn
end

return M
