-- Tests of unlock.lua (protocol 4.5): unlock tokens checked against fixed
-- vectors computed apart from this code (Python's hmac, hashlib and
-- base64; the same vectors are in the Rust unit test), the cookies a
-- request may carry, config.lua's `unlock.keys`, and pages.lua's
-- `/{code}.password` path and key.
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file).
local unlock = require("shorturl.unlock")
local seal = require("shorturl.seal")
local config = require("shorturl.config")
local pages = require("shorturl.pages")

local repo = ngx.var.su_repo
local tmp = ngx.var.su_tmp
local t = require("check").new()
local eq, ok, show = t.eq, t.ok, t.show

-- The vectors, computed with
--   python3 -c 'import hmac, hashlib, base64
--   def tok(key, domain, code, version, exp):
--       kid = hashlib.sha256(key).hexdigest()[:8]
--       msg = f"1\n{domain}\n{code}\n{version}\n{exp}".encode()
--       mac = base64.urlsafe_b64encode(hmac.new(key, msg, hashlib.sha256).digest()).rstrip(b"=").decode()
--       return f"1.{kid}.{exp}.{mac}"
--   print(tok(bytes(range(32)), "s.shop55.com", "pw1", 3, 1900000000))'
-- K1: bytes 0..31; K2 (a second key, for rotation): bytes 32..63.
local K1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
local K2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
local K1_ID, K2_ID = "630dcd29", "72dbb733"
local DOMAIN, CODE, VERSION, EXP = "s.shop55.com", "pw1", 3, 1900000000
-- K1 over (s.shop55.com, pw1, 3, 1900000000).
local VALID = "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E"
-- K2 over the same.
local VALID_K2 = "1.72dbb733.1900000000.xTQDLcQuygaoX8mfbN4nr8emBY6VEaJGenmEWjoWXps"
-- K1 over (s.shop55.com, pw1, 3, 1700000000): a right MAC, long expired.
local EXPIRED = "1.630dcd29.1700000000.mX-PA8fYxMeqfvikC85qDPnNxXEKP27FEIVmDdbLd5s"
-- K1 over another code (pw2), another domain (go.shop55.com), another
-- version (4), each with exp 1900000000.
local OTHER_CODE = "1.630dcd29.1900000000.ftWWiWV4arYFdP1WXPHO32w2mjTgtmxiOR3Z_AddF4c"
local OTHER_DOMAIN = "1.630dcd29.1900000000.0lWD4kiSFUTmCG2sAfX2GuGUU4X-mdKc5Lm8yUcfQlc"
local VERSION_4 = "1.630dcd29.1900000000.nYmml6S9X6gqN2oNLKcww6j4-BmNwYl8oa03ZFhsN9Q"

local NOW = 1800000000

local k1 = assert(seal.parse_key(K1))
local k2 = assert(seal.parse_key(K2))
local ONE, BOTH = { k1 }, { k1, k2 }

local function valid(keys, value, now, domain, code, version)
    return unlock.valid(keys, value, domain or DOMAIN, code or CODE, version or VERSION, now or NOW)
end

---------------------------------------------------------------- key ids and the MAC
eq(k1.id, K1_ID, "kid: first 8 hex digits of SHA-256 over the key bytes")
eq(k2.id, K2_ID, "kid of the second key")
eq(unlock.mac(k1.key, DOMAIN, CODE, "3", "1900000000"), "rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "MAC: base64url without padding, 43 characters")
eq(#unlock.mac(k1.key, "d", "c", "0", "1"), 43, "every MAC is 43 characters")
-- '-' and '_' of the URL alphabet (the vectors above hold both).
ok(VERSION_4:find("-", 1, true) and VALID:find("_", 1, true), "the vectors use the URL alphabet")

---------------------------------------------------------------- valid and invalid tokens
ok(valid(ONE, VALID), "a valid token")
ok(valid(ONE, VALID, EXP - 1), "valid up to the second before exp")
ok(not valid(ONE, VALID, EXP), "not valid at exp (now < exp)")
ok(not valid(ONE, VALID, EXP + 1), "not valid after exp")
ok(not valid(ONE, EXPIRED), "expired, its MAC right")
ok(valid(ONE, EXPIRED, 1699999999), "the expired vector's MAC is right (before its exp)")
ok(not valid(ONE, VALID, NOW, DOMAIN, CODE, 4), "another version: every earlier token stops opening")
ok(valid(ONE, VERSION_4, NOW, DOMAIN, CODE, 4), "a token of version 4 opens version 4")
ok(not valid(ONE, VERSION_4), "a token of version 4 does not open version 3")
ok(not valid(ONE, VALID, NOW, "go.shop55.com"), "another domain")
ok(not valid(ONE, OTHER_DOMAIN), "signed for another domain")
ok(valid(ONE, OTHER_DOMAIN, NOW, "go.shop55.com"), "the other domain's vector opens its domain")
ok(not valid(ONE, VALID, NOW, DOMAIN, "pw2"), "another code")
ok(not valid(ONE, OTHER_CODE), "signed for another code")
ok(valid(ONE, OTHER_CODE, NOW, DOMAIN, "pw2"), "the other code's vector opens its code")
ok(not valid(ONE, VALID, NOW, DOMAIN, "PW1"), "codes are matched byte for byte")
ok(not valid(ONE, VALID, NOW, "S.shop55.com"), "the domain is the normalised one")
ok(valid(ONE, VALID, NOW, DOMAIN, CODE, "3"), "the version as text")

-- Keys: the kid names the key; rotation keeps both.
ok(not valid({ k2 }, VALID), "unknown kid (only K2 configured)")
ok(not valid({}, VALID), "no key configured: nothing is valid")
ok(valid({ k2 }, VALID_K2), "the second key's token")
ok(not valid(ONE, VALID_K2), "the second key's token without it")
ok(valid(BOTH, VALID), "rotation: the old key's token")
ok(valid(BOTH, VALID_K2), "rotation: the new key's token")
ok(valid({ k2, k1 }, VALID), "the keys' order does not matter")
-- A kid naming K2 with K1's MAC, and the other way round.
ok(not valid(BOTH, "1.72dbb733.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E"),
    "K1's MAC under K2's id")
ok(not valid(BOTH, "1.630dcd29.1900000000.xTQDLcQuygaoX8mfbN4nr8emBY6VEaJGenmEWjoWXps"),
    "K2's MAC under K1's id")

-- Tampered parts: the MAC covers the exp.
for _, bad in ipairs({
    "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1F", -- last character
    "1.630dcd29.1900000000.sFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- first character
    "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj/2hp1E", -- standard alphabet
    "1.630dcd29.1900000001.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- a later exp
    "1.630dcd29.2900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E=", -- padded
    "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1", -- 42 characters
    "1.630dcd29.1900000000.", -- no MAC
    "1.630DCD29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- kid in upper case
}) do
    ok(not valid(ONE, bad), "tampered: " .. bad)
end

-- Malformed values.
for _, bad in ipairs({
    "",
    "1",
    "1.",
    "1.630dcd29",
    "1.630dcd29.1900000000", -- too few parts
    "630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E.x", -- too many
    "2.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- another format
    "v1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- wrong prefix
    "01.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    " 1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29.19000000x0.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- exp not digits
    "1.630dcd29.+1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29.-1.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29.1.9e9.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29.0x71.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E",
    "1.630dcd29..rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- empty exp
    "1.630dcd29.000000000001900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- over 20 digits
    "1.630dcd29.0.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- exp 0
    "1.630dcd29.18446744073709551616.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- past u64
    "1..1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E", -- no kid
    "1.630dcd29.1900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E ",
}) do
    ok(not valid(ONE, bad), "malformed: " .. show(bad))
end
ok(not unlock.valid(ONE, nil, DOMAIN, CODE, VERSION, NOW), "no value")
-- exp is read as a number (common/src/unlock.rs parses a u64 and signs its
-- decimal form): leading zeros, up to 20 digits, spell the same exp.
ok(valid(ONE, "1.630dcd29.01900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E"), "exp with a leading zero")
ok(valid(ONE, "1.630dcd29.00000000001900000000.rFXN0T2vL31TEFgYpotWMrwCJkFlxuHoCt7bj_2hp1E"),
    "exp of 20 digits, leading zeros")

---------------------------------------------------------------- constant-time comparison
ok(unlock.same("abc", "abc"), "same: equal")
ok(not unlock.same("abc", "abd"), "same: last byte")
ok(not unlock.same("abc", "xbc"), "same: first byte")
ok(not unlock.same("abc", "abcd"), "same: lengths")
ok(unlock.same("", ""), "same: empty")

---------------------------------------------------------------- cookies
do
    local function opens(cookie, keys)
        return unlock.opens(keys or ONE, cookie, DOMAIN, CODE, VERSION, NOW)
    end
    ok(opens("su_pass=" .. VALID), "one cookie")
    ok(opens("a=1; su_pass=" .. VALID .. "; b=2"), "among others")
    ok(opens("su_pass=" .. EXPIRED .. "; su_pass=" .. VALID), "several su_pass: the second valid")
    ok(opens("su_pass=" .. VALID .. "; su_pass=" .. OTHER_CODE), "several su_pass: the first valid")
    ok(opens("su_pass=garbage;su_pass=" .. OTHER_DOMAIN .. ";su_pass=" .. VALID), "no space after ';'")
    ok(opens({ "a=1", "su_pass=" .. VALID }), "several Cookie headers: in the second")
    ok(opens({ "su_pass=x", "b=2; su_pass=" .. VALID_K2 }, BOTH), "several Cookie headers, the second key")
    ok(opens("  su_pass=" .. VALID .. " \t;"), "white space around the pair and the value")
    ok(not opens("su_pass =" .. VALID), "no space before the '='")
    ok(not opens("su_pass=" .. EXPIRED .. "; su_pass=" .. OTHER_CODE), "several, none valid")
    ok(not opens("su_pass=" .. VALID, {}), "no keys: nothing opens")
    ok(not opens("su_pass=" .. VALID_K2), "an unknown kid")
    ok(not opens("su_pass2=" .. VALID), "another cookie's name")
    ok(not opens("xsu_pass=" .. VALID), "a name that ends in su_pass")
    ok(not opens("SU_PASS=" .. VALID), "names are case-sensitive")
    ok(not opens("su_pass=\"" .. VALID .. "\""), "a quoted value is not unquoted")
    ok(not opens("su_pass"), "a name without a value")
    ok(not opens(""), "an empty header")
    ok(not opens(nil), "no Cookie header")
    ok(not opens({}), "no Cookie header (an empty list)")
    eq(table.concat(unlock.cookie_values("a=1; su_pass=x=y; su_pass=; c", "su_pass"), "|"), "x=y|",
        "values after the first '=', empty ones kept")
    -- The request's own headers against the configured keys.
    unlock.init({ unlock_keys = BOTH })
    ok(unlock.request_opens({ cookie = "su_pass=" .. VALID_K2 }, DOMAIN, CODE, VERSION, NOW), "request: configured keys")
    ok(not unlock.request_opens(nil, DOMAIN, CODE, VERSION, NOW), "request: no headers")
    ok(not unlock.request_opens({}, DOMAIN, CODE, VERSION, NOW), "request: no Cookie")
    unlock.init({ unlock_keys = {} })
    ok(not unlock.request_opens({ cookie = "su_pass=" .. VALID }, DOMAIN, CODE, VERSION, NOW), "request: no keys")
    unlock.init({})
    ok(not unlock.request_opens({ cookie = "su_pass=" .. VALID }, DOMAIN, CODE, VERSION, NOW),
        "request: unlock not configured")
end

---------------------------------------------------------------- config: unlock.keys (SU_UNLOCK_KEYS)
do
    local nginx = { bots_file = repo .. "/common/data/bots.txt", inapp_file = repo .. "/common/data/inapp.txt",
        crawlers_file = repo .. "/common/data/crawlers.txt", families_file = repo .. "/common/data/ua_families.txt" }
    local function load(body)
        local path = tmp .. "/unlock_conf.lua"
        local f = assert(io.open(path, "w"))
        f:write("return " .. body)
        f:close()
        return pcall(config.load, path, nginx)
    end
    local good, c = load("{}")
    ok(good and #c.unlock_keys == 0, "no unlock keys by default: " .. tostring(c))
    good, c = load("{ unlock = { keys = { " .. show(K1) .. ", " .. show(" " .. K2 .. "\n") .. " } } }")
    ok(good, "two keys: " .. tostring(c))
    if good then
        eq(#c.unlock_keys, 2, "two keys read")
        eq(c.unlock_keys[1].id, K1_ID, "first key's id")
        eq(c.unlock_keys[2].id, K2_ID, "second key (white space around it ignored)")
    end
    for _, case in ipairs({
        { '{ unlock = { keys = { "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwd" } } }', "unlock.keys%[0%].*SU_UNLOCK_KEYS.*32 bytes" },
        { '{ unlock = { keys = { "' .. K1 .. '", "not base64!" } } }', "unlock.keys%[1%].*SU_UNLOCK_KEYS.*not base64" },
        { '{ unlock = { keys = { "' .. K1 .. '", "' .. K1 .. '" } } }', "unlock.keys%[1%].*listed twice" },
        { '{ unlock = { keys = { 7 } } }', "unlock.keys%[0%].*SU_UNLOCK_KEYS" },
        { '{ unlock = { keys = "' .. K1 .. '" } }', "unlock.keys must be a table" },
        { '{ unlock = { key = "' .. K1 .. '" } }', "unknown setting unlock.key" },
    }) do
        local loaded, err = load(case[1])
        ok(not loaded and tostring(err):find(case[2]), "refused: " .. case[1] .. " -> " .. tostring(err))
        ok(not tostring(err):find(K1, 1, true), "the message never shows a key: " .. tostring(err))
    end
end

---------------------------------------------------------------- pages: /{code}.password
do
    local kind, code = pages.of_path("/abc123.password")
    eq(kind, "password", "/{code}.password is a page")
    eq(code, "abc123", "its code")
    kind, code = pages.of_path("/pw-sale_1.password")
    eq(kind, "password", "a custom code's form")
    eq(code, "pw-sale_1", "the custom code")
    eq(pages.of_path("/abc.password"), nil, "a code too short")
    eq(pages.of_path("/abc123.passwords"), nil, "another suffix")
    eq(pages.of_path("/abc123.PASSWORD"), nil, "the suffix is case-sensitive")
    eq(pages.of_path("/.password"), nil, "no code")
    eq(pages.of_path("/abc123.password+"), nil, "a preview of no code")
    eq((pages.of_path("/abc123.card")), "card", "the card unchanged")
    eq((pages.of_path("/abc123+")), "preview", "the preview unchanged")
    -- Keyed like the preview and the card: no query part.
    local a = pages.key("s.shop55.com", "password", "abc123", "size=100&x=1")
    local b = pages.key("s.shop55.com", "password", "abc123", nil)
    ok(a and a == b, "no query in the form's key")
    ok(a:find("\npassword\nabc123\n$"), "kind password, no parameters: " .. show(a))
    ok(a ~= pages.key("s.shop55.com", "preview", "abc123", nil), "apart from the preview")
    ok(a ~= pages.key("s.shop55.com", "card", "abc123", nil), "apart from the card")
end

t.report()
