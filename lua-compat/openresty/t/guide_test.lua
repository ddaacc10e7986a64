-- Tests of the in-app browser guidance's page (protocol 4.6) in pages.lua:
-- the `/{code}.guide` path, its key's parameter (`zh` or `en`, as
-- common::pages::guide_lang_of_query reads a query) and its purge with
-- the code's other pages. (link_rules_test.lua reads `b`; run.sh checks
-- what /{code} answers.)
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file).
local pages = require("shorturl.pages")

local t = require("check").new()
local eq, ok, show = t.eq, t.ok, t.show

---------------------------------------------------------------- pages: /{code}.guide
do
    local kind, code = pages.of_path("/abc123.guide")
    eq(kind, "guide", "/{code}.guide is a page")
    eq(code, "abc123", "its code")
    kind, code = pages.of_path("/my-sale_1.guide")
    eq(kind, "guide", "a custom code's guidance")
    eq(code, "my-sale_1", "the custom code")
    eq(pages.of_path("/abc.guide"), nil, "a code too short")
    eq(pages.of_path("/abc123.guides"), nil, "another suffix")
    eq(pages.of_path("/abc123.GUIDE"), nil, "the suffix is case-sensitive")
    eq(pages.of_path("/.guide"), nil, "no code")
    eq(pages.of_path("/abc123.guide+"), nil, "a preview of no code")
    eq(pages.of_path("abc123.guide"), nil, "no leading '/'")
    eq((pages.of_path("/abc123.card")), "card", "the card unchanged")
    eq((pages.of_path("/abc123.password")), "password", "the form unchanged")
    eq((pages.of_path("/abc123+")), "preview", "the preview unchanged")
    eq((pages.of_path("/abc123.png")), "png", "the QR code unchanged")
end

---------------------------------------------------------------- the key's parameter
for _, c in ipairs({
    { "lang=zh", "zh" },
    { "a=1&lang=zh", "zh" },
    { "lang=zh&a=1", "zh" },
    { "lang=en&lang=zh", "zh" }, -- any pair
    { "lang=zh&lang=en", "zh" },
    { "lang=en", "en" },
    { "lang=fr", "en" },
    { "lang=", "en" },
    { "lang", "en" },
    { "lang=ZH", "en" }, -- byte for byte
    { "lang=zh-CN", "en" },
    { "lang=z%68", "en" }, -- no decoding
    { "lang%3Dzh", "en" },
    { " lang=zh", "en" },
    { "xlang=zh", "en" },
    { "lang=zh;", "en" },
    { "", "en" },
    { "&&", "en" },
}) do
    eq(pages.guide_lang(c[1]), c[2], "guide_lang(" .. show(c[1]) .. ")")
end
eq(pages.guide_lang(nil), "en", "guide_lang: no query")

do
    local H, C = "s.shop55.com", "abc123"
    local zh = pages.key(H, "guide", C, "lang=zh")
    local en = pages.key(H, "guide", C, "lang=en")
    ok(zh and zh:find("\nguide\nabc123\nzh$"), "kind guide, parameter zh: " .. show(zh))
    ok(en and en:find("\nguide\nabc123\nen$"), "kind guide, parameter en: " .. show(en))
    ok(zh ~= en, "one entry per language")
    -- What the origin renders `en` for shares the `en` entry.
    eq(pages.key(H, "guide", C, nil), en, "no query: the en entry")
    eq(pages.key(H, "guide", C, ""), en, "an empty query: the en entry")
    eq(pages.key(H, "guide", C, "lang=fr"), en, "lang=fr: the en entry")
    eq(pages.key(H, "guide", C, "lang=en&utm=1"), en, "other keys ignored")
    eq(pages.key(H, "guide", C, "utm=1&lang=zh"), zh, "other keys ignored (zh)")
    -- QR parameters mean nothing to it (never a refusal, never a part).
    eq(pages.key(H, "guide", C, "size=1"), en, "a QR size the origin would refuse: still the en entry")
    ok(zh ~= pages.key(H, "preview", C, nil), "apart from the preview")
    ok(zh ~= pages.key(H, "card", C, nil), "apart from the card")
    ok(zh ~= pages.key(H, "password", C, nil), "apart from the form")
    ok(pages.key(H, "guide", "abc124", "lang=zh") ~= zh, "apart from another code")
    ok(pages.key("go.shop55.com", "guide", C, "lang=zh") ~= zh, "apart from another host")
    eq(pages.key(nil, "guide", C, "lang=zh"), nil, "no host: not cached")
    -- Purged with the code's other pages (a generation per code).
    local card = pages.key(H, "card", C, nil)
    local other = pages.key(H, "guide", "other1", "lang=zh")
    pages.purge(C)
    ok(pages.key(H, "guide", C, "lang=zh") ~= zh, "purge: the zh entry is never found again")
    ok(pages.key(H, "guide", C, "lang=en") ~= en, "purge: nor the en entry")
    ok(pages.key(H, "card", C, nil) ~= card, "purge: nor the code's card")
    eq(pages.key(H, "guide", "other1", "lang=zh"), other, "purge: another code's guidance kept")
    zh = pages.key(H, "guide", C, "lang=zh")
    pages.flush()
    ok(pages.key(H, "guide", C, "lang=zh") ~= zh, "flush: every page")
end

t.report()
