-- Pages for people through nginx's proxy_cache (docs/protocol.md 4.3, and
-- 4.4's social card, 4.5's password form, 4.6's in-app browser guidance
-- and 4.7's destination warning; the twin of edge/src/pages/ on the
-- Pingora edge):
-- which paths are pages, the cache key (the same composition as the
-- Pingora edge's), and the purge.
--
-- Stock nginx has no purge: every key carries generations from
-- lua_shared_dict shorturl_pages_gen, one per code (bumped by each invalidation
-- message for it) and one for everything (bumped when the subscription is
-- (re)established), so a changed link's old entries are never found again
-- and age out of the cache (proxy_cache_path inactive=).
local proto = require("shorturl.proto")
local counters = require("shorturl.counters")

local gens = ngx.shared.shorturl_pages_gen
local byte, sub, find, gsub, format = string.byte, string.sub, string.find, string.gsub, string.format
local max, floor, tonumber = math.max, math.floor, tonumber

local M = {}

-- How long a code's generation is kept: longer than an unused cache entry
-- lives (proxy_cache_path inactive=1d), so by the time it is forgotten no
-- entry of the generation before it can be found any more.
local GEN_TTL = 90000

local SUFFIX = { [".svg"] = "svg", [".png"] = "png" }

-- Kinds whose key has no query part: the origin reads no parameter of
-- theirs (the QR codes' `size` and `margin`, and the guidance page's
-- `lang`, are the only ones).
local NO_QUERY = { preview = true, card = true, password = true, warning = true }

-- `/{code}.svg`, `/{code}.png`, `/{code}+`, `/{code}.card`,
-- `/{code}.password`, `/{code}.guide`, `/{code}.warning` (a valid code) →
-- kind, code.
function M.of_path(path)
    if byte(path, 1) ~= 47 then -- '/'
        return nil
    end
    local kind, code = SUFFIX[sub(path, -4)], sub(path, 2, -5)
    if not kind then
        if sub(path, -5) == ".card" then
            kind, code = "card", sub(path, 2, -6)
        elseif sub(path, -9) == ".password" then
            kind, code = "password", sub(path, 2, -10)
        elseif sub(path, -6) == ".guide" then
            kind, code = "guide", sub(path, 2, -7)
        elseif sub(path, -8) == ".warning" then
            kind, code = "warning", sub(path, 2, -9)
        elseif byte(path, -1) == 43 then -- '+'
            kind, code = "preview", sub(path, 2, -2)
        else
            return nil
        end
    end
    if proto.is_valid_code(code) then
        return kind, code
    end
    return nil
end

-- application/x-www-form-urlencoded decoding, as the origin reads queries
-- ('+' is a space, %XX decoded, a malformed escape kept as is).
local function decode(s)
    s = gsub(s, "+", " ")
    return (gsub(s, "%%(%x%x)", function(h)
        return string.char(tonumber(h, 16))
    end))
end

-- Plain decimal digits only, at most 4 (common::pages::number).
local function number(v)
    if v == nil or #v == 0 or #v > 4 or not find(v, "^[0-9]+$") then
        return nil
    end
    return tonumber(v)
end

-- `size` and `margin` as the origin reads them (common::pages::QrParams:
-- defaults 256 and 4, every occurrence must be valid, the last one counts);
-- nil when the origin refuses them (400).
function M.qr_params(query)
    local size, margin = 256, 4
    for piece in string.gmatch(query or "", "[^&]+") do
        local eq = find(piece, "=", 1, true)
        local k, v
        if eq then
            k, v = decode(sub(piece, 1, eq - 1)), decode(sub(piece, eq + 1))
        else
            k, v = decode(piece), ""
        end
        if k == "size" then
            size = number(v)
            if not size or size < 64 or size > 1024 then
                return nil
            end
        elseif k == "margin" then
            margin = number(v)
            if not margin or margin > 16 then
                return nil
            end
        end
    end
    return size, margin
end

-- The language of a guidance page's query (common::pages::
-- guide_lang_of_query): `zh` when one of its `&`-separated pairs is
-- exactly `lang=zh` (no decoding), else `en` (another value, none, no
-- query): what the origin renders, so `/{code}.guide` and
-- `/{code}.guide?lang=fr` share the `en` entry.
function M.guide_lang(query)
    if query then
        for p in (query .. "&"):gmatch("([^&]*)&") do
            if p == "lang=zh" then
                return "zh"
            end
        end
    end
    return "en"
end

-- The cache key of a page request, or nil when it must not be cached (no
-- host, or QR parameters the origin refuses). `host` is normalised.
-- `query`: the request's, after `?` (nil: none).
function M.key(host, kind, code, query)
    if not host then
        return nil
    end
    local params = ""
    if kind == "guide" then
        params = M.guide_lang(query)
    elseif not NO_QUERY[kind] then
        local size, margin = M.qr_params(query)
        if not size then
            return nil
        end
        params = format("%dx%d", size, margin)
    end
    return format("%s|%s|%s\n%s\n%s\n%s", gens:get("*") or 0, gens:get("c:" .. code) or 0, host, kind, code, params)
end

-- A generation newer than `old`: the time in ms (never reused, even if a
-- forgotten generation started again from nothing).
local function next_gen(old)
    return max(floor(ngx.now() * 1000), (old or 0) + 1)
end

-- An invalidation message for `code`: its pages are never found again.
function M.purge(code)
    local k = "c:" .. code
    local ok = gens:safe_set(k, next_gen(gens:get(k)), GEN_TTL)
    if not ok then
        -- No room to remember it: forget every page instead.
        M.flush()
    end
    counters.inc("pages_purge")
end

-- The subscription was (re)established: changes may have gone unannounced.
function M.flush()
    gens:set("*", next_gen(gens:get("*")))
    counters.inc("pages_flush")
end

-- log_by_lua of the page location: the result as the Pingora edge counts it.
local RESULT = { HIT = "hit", MISS = "miss", EXPIRED = "expired", REVALIDATED = "revalidated", STALE = "stale",
    UPDATING = "stale", BYPASS = "bypass" }

function M.count(cache_status, status)
    local st = tonumber(status) or 0
    local r = RESULT[cache_status or ""]
    if r ~= "stale" and r ~= "hit" and st >= 500 then
        r = "error"
    elseif not r or (r == "miss" and st ~= 200) then
        r = "bypass"
    end
    counters.inc("pages_" .. r)
end

M.RESULTS = { "hit", "miss", "expired", "revalidated", "stale", "error", "bypass" }

return M
