-- Tests of link_rules.lua and the protocol 3 record in proto.lua: the
-- cases of common/src/link_rules/tests.rs (same inputs, same expected
-- values, the pinned split hash included) and of the record tests in
-- common/src/record.rs, plus what serde_json accepts and refuses.
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file); answers
-- 200 and "PASS" when every check holds, else 500 and the failures.
local link_rules = require("shorturl.link_rules")
local proto = require("shorturl.proto")
local clicks_ua = require("shorturl.clicks_ua")
local ffi = require("ffi")

local repo = ngx.var.su_repo
local t = require("check").new()
local eq, ok, show = t.eq, t.ok, t.show

assert(clicks_ua.load(repo .. "/common/data/bots.txt"))
local inapp_count = assert(link_rules.load_inapp(repo .. "/common/data/inapp.txt"))

local IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"
local WECHAT = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 MicroMessenger/8.0.47(0x18002f2c) "
    .. "NetType/WIFI Language/zh_CN"
local ANDROID = "Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 Chrome/126.0 Mobile Safari/537.36"
local DESKTOP = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36"
local IPAD = "Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"

local opts = require("check").options

-- A visitor of the Rust tests' `V`: ip -> split key.
local function V(t)
    t = t or {}
    return { ua = t.ua, lang = t.lang, country = t.cc, query = t.q, key = t.ip and link_rules.split_key(t.ip) }
end

local function url_for(o, v, now)
    return (link_rules.choose(o, "https://x.example/base", false, "abc123", v, now))
end

---------------------------------------------------------------- forwarding_merges_the_request_query
for _, c in ipairs({
    { "https://t/p", "a=1&b=2", "https://t/p?a=1&b=2" },
    { "https://t/p?a=9", "a=1&b=2", "https://t/p?a=9&b=2" },
    { "https://t/p?a=9#frag", "b=2&b=3", "https://t/p?a=9&b=2&b=3#frag" },
    { "https://t/p?", "b=2", "https://t/p?b=2" },
    { "https://t/p?a=1&", "b", "https://t/p?a=1&b" },
    { "https://t/p", "&&x=1&", "https://t/p?x=1" },
    { "https://t/p", 'x=<a>%0D%0A"', "https://t/p?x=%3Ca%3E%0D%0A%22" },
    { "https://t/p", "x=\195\169", "https://t/p?x=%C3%A9" },
    { "https://t/p#f", "", "https://t/p#f" },
    { "https://t/p?a=1", "a=2", "https://t/p?a=1" },
    -- A pair ending in `?` is still followed by `&`; names are the bytes
    -- before `=`.
    { "https://t/p", "a?&b=1", "https://t/p?a?&b=1" },
    { "https://t/p", "a=&b=", "https://t/p?a=&b=" },
    -- The QR marker is never forwarded (protocol 3.7).
    { "https://t/p", "qr=1&b=2", "https://t/p?b=2" },
    { "https://t/p", "qr=1", "https://t/p" },
    { "https://t/p", "qr=12", "https://t/p?qr=12" },
    { "https://t/p?=1", "=2&c", "https://t/p?=1&c" },
    { "https://t/p?a", "a=5&b", "https://t/p?a&b" },
    { "https://t/p?x=1#a#b", "y", "https://t/p?x=1&y#a#b" },
}) do
    eq(link_rules.forward_query(c[1], c[2]), c[3], "forward_query(" .. c[1] .. ", " .. c[2] .. ")")
end
-- Every byte: raw only in 0x21-0x7E outside " < > \ ^ ` { | }, else %XX.
for b = 0, 255 do
    local raw = b > 0x20 and b < 0x7f and not ('"<>\\^`{|}'):find(string.char(b), 1, true)
    -- `&` splits pairs: test it inside a value apart.
    if b ~= 38 then
        local want = raw and string.char(b) or string.format("%%%02X", b)
        eq(link_rules.forward_query("https://t/p", "k=" .. string.char(b)), "https://t/p?k=" .. want,
            "forwarded byte " .. b)
    end
end

---------------------------------------------------------------- preferred_language_by_q_value
for _, c in ipairs({
    { "zh-CN,zh;q=0.9,en;q=0.8", "zh" },
    { "en;q=0.5, de;q=0.7, fr", "fr" },
    { "en;q=0.5, de;q=0.7", "de" },
    { "*, ja;q=0.1", "ja" },
    { "EN-us", "en" },
    { "en;q=0, de;q=0.001", "de" },
    { "en;q=2, de;q=0.3", "de" },
    { "en;q=1.0, de;q=1", "en" },
    { "x1", nil },
    { "", nil },
    { nil, nil },
    -- Beyond the Rust table.
    { "en;q=0.5;Q=0.9, de;q=0.8", "en" },
    { "en;q=.5, de;q=0.1", "de" },
    { "en;q=0.5000, de;q=0.1", "de" },
    { "en;q=1., de;q=0.1", "en" },
    { "abcdefghi, de;q=0.1", "de" },
    { " \tfr-CA ; q=0.9 ,de;q=0.8", "fr" },
    { "en;q= 0.9, de;q=0.1", "de" },
    { "\255en", nil },
    { string.rep("x1,", 32) .. "de", nil },
    { string.rep("x1,", 31) .. "de", "de" },
}) do
    eq(link_rules.preferred_language(c[1]), c[2], "preferred_language(" .. show(c[1]) .. ")")
end

---------------------------------------------------------------- user_agent_facts
local f = link_rules.ua_facts(WECHAT)
ok(f.ios and not f.android and f.app == "wechat" and f.device == "mobile", "facts of WECHAT")
f = link_rules.ua_facts(ANDROID)
ok(f.android and not f.ios and f.app == nil, "facts of ANDROID")
eq(link_rules.ua_facts(IPAD).device, "tablet", "device of IPAD")
eq(link_rules.ua_facts(DESKTOP).device, "desktop", "device of DESKTOP")
eq(link_rules.ua_facts(nil).device, "bot", "device without a User-Agent")
for _, c in ipairs({
    { "Mozilla/5.0 (Linux; Android 13) QQ/9.0.0.1 V1_AND_SQ", "qq" },
    { "... AlipayClient/10.5.0 ...", "alipay" },
    { "... Weibo (iPhone15,2__weibo__14.1.0__iphone__os17.0)", "weibo" },
    { "... DingTalk/7.5.0 ...", "dingtalk" },
    { "... [FBAN/FBIOS;FBAV/450.0]", "facebook" },
    { "... Instagram 300.0.0 ...", "instagram" },
    { "... Line/13.0.0", "line" },
    { "... musical_ly_33.0 ...", "tiktok" },
}) do
    eq(link_rules.in_app(c[1]), c[2], "in_app(" .. c[1] .. ")")
end
eq(link_rules.in_app("Mozilla/5.0 MQQBrowser/6.2"), nil, "in_app(MQQBrowser)")
-- "Contains", whatever overlaps; case-blind; the first pattern in file order.
eq(link_rules.ua_facts("Opera MiniPhone").ios, true, "ios of an overlapping token")
eq(link_rules.ua_facts("x ANDROID y").android, true, "android, case-blind")
eq(link_rules.in_app("Instagram 300 ... MicroMessenger/8"), "wechat", "in_app: file order wins")
eq(link_rules.in_app("micromessenger"), nil, "in_app is case-sensitive")
do
    local lines = 0
    for line in io.lines(repo .. "/common/data/inapp.txt") do
        if not line:match("^%s*$") and line:sub(1, 1) ~= "#" then
            lines = lines + 1
        end
    end
    eq(inapp_count, lines, "every inapp.txt line names a known app")
end

---------------------------------------------------------------- first_matching_rule_wins_and_conditions_combine
do
    local o = opts('{"r":[{"c":{"dev":["ios"],"app":["wechat"]},"u":"https://a/wechat-ios"},{"c":{"dev":["ios","android"]},'
        .. '"u":"https://a/app"},{"c":{"cc":["CN","HK"],"lang":["zh"]},"u":"https://a/zh-cn"},{"c":{"q":["ref","tw"]},'
        .. '"u":"https://a/tw"}]}')
    local at = 1800000000
    local function v(ua, lang, cc, q)
        return V({ ua = ua, lang = lang, cc = cc, q = q })
    end
    eq(url_for(o, v(WECHAT), at), "https://a/wechat-ios", "rules: wechat on iOS")
    eq(url_for(o, v(IPHONE), at), "https://a/app", "rules: iPhone")
    eq(url_for(o, v(ANDROID), at), "https://a/app", "rules: Android")
    eq(url_for(o, v(DESKTOP, "zh-CN", "CN"), at), "https://a/zh-cn", "rules: zh in CN")
    eq(url_for(o, v(DESKTOP, "en", "CN"), at), "https://x.example/base", "rules: en in CN")
    eq(url_for(o, v(DESKTOP, "zh", nil), at), "https://x.example/base", "rules: zh, no country")
    eq(url_for(o, v(DESKTOP, nil, nil, "a=1&ref=tw"), at), "https://a/tw", "rules: q pair")
    eq(url_for(o, v(DESKTOP, nil, nil, "ref=twx"), at), "https://x.example/base", "rules: q pair differs")
    eq(url_for(o, v(), at), "https://x.example/base", "rules: nothing known")
    -- Labels (Destination::label).
    local _, label = link_rules.choose(o, "https://x/", false, "abc123", v(IPHONE), at)
    eq(label, "r2", "label of rule 2")
    _, label = link_rules.choose(o, "https://x/", false, "abc123", v(), at)
    eq(label, "link", "label of the link")
    -- The country is asked only when a `cc` rule is reached, once.
    local asked = 0
    local lazy = V({ ua = DESKTOP, lang = "zh" })
    lazy.country = function()
        asked = asked + 1
        return "HK"
    end
    eq(url_for(o, lazy, at), "https://a/zh-cn", "rules: country from a function")
    eq(asked, 1, "country asked once")
    asked = 0
    lazy = V({ ua = IPHONE })
    lazy.country = function()
        asked = asked + 1
    end
    url_for(o, lazy, at)
    eq(asked, 0, "country not asked before its rule")
    -- A q value "" matches a pair without "=" and one with "=" and nothing.
    local e = opts('{"r":[{"c":{"q":["x",""]},"u":"https://a/e"}]}')
    eq(url_for(e, V({ q = "x" }), at), "https://a/e", "q: bare name")
    eq(url_for(e, V({ q = "y=1&x=" }), at), "https://a/e", "q: empty value")
    eq(url_for(e, V({ q = "x=1" }), at), "https://x.example/base", "q: other value")
    eq(url_for(e, V({}), at), "https://x.example/base", "q: no query")
end

---------------------------------------------------------------- time_windows_are_half_open
do
    local o = opts('{"r":[{"c":{"from":100,"until":200},"u":"https://a/sale"}]}')
    local v = V()
    eq(url_for(o, v, 99), "https://x.example/base", "window: before")
    eq(url_for(o, v, 100), "https://a/sale", "window: from")
    eq(url_for(o, v, 199), "https://a/sale", "window: last second")
    eq(url_for(o, v, 200), "https://x.example/base", "window: until")
    local far = opts('{"r":[{"c":{"from":18446744073709551615},"u":"https://a/later"}]}')
    eq(url_for(far, v, 1800000000), "https://x.example/base", "window: from u64::MAX")
end

---------------------------------------------------------------- forwarding_applies_to_the_chosen_destination
do
    local o = opts('{"f":true,"r":[{"c":{"dev":["android"]},"u":"https://a/droid?src=sl"}]}')
    eq(url_for(o, V({ ua = ANDROID, q = "src=x&utm_source=mail" }), 1), "https://a/droid?src=sl&utm_source=mail",
        "forwarding onto a rule's URL")
    eq(url_for(o, V({ ua = ANDROID }), 1), "https://a/droid?src=sl", "forwarding without a query")
    eq(url_for(o, V({ ua = ANDROID, q = "" }), 1), "https://a/droid?src=sl", "forwarding an empty query")
end

---------------------------------------------------------------- expired_and_gone_links_answer_their_fallback_or_nothing
do
    local o = opts('{"x":"https://a/over","f":true}')
    local url, label = link_rules.choose(o, "https://x/", true, "abc123", V({ q = "a=1" }), 1)
    eq(url, "https://a/over", "expired: fallback, nothing forwarded")
    eq(label, "expired", "expired: label")
    local gone = opts('{"x":"https://a/over","d":true}')
    url, label = link_rules.choose(gone, "https://x/", false, "c", V({ q = "a=1" }), 1)
    eq(label, "expired", "gone: fallback")
    eq(link_rules.choose(opts("{}"), "https://x/", true, "c", V({ q = "a=1" }), 1), nil, "expired without x: 404")
    eq(link_rules.decode('{"d":true}'), nil, "gone without x is refused")
end

---------------------------------------------------------------- splits_are_stable_and_hold_their_weights_within_two_percent
do
    local o = opts('{"r":[{"s":[["https://a/A",70],["https://a/B",20],["https://a/C",10]]}]}')
    local counts = { 0, 0, 0 }
    local index = { r1v1 = 1, r1v2 = 2, r1v3 = 3 }
    local n = 100000
    local unstable = 0
    for i = 0, n - 1 do
        local a = 0x0a000000 + i
        local ip = string.format("%d.%d.%d.%d", math.floor(a / 16777216), math.floor(a / 65536) % 256,
            math.floor(a / 256) % 256, a % 256)
        local _, label = link_rules.choose(o, "https://x/", false, "abc123", V({ ip = ip }), 1)
        local k = index[label]
        counts[k] = counts[k] + 1
        local _, again = link_rules.choose(o, "https://x/", false, "abc123", V({ ip = ip }), 1)
        if again ~= label then
            unstable = unstable + 1
        end
    end
    eq(unstable, 0, "split: the same visitor gets the same variant")
    for k, want in ipairs({ 70, 20, 10 }) do
        local pct = counts[k] * 100 / n
        ok(math.abs(pct - want) <= 2, string.format("split: variant %d has %.2f%% (want %d%% within 2)", k, pct, want))
    end
    local url, label = link_rules.choose(o, "https://x/", false, "abc123", V(), 1)
    eq(url, "https://a/A", "split without an address: the first variant")
    eq(label, "r1v1", "split without an address: label r1v1")
end

---------------------------------------------------------------- split_keys_and_hashes_are_the_documented_ones
eq(link_rules.split_key("192.0.2.7"), "192.0.2.7", "split_key IPv4")
eq(link_rules.split_key("2001:db8:1:2:3:4:5:6"), "20010db8000100020000000000000000/64", "split_key IPv6")
eq(link_rules.split_key("::ffff:192.0.2.7"), "192.0.2.7", "split_key IPv4-mapped")
eq(link_rules.split_key("::FFFF:c000:0207"), "192.0.2.7", "split_key IPv4-mapped in hex")
eq(link_rules.split_key("unix:"), nil, "split_key of no address")
eq(link_rules.split_key(nil), nil, "split_key of nothing")
eq(link_rules.split_hash("abc123", "192.0.2.7"), 2456142176, "pinned split hash")
-- The buckets lua-compat/conformance/link_rules.yaml names (mod 100).
for _, c in ipairs({ { "203.0.113.4", 17 }, { "203.0.113.5", 25 }, { "2001:db8:1:2:aaaa::9", 16 },
    { "203.0.113.1", 50 }, { "203.0.113.2", 74 }, { "198.51.100.7", 97 } }) do
    eq(link_rules.split_hash("ruleS0001", link_rules.split_key(c[1])) % 100, c[2], "bucket of " .. c[1])
end
do
    -- fmix32's multiplies against 64-bit integer arithmetic.
    local function ref(h)
        local x = ffi.new("uint64_t", h)
        x = bit.bxor(x, bit.rshift(x, 16)) % 0x100000000ULL
        x = (x * 0x85ebca6bULL) % 0x100000000ULL
        x = bit.bxor(x, bit.rshift(x, 13)) % 0x100000000ULL
        x = (x * 0xc2b2ae35ULL) % 0x100000000ULL
        x = bit.bxor(x, bit.rshift(x, 16)) % 0x100000000ULL
        return tonumber(x)
    end
    local bad = 0
    local h = 0
    for i = 1, 20000 do
        h = (h * 1103515245 + 12345 + i) % 4294967296
        if link_rules.fmix32(h) ~= ref(h) then
            bad = bad + 1
        end
    end
    for _, x in ipairs({ 0, 1, 0xffffffff, 0x80000000, 0x7fffffff, 0xdeadbeef }) do
        if link_rules.fmix32(x) ~= ref(x) then
            bad = bad + 1
        end
    end
    eq(bad, 0, "fmix32 agrees with uint64 arithmetic")
end

---------------------------------------------------------------- validation_bounds
for _, b in ipairs({
    '{"r":[{"c":{},"u":"ftp://x"}]}',
    '{"r":[{"c":{}}]}',
    '{"r":[{"u":"https://a","s":[["https://b",1],["https://c",1]]}]}',
    '{"r":[{"s":[["https://b",1]]}]}',
    '{"r":[{"s":[["https://b",0],["https://c",1]]}]}',
    '{"r":[{"c":{"cc":["cn"]},"u":"https://a"}]}',
    '{"r":[{"c":{"lang":["zh-CN"]},"u":"https://a"}]}',
    '{"r":[{"c":{"from":5,"until":5},"u":"https://a"}]}',
    '{"r":[{"c":{"q":["","x"]},"u":"https://a"}]}',
    '{"r":[{"c":{"dev":["phone"]},"u":"https://a"}]}',
    '{"r":[{"c":{"os":["ios"]},"u":"https://a"}]}',
    '{"x":"https://a b"}',
    '{"z":1}',
    '{"f": true}',
    -- Beyond the Rust list: what serde_json and the bounds refuse.
    '',
    '{"f":true}x',
    '{"f":true,}',
    '{"f":true,"f":true}',
    '{"f":1}',
    '{"f":null}',
    '{"r":null}',
    '{"r":[{"c":null,"u":"https://a/1"}]}',
    '{"r":[{"c":{"dev":null},"u":"https://a/1"}]}',
    '{"r":[{"s":[]}]}',
    '{"r":[{"c":{"from":1.0},"u":"https://a/1"}]}',
    '{"r":[{"c":{"from":1e3},"u":"https://a/1"}]}',
    '{"r":[{"c":{"from":-0},"u":"https://a/1"}]}',
    '{"r":[{"c":{"from":-1},"u":"https://a/1"}]}',
    '{"r":[{"c":{"from":01},"u":"https://a/1"}]}',
    '{"r":[{"c":{"from":18446744073709551616},"u":"https://a/1"}]}',
    '{"r":[{"c":{"from":"1"},"u":"https://a/1"}]}',
    '{"r":[{"s":[["https://b",1,2],["https://c",1]]}]}',
    '{"r":[{"s":[["https://b"],["https://c",1]]}]}',
    '{"r":[{"s":[["https://b",10001],["https://c",1]]}]}',
    '{"r":[{"s":[["https://b",1],["https://c",4294967297]]}]}',
    '{"r":[{"c":{"q":["a=b","x"]},"u":"https://a"}]}',
    '{"r":[{"c":{"q":["a","x&y"]},"u":"https://a"}]}',
    '{"r":[{"c":{"q":["a","x#"]},"u":"https://a"}]}',
    '{"r":[{"c":{"q":["a","' .. string.rep("v", 129) .. '"]},"u":"https://a"}]}',
    '{"r":[{"c":{"q":["a"]},"u":"https://a"}]}',
    '{"r":[{"c":{"q":["a","b","c"]},"u":"https://a"}]}',
    '{"r":[{"c":{"lang":[""]},"u":"https://a"}]}',
    '{"r":[{"c":{"lang":["abcdefghi"]},"u":"https://a"}]}',
    '{"r":[{"c":{"cc":["CHN"]},"u":"https://a"}]}',
    '{"r":[{"c":{"app":["WeChat"]},"u":"https://a"}]}',
    '{"r":[{"c":{"dev":[{"ios":1}]},"u":"https://a"}]}',
    '{"r":[{"c":{"dev":[{"ios":null,"android":null}]},"u":"https://a"}]}',
    '{"r":[{"u":"http://"}]}',
    '{"r":[{"u":"https://a/\\u0020"}]}',
    '{"r":[{"u":"https://a/\\n"}]}',
    '{"r":[{"u":"https://a/\\u00e9"}]}',
    '{"r":[{"u":"https://a/\\ud800"}]}',
    '{"r":[{"u":"https://a/\\x"}]}',
    '{"r":[{"u":"https://a/\127"}]}',
    '{"r":[{"u":"https://a/\195\169"}]}',
    '{"x":"https://a/\t"}',
    '{"r":[{"u":"https://a/' .. string.rep("a", 4096) .. '"}]}',
    '[true,null,false,[],1]',
    '[true,]',
    '{"r":[{"c":[["android"],null],"u":"https://a/1"}]}',
    '{"r":[{"c":{},"u":"https://a/1"},{"c":{},"u":"https://a/1"},{"c":{},"u":"https://a/1"},{"c":{},"u":"https://a/1"},'
        .. string.rep('{"c":{},"u":"https://a/1"},', 16) .. '{"c":{},"u":"https://a/1"}]}',
    '{"r":[{"c":{"cc":[' .. string.rep('"CN",', 50) .. '"CN"]},"u":"https://a"}]}',
    '{"r":[{"s":[' .. string.rep('["https://b",1],', 10) .. '["https://c",1]]}]}',
}) do
    eq(link_rules.decode(b), nil, "refused: " .. b:sub(1, 120))
end
for _, g in ipairs({
    -- What serde_json accepts besides the compact object form.
    { '{}', '{}' },
    { '{"x":null,"f":false,"d":false,"r":[]}', '{}' },
    { '[true,"https://a/x"]', '{"f":true,"x":"https://a/x"}' },
    { '[]', '{}' },
    { '{"r":[[{"dev":["ios"]},"https://a/1"]]}', '{"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}]}' },
    { '{"r":[{"c":[["android"],[],["CN"],[],null],"u":"https://a/1"}]}', '{"r":[{"c":{"dev":["android"],"cc":["CN"]},"u":"https://a/1"}]}' },
    { '{"r":[{"c":{"dev":[{"ios":null}]},"u":"https://a/1"}]}', '{"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}]}' },
    { '{"r":[{"u":"https:\\/\\/a\\u002F1","s":[]}]}', '{"r":[{"c":{},"u":"https://a/1"}]}' },
    { '{"\\u0066":true}', '{"f":true}' },
    { '{"x":"https://a/\\"\\\\"}', '{"x":"https://a/\\"\\\\"}' },
    { '{"r":[{"c":{"from":0,"until":18446744073709551615,"q":["a","b=c"]},"u":"HTTPS://A/1"}]}',
        '{"r":[{"c":{"from":0,"until":18446744073709551615,"q":["a","b=c"]},"u":"HTTPS://A/1"}]}' },
    { '{"r":[{"s":[["https://",1],["http://a",10000]]}]}', '{"r":[{"c":{},"s":[["https://",1],["http://a",10000]]}]}' },
    { '{"r":[{"c":{"q":["a",""]},"u":"https://a/1"}]}', '{"r":[{"c":{"q":["a",""]},"u":"https://a/1"}]}' },
}) do
    local o = link_rules.decode(g[1])
    eq(o and link_rules.encode(o), g[2], "accepted: " .. g[1])
end
do
    local src = '{"f":true,"x":"https://a/x","r":[{"c":{"dev":["ios"],"cc":["CN"]},"u":"https://a/1"},'
        .. '{"s":[["https://a/2",1],["https://a/3",3]]}]}'
    local o = opts(src)
    local enc = link_rules.encode(o)
    eq(enc, '{"f":true,"x":"https://a/x","r":[{"c":{"dev":["ios"],"cc":["CN"]},"u":"https://a/1"},'
        .. '{"c":{},"s":[["https://a/2",1],["https://a/3",3]]}]}', "encode")
    eq(link_rules.encode(opts(enc)), enc, "decode(encode(o)) == o")
    ok(not enc:find(" ", 1, true), "encode writes no space")
    ok(link_rules.is_empty(opts("{}")), "empty options")
    ok(not link_rules.is_empty(o), "options that change something")
end

---------------------------------------------------------------- g: the social card (protocol 4.4)
-- Read as `f` is (a plain bool, LinkOptions' 5th field: the 5th element
-- of the sequence form), written last and only when true.
for _, b in ipairs({
    '{"g":1}',
    '{"g":0}',
    '{"g":null}',
    '{"g":"true"}',
    '{"g":[]}',
    '{"g":True}',
    '{"g":tru}',
    '{"g":true,"g":true}',
    '{"g":true,"g":false}',
    '{"g": true}',
    '{"G":true}',
    '{"g":true,}',
    '[true,null,false,[],null]',
    '[true,null,false,[],1]',
    '[true,null,false,[],true,false,[],false]', -- an 8th field that is no screen (p is the 6th, b the 7th, w the 8th)
    '[true,null,false,[],true,]',
    '{"g":true,"d":true}',
}) do
    eq(link_rules.decode(b), nil, "refused (g): " .. b)
end
for _, g in ipairs({
    { '{"g":true}', '{"g":true}' },
    { '{"g":false}', '{}' },
    { '{"\\u0067":true}', '{"g":true}' },
    { '{"g":true,"f":true}', '{"f":true,"g":true}' },
    { '{"g":true,"x":"https://a/x","d":true}', '{"x":"https://a/x","d":true,"g":true}' },
    { '{"g":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}],"f":false}',
        '{"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}],"g":true}' },
    { '[false,null,false,[],true]', '{"g":true}' },
    { '[true,null,false,[],false]', '{"f":true}' },
    { '[false,"https://a/x",false,[[{},"https://a/1"]],true]',
        '{"x":"https://a/x","r":[{"c":{},"u":"https://a/1"}],"g":true}' },
}) do
    local o = link_rules.decode(g[1])
    eq(o and link_rules.encode(o), g[2], "accepted (g): " .. g[1])
end
do
    local o = opts('{"g":true}')
    eq(o.g, true, "g read")
    eq(opts("{}").g, false, "g defaults to false")
    ok(not link_rules.is_empty(o), "options with only g change something")
    eq(proto.encode_record(1, 9, "d.com", "https://x/", o), '3 1 9 d.com https://x/ {"g":true}',
        "a record with g stays protocol 3")
    -- Otherwise evaluated exactly as before: the card is the edge's
    -- decision (edge.lua), not choose()'s.
    local url, label = link_rules.choose(o, "https://x.example/base", false, "abc123", V({ ua = IPHONE }), 1)
    eq(url, "https://x.example/base", "g: the link's URL")
    eq(label, "link", "g: label link")
    local r = opts('{"g":true,"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}')
    eq(url_for(r, V({ ua = IPHONE, q = "a=1" }), 1), "https://a/ios?a=1", "g: rules and forwarding unchanged")
    local x = opts('{"g":true,"x":"https://a/over"}')
    url, label = link_rules.choose(x, "https://x/", true, "c", V(), 1)
    eq(url, "https://a/over", "g: expired, the fallback")
    eq(label, "expired", "g: expired label")
    local a = proto.decode('3 4 9 d.com https://x/ {"g":true}')
    ok(a and a.kind == "found" and a.opts and a.opts.g == true, "record with g decoded")
end

---------------------------------------------------------------- p: a password (protocol 4.5)
-- Read as `g` is (a plain bool, LinkOptions' 6th field: the 6th element
-- of the sequence form), written last and only when true.
for _, b in ipairs({
    '{"p":1}',
    '{"p":0}',
    '{"p":null}',
    '{"p":"true"}',
    '{"p":[]}',
    '{"p":{}}',
    '{"p":True}',
    '{"p":tru}',
    '{"p":true,"p":true}',
    '{"p":true,"p":false}',
    '{"p": true}',
    '{"P":true}',
    '{"p":true,}',
    '{"p":"1"}',
    '[true,null,false,[],false,null]',
    '[true,null,false,[],false,1]',
    '[true,null,false,[],false,true,[],false]', -- an 8th field that is no screen (w)
    '[true,null,false,[],false,true,]',
    '{"p":true,"d":true}',
}) do
    eq(link_rules.decode(b), nil, "refused (p): " .. b)
end
for _, p in ipairs({
    { '{"p":true}', '{"p":true}' },
    { '{"p":false}', '{}' },
    { '{"\\u0070":true}', '{"p":true}' },
    { '{"p":true,"f":true}', '{"f":true,"p":true}' },
    { '{"p":true,"g":true}', '{"g":true,"p":true}' },
    { '{"p":true,"x":"https://a/x","d":true}', '{"x":"https://a/x","d":true,"p":true}' },
    { '{"p":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}],"f":false}',
        '{"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}],"p":true}' },
    { '[false,null,false,[],false,true]', '{"p":true}' },
    { '[false,null,false,[],true]', '{"g":true}' },
    { '[true,null,false,[],false,false]', '{"f":true}' },
    { '[false,"https://a/x",false,[[{},"https://a/1"]],true,true]',
        '{"x":"https://a/x","r":[{"c":{},"u":"https://a/1"}],"g":true,"p":true}' },
}) do
    local o = link_rules.decode(p[1])
    eq(o and link_rules.encode(o), p[2], "accepted (p): " .. p[1])
end
do
    local o = opts('{"p":true}')
    eq(o.p, true, "p read")
    eq(opts("{}").p, false, "p defaults to false")
    eq(opts('{"g":true}').p, false, "p defaults to false beside g")
    ok(not link_rules.is_empty(o), "options with only p change something")
    eq(proto.encode_record(3, 9, "d.com", "https://x/", o), '3 3 9 d.com https://x/ {"p":true}',
        "a record with p stays protocol 3")
    -- Otherwise evaluated exactly as before: the password is the edge's
    -- gate (edge.lua, unlock.lua), not choose()'s.
    local url, label = link_rules.choose(o, "https://x.example/base", false, "abc123", V({ ua = IPHONE }), 1)
    eq(url, "https://x.example/base", "p: the link's URL")
    eq(label, "link", "p: label link")
    local r = opts('{"p":true,"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}')
    eq(url_for(r, V({ ua = IPHONE, q = "a=1" }), 1), "https://a/ios?a=1", "p: rules and forwarding unchanged")
    local x = opts('{"p":true,"x":"https://a/over"}')
    url, label = link_rules.choose(x, "https://x/", true, "c", V(), 1)
    eq(url, "https://a/over", "p: expired, the fallback")
    eq(label, "expired", "p: expired label")
    local a = proto.decode('3 4 9 s.shop55.com https://x/ {"p":true}')
    ok(a and a.kind == "found" and a.opts and a.opts.p == true and a.v == 4, "record with p decoded")
    local n = proto.decode('3 4 9 s.shop55.com https://x/ {"p":1}')
    eq(n, nil, "record with a malformed p: a miss")
end

---------------------------------------------------------------- b: in-app browser guidance (protocol 4.6)
-- Read as the `app` condition's list is (LinkOptions' 7th field, a
-- Set<App>: names of App, at most 50 read, duplicates fold), written after
-- `p` in App::ALL's order and only when not empty.
for _, b in ipairs({
    '{"b":["icq"]}', -- an unknown app
    '{"b":["WeChat"]}',
    '{"b":["wechat","icq"]}',
    '{"b":"wechat"}',
    '{"b":null}',
    '{"b":true}',
    '{"b":{}}',
    '{"b":[null]}',
    '{"b":[1]}',
    '{"b":["wechat",]}',
    '{"b":[],"b":[]}',
    '{"b": ["wechat"]}',
    '{"B":["wechat"]}',
    '{"b":[' .. string.rep('"wechat",', 50) .. '"wechat"]}', -- 51 names, duplicates or not
    '{"b":[' .. string.rep('"qq",', 50) .. '"wechat"]}',
    '[false,null,false,[],false,false,["icq"]]',
    '[false,null,false,[],false,false,null]',
    '[false,null,false,[],false,false,true]',
    '[false,null,false,[],false,false,["wechat"],false]', -- an 8th field that is no screen (w)
    '[false,null,false,[],false,false,["wechat"],]',
}) do
    eq(link_rules.decode(b), nil, "refused (b): " .. b:sub(1, 120))
end
for _, c in ipairs({
    { '{"b":["wechat"]}', '{"b":["wechat"]}' },
    { '{"b":[]}', '{}' },
    { '{"b":["qq","wechat"]}', '{"b":["wechat","qq"]}' }, -- App::ALL's order
    { '{"b":["wechat","qq","wechat"]}', '{"b":["wechat","qq"]}' }, -- duplicates fold
    { '{"b":["tiktok","line","instagram","facebook","dingtalk","weibo","alipay","qq","wechat"]}',
        '{"b":["wechat","qq","alipay","weibo","dingtalk","facebook","instagram","line","tiktok"]}' },
    { '{"b":[' .. string.rep('"qq",', 49) .. '"wechat"]}', '{"b":["wechat","qq"]}' }, -- 50 names
    { '{"b":[{"weibo":null}]}', '{"b":["weibo"]}' }, -- serde_json's externally tagged unit variant
    { '{"\\u0062":["\\u0071q"]}', '{"b":["qq"]}' },
    { '{"b":["wechat"],"p":true,"g":true,"f":true}', '{"f":true,"g":true,"p":true,"b":["wechat"]}' },
    { '{"b":["alipay"],"x":"https://a/x","d":true}', '{"x":"https://a/x","d":true,"b":["alipay"]}' },
    -- The sequence form: b is the 7th field.
    { '[false,null,false,[],false,false,["wechat","qq"]]', '{"b":["wechat","qq"]}' },
    { '[false,null,false,[],false,false,[]]', '{}' },
    { '[true,null,false,[],true,true,["dingtalk"]]', '{"f":true,"g":true,"p":true,"b":["dingtalk"]}' },
    { '[false,null,false,[],false,true]', '{"p":true}' },
}) do
    local o = link_rules.decode(c[1])
    eq(o and link_rules.encode(o), c[2], "accepted (b): " .. c[1]:sub(1, 120))
end
do
    -- The Rust test's case (the_guide_apps_are_read_and_written_as_b).
    local o = opts('{"b":["qq","wechat"]}')
    eq(link_rules.encode(o), '{"b":["wechat","qq"]}', "b: Rust's encoding")
    eq(link_rules.encode(opts('[false,null,false,[],false,false,["wechat","qq"]]')), link_rules.encode(o),
        "b: the sequence form reads the same")
    ok(o.guide and o.guide.wechat and o.guide.qq and not o.guide.weibo, "b read as a set")
    eq(#o.b, 2, "b: the names as read")
    eq(opts("{}").guide, nil, "no b: no set")
    eq(opts('{"b":[]}').guide, nil, "an empty b: no set")
    eq(#opts("{}").b, 0, "b defaults to empty")
    ok(not link_rules.is_empty(o), "options with only b change something")
    ok(link_rules.is_empty(opts('{"b":[]}')), "an empty b changes nothing")
    eq(proto.encode_record(2, 9, "d.com", "https://x/", o), '3 2 9 d.com https://x/ {"b":["wechat","qq"]}',
        "a record with b stays protocol 3")
    -- shows_guide: the visitor's app (in_app, the `app` condition's) is one of b's.
    local WEIBO = "Mozilla/5.0 (iPhone) Weibo (iPhone10,1__weibo__12.1.0)"
    local SAFARI = "Mozilla/5.0 (iPhone) Version/17.0 Safari/604.1"
    ok(link_rules.shows_guide(o, WECHAT), "shows_guide: WeChat")
    ok(link_rules.shows_guide(o, "Mozilla/5.0 (iPhone) MicroMessenger/8.0.47"), "shows_guide: WeChat (Rust's UA)")
    ok(link_rules.shows_guide(o, "Mozilla/5.0 QQ/9.0.0"), "shows_guide: QQ")
    ok(not link_rules.shows_guide(o, WEIBO), "shows_guide: Weibo not listed")
    ok(not link_rules.shows_guide(o, SAFARI), "shows_guide: a browser")
    ok(not link_rules.shows_guide(o, IPHONE), "shows_guide: iPhone Safari")
    ok(not link_rules.shows_guide(o, nil), "shows_guide: no User-Agent")
    ok(not link_rules.shows_guide(o, ""), "shows_guide: an empty User-Agent")
    ok(not link_rules.shows_guide(o, "micromessenger/8"), "shows_guide: tokens are case-sensitive")
    -- The first matching line of inapp.txt names the app: Instagram's UA
    -- carrying MicroMessenger is WeChat's.
    ok(link_rules.shows_guide(o, "Instagram 300 ... MicroMessenger/8"), "shows_guide: file order wins")
    ok(not link_rules.shows_guide(opts('{"b":["instagram"]}'), "Instagram 300 ... MicroMessenger/8"),
        "shows_guide: file order wins (the other way)")
    ok(link_rules.shows_guide(opts('{"b":["weibo"]}'), WEIBO), "shows_guide: Weibo listed")
    ok(not link_rules.shows_guide(opts('{"f":true}'), WECHAT), "shows_guide: a link without b")
    -- Otherwise evaluated exactly as before: the guidance is the edge's
    -- decision (edge.lua), not choose()'s; a visitor of another app gets
    -- the rules.
    local r = opts('{"b":["wechat"],"f":true,"r":[{"c":{"app":["wechat"]},"u":"https://a/wechat"}]}')
    eq(url_for(r, V({ ua = WECHAT, q = "a=1" }), 1), "https://a/wechat?a=1", "b: rules and forwarding unchanged")
    local x = opts('{"b":["wechat"],"x":"https://a/over"}')
    local url, label = link_rules.choose(x, "https://x/", true, "c", V({ ua = WECHAT }), 1)
    eq(url, "https://a/over", "b: expired, the fallback")
    eq(label, "expired", "b: expired label")
    local a = proto.decode('3 4 9 d.com https://x/ {"b":["wechat","qq"]}')
    ok(a and a.kind == "found" and a.opts and a.opts.guide and a.opts.guide.qq, "record with b decoded")
    eq(proto.decode('3 4 9 d.com https://x/ {"b":["icq"]}'), nil, "record with an unknown app in b: a miss")
    eq(proto.decode('3 4 9 d.com https://x/ {"b":[' .. string.rep('"qq",', 50) .. '"qq"]}'), nil,
        "record with 51 names in b: a miss")
    -- guide_language: `zh` when the visitor's language is, else `en`.
    for _, c in ipairs({
        { "zh-CN,zh;q=0.9,en;q=0.8", "zh" },
        { "zh-CN", "zh" },
        { "zh", "zh" },
        { "ZH-tw", "zh" },
        { "zh-Hant-TW;q=0.8", "zh" },
        { "en-US,zh;q=0.5", "en" },
        { "en;q=0.5, zh", "zh" },
        { "fr", "en" },
        { "zho", "en" },
        { "zh;q=0", "en" },
        { "*", "en" },
        { "", "en" },
        { "zh\255", "en" }, -- not UTF-8: no language
    }) do
        eq(link_rules.guide_language(c[1]), c[2], "guide_language(" .. show(c[1]) .. ")")
    end
    eq(link_rules.guide_language(nil), "en", "guide_language: no header")
end

---------------------------------------------------------------- record.rs: protocol 3 records
do
    local line = '3 4 9 d.com https://x/ {"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://i/"}]}'
    local a = proto.decode(line)
    ok(a and a.kind == "found", "protocol 3 record decoded")
    if a then
        eq(a.v, 4, "record version")
        eq(a.exp, 9, "record expiry")
        eq(a.domain, "d.com", "record domain")
        eq(a.url, "https://x/", "record url")
        eq(a.options, '{"f":true,"r":[{"c":{"dev":["ios"]},"u":"https://i/"}]}', "raw options kept")
        ok(a.opts and a.opts.f and #a.opts.r == 1, "options parsed")
        eq(proto.encode(a), line, "cached form is the line")
        eq(proto.encode_record(a.v, a.exp, a.domain, a.url, a.opts), line, "Record::encode")
        eq(proto.encode_record(a.v, a.exp, a.domain, a.url, opts("{}")), "2 4 9 d.com https://x/",
            "empty options write protocol 2")
        eq(proto.encode_record(a.v, a.exp, a.domain, a.url, nil), "2 4 9 d.com https://x/", "no options: protocol 2")
        local b = proto.decode(line)
        ok(b ~= a and b.opts == a.opts, "options parsed once per worker (shared table)")
        local c = proto.decode_cached(proto.encode(a))
        eq(c and c.options, a.options, "cached and read back")
    end
    local p2 = proto.decode("2 4 9 d.com https://x/")
    ok(p2 and p2.kind == "found" and p2.opts == nil and p2.options == nil, "protocol 2 record has no options")
    for _, bad in ipairs({
        "3 1 5 d.com https://x",
        "3 1 5 d.com https://x ",
        '3 1 5 d.com https://x {}x',
        '3 1 5 d.com https://x {"z":1}',
        '3 1 5 d.com https://x {"f":true} y',
        '3 1 5 d.com https://x\t {"f":true}',
        '3 1 5  https://x {"f":true}',
        '3 x 5 d.com https://x {"f":true}',
        '3 1 +5 d.com https://x {"f":true}',
        '3 1 5 d.com  {"f":true}',
        '3 18446744073709551616 5 d.com https://x {"f":true}',
    }) do
        eq(proto.decode(bad), nil, "malformed record: " .. bad)
    end
    local e = proto.decode("3 1 5 d.com https://x {}")
    ok(e and e.kind == "found" and e.opts and link_rules.is_empty(e.opts), "empty options record")
end

---------------------------------------------------------------- report
t.report()
