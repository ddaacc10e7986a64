-- TLS certificates for the OpenResty edge, from the same store as the
-- Pingora edges (protocol section 3.3): chosen by SNI in
-- ssl_certificate_by_lua, exact name first, then the wildcard one label up
-- (`*.shop55.com` for `s.shop55.com`), else nginx's own certificate (the
-- default one, `ssl_certificate` in nginx.conf).
--
-- For a name, the shared store in Redis (`su:1:tls:cert:{name}`, JSON with
-- the PEM chain and the private key, sealed: seal.lua) wins over the
-- certificate directory (`<dir>/<name>.crt` + `.key`, wildcards
-- `_wildcard.<domain>`). A sealed key that does not open (tampered, moved,
-- unknown key) is refused like a broken bundle, counted
-- (`shorturl_tls_store_refused_total{reason}`) and logged with its key id;
-- a plaintext one from before sealing is used and counted
-- (`shorturl_tls_store_plaintext_total`), as on the Pingora edge. Parsed
-- certificates are cached per worker for `cache_secs` (a miss too), so a
-- handshake costs a Redis round trip only once per name and period; when
-- Redis fails, the last certificate loaded keeps being served.
local ssl = require("ngx.ssl")
local lrucache = require("resty.lrucache")
local redis = require("shorturl.redis")
local json = require("shorturl.json")
local seal = require("shorturl.seal")
local counters = require("shorturl.counters")

local lower, sub, find = string.lower, string.sub, string.find

local M = {}

local opts -- { redis = conn cfg, cert_dir = path or nil, cache_secs = n, keys = store keys or nil }
local cache

-- `o`: { redis = the module's Redis spec (config.lua: any mode),
-- cert_dir = "...", cache_secs = 5, store_keys = config.lua's store keys }.
-- Called on every edge: challenge answers need the shared store even
-- without TLS.
function M.init(o)
    local spec = {}
    for k, v in pairs(o.redis) do
        spec[k] = v
    end
    spec.timeout_ms, spec.connect_timeout_ms = 1000, 1000
    spec.pool_size, spec.keepalive_ms = 16, 60000
    spec.pool_prefix = "su-tls:"
    opts = { redis = redis.new(spec), cert_dir = o.cert_dir ~= "" and o.cert_dir or nil, cache_secs = o.cache_secs or 5,
        keys = o.store_keys }
end

-- The Redis connection settings of the shared store (nil before init).
function M.redis_conn()
    return opts and opts.redis
end

local function read_file(path)
    local f = io.open(path, "rb")
    if not f then
        return nil
    end
    local s = f:read("*a")
    f:close()
    return s
end

local function parse(cert_pem, key_pem)
    local cert, err = ssl.parse_pem_cert(cert_pem)
    if not cert then
        return nil, err
    end
    local key, kerr = ssl.parse_pem_priv_key(key_pem)
    if not key then
        return nil, kerr
    end
    return { cert = cert, key = key }
end

-- The private key of a stored bundle, opened; nil when refused.
local function open_key(redis_key, value)
    local plain, how, id = seal.open(opts.keys, redis_key, value)
    if plain then
        if how == "plaintext" then
            counters.inc("tls_store_plaintext")
        end
        return plain
    end
    counters.inc("tls_store_refused_" .. how)
    ngx.log(ngx.WARN, "shorturl tls: shared-store value refused: ", redis_key, ": ", how,
        id and (" (key " .. id .. ")") or "")
    return nil
end

-- The certificate stored for exactly `name` (`*.x` for a wildcard):
-- entry, false (none), or nil, err (Redis failed).
local function load(name)
    local redis_key = "su:1:tls:cert:" .. name
    local v, err = redis.get(opts.redis, redis_key)
    if v then
        local b = json.decode(v)
        if type(b) == "table" and type(b.cert) == "string" and type(b.key) == "string" then
            local key = open_key(redis_key, b.key)
            if key then
                local e, perr = parse(b.cert, key)
                if e then
                    return e
                end
                ngx.log(ngx.WARN, "shorturl tls: bad shared certificate for ", name, ": ", perr)
            end
        end
    end
    if opts.cert_dir then
        local stem = name:gsub("^%*%.", "_wildcard.")
        local crt = read_file(opts.cert_dir .. "/" .. stem .. ".crt")
        local key = crt and read_file(opts.cert_dir .. "/" .. stem .. ".key")
        if crt and key then
            local e, perr = parse(crt, key)
            if e then
                return e
            end
            ngx.log(ngx.WARN, "shorturl tls: bad certificate file for ", name, ": ", perr)
        end
    end
    if v == nil then
        return nil, err
    end
    return false
end

local function lookup(name)
    local e, stale = cache:get(name)
    if e ~= nil then
        return e
    end
    local got, err = load(name)
    if got == nil then
        ngx.log(ngx.WARN, "shorturl tls: shared store unavailable: ", err)
        got = stale or false
    end
    cache:set(name, got, opts.cache_secs)
    return got
end

-- ssl_certificate_by_lua: installs the certificate for the SNI name; with
-- no SNI or no certificate for it, nginx's default one stays.
function M.certificate()
    if not opts then
        return
    end
    if not cache then
        cache = lrucache.new(10000)
    end
    local name = ssl.server_name()
    if not name or name == "" then
        return
    end
    name = lower(name)
    if sub(name, -1) == "." then
        name = sub(name, 1, -2)
    end
    local e = lookup(name)
    if not e then
        local dot = find(name, ".", 1, true)
        local up = dot and sub(name, dot + 1)
        -- A wildcard needs two labels under it.
        if up and find(up, ".", 1, true) then
            e = lookup("*." .. up)
        end
    end
    if not e then
        return
    end
    local ok, err = ssl.clear_certs()
    if ok then
        ok, err = ssl.set_cert(e.cert)
    end
    if ok then
        ok, err = ssl.set_priv_key(e.key)
    end
    if not ok then
        ngx.log(ngx.ERR, "shorturl tls: cannot install the certificate for ", name, ": ", err)
        return ngx.exit(ngx.ERROR)
    end
end

return M
