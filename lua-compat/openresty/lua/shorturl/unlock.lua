-- Unlock tokens of password-protected links (docs/protocol.md 4.5): the
-- cookie `su_pass` a visitor gets from the origin once it entered the
-- link's password, checked here as the Pingora edge checks it. The edge
-- never signs one and never sees the password or its hash; it only tells a
-- valid token from anything else:
--
--   1.<kid>.<exp>.<mac>
--
-- `kid`: the first 8 hex digits of SHA-256 over the 32 key bytes (the key
-- ids of the TLS store, seal.lua); `exp`: Unix seconds; `mac`: base64url
-- without padding of HMAC-SHA256(key, "1\n<domain>\n<code>\n<version>\n<exp>").
-- Valid for a record when `kid` names a configured key (`unlock.keys`,
-- start.sh: SU_UNLOCK_KEYS), now < exp, and the MAC matches (compared in
-- constant time) for the record's domain and version and the requested
-- code. Any edit moves the version on, so no earlier token opens the link.
--
-- HMAC-SHA256: crypto.lua (libcrypto through the FFI, shared with the
-- unique visitors' hash).
local bit = require("bit")
local b64 = require("ngx.base64")
local hmac_sha256 = require("shorturl.crypto").hmac_sha256

local byte, sub, find, format = string.byte, string.sub, string.find, string.format
local bor, bxor = bit.bor, bit.bxor
local type = type

local M = {}

M.COOKIE = "su_pass"

-- The MAC of a token (base64url, no padding: 43 characters). `version`
-- and `exp` as their decimal text.
function M.mac(key, domain, code, version, exp)
    return b64.encode_base64url(hmac_sha256(key, "1\n" .. domain .. "\n" .. code .. "\n" .. version .. "\n" .. exp))
end

-- Equal strings, in a time that depends on their length only (the MAC a
-- request carries is never compared byte by byte with an early exit).
local function same(a, b)
    if #a ~= #b then
        return false
    end
    local diff = 0
    for i = 1, #a do
        diff = bor(diff, bxor(byte(a, i), byte(b, i)))
    end
    return diff == 0
end
M.same = same

local U64_MAX = "18446744073709551615"

-- `exp` read as common/src/unlock.rs reads it (1-20 ASCII digits parsed
-- as a u64): its value, and its decimal text without leading zeros, which
-- is what the MAC covers (Rust formats the parsed number); nil when it is
-- no such number.
local function exp_of(s)
    if #s < 1 or #s > 20 or find(s, "[^0-9]") then
        return nil
    end
    local d = s:gsub("^0+", "")
    if d == "" then
        d = "0"
    end
    if #d == 20 and d > U64_MAX then
        return nil
    end
    return tonumber(d), d
end

-- Whether one cookie value opens `code` of the record (`domain`, `version`)
-- at `now` (Unix seconds) with `keys` (config: { { id, key }, ... }).
function M.valid(keys, value, domain, code, version, now)
    if type(value) ~= "string" or sub(value, 1, 2) ~= "1." then
        return false
    end
    -- 1.<kid>.<exp>.<mac>: exactly four parts (base64url has no '.').
    local kid, exp_s, mac = value:match("^1%.([^.]*)%.([^.]*)%.([^.]*)$")
    if not kid or #mac ~= 43 then
        return false
    end
    local exp, exp_d = exp_of(exp_s)
    if not exp or not (now < exp) then
        return false
    end
    local v = type(version) == "number" and format("%d", version) or version
    for i = 1, #keys do
        local k = keys[i]
        -- Two keys may share an id (1 in 2^32): each is tried.
        if k.id == kid and same(M.mac(k.key, domain, code, v, exp_d), mac) then
            return true
        end
    end
    return false
end

-- Rust's trim_ascii: ASCII white space (space, \t, \n, \f, \r) at both ends.
local function trim(s)
    return (s:match("^[ \t\n\f\r]*(.-)[ \t\n\f\r]*$"))
end

-- The values of every `name` cookie in `cookie` (one Cookie header's value,
-- or a list of them: HTTP/1.1 clients may send several, HTTP/2 ones split
-- it), in order, as UnlockKeys::opened_by reads them: pairs separated by
-- ';' and trimmed, the pair starting with exactly `name=` (no space
-- before the '='), the rest trimmed is the value (never unquoted: the
-- origin never quotes a token).
function M.cookie_values(cookie, name)
    local out = {}
    if type(cookie) == "string" then
        cookie = { cookie }
    elseif type(cookie) ~= "table" then
        return out
    end
    local prefix = name .. "="
    for _, h in ipairs(cookie) do
        for pair in (h .. ";"):gmatch("([^;]*);") do
            pair = trim(pair)
            if sub(pair, 1, #prefix) == prefix then
                out[#out + 1] = trim(sub(pair, #prefix + 1))
            end
        end
    end
    return out
end

-- Whether any `su_pass` cookie of `cookie` (the Cookie header(s)) opens
-- `code` of the record (`domain`, `version`) at `now`: several may be sent
-- (one per path, or an old one beside a new one), any valid one opens.
function M.opens(keys, cookie, domain, code, version, now)
    if not keys or #keys == 0 or not cookie then
        return false
    end
    local values = M.cookie_values(cookie, M.COOKIE)
    for i = 1, #values do
        if M.valid(keys, values[i], domain, code, version, now) then
            return true
        end
    end
    return false
end

local configured = {} -- { { id, key }, ... } from config.lua (unlock.keys)

function M.init(cfg)
    configured = cfg.unlock_keys or {}
end

-- The request's tokens against the configured keys. `headers`: the
-- request's header table (read_head in edge.lua), nil when none.
function M.request_opens(headers, domain, code, version, now)
    return M.opens(configured, headers and headers["cookie"], domain, code, version, now)
end

return M
