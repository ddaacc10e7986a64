-- The referrer host of a click, ported from common/src/clicks/referrer.rs
-- (protocol section 3.4): the host of `scheme://[userinfo@]host[:port]...`,
-- lower-cased, without port or trailing dot, only [a-z0-9._-] (at least
-- one letter or digit) or a bracketed IPv6 literal, at most 253 bytes;
-- anything else, and no header, is "-".
local ua = require("shorturl.clicks_ua")

local byte, sub, lower, find = string.byte, string.sub, string.lower, string.find
local trim_value = ua.trim_value

local M = {}

M.NONE = "-"
local MAX_HOST_LEN = 253

local function scheme_ok(s)
    local b = byte(s, 1)
    if not b or not ((b >= 65 and b <= 90) or (b >= 97 and b <= 122)) then
        return false
    end
    return not find(s, "[^A-Za-z0-9+%-.]", 2)
end

-- "" or ":digits" after an IPv6 literal.
local function port_ok(after)
    return after == "" or (byte(after, 1) == 58 and not find(after, "[^0-9]", 2))
end

local function parse(v)
    v = trim_value(v)
    local s = find(v, "://", 1, true)
    if not s then
        return nil
    end
    if not scheme_ok(sub(v, 1, s - 1)) then
        return nil
    end
    local rest = sub(v, s + 3)
    local e = find(rest, "[/?#]")
    local authority = e and sub(rest, 1, e - 1) or rest
    -- rsplit_once('@'): the host follows the last '@'.
    local hostport = authority
    local at = find(authority, "@[^@]*$")
    if at then
        hostport = sub(authority, at + 1)
    end
    local host
    if byte(hostport, 1) == 91 then -- '['
        local v6 = sub(hostport, 2)
        local close = find(v6, "]", 1, true)
        if not close then
            return nil
        end
        local inner, after = sub(v6, 1, close - 1), sub(v6, close + 1)
        if not port_ok(after) or inner == "" or find(inner, "[^0-9A-Fa-f:.]") then
            return nil
        end
        host = "[" .. lower(inner) .. "]"
    else
        local h = hostport
        local colon = find(hostport, ":", 1, true)
        if colon then
            h = sub(hostport, 1, colon - 1)
            if find(hostport, "[^0-9]", colon + 1) then
                return nil
            end
        end
        if byte(h, -1) == 46 then -- one trailing '.'
            h = sub(h, 1, -2)
        end
        if h == "" or not find(h, "[A-Za-z0-9]") or find(h, "[^A-Za-z0-9._%-]") then
            return nil
        end
        host = lower(h)
    end
    if #host > MAX_HOST_LEN then
        return nil
    end
    return host
end

-- The referrer host of a `Referer` value (any bytes, or nil for none), as
-- referrer.rs `referrer_host_buf`.
function M.host(referer)
    if referer == nil then
        return M.NONE
    end
    return parse(referer) or M.NONE
end

return M
