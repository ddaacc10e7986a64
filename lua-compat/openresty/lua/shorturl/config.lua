-- Configuration of the OpenResty edge: a Lua file returning a table shaped
-- like the `edge:` section of conf/edge.yaml (same names, same units, same
-- defaults), merged over the defaults below and validated at start, so a
-- mistake stops nginx with a message naming the key.
local proto = require("shorturl.proto")
local redis = require("shorturl.redis")
local net = require("shorturl.net")
local seal = require("shorturl.seal")

local M = {}
local format = string.format

local function defaults()
    return {
        default_domain = "localhost",
        redis = {
            -- single (url) | cluster (nodes: seeds) | sentinel (sentinels
            -- + master_name), as the Pingora edge's `redis:`. In cluster
            -- and sentinel modes `url` gives only the credentials (and the
            -- database, sentinel only).
            mode = "single",
            url = "redis://127.0.0.1:6379/",
            nodes = {},
            sentinels = {},
            master_name = "",
            timeout_ms = 30,
            connect_timeout_ms = 200,
            pool_size = 64,
            keepalive_ms = 60000,
        },
        origin = {
            servers = { "127.0.0.1:8081" },
            connect_timeout_ms = 100,
            read_timeout_ms = 5000,
            record_timeout_ms = 500,
            status_timeout_ms = 300,
            health_check_interval_ms = 1000,
            health_check_path = "/healthz",
            -- The module's own connections to an origin (record, status,
            -- health check) stay pooled at most this long: well under the
            -- origin's idle close (its limits.header_timeout_secs, 10 s).
            pool_idle_timeout_ms = 5000,
            -- The shared edge token, sent as `Authorization: Bearer` on the
            -- module's own requests to an origin (record fetch, status
            -- merge); "" = none. A secret: never logged.
            internal_token = "",
        },
        cache = {
            -- Per-worker LRU (entries) and the node-wide lua_shared_dict.
            -- Both off = Redis on every request (the load-test anchor).
            lru = true,
            lru_items = 100000,
            shared = true,
            positive_ttl_secs = 30,
            negative_ttl_secs = 5,
            unavailable_ttl_ms = 1000,
            -- Invalidation (protocol section 3.2): how long a message's
            -- version outlives it, refusing older answers of lookups in
            -- flight; how long entries are trusted while not subscribed.
            tombstone_ttl_ms = 10000,
            unsubscribed_grace_ms = 5000,
        },
        redirect = {
            status = 302,
            cache_control = "private, max-age=60",
            not_found_cache_control = "no-store",
        },
        -- Only from these peers is the client taken from X-Forwarded-For.
        trusted_proxies = {},
        -- nginx's access log (start.sh: SU_ACCESS_LOG): client addresses
        -- cut to their network, IPv4 /24 and IPv6 /48 (net.truncated;
        -- start.sh: SU_ACCESS_LOG_TRUNCATE=1).
        access_log = { truncate_addresses = false },
        -- Who may GET /shorturl_status; everyone else gets the normal 404.
        status_allow = { "127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7" },
        limits = {
            unknown_per_ip_per_sec = 50,
            creations_per_ip_per_sec = 20,
            refused_creations_per_ip_per_min = 10,
            clients_tracked = 100000,
            ipv6_prefix_len = 64,
            max_uri_bytes = 4096,
            max_header_bytes = 16384,
            -- nginx directives (rendered by start.sh from SU_* variables).
            header_timeout_secs = 5,
            max_connections = 10000,
            max_connections_per_ip = 64,
            keepalive_timeout_secs = 60,
        },
        -- Click counting (protocol section 3.4), the Pingora edge's `clicks:`.
        clicks = {
            enabled = true,
            -- 50..5000: a worker flushes its counts at least this often.
            flush_interval_ms = 5000,
            -- The batch-id prefix; "" = the host name (sanitised), else "edge".
            edge_name = "",
            -- Unsent clicks kept while Redis is unreachable (node-wide,
            -- split evenly over the workers); beyond, the oldest are dropped.
            max_buffered_clicks = 1000000,
            -- Bytes of unsent batches kept (node-wide, split over the
            -- workers), at least 4 MiB; beyond, the oldest are dropped.
            max_buffered_bytes = 67108864,
            -- common/data/bots.txt; "" = the path start.sh rendered.
            bots_file = "",
            -- Protocol 3.7: human clicks also counted by country, browser,
            -- OS, language, source and UTM (batch version 5 of 3.8, `x` lines);
            -- false for a fleet whose origins are older than 3.8.
            dimensions = true,
            -- common/data/ua_families.txt (the browser and OS families);
            -- "" = the path start.sh rendered.
            families_file = "",
            -- Human clicks also counted by city (`city:<CC>-<name>`), from
            -- the geo.mmdb_path database only; needs it and dimensions.
            city = false,
        },
        -- The shared TLS store's key material (protocol section 3.3), the
        -- Pingora edge's `tls.store_key` / `store_old_keys`: base64 of 32
        -- bytes; the old keys only open values sealed before a rotation.
        -- Required with a TLS listener (start.sh: SU_TLS_STORE_KEY).
        tls = {
            store_key = "",
            store_old_keys = {},
        },
        -- Password-protected links (protocol section 4.5), the Pingora
        -- edge's `unlock:`: the keys whose unlock tokens (cookie `su_pass`)
        -- open a link, base64 of 32 bytes each; every one is accepted (the
        -- origin's current key and those still live after a rotation).
        -- None: no token is valid, a password link only ever gets its form
        -- or the 401 (start.sh: SU_UNLOCK_KEYS).
        unlock = {
            keys = {},
        },
        -- The visitor's country, for the link rules' `cc` condition
        -- (protocol section 3.1.1), the Pingora edge's `geo:`.
        geo = {
            -- A request header carrying it (e.g. CF-IPCountry), read only
            -- from a peer in trusted_proxies; "" = none.
            country_header = "",
            -- A MaxMind DB country database (ip-location-db's
            -- `country_code`, GeoLite2's `country.iso_code`) for the
            -- client's address, when the header gives none; "" = none.
            mmdb_path = "",
            -- How often each worker checks the file for a change.
            reload_interval_ms = 5000,
        },
        -- Link rules (protocol section 3.1.1).
        link_rules = {
            -- common/data/inapp.txt (the `app` condition); "" = the path
            -- start.sh rendered.
            inapp_file = "",
            -- common/data/crawlers.txt (protocol 4.4: the link-preview
            -- crawlers a link with a social card answers with its card);
            -- "" = the path start.sh rendered.
            crawlers_file = "",
        },
        -- Workers exit with the master (tests kill the master with SIGKILL).
        die_with_master = false,
    }
end

local function merge(into, from, path)
    for k, v in pairs(from) do
        local name = path == "" and k or (path .. "." .. k)
        local cur = into[k]
        if cur == nil then
            error("unknown setting " .. name, 0)
        end
        if type(cur) == "table" and #cur == 0 and type(v) == "table" and next(cur) ~= nil then
            merge(cur, v, name)
        elseif type(cur) ~= type(v) then
            error(name .. " must be a " .. type(cur) .. " (got " .. type(v) .. ")", 0)
        else
            into[k] = v
        end
    end
end

-- /etc/hosts first (the resolver directive does not read it), like
-- getaddrinfo does for the Pingora edge.
local function hosts_file()
    local map = {}
    local f = io.open("/etc/hosts", "r")
    if not f then
        return map
    end
    for line in f:lines() do
        line = line:gsub("#.*", "")
        local ip, names = line:match("^%s*(%S+)%s+(.+)$")
        if ip and ip:find("^%d+%.%d+%.%d+%.%d+$") then
            for name in names:gmatch("%S+") do
                if not map[name:lower()] then
                    map[name:lower()] = ip
                end
            end
        end
    end
    f:close()
    return map
end

local function resolve_name(host, hosts)
    if host:find("^%d+%.%d+%.%d+%.%d+$") then
        return host
    end
    return hosts[host:lower()] or host
end

local function positive(v, name)
    if type(v) ~= "number" or v <= 0 then
        error(name .. " must be > 0", 0)
    end
end

-- A list of host:port strings as { host, port } (names from /etc/hosts).
local function addr_list(list, name, hosts)
    if #list == 0 then
        error(name .. " must list at least one host:port", 0)
    end
    local out = {}
    for i, s in ipairs(list) do
        local host, port
        if type(s) == "string" then
            host, port = s:match("^%[?([^%]]+)%]?:(%d+)$")
        end
        if not host or tonumber(port) < 1 or tonumber(port) > 65535 then
            error(name .. ": cannot read " .. tostring(s) .. " as host:port", 0)
        end
        out[i] = { host = resolve_name(host, hosts), port = tonumber(port) }
    end
    return out
end

-- The `redis` section as a connection spec for redis.new.
local function redis_spec(rc, hosts)
    local spec, err = redis.parse_url(rc.url)
    if not spec then
        error("redis.url is invalid: " .. err, 0)
    end
    if rc.mode == "single" then
        if not spec.host then
            error("redis.url must name the server (redis://host:port/)", 0)
        end
        spec.host = resolve_name(spec.host, hosts)
    elseif rc.mode == "cluster" or rc.mode == "sentinel" then
        spec.host, spec.port = nil, nil
        if rc.mode == "cluster" then
            if spec.db and spec.db ~= 0 then
                error("redis.url: a cluster has only database 0 (got " .. spec.db .. ")", 0)
            end
            spec.seeds = addr_list(rc.nodes, "redis.nodes", hosts)
        else
            spec.sentinels = addr_list(rc.sentinels, "redis.sentinels", hosts)
            if rc.master_name == "" or rc.master_name:find("%s") then
                error("redis.master_name must name the master the Sentinels monitor", 0)
            end
            spec.master_name = rc.master_name
        end
    else
        error("redis.mode must be single, cluster or sentinel (got " .. tostring(rc.mode) .. ")", 0)
    end
    spec.mode = rc.mode
    for _, k in ipairs({ "timeout_ms", "connect_timeout_ms", "pool_size", "keepalive_ms" }) do
        positive(rc[k], "redis." .. k)
        spec[k] = rc[k]
    end
    spec.pool_prefix = "su-redis:"
    return spec
end

-- [A-Za-z0-9._-], 1-64 bytes (a batch id's edge-name part).
local function valid_name(s)
    return #s >= 1 and #s <= 64 and not s:find("[^A-Za-z0-9._%-]")
end

-- The host name without characters a batch id cannot hold, else "edge".
local function default_edge_name()
    local f = io.open("/proc/sys/kernel/hostname", "r") or io.open("/etc/hostname", "r")
    local name = f and f:read("*l") or ""
    if f then
        f:close()
    end
    name = name:gsub("[^A-Za-z0-9._%-]", ""):sub(1, 64)
    return name ~= "" and name or "edge"
end

local function check_clicks(c, nginx)
    local k = c.clicks
    local ms = k.flush_interval_ms
    if ms % 1 ~= 0 or ms < 50 or ms > 5000 then
        error("clicks.flush_interval_ms must be a whole number from 50 to 5000 (got " .. tostring(ms) .. ")", 0)
    end
    if k.max_buffered_clicks % 1 ~= 0 or k.max_buffered_clicks < 1 then
        error("clicks.max_buffered_clicks must be a whole number >= 1", 0)
    end
    if k.max_buffered_bytes % 1 ~= 0 or k.max_buffered_bytes < 4194304 then
        error("clicks.max_buffered_bytes must be a whole number >= 4194304 (4 MiB)", 0)
    end
    if k.edge_name == "" then
        k.edge_name = default_edge_name()
    elseif not valid_name(k.edge_name) then
        error("clicks.edge_name must be 1-64 of [A-Za-z0-9._-] (got " .. k.edge_name .. ")", 0)
    end
    if k.bots_file == "" then
        k.bots_file = nginx.bots_file or ""
    end
    if k.enabled and k.bots_file == "" then
        error("clicks.bots_file must name the bot list (common/data/bots.txt)", 0)
    end
    if k.families_file == "" then
        k.families_file = nginx.families_file or ""
    end
    if k.enabled and k.dimensions and k.families_file == "" then
        error("clicks.families_file must name the browser and OS families (common/data/ua_families.txt)", 0)
    end
    -- The city is one of the dimensions, and comes from the database alone
    -- (checked in the Pingora edge's order).
    if k.city and not k.dimensions then
        error("clicks.city needs clicks.dimensions", 0)
    end
    if k.city and c.geo.mmdb_path == "" then
        error("clicks.city needs geo.mmdb_path (a city database such as GeoLite2-City)", 0)
    end
end

-- `tls.store_key` and `tls.store_old_keys` as { current = key, old = { ... } }
-- (nil without a current key); errors name the setting, never the key.
-- `tls_listener`: nginx was rendered with a TLS listener, whose handshakes
-- read private keys from the shared store, so a key is required.
local function store_keys(t, tls_listener)
    if t.store_key == "" then
        if #t.store_old_keys > 0 then
            error("tls.store_old_keys needs a current key in tls.store_key", 0)
        end
        if tls_listener then
            error("tls.store_key is required with a TLS listener (private keys in Redis are sealed with it): "
                .. "base64 of 32 random bytes (`openssl rand -base64 32`), through start.sh's SU_TLS_STORE_KEY", 0)
        end
        return nil
    end
    local current, err = seal.parse_key(t.store_key)
    if not current then
        error("tls.store_key: " .. err, 0)
    end
    local keys = { current = current, old = {} }
    local seen = { [current.id] = true }
    for i, text in ipairs(t.store_old_keys) do
        local k, kerr = seal.parse_key(text)
        if not k then
            error(format("tls.store_old_keys[%d]: %s", i - 1, kerr), 0)
        end
        if seen[k.id] then
            error(format("tls.store_old_keys[%d]: key %s is listed twice (the current key is not an old one)",
                i - 1, k.id), 0)
        end
        seen[k.id] = true
        keys.old[#keys.old + 1] = k
    end
    return keys
end

-- `unlock.keys` as { { id, key }, ... }; errors name the setting and the
-- variable start.sh fills it from, never the key.
local function unlock_keys(list)
    local keys, seen = {}, {}
    for i, text in ipairs(list) do
        local k, err = seal.parse_key(text)
        if not k then
            error(format("unlock.keys[%d] (start.sh: SU_UNLOCK_KEYS): %s", i - 1, err), 0)
        end
        if seen[k.key] then
            error(format("unlock.keys[%d] (start.sh: SU_UNLOCK_KEYS): key %s is listed twice", i - 1, k.id), 0)
        end
        seen[k.key] = true
        keys[#keys + 1] = k
    end
    return keys
end

-- An RFC 9110 field name (token).
local function field_name(s)
    return #s >= 1 and not s:find("[^!#$%%&'*+%-.^_`|~0-9A-Za-z]")
end

local function check_geo(c, nginx)
    local g = c.geo
    if g.country_header ~= "" and not field_name(g.country_header) then
        error("geo.country_header must be a header name such as CF-IPCountry (got " .. g.country_header .. ")", 0)
    end
    g.country_header_lc = g.country_header:lower()
    local ms = g.reload_interval_ms
    if ms % 1 ~= 0 or ms < 1 then
        error("geo.reload_interval_ms must be a whole number > 0 (got " .. tostring(ms) .. ")", 0)
    end
    if g.country_header ~= "" and #c.trusted == 0 then
        -- Believed only from a trusted proxy: with none it is never read.
        ngx.log(ngx.WARN, "shorturl: geo.country_header is set but trusted_proxies is empty: it is never read")
    end
    local l = c.link_rules
    if l.inapp_file == "" then
        l.inapp_file = nginx.inapp_file or ""
    end
    if l.inapp_file == "" then
        error("link_rules.inapp_file must name the in-app browser patterns (common/data/inapp.txt)", 0)
    end
    if l.crawlers_file == "" then
        l.crawlers_file = nginx.crawlers_file or ""
    end
    if l.crawlers_file == "" then
        error("link_rules.crawlers_file must name the link-preview crawlers (common/data/crawlers.txt)", 0)
    end
end

-- Limits that are nginx directives, not module settings: nginx.conf is
-- rendered with them before the module loads its config.
local NGINX_LIMITS = { "header_timeout_secs", "max_connections", "max_connections_per_ip", "keepalive_timeout_secs",
    "clients_tracked" }
-- (`nginx.bots_file`, `nginx.families_file`, `nginx.inapp_file` and
-- `nginx.crawlers_file`, also rendered by start.sh, are the defaults of
-- clicks.bots_file, clicks.families_file, link_rules.inapp_file and
-- link_rules.crawlers_file;
-- `nginx.tls_listener` says whether it rendered a TLS listener.)

-- Loads and validates `path`; returns the config or raises a message.
-- `nginx` holds the values start.sh rendered into nginx.conf for the
-- NGINX_LIMITS: a config file stating another value is refused, since
-- nginx would not apply it.
function M.load(path, nginx)
    local chunk, err = loadfile(path)
    if not chunk then
        error("cannot load " .. path .. ": " .. tostring(err), 0)
    end
    local ok, user = pcall(chunk)
    if not ok or type(user) ~= "table" then
        error(path .. " must return a table: " .. tostring(user), 0)
    end
    local c = defaults()
    merge(c, user, "")
    nginx = nginx or {}
    for _, k in ipairs(NGINX_LIMITS) do
        local given = user.limits and user.limits[k]
        if nginx[k] ~= nil then
            if given ~= nil and given ~= nginx[k] then
                error(format("limits.%s is %s here but nginx was rendered with %s: set it through start.sh (SU_* "
                    .. "variables)", k, tostring(given), tostring(nginx[k])), 0)
            end
            c.limits[k] = nginx[k]
        end
    end
    local dd = proto.normalize_host(c.default_domain)
    if not dd then
        error("default_domain " .. c.default_domain .. " is not a valid host", 0)
    end
    c.default_domain = dd
    local hosts = hosts_file()
    c.redis_spec = redis_spec(c.redis, hosts)
    c.redis_conn = redis.new(c.redis_spec)
    if #c.origin.servers == 0 then
        error("origin.servers must list at least one origin", 0)
    end
    c.origins = {}
    for i, s in ipairs(c.origin.servers) do
        local host, port = s:match("^%[?([^%]]+)%]?:(%d+)$")
        if not host then
            error("origin.servers: cannot read " .. tostring(s) .. " as host:port", 0)
        end
        host = resolve_name(host, hosts)
        c.origins[i] = {
            host = host,
            port = tonumber(port),
            name = s,
            proxy = host .. ":" .. port,
            pool = "su-origin:" .. host .. ":" .. port,
            pool_idle_ms = c.origin.pool_idle_timeout_ms,
        }
    end
    for _, k in ipairs({ "connect_timeout_ms", "read_timeout_ms", "record_timeout_ms", "status_timeout_ms",
        "health_check_interval_ms", "pool_idle_timeout_ms" }) do
        positive(c.origin[k], "origin." .. k)
    end
    local token = c.origin.internal_token
    if token ~= "" then
        if #token > 512 or token:find("[^!-~]") then
            error("origin.internal_token must be 1 to 512 visible ASCII characters (no spaces); \"\" sends none", 0)
        end
        c.origin_auth = "Bearer " .. token
    end
    if c.origin.health_check_path:sub(1, 1) ~= "/" then
        error("origin.health_check_path must start with /", 0)
    end
    local st = c.redirect.status
    if st ~= 301 and st ~= 302 and st ~= 307 and st ~= 308 then
        error("redirect.status must be one of 301, 302, 307, 308 (got " .. tostring(st) .. ")", 0)
    end
    for _, k in ipairs({ "cache_control", "not_found_cache_control" }) do
        local v = c.redirect[k]
        if v == "" or v:find("%c") then
            error("redirect." .. k .. " must be a non-empty header value", 0)
        end
    end
    positive(c.cache.positive_ttl_secs, "cache.positive_ttl_secs")
    positive(c.cache.negative_ttl_secs, "cache.negative_ttl_secs")
    positive(c.cache.unavailable_ttl_ms, "cache.unavailable_ttl_ms")
    positive(c.cache.lru_items, "cache.lru_items")
    positive(c.cache.tombstone_ttl_ms, "cache.tombstone_ttl_ms")
    positive(c.cache.unsubscribed_grace_ms, "cache.unsubscribed_grace_ms")
    if c.limits.max_uri_bytes < 64 or c.limits.max_header_bytes < 256 then
        error("limits.max_uri_bytes must be >= 64 and max_header_bytes >= 256", 0)
    end
    for _, k in ipairs({ "unknown_per_ip_per_sec", "creations_per_ip_per_sec", "refused_creations_per_ip_per_min",
        "max_connections", "max_connections_per_ip" }) do
        local v = c.limits[k]
        if v < 0 or v % 1 ~= 0 then
            error("limits." .. k .. " must be a whole number >= 0 (0 = off)", 0)
        end
    end
    positive(c.limits.clients_tracked, "limits.clients_tracked")
    positive(c.limits.header_timeout_secs, "limits.header_timeout_secs")
    positive(c.limits.keepalive_timeout_secs, "limits.keepalive_timeout_secs")
    local p = c.limits.ipv6_prefix_len
    if p < 1 or p > 128 or p % 1 ~= 0 then
        error("limits.ipv6_prefix_len must be 1..128", 0)
    end
    check_clicks(c, nginx)
    c.store_keys = store_keys(c.tls, nginx.tls_listener)
    c.unlock_keys = unlock_keys(c.unlock.keys)
    c.trusted = net.parse_list(c.trusted_proxies, "trusted_proxies")
    c.status_cidrs = net.parse_list(c.status_allow, "status_allow")
    check_geo(c, nginx)
    return c
end

return M
