-- Tests of click counting by link key (protocol 3.6): clicks.lua counts a
-- redirect under proto.click_key (a fleet code alone, any other code as
-- `<domain>/<code>`, so one custom code on two domains is two links), and
-- clicks_batch.lua writes the keys in byte order and picks the format
-- version (3 with a per-domain key, else 2 with `t` lines, else 1).
-- With clicks.dimensions (protocol 3.7) a human click is also counted by
-- its dimensions (clicks_dims.lua): the `x` lines after the `t` lines,
-- version 4; the first part runs with it off, the old bodies; with
-- clicks.city the city too, the last dimension. And then
-- (protocol 3.7) the unique visitors (clicks_uniq.lua): the visitor hash,
-- registers, sketches, the salts in a stub Redis, and the `u` lines.
-- And the paced flush: a build with a pace gives the same batches byte for
-- byte, and clicks counted while the flush is paused go to the next one.
-- The counts go through clicks.lua's own flush (its timer, every 50 ms)
-- with redis.run replaced by a stub keeping each XADD: no Redis needed.
-- Run by t/run.sh (content_by_lua_file).
local clicks = require("shorturl.clicks")
local clicks_batch = require("shorturl.clicks_batch")
local clicks_dims = require("shorturl.clicks_dims")
local link_rules = require("shorturl.link_rules")
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
-- The pipelines clicks.lua sends: XLEN, then XADD su:1:clicks MAXLEN ~ n *
-- id <id> v <v> b <body>; and for the salts of unique visitors SET <key>
-- <salt> NX EX <secs>, then GET <key> (kept in `kv`, their TTL in `ttl`;
-- `set_at` the time of the SET; `salt_down`: those fail as an unreachable
-- Redis does).
local kv, ttl, set_at, salt_down = {}, {}, {}, false
-- `xadd_down`: the click pipelines fail as an unreachable Redis's do.
local xadd_down = false
redis.run = function(_, key, cmds)
    local replies = {}
    for i, c in ipairs(cmds) do
        if (c[1] == "XADD" or c[1] == "XLEN") and xadd_down then
            return nil, "connect: refused (stub)"
        elseif c[1] == "XADD" then
            sent[#sent + 1] = { id = c[8], v = c[10], body = c[12] }
            replies[i] = "1-0"
        elseif c[1] == "XLEN" then
            replies[i] = 0
        elseif salt_down then
            return nil, "connect: refused (stub)"
        elseif c[1] == "SET" then
            assert(c[2] == key and c[4] == "NX" and c[5] == "EX", "SET key value NX EX secs")
            if kv[key] == nil then
                kv[key], ttl[key], set_at[key] = c[3], tonumber(c[6]), ngx.time()
                replies[i] = "OK"
            else
                replies[i] = false
            end
        elseif c[1] == "GET" then
            replies[i] = kv[key] or false
        end
    end
    return replies
end

local repo = ngx.var.su_repo
-- The link rules' in-app patterns (edge.lua loads them at start): the
-- browser dimension looks for them first.
assert(link_rules.load_inapp(repo .. "/common/data/inapp.txt") > 0)
local function init(dimensions, max_bytes, max_clicks, city)
    clicks.init({ clicks = { enabled = true, bots_file = repo .. "/common/data/bots.txt", edge_name = "t",
        flush_interval_ms = 50, max_buffered_clicks = max_clicks or 100000,
        max_buffered_bytes = max_bytes or 67108864,
        dimensions = dimensions, city = city,
        families_file = repo .. "/common/data/ua_families.txt" }, redis_conn = {} })
end
-- The clicks of protocol 3.6 first, dimensions off: the bodies of before.
init(false)
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

---------------------------------------------------------------- dimensions: the families, language, QR marker, UTM
local CHROME_WIN = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
    .. "Chrome/120.0.0.0 Safari/537.36"
local SAFARI_IOS = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
    .. "Version/17.1 Mobile/15E148 Safari/604.1"
local EDGE_MAC = "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
    .. "Chrome/120.0.0.0 Safari/537.36 Edg/120.0.2210.91"
local FIREFOX_LINUX = "Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0"
local WECHAT_ANDROID = "Mozilla/5.0 (Linux; Android 13; PGT-AN10) AppleWebKit/537.36 (KHTML, like Gecko) "
    .. "Version/4.0 Chrome/111.0.5563.116 Mobile Safari/537.36 XWEB/1160117 MMWEBSDK/20231202 "
    .. "MicroMessenger/8.0.47.2560(0x28002F30) WeChat/arm64 Weixin NetType/WIFI Language/zh_CN ABI/arm64"
local CHROME_ANDROID = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) "
    .. "Chrome/120.0.0.0 Mobile Safari/537.36"
local FIREFOX_WIN = "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:121.0) Gecko/20100101 Firefox/121.0"
-- Neither a bot nor of any family: a human click whose dimensions are all
-- defaults.
local PLAIN_UA = "Mozilla/5.0 (compatible; Browsyx 1.0)"

do
    local n = clicks_dims.load(repo .. "/common/data/ua_families.txt")
    ok(n and n > 20, "the family file loads: " .. tostring(n))
    local function fam(ua)
        local b, o = clicks_dims.families(ua)
        return (b or "other") .. "/" .. (o or "other")
    end
    -- dims.rs families_follow_the_file_order, and more.
    eq(fam(CHROME_WIN), "chrome/windows", "families: Chrome on Windows")
    eq(fam(SAFARI_IOS), "safari/ios", "families: Safari on iOS (not macos: iPhone first)")
    eq(fam(EDGE_MAC), "edge/macos", "families: Edge on macOS (not chrome: Edg/ first)")
    eq(fam(FIREFOX_LINUX), "firefox/linux", "families: Firefox on Linux")
    eq(fam(WECHAT_ANDROID), "wechat/android", "families: WeChat's in-app browser first (not chrome)")
    eq(fam(CHROME_ANDROID), "chrome/android", "families: Chrome on Android (not linux)")
    eq(fam(FIREFOX_WIN), "firefox/windows", "families: Firefox on Windows")
    eq(fam("curl/8.4"), "other/other", "families: none")
    eq(fam(""), "other/other", "families: empty")
    eq(fam(nil), "other/other", "families: no header")
    eq(fam("mozilla/5.0 (iphone) chrome/1"), "other/other", "families: tokens are case-sensitive")
    eq(fam(PLAIN_UA), "other/other", "families: an unknown browser")

    -- dims.rs language_is_the_first_ranges_primary_subtag, and more.
    local lang = clicks_dims.lang
    eq(lang("zh-CN,zh;q=0.9,en;q=0.8"), "zh", "lang: zh-CN,zh;q=0.9")
    eq(lang(" EN_us ; q=1"), "en", "lang: spaces, `_`, upper case")
    eq(lang("fil"), "fil", "lang: three letters")
    eq(lang("\tde\t;q=0.5, fr"), "de", "lang: tabs trimmed, the first range whatever its q")
    eq(lang("en-US;q=0.1,fr"), "en", "lang: the first range, not the preferred one")
    eq(lang("*"), nil, "lang: * is none")
    eq(lang("x-klingon"), nil, "lang: one letter")
    eq(lang("e1"), nil, "lang: not letters")
    eq(lang("engl"), nil, "lang: four letters")
    eq(lang(""), nil, "lang: empty")
    eq(lang(",en"), nil, "lang: empty first range")
    eq(lang(nil), nil, "lang: no header")

    -- dims.rs the_qr_marker_is_one_parameter.
    local qr = clicks_dims.has_qr
    ok(qr("qr=1"), "qr: alone")
    ok(qr("a=b&qr=1"), "qr: last")
    ok(qr("qr=1&x"), "qr: first")
    ok(not qr("qr=10"), "qr: qr=10 is not")
    ok(not qr("xqr=1"), "qr: xqr=1 is not")
    ok(not qr("qr=1%26"), "qr: qr=1%26 is not")
    ok(not qr(""), "qr: empty query")
    ok(not qr(nil), "qr: no query")

    -- dims.rs utm_values_come_from_the_locations_query.
    local function utm(url)
        local a, b, c = clicks_dims.utm(url)
        return tostring(a) .. " " .. tostring(b) .. " " .. tostring(c)
    end
    eq(utm("https://a.example/x"), "nil nil nil", "utm: no query")
    eq(utm("https://a.example/utm_x"), "nil nil nil", "utm: utm_ in the path only")
    eq(utm("https://a/p?utm_source=mail&utm_medium=&utm_campaign=spring%2024&utm_source=x&utm_medium=late"
        .. "#utm_medium=y"), "mail nil spring%2024", "utm: the first of a name decides, empty is none, # ends it")
    eq(utm("https://a/?utm_medium=a b&utm_campaign=" .. string.rep("a", 65) .. "&utm_source=-"),
        "nil ~other ~other", "utm: a space or 65 bytes: ~other; `-` is the default")
    eq(utm("https://a/?utm_campaign=" .. string.rep("a", 64)), "nil nil " .. string.rep("a", 64),
        "utm: 64 bytes as they are")
    eq(utm("https://a/?utm_source=A.z_0~%7E+-"), "A.z_0~%7E+- nil nil", "utm: every byte allowed")
    eq(utm("https://a/?utm_source=a!b&UTM_MEDIUM=x&utm_campaign"), "~other nil nil",
        "utm: `!` is ~other, names are case-sensitive, no `=` is empty")
    eq(utm("https://a/?utm_source=-"), "nil nil nil", "utm: `-` alone")
    eq(utm("https://a/x?a=1?utm_source=s#f"), "nil nil nil", "utm: after the first `?` only")
    eq(utm("https://a/x?a=1&utm_source=s?x#utm_medium=m?"), "~other nil nil", "utm: `?` in a value is ~other")
    eq(utm(nil), "nil nil nil", "utm: no Location")

    -- The marker is never forwarded (link_rules.forward_query skips it).
    local fq = link_rules.forward_query
    eq(fq("https://d.example/p", "qr=1"), "https://d.example/p", "forwarding: qr=1 alone, no `?`")
    eq(fq("https://d.example/p", "a=1&qr=1&b=2&qr=1"), "https://d.example/p?a=1&b=2", "forwarding: every qr=1 dropped")
    eq(fq("https://d.example/p", "qr=10&xqr=1&qr=1%26"), "https://d.example/p?qr=10&xqr=1&qr=1%26",
        "forwarding: only qr=1 itself")
    eq(fq("https://d.example/p?x=1#f", "qr=1&utm_source=news"), "https://d.example/p?x=1&utm_source=news#f",
        "forwarding: the rest forwarded")
    local opts = require("check").options('{"f":true}')
    eq(link_rules.choose(opts, "https://d.example/p", false, "aB3xYz", { query = "qr=1" }, 0), "https://d.example/p",
        "choose: qr=1 alone, nothing forwarded")
    eq(link_rules.choose(opts, "https://d.example/p", false, "aB3xYz", { query = "a=1&qr=1&b=2" }, 0),
        "https://d.example/p?a=1&b=2", "choose: qr=1 dropped from the forwarded query")
end

---------------------------------------------------------------- dimensions: counted and sent (version 4)
init(true)
do
    local h, d = hour_day()
    local k = "aB3xYz"
    local asked = 0
    local function country_of(cc)
        return function(headers)
            asked = asked + 1
            ok(type(headers) == "table", "country: asked with the headers")
            return cc
        end
    end
    local LOC = "https://dest.example/p?utm_source=news&utm_medium=email&utm_campaign=spring"
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz?qr=1",
        { ["accept-language"] = "zh-CN,zh;q=0.9" }, "CN")
    clicks.count(k, SHOP, false, FIREFOX_LINUX, nil, nil, "https://dest.example/p", "/aB3xYz",
        { ["accept-language"] = "*" }, country_of(nil))
    clicks.count(k, SHOP, false, SAFARI_IOS, nil, nil, "https://dest.example/p?utm_source=a!b", "/aB3xYz?qr=10",
        { ["accept-language"] = { "en-US", "de" } }, country_of("US"))
    clicks.count(k, SHOP, false, EDGE_MAC, nil, nil, "https://dest.example/p", "/aB3xYz?x=qr=1", {}, false)
    clicks.count(k, SHOP, false, WECHAT_ANDROID, nil, nil, nil, nil, nil, nil)
    -- Bots: in no dimension, their country never asked.
    clicks.count(k, SHOP, true, CHROME_WIN, nil, nil, LOC, "/aB3xYz?qr=1", { ["accept-language"] = "fr" },
        country_of("FR"))
    clicks.count(k, SHOP, false, "curl/8.4", nil, nil, LOC, "/aB3xYz?qr=1", { ["accept-language"] = "fr" },
        country_of("FR"))
    clicks.count(k, SHOP, false, nil, nil, nil, LOC, "/aB3xYz?qr=1", nil, country_of("FR"))
    eq(asked, 2, "country: asked for the human clicks only")
    local b = flushed()
    eq(#b, 1, "dimensions: one batch")
    eq(b[1] and b[1].v, "5", "dimensions: version 5 (a fleet code without options)")
    local function x(what, n)
        return string.format("x %s %d %s %d", k, d, what, n)
    end
    local want = table.concat({
        string.format("h %s %d 5 3", k, h),
        string.format("d %s %d mobile 2", k, d),
        string.format("d %s %d desktop 3", k, d),
        x("country:CN", 1), x("country:US", 1),
        x("browser:chrome", 1), x("browser:edge", 1), x("browser:firefox", 1), x("browser:safari", 1),
        x("browser:wechat", 1),
        x("os:android", 1), x("os:ios", 1), x("os:linux", 1), x("os:macos", 1), x("os:windows", 1),
        x("lang:en", 1), x("lang:zh", 1),
        x("source:qr", 1),
        x("utm_source:news", 1), x("utm_source:~other", 1),
        x("utm_medium:email", 1),
        x("utm_campaign:spring", 1),
    }, "\n") .. "\n"
    eq(b[1] and b[1].body, want, "dimensions: the x lines after the others, by dimension then value")
end

do -- x lines follow t lines; a per-domain key's batch with x lines is version 5
    local _, d = hour_day()
    clicks.count("sale", SHOP, false, FIREFOX_WIN, nil, "r1", "https://d.example/?utm_medium=cpc", "/sale")
    local b = flushed()
    eq(b[1] and b[1].v, "5", "per-domain key with dimensions: version 5")
    local k = "s.shop55.com/sale"
    ok(b[1] and b[1].body:find(string.format("\nt %s %d r1 1\nx %s %d browser:firefox 1\nx %s %d os:windows 1\n"
        .. "x %s %d utm_medium:cpc 1\n$", k, d, k, d, k, d, k, d)), "t lines, then x lines: "
        .. t.show(b[1] and b[1].body))
end

do -- every dimension at its default: no x line, still version 5 (counted by dimension), no implied line
    local h, d = hour_day()
    clicks.count("aB3xYz", SHOP, false, PLAIN_UA, nil, nil, "https://d.example/", "/aB3xYz?q=1",
        { ["accept-language"] = "*" }, nil)
    clicks.count("aB3xYz", SHOP, false, "curl/8", nil, nil, "https://d.example/?utm_source=x", "/aB3xYz?qr=1")
    local b = flushed()
    eq(b[1] and b[1].v, "5", "only defaults and bots: version 5")
    eq(b[1] and b[1].body, string.format("h aB3xYz %d 1 1\nd aB3xYz %d other 1\n", h, d),
        "only defaults and bots: no x line, no r - and d bot line")
end

do -- per link-day and dimension the top 20 by clicks (ties by value), the rest as ~other
    local _, d = hour_day()
    -- dims.rs a_day_keeps_the_top_20_of_each_dimension: campaign c<i> has
    -- i + 1 clicks, every even one from a QR code; and an invalid value
    -- (~other of its own: folded into the line of the rest, never one of
    -- the 20), and ties at the cut decided by value.
    for i = 0, 24 do
        for _ = 0, i do
            clicks.count("aB3xYz", SHOP, false, PLAIN_UA, nil, nil,
                string.format("https://d.example/?utm_campaign=c%02d", i), i % 2 == 0 and "/aB3xYz?qr=1" or "/aB3xYz",
                nil, "CN")
        end
    end
    for _ = 1, 30 do
        clicks.count("aB3xYz", SHOP, false, PLAIN_UA, nil, nil, "https://d.example/?utm_campaign=a!b", "/aB3xYz", nil,
            "CN")
    end
    -- utm_source: 21 values tied at one click: the 20 first by value kept.
    -- `~zz` sorts after `~other` (byte order).
    for i = 1, 20 do
        clicks.count("abcdef", SHOP, false, PLAIN_UA, nil, nil, string.format("https://d.example/?utm_source=s%02d", i),
            "/abcdef")
    end
    clicks.count("abcdef", SHOP, false, PLAIN_UA, nil, nil, "https://d.example/?utm_source=~zz", "/abcdef")
    clicks.count("abcdef", SHOP, false, PLAIN_UA, nil, nil, "https://d.example/?utm_source=~zz", "/abcdef")
    local b = flushed()
    eq(#b, 1, "top 20: one batch")
    local body = b[1] and b[1].body or ""
    local xs = {}
    for line in body:gmatch("x aB3xYz " .. d .. " ([^\n]*)\n") do
        xs[#xs + 1] = line
    end
    local want = { "country:CN 355", "source:qr 169" }
    for i = 5, 24 do
        want[#want + 1] = string.format("utm_campaign:c%02d %d", i, i + 1)
    end
    want[#want + 1] = "utm_campaign:~other " .. (1 + 2 + 3 + 4 + 5 + 30)
    eq(table.concat(xs, ","), table.concat(want, ","), "top 20 campaigns and ~other (a real ~other folded in)")
    xs = {}
    for line in body:gmatch("x abcdef " .. d .. " ([^\n]*)\n") do
        xs[#xs + 1] = line
    end
    want = {}
    for i = 1, 19 do
        want[#want + 1] = string.format("utm_source:s%02d 1", i)
    end
    want[#want + 1] = "utm_source:~other 1"
    want[#want + 1] = "utm_source:~zz 2"
    eq(table.concat(xs, ","), table.concat(want, ","), "ties by value at the cut; lines in value byte order")
end

---------------------------------------------------------------- the city (clicks.city): the last dimension
do -- clicks.city off: the city never asked, no city line
    local asked = 0
    clicks.count("aB3xYz", SHOP, false, PLAIN_UA, nil, nil, "https://d.example/", "/aB3xYz", nil, "GB", nil,
        function()
            asked = asked + 1
            return "GB-London"
        end)
    local b = flushed()
    eq(asked, 0, "city off: never asked")
    ok(b[1] and not b[1].body:find("city:", 1, true), "city off: no city line")
end

init(true, nil, nil, true)
do -- a human click's city after its UTM values, in value byte order; bots in none, their city never asked
    local h, d = hour_day()
    local k = "aB3xYz"
    local asked = 0
    local function city_of(v)
        return function()
            asked = asked + 1
            return v
        end
    end
    local LOC = "https://dest.example/p?utm_campaign=spring"
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "GB", nil, "GB-London")
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "GB", nil, city_of("GB-London"))
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "SE", nil, city_of("SE-Link%C3%B6ping"))
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "BR", nil, "BR-S%C3%A3o%20Paulo")
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "CN", nil, city_of("~other"))
    clicks.count(k, SHOP, false, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "US", nil, city_of(nil))
    -- Only a city: its line alone.
    clicks.count(k, SHOP, false, PLAIN_UA, nil, nil, nil, nil, nil, nil, nil, city_of("DE-Berlin"))
    -- Bots: in no dimension, their city never asked.
    clicks.count(k, SHOP, true, CHROME_WIN, nil, nil, LOC, "/aB3xYz", nil, "GB", nil, city_of("GB-London"))
    clicks.count(k, SHOP, false, "curl/8.4", nil, nil, LOC, "/aB3xYz", nil, "GB", nil, city_of("GB-London"))
    eq(asked, 5, "city: asked for the human clicks only")
    local b = flushed()
    eq(#b, 1, "city: one batch")
    eq(b[1] and b[1].v, "5", "city: the batch version unchanged")
    local function x(what, n)
        return string.format("x %s %d %s %d", k, d, what, n)
    end
    local want = table.concat({
        string.format("h %s %d 7 2", k, h),
        string.format("d %s %d desktop 6", k, d),
        string.format("d %s %d other 1", k, d),
        x("country:BR", 1), x("country:CN", 1), x("country:GB", 2), x("country:SE", 1), x("country:US", 1),
        x("browser:chrome", 6),
        x("os:windows", 6),
        x("utm_campaign:spring", 6),
        x("city:BR-S%C3%A3o%20Paulo", 1), x("city:DE-Berlin", 1), x("city:GB-London", 2),
        x("city:SE-Link%C3%B6ping", 1), x("city:~other", 1),
    }, "\n") .. "\n"
    eq(b[1] and b[1].body, want, "city: the last dimension, after utm_campaign, in value byte order")
end

do -- the city's top 20 by clicks (ties by value), the rest and a ~other as ~other
    local _, d = hour_day()
    -- c01..c22: c<i> has 1 click, c21 and c22 3; and a name past 64 bytes twice.
    for i = 1, 22 do
        for _ = 1, i > 20 and 3 or 1 do
            clicks.count("abcdef", SHOP, false, PLAIN_UA, nil, nil, nil, "/abcdef", nil, nil, nil,
                string.format("XX-c%02d", i))
        end
    end
    clicks.count("abcdef", SHOP, false, PLAIN_UA, nil, nil, nil, "/abcdef", nil, nil, nil, "~other")
    clicks.count("abcdef", SHOP, false, PLAIN_UA, nil, nil, nil, "/abcdef", nil, nil, nil, "~other")
    local b = flushed()
    local xs = {}
    for line in (b[1] and b[1].body or ""):gmatch("x abcdef " .. d .. " ([^\n]*)\n") do
        xs[#xs + 1] = line
    end
    local want = {}
    for i = 1, 18 do
        want[#want + 1] = string.format("city:XX-c%02d 1", i)
    end
    want[#want + 1] = "city:XX-c21 3"
    want[#want + 1] = "city:XX-c22 3"
    want[#want + 1] = "city:~other " .. (2 + 2)
    eq(table.concat(xs, ","), table.concat(want, ","), "city: top 20, the rest (a ~other folded in) as ~other")
end
init(true)

do -- the version is per batch: 4 only for the batch with x lines
    local h, d = hour_day()
    local max = clicks_batch.MAX_LINES
    clicks_batch.MAX_LINES = 3
    local n = 0
    local b = clicks_batch.build({
        aB3xYz = { h = { [h] = { 1, 0 } }, d = { [d] = { r = { ["-"] = 1 }, t = { link = 1 }, routed = false,
            0, 1, 0, 0, 0 } } },
        abcdef = { h = { [h] = { 1, 0 } }, d = { [d] = { r = { ["-"] = 1 }, t = { link = 1 }, routed = false,
            0, 1, 0, 0, 0, x = { [2] = { chrome = 1 } } } } },
    }, function()
        n = n + 1
        return "t:x:" .. n
    end)
    clicks_batch.MAX_LINES = max
    eq(#b, 2, "split with x lines: two batches")
    eq(b[1] and b[1].v, "1", "split: the batch without x lines stays version 1")
    eq(b[2] and b[2].v, "4", "split: the batch with x lines is version 4")
    eq(b[2] and b[2].body, one_click("abcdef", h, d) .. string.format("x abcdef %d browser:chrome 1\n", d),
        "split: the x line with its link")
end

---------------------------------------------------------------- unique visitors (protocol 3.7): u lines
local clicks_uniq = require("shorturl.clicks_uniq")
local state = ngx.shared.shorturl_state
-- The visitors' test vector, shared with common/src/clicks/uniq.rs's test
-- (salt 000102030405060708090a0b0c0d0e0f, client 203.0.113.7, this user
-- agent), worked out apart from the module by
--   printf '%s' "203.0.113.7
--   Mozilla/5.0 (X11; Linux x86_64) Firefox/121.0" | openssl dgst -sha256 -hmac 000102030405060708090a0b0c0d0e0f
-- = da66dc97bcde37533832e77fea22665175fd43d472f9b1ef208871414598dff3: its
-- first 8 bytes. The HMAC key is the salt's 32 hex digits as text.
local SALT = "000102030405060708090a0b0c0d0e0f"
local VEC_UA = "Mozilla/5.0 (X11; Linux x86_64) Firefox/121.0"
local VEC = "da66dc97bcde3753"
do
    eq(clicks_uniq.visitor(SALT, "203.0.113.7", VEC_UA), VEC, "visitor: the shared test vector")
    -- (openssl as above, client 198.51.100.1; an IPv6 client's /64 key)
    eq(clicks_uniq.visitor(SALT, "198.51.100.1", VEC_UA), "fe6cc63008def4d7", "visitor: another client")
    eq(clicks_uniq.visitor(SALT, "20010db8000100020000000000000000/64", VEC_UA), "103798da27d72123",
        "visitor: an IPv6 client's /64")
    eq(link_rules.split_key("2001:db8:1:2::5"), "20010db8000100020000000000000000/64", "visitor: IPv6 split key")
    eq(link_rules.split_key("::ffff:203.0.113.7"), "203.0.113.7", "visitor: IPv4-mapped split key")
    ok(clicks_uniq.visitor("000102030405060708090a0b0c0d0e0e", "203.0.113.7", VEC_UA) ~= VEC,
        "visitor: another salt, another visitor")

    -- Registers: v >> 50, and 1 + the leading zeros of the low 50 bits.
    local function reg(hex)
        local i, v = clicks_uniq.register(hex)
        return i .. ":" .. v
    end
    eq(reg(VEC), "13977:1", "register: the test vector")
    eq(reg("fe6cc63008def4d7"), "16283:3", "register: fe6c... (bit 47 the first one)")
    eq(reg("ffffffffffffffff"), "16383:1", "register: all ones")
    eq(reg("0000000000000000"), "0:51", "register: zero (low 50 bits zero: 51)")
    eq(reg("fffc000000000000"), "16383:51", "register: the last, low 50 bits zero: 51")
    eq(reg("0004000000000000"), "1:51", "register: 1, low 50 bits zero: 51")
    eq(reg("0003ffffffffffff"), "0:1", "register: 0, low 50 bits all ones")
    eq(reg("0001000000000000"), "0:2", "register: bit 48")
    eq(reg("0000000100000000"), "0:18", "register: bit 32 (the high half's last)")
    eq(reg("0000000080000000"), "0:19", "register: bit 31 (the low half's first)")
    eq(reg("0000000000000001"), "0:50", "register: bit 0")
    eq(reg("8000000000000001"), "8192:50", "register: the top bit is the index's (no sign)")
    eq(reg("7fffffffffffffff"), "8191:1", "register: 7fff...")
    eq(reg("0014010000000000"), "5:10", "register: (5 << 50) | (1 << 40), as uniq.rs's test")

    -- Sparse: the distinct visitors in ascending order.
    local sk = clicks_uniq.new()
    for _, v in ipairs({ "fe6cc63008def4d7", VEC, "103798da27d72123", VEC }) do
        clicks_uniq.add(sk, v)
    end
    eq(clicks_uniq.encode(sk), "s 103798da27d72123da66dc97bcde3753fe6cc63008def4d7",
        "sparse: 3 visitors, sorted")

    -- uniq.rs's test: 30, 10, 20, 10.
    sk = clicks_uniq.new()
    for _, v in ipairs({ "000000000000001e", "000000000000000a", "0000000000000014", "000000000000000a" }) do
        clicks_uniq.add(sk, v)
    end
    eq(clicks_uniq.encode(sk), "s 000000000000000a0000000000000014000000000000001e", "sparse: uniq.rs's example")

    -- 256 distinct: sparse; the 257th: dense. Visitors of 10.0.<i/256>.<i%256>
    -- with "UA-dense", the expected encodings' MD5s from a Python model.
    sk = clicks_uniq.new()
    local function client(i)
        return string.format("10.0.%d.%d", math.floor(i / 256), i % 256)
    end
    for i = 0, 255 do
        clicks_uniq.add(sk, clicks_uniq.visitor(SALT, client(i), "UA-dense"))
    end
    clicks_uniq.add(sk, clicks_uniq.visitor(SALT, client(7), "UA-dense")) -- again: still 256
    local e = clicks_uniq.encode(sk)
    eq(#e, 2 + 256 * 16, "sparse: 256 visitors")
    eq(ngx.md5(e), "9e9ccd2039cc874ad45213143d43d124", "sparse: 256 visitors' encoding")
    for i = 256, 299 do
        clicks_uniq.add(sk, clicks_uniq.visitor(SALT, client(i), "UA-dense"))
    end
    e = clicks_uniq.encode(sk)
    eq(#e, 16386, "dense: `d `, 16,384 characters")
    eq(e:sub(1, 2), "d ", "dense: d")
    ok(not e:find("[^A-Za-z0-9_-]", 3), "dense: base64url characters")
    eq(ngx.md5(e), "87fee03ad283c2498519b69374585dae", "dense: 300 visitors' registers")
    -- 257 exactly: dense.
    sk = clicks_uniq.new()
    for i = 0, 256 do
        clicks_uniq.add(sk, clicks_uniq.visitor(SALT, client(i), "UA-dense"))
    end
    eq(clicks_uniq.encode(sk):sub(1, 2), "d ", "257 distinct visitors: dense")
    -- Registers keep their maximum; 51 is 'z'.
    sk = clicks_uniq.new()
    for i = 0, 256 do
        clicks_uniq.add(sk, string.format("%016x", 0x4000000000000 * 3 + i)) -- register 3, values 50, 49, ...
    end
    clicks_uniq.add(sk, "000c000000000000") -- register 3, 51
    clicks_uniq.add(sk, "0000000000000000") -- register 0, 51
    clicks_uniq.add(sk, "ffffffffffffffff") -- register 16383, 1
    e = clicks_uniq.encode(sk)
    eq(e:sub(1, 6), "d zAAz", "dense: registers 0 and 3 at 51 ('z')")
    eq(e:sub(-1), "B", "dense: register 16383 at 1 ('B')")
    eq(#e:gsub("A", ""), 5, "dense: every other register 0 ('A')")
end

-- The salts: fetched by the flush timer (SET NX EX, GET), today's and
-- tomorrow's, the TTL to the end of the day + 3600.
do
    local _, d = hour_day()
    for _ = 1, 100 do
        if clicks_uniq.salt(d) and clicks_uniq.salt(d + 86400) then
            break
        end
        ngx.sleep(0.02)
    end
    local k = "su:1:uniq_salt:" .. d
    ok(kv[k] and kv[k]:find("^[0-9a-f]+$") and #kv[k] == 32, "salt: 32 hex digits in Redis: " .. t.show(kv[k]))
    eq(clicks_uniq.salt(d), kv[k], "salt: today's known by the worker")
    local k2 = "su:1:uniq_salt:" .. (d + 86400)
    eq(clicks_uniq.salt(d + 86400), kv[k2], "salt: tomorrow's known too")
    ok(kv[k2] ~= kv[k], "salt: one per day")
    eq(ttl[k], set_at[k] and d + 86400 + 3600 - set_at[k], "salt: expires an hour after its day")
    ok(ttl[k2] and ttl[k2] - ttl[k] == 86400, "salt: tomorrow's a day later: " .. tostring(ttl[k2]))
    -- Another edge's salt wins (NX): the worker reads it back.
    kv["su:1:uniq_salt:" .. (d + 2 * 86400)] = "00112233445566778899aabbccddeeff"
    eq(clicks_uniq.refresh({}, d + 86400), 0, "salt: a refresh the next day")
    eq(clicks_uniq.salt(d + 2 * 86400), "00112233445566778899aabbccddeeff", "salt: the one already in Redis")
    eq(clicks_uniq.salt(d), kv[k], "salt: yesterday's kept for an hour")
    clicks_uniq.refresh({}, d + 86400 + 3600)
    eq(clicks_uniq.salt(d), nil, "salt: forgotten an hour after its day")
    clicks_uniq.set_salt(d + 2 * 86400, nil)
    -- A GET answering something else than a salt: not taken.
    kv["su:1:uniq_salt:" .. (d + 3 * 86400)] = "0011223344556677"
    eq(clicks_uniq.refresh({}, d + 2 * 86400 + 7200), 1, "salt: not 32 hex digits, not taken")
    eq(clicks_uniq.salt(d + 3 * 86400), nil, "salt: not 32 hex digits, none")
    clicks_uniq.set_salt(d + 2 * 86400, nil)
    salt_down = true
    eq(clicks_uniq.refresh({}, d + 2 * 86400), 2, "salt: Redis down, that day's and the next missing")
    eq(clicks_uniq.salt(d + 2 * 86400), nil, "salt: Redis down, none")
    salt_down = false
    clicks_uniq.set_salt(d, SALT) -- today: the test vector's
end

do -- clicks: a u line per link-day with a visitor, after every x line; the visitor memoised
    local h, d = hour_day()
    local calls = 0
    local real_visitor = clicks_uniq.visitor
    clicks_uniq.visitor = function(...)
        calls = calls + 1
        return real_visitor(...)
    end
    local asked = 0
    local function key_of(k)
        return function()
            asked = asked + 1
            return k
        end
    end
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, "203.0.113.7")
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, "203.0.113.7") -- memo
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, key_of("198.51.100.1"))
    clicks.count("abcdef", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, key_of("198.51.100.1")) -- memo
    clicks.count("abcdef", SHOP, false, VEC_UA, nil, nil, "https://d.example/?utm_source=x") -- no address
    clicks.count("abcdef", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, key_of(nil)) -- no address
    -- Bots: no visitor, their key never asked.
    clicks.count("aB3xYz", SHOP, true, VEC_UA, nil, nil, nil, nil, nil, nil, key_of("192.0.2.1"))
    clicks.count("aB3xYz", SHOP, false, "curl/8.4", nil, nil, nil, nil, nil, nil, key_of("192.0.2.1"))
    clicks.count("aB3xYz", SHOP, false, nil, nil, nil, nil, nil, nil, nil, key_of("192.0.2.1"))
    -- A link without a visitor: no u line.
    clicks.count("zzzzzz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, nil)
    clicks_uniq.visitor = real_visitor
    eq(calls, 2, "visitor: one HMAC per (client, user agent, salt): the memo")
    eq(asked, 3, "visitor: the client key asked for human clicks only")
    local b = flushed()
    eq(#b, 1, "uniques: one batch")
    eq(b[1] and b[1].v, "5", "uniques: version 5")
    local want = table.concat({
        string.format("h aB3xYz %d 3 3", h),
        string.format("h abcdef %d 3 0", h),
        string.format("h zzzzzz %d 1 0", h),
        string.format("d aB3xYz %d desktop 3", d),
        string.format("d abcdef %d desktop 3", d),
        string.format("d zzzzzz %d desktop 1", d),
        string.format("x aB3xYz %d browser:firefox 3", d),
        string.format("x aB3xYz %d os:linux 3", d),
        string.format("x abcdef %d browser:firefox 3", d),
        string.format("x abcdef %d os:linux 3", d),
        string.format("x abcdef %d utm_source:x 1", d),
        string.format("x zzzzzz %d browser:firefox 1", d),
        string.format("x zzzzzz %d os:linux 1", d),
        string.format("u aB3xYz %d s %sfe6cc63008def4d7", d, VEC),
        string.format("u abcdef %d s fe6cc63008def4d7", d),
    }, "\n") .. "\n"
    eq(b[1] and b[1].body, want, "uniques: u lines last, links in key order")
end

do -- dense through the counts: 300 visitors on one link-day, one line of 16,385 characters
    local _, d = hour_day()
    for i = 0, 299 do
        clicks.count("aB3xYz", SHOP, false, "UA-dense", nil, nil, nil, nil, nil, nil,
            string.format("10.0.%d.%d", math.floor(i / 256), i % 256))
    end
    local b = flushed()
    local body = b[1] and b[1].body or ""
    local u = body:match("\nu aB3xYz " .. d .. " (d [^\n]*)\n$")
    eq(u and #u, 16386, "dense u line: `d ` and 16,384 characters")
    eq(u and ngx.md5(u), "87fee03ad283c2498519b69374585dae", "dense u line: the registers")
end

do -- a dense line counts in the batch's bytes: two links, 20,000 bytes a batch, two batches
    local h, d = hour_day()
    local function counts(first)
        local sk = clicks_uniq.new()
        for i = first, first + 299 do
            clicks_uniq.add(sk, clicks_uniq.visitor(SALT, tostring(i), "UA"))
        end
        return { h = { [h] = { 300, 0 } }, d = { [d] = { r = { ["-"] = 300 }, t = { link = 300 }, routed = false,
            0, 300, 0, 0, 0, u = sk } } }
    end
    local max = clicks_batch.MAX_BODY_BYTES
    clicks_batch.MAX_BODY_BYTES = 20000
    local n = 0
    local b = clicks_batch.build({ aB3xYz = counts(0), abcdef = counts(1000) }, function()
        n = n + 1
        return "t:x:" .. n
    end, true)
    clicks_batch.MAX_BODY_BYTES = max
    eq(#b, 2, "dense lines: one link a batch")
    ok(b[1] and #b[1].body < 20000 and b[1].body:find("\nu aB3xYz " .. d .. " d ", 1, true),
        "dense lines: the first link's, within the bytes")
    eq(b[2] and b[2].v, "5", "dense lines: version 5")
end

do -- no salt for the day (Redis unreachable since before it): no visitor; a human click with an address
    -- counted `unsalted` (record.rs: one without an address is not)
    local _, d = hour_day()
    local before = state:get("ck:unsalted") or 0
    salt_down = true
    clicks_uniq.set_salt(d, nil)
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, "203.0.113.7")
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, function()
        return "198.51.100.1"
    end)
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, nil) -- no address: not counted
    clicks.count("aB3xYz", SHOP, true, VEC_UA, nil, nil, nil, nil, nil, nil, "203.0.113.7") -- a bot: not counted
    local b = flushed()
    ok(b[1] and not b[1].body:find("\nu ", 1, true), "unsalted: no u line")
    eq((state:get("ck:unsalted") or 0) - before, 2, "unsalted: the human clicks counted")
    local clicks_stats = require("shorturl.clicks_stats")
    clicks_stats.init({ clicks = { enabled = true } })
    ok(clicks_stats.status_part():find('"dropped":%d+,"unsalted":' .. (before + 2) .. ',"last_flush_unix"'),
        "unsalted: in the status's clicks: " .. clicks_stats.status_part())
    local m = {}
    clicks_stats.metrics(m)
    ok(table.concat(m, "\n"):find("\nshorturl_edge_clicks_unsalted_total " .. (before + 2) .. "\n", 1, true),
        "unsalted: the metric")
    salt_down = false
    -- The next flushes get today's salt again (the one in Redis).
    for _ = 1, 100 do
        if clicks_uniq.salt(d) then
            break
        end
        ngx.sleep(0.02)
    end
    eq(clicks_uniq.salt(d), kv["su:1:uniq_salt:" .. d], "unsalted: the salt fetched again by the flush")
    clicks.count("aB3xYz", SHOP, false, VEC_UA, nil, nil, nil, nil, nil, nil, "203.0.113.7")
    b = flushed()
    ok(b[1] and b[1].body:find("\nu aB3xYz " .. d .. " s " .. clicks_uniq.visitor(kv["su:1:uniq_salt:" .. d],
        "203.0.113.7", VEC_UA) .. "\n", 1, true), "unsalted: visitors again once the salt is known")
end

---------------------------------------------------------------- a paced flush (the Pingora edge's pace.rs)
-- clicks_batch.build with a `pace`: called every PACE_LINKS links and
-- between sorts, the code order made by bucketing on the first byte (and
-- splitting a bucket beyond MAX_SORT on its next bytes), the batches the
-- same byte for byte as one sort of all keys gives.
do
    local h, d = hour_day()
    -- A few hundred links: fleet codes of many first bytes, keys that are
    -- prefixes of others, bytes above 0x7f, per-domain keys on two domains
    -- (sharing their names' bytes), with t, x and u lines here and there.
    local ALNUM = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
    local function make_links()
        local links, seed = {}, 7
        local function rnd(n)
            seed = (seed * 1103515245 + 12345) % 2147483648
            return seed % n + 1
        end
        local function counts(i)
            local day = { r = { ["-"] = 1, ["r" .. (i % 30) .. ".example"] = i % 7 + 1 }, t = { link = 1 },
                routed = i % 5 == 0, 0, 1, 0, i % 3, 0 }
            if day.routed then
                day.t["r" .. (i % 4)] = i % 9 + 1
            end
            if i % 4 == 0 then
                day.x = { [1] = { CN = 1 + i % 3, KR = 1 }, [2] = { chrome = 2 }, [6] = { ["s" .. (i % 25)] = 1 } }
            end
            if i % 6 == 0 then
                day.u = clicks_uniq.new()
                clicks_uniq.add(day.u, clicks_uniq.visitor(SALT, "203.0.113." .. (i % 200), VEC_UA))
            end
            return { h = { [h] = { 2 + i % 3, i % 3 }, [h - 3600] = { 1, 0 } }, d = { [d] = day } }
        end
        local i = 0
        local function add(key)
            i = i + 1
            links[key] = counts(i)
        end
        for _ = 1, 250 do
            local code = {}
            for j = 1, 6 do
                local k = rnd(#ALNUM)
                code[j] = ALNUM:sub(k, k)
            end
            add(table.concat(code))
        end
        for _, k in ipairs({ "a", "ab", "abc", "abcd", "Z", "Zz", "~x", "\195\169t\195\169", "\255z", "\128",
            "0", "00", "000" }) do
            add(k)
        end
        for j = 1, 60 do
            add(SHOP .. "/sale" .. j)
            add(GO .. "/p" .. (j * 7))
        end
        add(SHOP .. "/s")
        add("s.shop55.co/x") -- a domain that is a prefix of another's name
        return links
    end
    local function ids()
        local n = 0
        return function()
            n = n + 1
            return "t:p:" .. n
        end
    end
    local function same(what, want, got)
        eq(#got, #want, what .. ": as many batches")
        local diff = nil
        for i = 1, math.max(#got, #want) do
            local a, b = want[i] or {}, got[i] or {}
            if a.id ~= b.id or a.v ~= b.v or a.body ~= b.body or a.human ~= b.human or a.bot ~= b.bot then
                diff = i
                break
            end
        end
        eq(diff, nil, what .. ": the same batches byte for byte (first that differs)")
    end
    local nlinks = 0
    for _ in pairs(make_links()) do
        nlinks = nlinks + 1
    end
    ok(nlinks > 300, "paced: a few hundred links (" .. nlinks .. ")")
    local max_lines = clicks_batch.MAX_LINES
    for _, lines in ipairs({ max_lines, 97 }) do
        clicks_batch.MAX_LINES = lines
        local want = clicks_batch.build(make_links(), ids(), true)
        local calls = 0
        local got = clicks_batch.build(make_links(), ids(), true, function()
            calls = calls + 1
        end)
        same("paced (" .. #want .. " batches)", want, got)
        ok(calls >= math.floor(nlinks / clicks_batch.PACE_LINKS), "paced: pace called every 64 links (" .. calls
            .. " calls, " .. #want .. " batches)")
        -- Buckets split again on their next bytes (the domains' shared bytes skipped).
        local max_sort = clicks_batch.MAX_SORT
        clicks_batch.MAX_SORT = 3
        local calls_split = 0
        got = clicks_batch.build(make_links(), ids(), true, function()
            calls_split = calls_split + 1
        end)
        clicks_batch.MAX_SORT = max_sort
        same("paced, buckets of 3 at most", want, got)
        ok(calls_split > calls, "paced, buckets of 3 at most: a pace per sort (" .. calls_split .. ")")
        -- A pace that yields, as the flush's.
        got = clicks_batch.build(make_links(), ids(), true, function()
            ngx.sleep(0.001) -- (the shortest that is no warning without the delayed-events patch)
        end)
        same("paced, yielding", want, got)
    end
    clicks_batch.MAX_LINES = max_lines
    local want = clicks_batch.build(make_links(), ids(), true)
    ok(#want == 1 and want[1].body:find("\nh 000 ", 1, true) and want[1].body:find("^h 0 "),
        "paced: one batch, byte order ('0' before '00')")
    -- A few links: the pace is still called between the sorts, not at every link.
    local calls = 0
    clicks_batch.build({ b = make_links()["a"], a = make_links()["ab"] }, ids(), true, function()
        calls = calls + 1
    end)
    ok(calls > 0 and calls < 16, "paced, two links: a few calls (" .. calls .. ")")
end

-- The flush passes a pace; clicks counted while it is paused (counted
-- here inside the pace, the flush then sleeping across ticks of its
-- timer) go to the next flush: none lost, none twice, and no tick starts
-- a second flush meanwhile (single flight).
do
    local real_build = clicks_batch.build
    local builds, inside, overlap, paced, paces, late_at = 0, false, false, true, 0, nil
    local flush_of = {} -- batch id -> the flush (1, 2) that built it
    clicks_batch.build = function(links, next_id, dims, pace)
        builds = builds + 1
        if inside then
            overlap = true
        end
        inside = true
        paced = paced and pace ~= nil
        local first = true
        local ok_, out = pcall(real_build, links, next_id, dims, pace and function()
            paces = paces + 1
            if first and builds == 1 then
                first = false
                late_at = paces
                for i = 1, 5 do
                    clicks.count("late" .. i, SHOP, false, DESKTOP, nil)
                    clicks.count("p001", SHOP, false, DESKTOP, nil)
                end
                ngx.sleep(0.16) -- three ticks of the 50 ms timer
            end
            pace()
        end)
        inside = false
        if not ok_ then
            error(out)
        end
        for _, b in ipairs(out) do
            flush_of[b.id] = builds
        end
        return out
    end
    local N = 300
    for i = 1, N do
        clicks.count(string.format("p%03d", i), SHOP, false, DESKTOP, nil)
    end
    clicks.count("p001", SHOP, false, DESKTOP, nil)
    -- The human clicks of each key in batches `bs`.
    local function humans(bs)
        local m = {}
        for _, b in ipairs(bs) do
            for key, n in b.body:gmatch("\nh (%S+) %d+ (%d+) %d+") do
                m[key] = (m[key] or 0) + tonumber(n)
            end
            local key, n = b.body:match("^h (%S+) %d+ (%d+) %d+")
            if key then
                m[key] = (m[key] or 0) + tonumber(n)
            end
        end
        return m
    end
    -- The batches of the first two flushes, told apart by their ids (the
    -- second may follow the first within one poll of flushed()).
    local got = {}
    for _ = 1, 5 do
        for _, b in ipairs(flushed()) do
            got[#got + 1] = b
        end
        local seconds = false
        for _, b in ipairs(got) do
            seconds = seconds or flush_of[b.id] == 2
        end
        if seconds then
            break
        end
    end
    local bs = { {}, {} }
    for _, b in ipairs(got) do
        local f = flush_of[b.id]
        if bs[f] then
            table.insert(bs[f], b)
        end
    end
    eq(#bs[1] + #bs[2], #got, "paced flush: every batch of the two flushes")
    local first, second = humans(bs[1]), humans(bs[2])
    local function key(code) -- (custom codes: under <domain>/<code>)
        return SHOP .. "/" .. code
    end
    ngx.sleep(0.12) -- (no third flush: nothing left)
    clicks_batch.build = real_build
    ok(paced, "paced flush: the flush passes a pace")
    ok(late_at ~= nil and paces >= math.floor(N / clicks_batch.PACE_LINKS),
        "paced flush: its pace called (" .. paces .. " calls)")
    local n1, all = 0, true
    for i = 1, N do
        local want = i == 1 and 2 or 1
        all = all and first[key(string.format("p%03d", i))] == want
        n1 = n1 + (first[key(string.format("p%03d", i))] or 0)
    end
    ok(all, "paced flush: every click counted before it in the first flush (" .. n1 .. ")")
    eq(first[key("late1")], nil, "paced flush: clicks counted meanwhile not in it")
    eq(second[key("p001")], 5, "paced flush: clicks counted meanwhile in the next flush (a link already in the first)")
    local late = 0
    for i = 1, 5 do
        late = late + (second[key("late" .. i)] or 0)
    end
    eq(late, 5, "paced flush: the new links counted meanwhile in the next flush")
    eq(second[key("p002")], nil, "paced flush: nothing twice")
    ok(not overlap, "paced flush: no second flush while it sleeps")
    eq(builds, 2, "paced flush: two flushes (" .. builds .. ")")
end

-- A figure of the node's shared state (0 when unset), and a wait of up
-- to 5 s for a condition, failing with `prefix` when it never holds.
local function shared_count(k)
    return state:get(k) or 0
end
local function waiter(prefix)
    return function(what, cond)
        for _ = 1, 500 do
            if cond() then
                return
            end
            ngx.sleep(0.01)
        end
        ok(false, prefix .. ": timed out waiting for " .. what)
    end
end

---------------------------------------------------------------- unsent batches bounded in bytes
-- Redis down: each flush adds a batch of one click (three lines); the
-- bound holds two, so the third flush drops the oldest, counted; back up,
-- the two kept arrive.
do
    local h, d = hour_day()
    local len = #one_click("bndAA1", h, d)
    init(false, 2 * len)
    local n, wid = shared_count, ngx.worker.id() or 0
    local wait = waiter("bytes bound")
    local dropped0 = n("ck:drop:buffer_full")
    xadd_down = true
    for i = 1, 3 do
        clicks.count("bndAA" .. i, SHOP, false, DESKTOP, nil)
        wait(i .. " clicks held or dropped", function()
            return n("ck:buffered:" .. wid) + n("ck:drop:buffer_full") - dropped0 == i
        end)
    end
    eq(n("ck:drop:buffer_full") - dropped0, 1, "bytes bound: the oldest batch dropped, counted")
    eq(n("ck:buffered_bytes:" .. wid), 2 * len, "bytes bound: two batches' bytes held")
    local m = {}
    require("shorturl.clicks_stats").metrics(m)
    ok((table.concat(m, "\n") .. "\n"):find("\nshorturl_edge_clicks_buffered_bytes " .. 2 * len .. "\n", 1, true),
        "bytes bound: the metric")
    xadd_down = false
    wait("the kept batches sent", function()
        return n("ck:buffered:" .. wid) == 0
    end)
    local got = flushed()
    eq(#got, 2, "bytes bound: two batches sent")
    eq(got[1] and got[1].body, one_click("bndAA2", h, d), "bytes bound: the second click first")
    eq(got[2] and got[2].body, one_click("bndAA3", h, d), "bytes bound: then the third")
    eq(n("ck:buffered_bytes:" .. wid), 0, "bytes bound: nothing held")
end

---------------------------------------------------------------- the newest batch is kept over the bound
-- Redis down, a bound of 2 clicks: one flush takes three clicks of one link
-- (one batch, over the bound by itself): kept, not dropped; the next
-- flush's batch drops it (the oldest) and is sent once Redis is back.
do
    local h, d = hour_day()
    init(false, nil, 2 * ngx.worker.count())
    local n, wid = shared_count, ngx.worker.id() or 0
    local wait = waiter("newest kept")
    local dropped0 = n("ck:drop:buffer_full")
    xadd_down = true
    for _ = 1, 3 do
        clicks.count("bndBB1", SHOP, false, DESKTOP, nil)
    end
    wait("three clicks held", function()
        return n("ck:buffered:" .. wid) == 3
    end)
    eq(n("ck:drop:buffer_full") - dropped0, 0, "newest kept: a batch over the bound by itself is not dropped")
    clicks.count("bndBB2", SHOP, false, DESKTOP, nil)
    wait("the older batch dropped", function()
        return n("ck:drop:buffer_full") - dropped0 == 3
    end)
    eq(n("ck:buffered:" .. wid), 1, "newest kept: the newer batch held")
    xadd_down = false
    wait("the kept batch sent", function()
        return n("ck:buffered:" .. wid) == 0
    end)
    local got = flushed()
    eq(#got, 1, "newest kept: one batch sent")
    eq(got[1] and got[1].body, one_click("bndBB2", h, d), "newest kept: the newest click")
end

---------------------------------------------------------------- clicks.dimensions = false: the old bodies
init(false)
do
    local h, d = hour_day()
    local asked = false
    clicks.count("aB3xYz", SHOP, false, DESKTOP, nil, nil, "https://d.example/?utm_source=x", "/aB3xYz?qr=1",
        { ["accept-language"] = "zh" }, function()
            asked = true
            return "CN"
        end, "203.0.113.7")
    local b = flushed()
    eq(b[1] and b[1].v, "1", "dimensions off: version 1")
    eq(b[1] and b[1].body, one_click("aB3xYz", h, d), "dimensions off: no x line, no u line")
    ok(not asked, "dimensions off: the country never asked")
    clicks.count("sale", SHOP, false, DESKTOP, nil, "r1", "https://d.example/?utm_source=x", "/sale?qr=1")
    b = flushed()
    eq(b[1] and b[1].v, "3", "dimensions off: a per-domain key is version 3")
end

---------------------------------------------------------------- config: clicks.dimensions, clicks.families_file
do
    local config = require("shorturl.config")
    local nginx = { bots_file = repo .. "/common/data/bots.txt", inapp_file = repo .. "/common/data/inapp.txt",
        crawlers_file = repo .. "/common/data/crawlers.txt", families_file = repo .. "/common/data/ua_families.txt" }
    local function load(body, ng)
        local path = ngx.var.su_tmp .. "/clicks_conf.lua"
        local f = assert(io.open(path, "w"))
        f:write("return " .. body)
        f:close()
        return pcall(config.load, path, ng or nginx)
    end
    local good, c = load("{}")
    ok(good and c.clicks.dimensions == true, "config: dimensions on by default: " .. tostring(c))
    eq(good and c.clicks.families_file, nginx.families_file, "config: the family file start.sh rendered")
    eq(good and c.clicks.max_buffered_bytes, 67108864, "config: 64 MiB of unsent batches by default")
    good, c = load("{ clicks = { max_buffered_bytes = 4194303 } }")
    ok(not good and tostring(c):find("clicks.max_buffered_bytes must be a whole number >= 4194304", 1, true),
        "config: under 4 MiB of unsent batches refused: " .. tostring(c))
    good, c = load("{ clicks = { dimensions = false } }")
    ok(good and c.clicks.dimensions == false, "config: dimensions off: " .. tostring(c))
    good, c = load("{ clicks = { dimensions = 1 } }")
    ok(not good and tostring(c):find("clicks.dimensions must be a boolean", 1, true),
        "config: dimensions refused unless boolean: " .. tostring(c))
    good, c = load("{}", { bots_file = nginx.bots_file, inapp_file = nginx.inapp_file,
        crawlers_file = nginx.crawlers_file })
    ok(not good and tostring(c):find("clicks.families_file", 1, true), "config: no family file: " .. tostring(c))
    good, c = load("{ clicks = { dimensions = false } }", { bots_file = nginx.bots_file, inapp_file = nginx.inapp_file,
        crawlers_file = nginx.crawlers_file })
    ok(good, "config: no family file needed with dimensions off: " .. tostring(c))
    -- clicks.city: off by default; needs the database and dimensions.
    good, c = load("{}")
    eq(good and c.clicks.city, false, "config: city off by default")
    good, c = load('{ clicks = { city = true }, geo = { mmdb_path = "/x/city.mmdb" } }')
    ok(good and c.clicks.city == true, "config: city with a database: " .. tostring(c))
    good, c = load("{ clicks = { city = true } }")
    ok(not good and tostring(c):find("clicks.city needs geo.mmdb_path", 1, true),
        "config: city without a database refused: " .. tostring(c))
    good, c = load('{ clicks = { city = true, dimensions = false }, geo = { mmdb_path = "/x/city.mmdb" } }')
    ok(not good and tostring(c):find("clicks.city needs clicks.dimensions", 1, true),
        "config: city without dimensions refused: " .. tostring(c))
    good, c = load("{ clicks = { city = true, dimensions = false } }")
    ok(not good and tostring(c):find("clicks.city needs clicks.dimensions", 1, true),
        "config: city without either: the dimensions named first (as the Pingora edge): " .. tostring(c))
    good, c = load('{ clicks = { city = true, enabled = false }, geo = { mmdb_path = "/x/city.mmdb" } }')
    ok(good, "config: city with clicks off: accepted (nothing counted): " .. tostring(c))
    good, c = load('{ clicks = { city = 1 }, geo = { mmdb_path = "/x/city.mmdb" } }')
    ok(not good and tostring(c):find("clicks.city must be a boolean", 1, true),
        "config: city refused unless boolean: " .. tostring(c))
end

---------------------------------------------------------------- report
clicks.enabled = false
redis.run, redis.command = real_run, real_command
t.report()
