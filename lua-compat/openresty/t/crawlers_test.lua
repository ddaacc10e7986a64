-- Tests of crawlers.lua (protocol 4.4): the cases of
-- common/src/crawlers.rs (the documented fetchers are crawlers and bots,
-- every token is a bot, browsers and in-app browsers are not crawlers),
-- how the file is read, and pages.lua's `/{code}.card` path and key.
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file).
local crawlers = require("shorturl.crawlers")
local clicks_ua = require("shorturl.clicks_ua")
local pages = require("shorturl.pages")

local repo = ngx.var.su_repo
local tmp = ngx.var.su_tmp
local t = require("check").new()
local eq, ok = t.eq, t.ok

assert(clicks_ua.load(repo .. "/common/data/bots.txt"))

---------------------------------------------------------------- the file
do
    -- A file with comments, blank lines, CRLF, surrounding spaces and a
    -- `#` after spaces (a comment once trimmed, as `tokens()` reads it).
    local path = tmp .. "/crawlers.txt"
    local f = assert(io.open(path, "w"))
    f:write("# header\r\n\r\n  FooBot  \r\n\t# indented comment\nbar.example/Fetch\n   \n")
    f:close()
    eq(crawlers.load(path), 2, "tokens of a small file")
    local got = crawlers.tokens()
    eq(table.concat(got, "|"), "foobot|bar.example/fetch", "tokens trimmed, lower case, comments out")
    ok(crawlers.is_crawler("Mozilla/5.0 (compatible; FOOBOT/2)"), "matched case aside")
    ok(crawlers.is_crawler("x bar.example/fetch y"), "a token with '.' and '/' is plain text")
    ok(not crawlers.is_crawler("barXexample/fetch"), "'.' is not a pattern")
    ok(not crawlers.is_crawler("# header"), "a comment is no token")
    local n, err = crawlers.load(tmp .. "/no-such-file")
    ok(n == nil and err ~= nil, "a missing file: nil, err")
    -- The previous tokens are kept when a load fails.
    ok(crawlers.is_crawler("foobot"), "tokens kept after a failed load")
end

---------------------------------------------------------------- common/data/crawlers.txt
local count = assert(crawlers.load(repo .. "/common/data/crawlers.txt"))
do
    local lines = 0
    for line in io.lines(repo .. "/common/data/crawlers.txt") do
        local l = clicks_ua.trim(line)
        if l ~= "" and l:sub(1, 1) ~= "#" then
            lines = lines + 1
        end
    end
    eq(count, lines, "every token line is read")
    ok(count > 0, "crawlers.txt holds tokens")
end

-- the_documented_fetchers_are_crawlers_and_bots
for _, ua in ipairs({
    "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
    "Twitterbot/1.0",
    "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)",
    "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
    "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
    "WhatsApp/2.23.20.0",
    "TelegramBot (like TwitterBot)",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.0 "
        .. "Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)",
    -- The conformance suite's crawler.
    "facebookexternalhit/1.1",
}) do
    ok(crawlers.is_crawler(ua), "crawler: " .. ua)
    ok(clicks_ua.is_bot(ua), "a card counts as a bot click: " .. ua)
end

-- every_token_is_a_bot_so_a_card_counts_as_one
for _, tok in ipairs(crawlers.tokens()) do
    ok(clicks_ua.is_bot(tok), "token in bots.txt: " .. tok)
    ok(crawlers.is_crawler(tok:upper()), "token upper case: " .. tok)
end

-- browsers_and_in_app_browsers_are_not_crawlers
for _, ua in ipairs({
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 "
        .. "MicroMessenger/8.0.47",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 "
        .. "[FBAN/FBIOS;FBAV/450.0]",
    "curl/8.5.0",
    "",
}) do
    ok(not crawlers.is_crawler(ua), "not a crawler: " .. ua)
end
ok(not crawlers.is_crawler(nil), "no User-Agent: not a crawler")

---------------------------------------------------------------- pages: /{code}.card
do
    local kind, code = pages.of_path("/abc123.card")
    eq(kind, "card", "/{code}.card is a page")
    eq(code, "abc123", "its code")
    kind, code = pages.of_path("/my-sale_1.card")
    eq(kind, "card", "a custom code's card")
    eq(code, "my-sale_1", "the custom code")
    eq(pages.of_path("/abc.card"), nil, "a code too short")
    eq(pages.of_path("/abc123.card+"), nil, "a preview of no code")
    eq(pages.of_path("/abc123.cards"), nil, "another suffix")
    eq(pages.of_path("/abc123.CARD"), nil, "the suffix is case-sensitive")
    eq(pages.of_path("/.card"), nil, "no code")
    eq((pages.of_path("/abc123+")), "preview", "the preview unchanged")
    eq((pages.of_path("/abc123.svg")), "svg", "the QR code unchanged")
end

t.report()
