-- Tests of click counting by link key (protocol 3.6): clicks.lua counts a
-- redirect under proto.click_key (a fleet code alone, any other code as
-- `<domain>/<code>`, so one custom code on two domains is two links), and
-- clicks_batch.lua writes the keys in byte order and picks the format
-- version (3 with a per-domain key, else 2 with `t` lines, else 1).
-- The counts go through clicks.lua's own flush (its timer, every 50 ms)
-- with redis.run replaced by a stub keeping each XADD: no Redis needed.
-- Run by t/run.sh (content_by_lua_file).
local clicks = require("shorturl.clicks")
local clicks_batch = require("shorturl.clicks_batch")
local redis = require("shorturl.redis")

local t = require("check").new()
local eq, ok = t.eq, t.ok

local DESKTOP = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36"
local SHOP, GO = "s.shop55.com", "go.brand91.cn"

---------------------------------------------------------------- a stub Redis
local sent = {}
local real_run, real_command = redis.run, redis.command
redis.command = function(...)
    return { ... }
end
-- The pipeline clicks.lua sends: XLEN, then XADD su:1:clicks MAXLEN ~ n *
-- id <id> v <v> b <body>.
redis.run = function(_, _, cmds)
    for _, c in ipairs(cmds) do
        if c[1] == "XADD" then
            sent[#sent + 1] = { id = c[8], v = c[10], body = c[12] }
        end
    end
    return { 0, "1-0" }
end

clicks.init({ clicks = { enabled = true, bots_file = ngx.var.su_repo .. "/common/data/bots.txt", edge_name = "t",
    flush_interval_ms = 50, max_buffered_clicks = 100000 }, redis_conn = {} })
clicks.init_worker()

-- The batches of the next flush (counting never yields: one flush takes
-- every click counted before it).
local function flushed()
    for _ = 1, 100 do
        if #sent > 0 then
            break
        end
        ngx.sleep(0.02)
    end
    local out = sent
    sent = {}
    return out
end

-- The time of the counts below: each block counts without yielding, so
-- ngx.time() is the one clicks.lua reads.
local function hour_day()
    local now = ngx.time()
    return now - now % 3600, now - now % 86400
end

-- The three lines of one desktop click without a referrer on `key`.
local function one_click(key, h, d)
    return string.format("h %s %d 1 0\nr %s %d - 1\nd %s %d desktop 1\n", key, h, key, d, key, d)
end

-- One click on `code` from SHOP: one batch of `version`, counted under `key`.
local function single(what, code, key, version)
    local h, d = hour_day()
    clicks.count(code, SHOP, false, DESKTOP, nil)
    local b = flushed()
    eq(#b, 1, what .. ": one batch")
    eq(b[1] and b[1].v, version, what .. ": version " .. version)
    eq(b[1] and b[1].body, one_click(key, h, d), what .. ": counted under " .. key)
end

-- A fleet code: the bare code, version 1; a custom code: <domain>/<code>, version 3.
single("fleet code", "aB3xYz", "aB3xYz", "1")
single("custom code", "sale", "s.shop55.com/sale", "3")

---------------------------------------------------------------- one custom code on two domains: two links
do
    local h, d = hour_day()
    clicks.count("sale", SHOP, false, DESKTOP, nil)
    clicks.count("sale", SHOP, true, DESKTOP, nil) -- HEAD: a bot
    clicks.count("sale", GO, false, DESKTOP, "https://news.example/a")
    local b = flushed()
    eq(#b, 1, "two domains: one batch")
    eq(b[1] and b[1].v, "3", "two domains: version 3")
    local want = table.concat({
        string.format("h go.brand91.cn/sale %d 1 0", h),
        string.format("h s.shop55.com/sale %d 1 1", h),
        string.format("r go.brand91.cn/sale %d news.example 1", d),
        string.format("r s.shop55.com/sale %d - 2", d),
        string.format("d go.brand91.cn/sale %d desktop 1", d),
        string.format("d s.shop55.com/sale %d desktop 1", d),
        string.format("d s.shop55.com/sale %d bot 1", d),
    }, "\n") .. "\n"
    eq(b[1] and b[1].body, want, "two domains: counted separately")
end

---------------------------------------------------------------- 6 characters with _ or -: per domain; key order
do
    local _, d = hour_day()
    clicks.count("ab_cde", SHOP, false, DESKTOP, nil)
    clicks.count("ab-cde", SHOP, false, DESKTOP, nil)
    clicks.count("aB3xYz", GO, false, DESKTOP, nil)
    clicks.count("Zz9aaa", SHOP, false, DESKTOP, nil)
    clicks.count("sale", "[::1]", false, DESKTOP, nil)
    local b = flushed()
    eq(#b, 1, "mixed keys: one batch")
    eq(b[1] and b[1].v, "3", "mixed keys: version 3")
    local keys = {}
    for key in ((b[1] and b[1].body) or ""):gmatch("d (%S+) " .. d .. " desktop 1\n") do
        keys[#keys + 1] = key
    end
    -- Byte order of the keys: 'Z' < '[' < 'a', '-' < '_'.
    eq(table.concat(keys, " "), "Zz9aaa [::1]/sale aB3xYz s.shop55.com/ab-cde s.shop55.com/ab_cde",
        "6 characters with _ or - per domain, keys in byte order")
end

---------------------------------------------------------------- destinations: 2 for fleet codes, 3 with a per-domain key
do
    local _, d = hour_day()
    clicks.count("aB3xYz", SHOP, false, DESKTOP, nil, "r1")
    local b = flushed()
    eq(b[1] and b[1].v, "2", "fleet code with options: version 2")
    ok(b[1] and b[1].body:find("\nt aB3xYz " .. d .. " r1 1\n", 1, true), "fleet code with options: t line")
    clicks.count("sale", SHOP, false, DESKTOP, nil, "r1")
    b = flushed()
    eq(b[1] and b[1].v, "3", "custom code with options: version 3")
    ok(b[1] and b[1].body:find("\nt s.shop55.com/sale " .. d .. " r1 1\n", 1, true),
        "custom code with options: t line under its key")
end

---------------------------------------------------------------- the version is per batch
do
    local h, d = hour_day()
    local function counts() -- one desktop click (clicks.lua's tables)
        return { h = { [h] = { 1, 0 } }, d = { [d] = { r = { ["-"] = 1 }, t = { link = 1 }, routed = false,
            0, 1, 0, 0, 0 } } }
    end
    local max = clicks_batch.MAX_LINES
    clicks_batch.MAX_LINES = 3 -- one link a batch
    local n = 0
    local b = clicks_batch.build({ aB3xYz = counts(), ["s.shop55.com/sale"] = counts() }, function()
        n = n + 1
        return "t:x:" .. n
    end)
    clicks_batch.MAX_LINES = max
    eq(#b, 2, "split: two batches")
    eq(b[1] and b[1].v, "1", "split: the fleet code's batch stays version 1")
    eq(b[1] and b[1].body, one_click("aB3xYz", h, d), "split: first batch")
    eq(b[2] and b[2].v, "3", "split: the per-domain key's batch is version 3")
    eq(b[2] and b[2].body, one_click("s.shop55.com/sale", h, d), "split: second batch")
end

---------------------------------------------------------------- report
clicks.enabled = false
redis.run, redis.command = real_run, real_command
t.report()
