-- config.lua of the legacy OpenResty short-link edge, as the old fleet has it.
-- The Pingora edge reads it directly:
--   shorturl-edge --lua-config conf/legacy/config.lua [--test]
-- It runs in a sandbox (no os, io, require): plain tables and string/math only.
-- Keys the edge has no use for (mysql, domain.allowed, pool sizes) are
-- accepted and reported; unknown keys stop the edge with an error naming them.
local config = {
    listen = 8080,
    worker_processes = 2,

    domain = {
        default = "s.example.com",
        -- creation whitelist: enforced by the origin now
        allowed = { "s.shop55.com", "go.brand91.cn" },
    },

    redis = {
        host = "127.0.0.1",
        port = 6379,
        password = "s3cr/t",
        db = 2,
        timeout = 30,          -- ms
        pool_size = 100,
        keepalive = 60000,
    },

    -- The old edge read MySQL on a Redis miss; the new edge asks the origin,
    -- which owns these settings (conf/origin.yaml).
    mysql = {
        host = "10.0.0.21",
        port = 3306,
        database = "shorturl",
        user = "shorturl",
        password = "CHANGE_ME",
        timeout = 1000,
    },

    origin = {
        servers = { "127.0.0.1:8081", "127.0.0.1:8082" },
        timeout = 500,         -- ms, record fetch on a miss
        connect_timeout = 100,
    },

    cache = {
        lru_size = 100000,
        ttl = 30,              -- seconds
        negative_ttl = 5,
    },

    redirect = {
        status = 302,
        cache_control = "private, max-age=60",
    },
}

return config
