-- The dimensions of a human click (protocol 3.7, docs/protocol.md section
-- 3.4 "Version 4"), ported from common/src/clicks/dims.rs so both edges
-- send the same `x` lines: country (the caller's: geo.lua), the browser
-- and OS families of the User-Agent (common/data/ua_families.txt, after
-- the in-app browsers of common/data/inapp.txt), the language (the first
-- Accept-Language range's primary subtag), the source (`qr` for a request
-- whose query carries `qr=1`), the UTM parameters of the redirect's
-- Location and, with `clicks.city`, the city (the caller's: geo.city).
-- Every function answers nil for a dimension's default (which a batch
-- never sends).
--
-- The family file is read once in the master (`init_by_lua`, as the bot
-- list); the caller (clicks.lua) caches a user agent's families with its
-- device class.
local clicks_ua = require("shorturl.clicks_ua")
local link_rules = require("shorturl.link_rules")

local byte, sub, find, lower = string.byte, string.sub, string.find, string.lower

local M = {}

-- The dimensions in the order a batch lists them (Dim::ALL), and their
-- defaults (never sent).
M.DIMS = { "country", "browser", "os", "lang", "source", "utm_source", "utm_medium", "utm_campaign", "city" }
M.DEFAULTS = { country = "unknown", browser = "other", os = "other", lang = "-", source = "link",
    utm_source = "-", utm_medium = "-", utm_campaign = "-", city = "unknown" }
-- Values of a dimension named per link-day in a batch (TOP_VALUES); the
-- rest are summed under `~other`.
M.TOP_VALUES = 20
M.OTHER = "~other"
-- Longest UTM value sent as it is (MAX_UTM_VALUE).
local MAX_UTM_VALUE = 64
-- The QR marker (protocol 4.1, QR_MARKER): counted as the source `qr`,
-- never forwarded (link_rules.forward_query).
M.QR_MARKER = link_rules.QR_MARKER

---------------------------------------------------------------- families

local browser_tokens, os_tokens = {}, {} -- { family, token }, file order

-- A family name: 1-16 of [a-z0-9_] (is_family_name).
local function is_family_name(s)
    return #s >= 1 and #s <= 16 and not find(s, "[^a-z0-9_]")
end

-- Loads common/data/ua_families.txt (`<dimension> <family> <token>` a
-- line, `#` comments, blank lines skipped), as dims.rs `families` reads
-- it: a line whose dimension is neither `browser` nor `os`, whose family
-- is not 1-16 of [a-z0-9_] (or is `other`), or without a token is skipped.
-- Returns the number of tokens kept, or nil, err.
function M.load(path)
    local lines, err = clicks_ua.data_lines(path)
    if not lines then
        return nil, err
    end
    local b, o = {}, {}
    for _, l in ipairs(lines) do
        -- splitn(3, ' '): the token is the rest of the line, spaces and all.
        local s1 = find(l, " ", 1, true)
        local s2 = s1 and find(l, " ", s1 + 1, true)
        if s2 then
            local dim, family, token = sub(l, 1, s1 - 1), sub(l, s1 + 1, s2 - 1), sub(l, s2 + 1)
            if is_family_name(family) and family ~= "other" and token ~= "" then
                if dim == "browser" then
                    b[#b + 1] = { family, token }
                elseif dim == "os" then
                    o[#o + 1] = { family, token }
                end
            end
        end
    end
    browser_tokens, os_tokens = b, o
    return #b + #o
end

local function first_token(tokens, ua)
    for i = 1, #tokens do
        local t = tokens[i]
        if find(ua, t[2], 1, true) then
            return t[1]
        end
    end
    return nil
end

-- The browser and OS families of user agent `ua` (a header value, any
-- bytes; nil: none), each nil for `other`: the browser is the in-app
-- browser (link_rules.in_app, the `app` condition's) if any, else the
-- first `browser` token the user agent contains (case-sensitive); the OS
-- the first `os` token.
function M.families(ua)
    ua = ua or ""
    return link_rules.in_app(ua) or first_token(browser_tokens, ua), first_token(os_tokens, ua)
end

---------------------------------------------------------------- language

-- `[u8]::trim_ascii_start`'s bytes (space, \t, \n, \f, \r).
local function ascii_space(b)
    return b == 32 or b == 9 or b == 10 or b == 12 or b == 13
end

-- lang_of: the primary subtag of the first language range of an
-- Accept-Language value (up to the first `,`, then `;`, spaces and tabs
-- trimmed, up to the first `-` or `_`), lower-cased, when it is 2-3 ASCII
-- letters; else nil (`-`). Bytes, as the Pingora edge reads the header.
function M.lang(v)
    if not v then
        return nil
    end
    local e = find(v, "[,;]") -- up to ',' then up to ';': up to the first of either
    local i, j = 1, e and e - 1 or #v
    while i <= j and ascii_space(byte(v, i)) do
        i = i + 1
    end
    while j >= i do
        local b = byte(v, j)
        if b ~= 32 and b ~= 9 then
            break
        end
        j = j - 1
    end
    local d = find(v, "[-_]", i)
    if d and d <= j then
        j = d - 1
    end
    local n = j - i + 1
    if n < 2 or n > 3 then
        return nil
    end
    local tag = sub(v, i, j)
    if find(tag, "[^A-Za-z]") then
        return nil
    end
    return lower(tag)
end

---------------------------------------------------------------- source

-- has_qr_marker: whether `query` (the request's raw query, after `?`; nil:
-- none) has `qr=1` as one of its `&`-separated parameters.
function M.has_qr(query)
    if not query or not find(query, "qr=1", 1, true) then
        return false
    end
    for p in (query .. "&"):gmatch("([^&]*)&") do
        if p == "qr=1" then
            return true
        end
    end
    return false
end

---------------------------------------------------------------- UTM

local UTM_INDEX = { utm_source = 1, utm_medium = 2, utm_campaign = 3 }

-- A UTM value sent as it is: 1-64 of [A-Za-z0-9._~%+-].
local function is_utm_value(v)
    return #v <= MAX_UTM_VALUE and not find(v, "[^A-Za-z0-9._~%%+%-]")
end

-- utm_of: the UTM values of the redirect's Location `url`, in the order
-- utm_source, utm_medium, utm_campaign, each nil for the default `-`: the
-- first parameter of that exact name in its query (after the first `?`,
-- before any `#`, `&`-separated); its raw value when it is 1-64 of
-- [A-Za-z0-9._~%+-], `~other` for any other; empty or `-` (the default)
-- as if absent. A URL without `utm_` costs one search.
function M.utm(url)
    if not url or not find(url, "utm_", 1, true) then
        return nil, nil, nil
    end
    local qm = find(url, "?", 1, true)
    if not qm then
        return nil, nil, nil
    end
    local hash = find(url, "#", qm + 1, true)
    local q = sub(url, qm + 1, hash and hash - 1 or #url)
    local vals, seen = {}, {}
    for p in (q .. "&"):gmatch("([^&]*)&") do
        local eq = find(p, "=", 1, true)
        local name, value = p, ""
        if eq then
            name, value = sub(p, 1, eq - 1), sub(p, eq + 1)
        end
        local i = UTM_INDEX[name]
        if i and not seen[i] then
            seen[i] = true
            if value ~= "" and value ~= "-" then
                vals[i] = is_utm_value(value) and value or M.OTHER
            end
        end
    end
    return vals[1], vals[2], vals[3]
end

return M
