-- Tests of destination screening (protocol 4.7): link_rules.lua reading
-- and writing `w` (an Option<Screen>: "warn" or "block", any other value a
-- malformed record), `screened()` (a live link's `w`, nil once expired or
-- disabled) and `gate()`, the order in which a record's options answer
-- before its rules (`w` before `b`, `p` and `g`, for every visitor); and
-- pages.lua's `/{code}.warning` path and key (kind `warning`, no
-- parameter). (run.sh checks what /{code} answers end to end.)
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file).
local link_rules = require("shorturl.link_rules")
local proto = require("shorturl.proto")
local pages = require("shorturl.pages")
local crawlers = require("shorturl.crawlers")
local clicks_ua = require("shorturl.clicks_ua")

local repo = ngx.var.su_repo
local t = require("check").new()
local eq, ok, show = t.eq, t.ok, t.show

assert(clicks_ua.load(repo .. "/common/data/bots.txt"))
assert(link_rules.load_inapp(repo .. "/common/data/inapp.txt"))
assert(crawlers.load(repo .. "/common/data/crawlers.txt"))

local IPHONE = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"
local WECHAT = "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 MicroMessenger/8.0.47(0x18002f2c) "
    .. "NetType/WIFI Language/zh_CN"
local CRAWLER = "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)"

local opts = require("check").options

---------------------------------------------------------------- w: reading and writing
-- An Option<Screen> (LinkOptions' 8th field: the 8th element of the
-- sequence form): "warn" or "block" (serde's lower-case variant names, or
-- the externally tagged {"warn":null}), null as absent; written last and
-- only when present.
for _, b in ipairs({
    '{"w":"allow"}', -- a policy action, never a record's
    '{"w":"Warn"}', -- variant names are lower case, byte for byte
    '{"w":"BLOCK"}',
    '{"w":"warning"}',
    '{"w":"blocked"}',
    '{"w":""}',
    '{"w":true}',
    '{"w":false}',
    '{"w":1}',
    '{"w":0}',
    '{"w":[]}',
    '{"w":["warn"]}',
    '{"w":{}}',
    '{"w":{"warn":1}}',
    '{"w":{"warn":null,"block":null}}',
    '{"w":{"allow":null}}',
    '{"w":warn}',
    '{"w":"warn","w":"warn"}',
    '{"w":"warn","w":"block"}',
    '{"w": "warn"}',
    '{"W":"warn"}',
    '{"w":"warn",}',
    '{"w":"warn"} ',
    '{"w":"w\\u0061rn "}',
    '[false,null,false,[],false,false,[],"allow"]',
    '[false,null,false,[],false,false,[],true]',
    '[false,null,false,[],false,false,[],"warn",null]', -- a 9th field
    '[false,null,false,[],false,false,[],"warn",]',
    '[false,null,false,[],false,false,"warn"]', -- `w` is not the 7th field
    '{"w":"block","d":true}', -- `d` without `x`, as ever
}) do
    eq(link_rules.decode(b), nil, "refused (w): " .. b)
end
for _, c in ipairs({
    { '{"w":"warn"}', '{"w":"warn"}' },
    { '{"w":"block"}', '{"w":"block"}' },
    { '{"w":null}', '{}' },
    { '{"w":{"block":null}}', '{"w":"block"}' }, -- serde_json's externally tagged unit variant
    { '{"\\u0077":"w\\u0061rn"}', '{"w":"warn"}' },
    { '{"w":"block","b":["qq"],"p":true,"g":true,"f":true}', '{"f":true,"g":true,"p":true,"b":["qq"],"w":"block"}' },
    { '{"w":"warn","x":"https://a/x","d":true}', '{"x":"https://a/x","d":true,"w":"warn"}' },
    { '{"w":"warn","r":[{"c":{"dev":["ios"]},"u":"https://a/1"}]}',
        '{"r":[{"c":{"dev":["ios"]},"u":"https://a/1"}],"w":"warn"}' },
    -- The sequence form: w is the 8th field.
    { '[false,null,false,[],false,false,[],"warn"]', '{"w":"warn"}' },
    { '[false,null,false,[],false,false,[],"block"]', '{"w":"block"}' },
    { '[false,null,false,[],false,false,[],null]', '{}' },
    { '[true,null,false,[],true,true,["wechat"],"block"]', '{"f":true,"g":true,"p":true,"b":["wechat"],"w":"block"}' },
    { '[false,null,false,[],false,false,["wechat"]]', '{"b":["wechat"]}' },
}) do
    local o = link_rules.decode(c[1])
    eq(o and link_rules.encode(o), c[2], "accepted (w): " .. c[1])
end
do
    local warn, block = opts('{"w":"warn"}'), opts('{"w":"block"}')
    eq(warn.w, "warn", "w read: warn")
    eq(block.w, "block", "w read: block")
    eq(opts("{}").w, nil, "no w: absent")
    eq(opts('{"w":null}').w, nil, "w null: absent")
    ok(not link_rules.is_empty(warn), "options with only w change something")
    ok(not link_rules.is_empty(block), "options with only w (block) change something")
    ok(link_rules.is_empty(opts('{"w":null}')), "a null w changes nothing")
    eq(proto.encode_record(7, 9, "d.com", "https://x/", block), '3 7 9 d.com https://x/ {"w":"block"}',
        "a record with w stays protocol 3")
    -- Records: w read with the record, any other value a miss.
    local a = proto.decode('3 4 9 s.shop55.com https://x/ {"w":"warn"}')
    ok(a and a.kind == "found" and a.opts and a.opts.w == "warn" and a.v == 4, "record with w decoded")
    a = proto.decode('3 4 9 s.shop55.com https://x/ {"p":true,"w":"block"}')
    ok(a and a.kind == "found" and a.opts and a.opts.w == "block" and a.opts.p, "record with w and p decoded")
    eq(proto.decode('3 4 9 s.shop55.com https://x/ {"w":"allow"}'), nil, "record with w allow: a miss")
    eq(proto.decode('3 4 9 s.shop55.com https://x/ {"w":"Block"}'), nil, "record with w Block: a miss")
    eq(proto.decode('3 4 9 s.shop55.com https://x/ {"w":true}'), nil, "record with w true: a miss")
    -- Otherwise evaluated exactly as before: the screening is the edge's
    -- decision (edge.lua, gate()), not choose()'s.
    local r = opts('{"w":"block","f":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}')
    local url, label = link_rules.choose(r, "https://x/", false, "c", { ua = IPHONE, query = "a=1" }, 1)
    eq(url, "https://a/ios?a=1", "w: rules and forwarding unchanged")
    eq(label, "r1", "w: the rule's label")
    local x = opts('{"w":"warn","x":"https://a/over"}')
    url, label = link_rules.choose(x, "https://x/", true, "c", {}, 1)
    eq(url, "https://a/over", "w: expired, the fallback")
    eq(label, "expired", "w: expired label")
end

---------------------------------------------------------------- screened(): a live link's w
do
    eq(link_rules.screened(opts('{"w":"warn"}'), false), "warn", "screened: warn, live")
    eq(link_rules.screened(opts('{"w":"block"}'), false), "block", "screened: block, live")
    eq(link_rules.screened(opts('{"w":"block"}'), true), nil, "screened: expired, none")
    eq(link_rules.screened(opts('{"w":"warn","x":"https://a/x"}'), true), nil, "screened: expired with x, none")
    eq(link_rules.screened(opts('{"w":"block","x":"https://a/x","d":true}'), false), nil,
        "screened: disabled (d), none")
    eq(link_rules.screened(opts('{"w":"block","x":"https://a/x","d":true}'), true), nil,
        "screened: disabled and expired, none")
    eq(link_rules.screened(opts('{"f":true}'), false), nil, "screened: no w, none")
    eq(link_rules.screened(opts('{"w":null,"p":true}'), false), nil, "screened: a null w, none")
end

---------------------------------------------------------------- gate(): the order before the rules
do
    -- `opens`: whether the request's token opens the link, asked only for
    -- a password link that nothing before answered.
    local asked = 0
    local function opens(v)
        asked = asked + 1
        return v
    end
    local function gate(json, expired, ua, token)
        return link_rules.gate(opts(json), expired, ua, opens, token)
    end
    -- The verdict and the screen, as one string.
    local function both(v, screen)
        return tostring(v) .. " " .. tostring(screen)
    end

    local all = '{"w":"block","b":["wechat"],"p":true,"g":true}'
    local all_warn = '{"w":"warn","b":["wechat"],"p":true,"g":true}'
    -- w before everything else of the link, for every visitor.
    for _, c in ipairs({
        { "an in-app browser of b", WECHAT },
        { "a browser", IPHONE },
        { "a crawler", CRAWLER },
        { "a crawler in WeChat", CRAWLER .. " " .. WECHAT },
        { "no User-Agent", nil },
    }) do
        eq(both(gate(all, false, c[2], false)), "screened block", "w before b, p and g: " .. c[1])
        eq(both(gate(all, false, c[2], true)), "screened block", "w before b, p and g, with a token: " .. c[1])
        eq(both(gate(all_warn, false, c[2], false)), "screened warn", "w (warn) before b, p and g: " .. c[1])
    end
    eq(asked, 0, "a screened link never asks for the token")
    eq(both(gate('{"w":"warn","b":["wechat"]}', false, WECHAT)), "screened warn", "w before b")
    eq(both(gate('{"w":"block","p":true}', false, IPHONE, false)), "screened block", "w before p")
    eq(both(gate('{"w":"warn","g":true}', false, CRAWLER)), "screened warn", "w before g")
    eq(both(gate('{"w":"block","f":true,"r":[{"c":{"dev":["ios"]},"u":"https://a/ios"}]}', false, IPHONE)),
        "screened block", "w before the rules")
    eq(asked, 0, "still no token asked")

    -- The same link without w: the order of 4.4-4.6 as before.
    local none = '{"b":["wechat"],"p":true,"g":true}'
    eq(both(gate(none, false, WECHAT, false)), "guide nil", "no w: b first")
    eq(asked, 0, "the guidance asks no token")
    eq(both(gate(none, false, IPHONE, false)), "locked nil", "no w: then p")
    eq(asked, 1, "the token asked once")
    eq(both(gate(none, false, IPHONE, true)), "nil nil", "no w: p opened, the rules")
    eq(both(gate(none, false, CRAWLER, false)), "locked nil", "no w: a crawler on a password link, p")
    eq(both(gate('{"b":["wechat"],"g":true}', false, CRAWLER)), "card nil", "no w: a crawler, g")
    eq(both(gate('{"b":["wechat"],"g":true}', false, CRAWLER .. " " .. WECHAT)), "guide nil",
        "no w: a crawler in WeChat, b before g")
    eq(both(gate('{"g":true}', false, IPHONE)), "nil nil", "no w: a browser on a card link, the rules")
    eq(both(gate('{"f":true}', false, WECHAT)), "nil nil", "no options of 4.4-4.7: the rules")

    -- An expired or disabled link: its fallback, none of them (w neither).
    asked = 0
    for _, c in ipairs({
        { "expired", all, true },
        { "expired (warn)", all_warn, true },
        { "expired with x", '{"w":"block","x":"https://a/x","b":["wechat"],"p":true}', true },
        { "disabled", '{"w":"block","x":"https://a/x","d":true,"b":["wechat"],"p":true,"g":true}', false },
        { "disabled and expired", '{"w":"warn","x":"https://a/x","d":true}', true },
    }) do
        for _, ua in ipairs({ WECHAT, IPHONE, CRAWLER }) do
            eq(both(gate(c[2], c[3], ua, false)), "nil nil", "not screened: " .. c[1] .. " (" .. ua:sub(1, 20) .. ")")
        end
    end
    eq(asked, 0, "an expired or disabled link asks no token")
end

---------------------------------------------------------------- pages: /{code}.warning
do
    local kind, code = pages.of_path("/abc123.warning")
    eq(kind, "warning", "/{code}.warning is a page")
    eq(code, "abc123", "its code")
    kind, code = pages.of_path("/my-sale_1.warning")
    eq(kind, "warning", "a custom code's warning")
    eq(code, "my-sale_1", "the custom code")
    eq(pages.of_path("/abc.warning"), nil, "a code too short")
    eq(pages.of_path("/abc123.warnings"), nil, "another suffix")
    eq(pages.of_path("/abc123.warn"), nil, "not the screen's name")
    eq(pages.of_path("/abc123.WARNING"), nil, "the suffix is case-sensitive")
    eq(pages.of_path("/.warning"), nil, "no code")
    eq(pages.of_path("abc123.warning"), nil, "no leading '/'")
    eq((pages.of_path("/abc123.guide")), "guide", "the guidance unchanged")
    eq((pages.of_path("/abc123.password")), "password", "the form unchanged")
    eq((pages.of_path("/abc123.card")), "card", "the card unchanged")
    eq((pages.of_path("/abc123+")), "preview", "the preview unchanged")
    eq((pages.of_path("/abc123.svg")), "svg", "the QR code unchanged")
end
do
    local H, C = "s.shop55.com", "abc123"
    local w = pages.key(H, "warning", C, nil)
    ok(w and w:find("\nwarning\nabc123\n$"), "kind warning, no parameter: " .. show(w))
    -- The origin reads no parameter of it: every query shares the entry,
    -- never refused.
    eq(pages.key(H, "warning", C, ""), w, "an empty query: the same entry")
    eq(pages.key(H, "warning", C, "lang=zh"), w, "lang: the same entry")
    eq(pages.key(H, "warning", C, "size=1&margin=99"), w, "QR parameters the origin would refuse: the same entry")
    ok(w ~= pages.key(H, "password", C, nil), "apart from the form")
    ok(w ~= pages.key(H, "card", C, nil), "apart from the card")
    ok(w ~= pages.key(H, "preview", C, nil), "apart from the preview")
    ok(w ~= pages.key(H, "guide", C, nil), "apart from the guidance")
    ok(pages.key(H, "warning", "abc124", nil) ~= w, "apart from another code")
    ok(pages.key("go.shop55.com", "warning", C, nil) ~= w, "apart from another host")
    eq(pages.key(nil, "warning", C, nil), nil, "no host: not cached")
    -- Purged with the code's other pages (a generation per code).
    local other = pages.key(H, "warning", "other1", nil)
    pages.purge(C)
    ok(pages.key(H, "warning", C, nil) ~= w, "purge: the warning is never found again")
    eq(pages.key(H, "warning", "other1", nil), other, "purge: another code's warning kept")
    w = pages.key(H, "warning", C, nil)
    pages.flush()
    ok(pages.key(H, "warning", C, nil) ~= w, "flush: every page")
end

t.report()
