-- Protocol section 2.1 (docs/protocol.md): which request heads are refused
-- and which host a request is for. `check` mirrors
-- common/src/request_rules.rs step for step; `pingora_refusal` reproduces
-- the answers Pingora's own HTTP parser gives before the Pingora edge's code
-- runs (edge/src/request_rules.rs), so both edges answer every odd request
-- identically. Both read the raw request line (nginx's $request), never
-- nginx's decoded $uri.
local proto = require("shorturl.proto")

local byte, sub, find, lower = string.byte, string.sub, string.find, string.lower

local M = {}

M.MAX_HEADER_FIELDS = 100

-- Fields nginx takes at most once (request_rules::SINGLE_FIELDS): nginx
-- refuses a head repeating one before the module runs; the rules say why.
M.SINGLE_FIELDS = {
    ["authorization"] = true, ["content-range"] = true, ["expect"] = true, ["if-match"] = true,
    ["if-modified-since"] = true, ["if-none-match"] = true, ["if-range"] = true, ["if-unmodified-since"] = true,
}
-- Pingora's parser refuses heads with more fields than this (bare 400).
local PINGORA_MAX_FIELDS = 256

-- Splits a raw request line into method, target and version token
-- ("HTTP/1.1"; nil for an HTTP/0.9 line). The target is everything between
-- the first and the last space, raw spaces included.
function M.parse_line(line)
    local sp = find(line, " ", 1, true)
    if not sp then
        return line, nil, nil
    end
    local method = sub(line, 1, sp - 1)
    local last = line:match("^.*() ")
    if last == sp then
        return method, sub(line, sp + 1), nil -- "GET /x": HTTP/0.9
    end
    return method, sub(line, sp + 1, last - 1), sub(line, last + 1)
end

-- Version::from_token
function M.version(token)
    if token == nil then
        return "0.9"
    elseif token == "HTTP/1.1" then
        return "1.1"
    elseif token == "HTTP/1.0" then
        return "1.0"
    end
    return "other"
end

local STATUS = { connect = 405, too_many_fields = 431 }

-- Refusal::status
function M.status(reason)
    return STATUS[reason] or 400
end

local function hexval(c)
    if not c then
        return nil
    end
    if c >= 48 and c <= 57 then
        return c - 48
    end
    c = c - (c >= 97 and 32 or 0) -- lower -> upper
    if c >= 65 and c <= 70 then
        return c - 55
    end
    return nil
end

-- check_path: escaped controls, malformed escapes, dot segments above the root.
local function check_path(path)
    local n = #path
    local depth, seg_len, seg_dots = 0, 0, 0
    local i = 1
    while i <= n + 1 do
        local ch, width
        if i > n then
            ch, width = 47, 1
        else
            ch, width = byte(path, i), 1
            if ch == 37 then -- '%'
                local hi, lo = hexval(byte(path, i + 1)), hexval(byte(path, i + 2))
                if not hi or not lo then
                    return "bad_escape"
                end
                ch, width = hi * 16 + lo, 3
                if ch < 0x21 or ch == 0x7f then
                    return "encoded_control"
                end
            end
        end
        if ch == 47 then -- '/'
            if seg_len == 2 and seg_dots == 2 then
                if depth == 0 then
                    return "dot_segments"
                end
                depth = depth - 1
            elseif not (seg_len == 0 or (seg_len == 1 and seg_dots == 1)) then
                depth = depth + 1
            end
            seg_len, seg_dots = 0, 0
        else
            seg_len = seg_len + 1
            if ch == 46 then
                seg_dots = seg_dots + 1
            end
        end
        i = i + width
    end
    return nil
end

-- split_target: nil, reason | authority (false for origin-form), rest
local function split_target(t)
    if byte(t, 1) == 47 then
        return false, t
    end
    local s = find(t, "://", 1, true)
    if not s then
        return nil, "target_form"
    end
    local scheme = sub(t, 1, s - 1)
    if not find(scheme, "^[A-Za-z][A-Za-z0-9+.%-]*$") then
        return nil, "target_form"
    end
    local ls = lower(scheme)
    if ls ~= "http" and ls ~= "https" then
        return nil, "scheme"
    end
    local rest = sub(t, s + 3)
    local e = find(rest, "[/?]") or (#rest + 1)
    local authority = sub(rest, 1, e - 1)
    if find(authority, "@", 1, true) then
        return nil, "userinfo"
    end
    return authority, sub(rest, e)
end

local function trim_ows(v)
    return (v:match("^[ \t]*(.-)[ \t]*$"))
end

-- The head: { method=, target=, version= "0.9"|"1.0"|"1.1"|"other",
-- hosts = { values }, fields = n, repeated_single = true when a field of
-- SINGLE_FIELDS appears twice }.
-- Returns nil, host (or false: no domain), path, path_and_query when the
-- request is accepted; the refusal reason otherwise (see Refusal).
function M.check(h)
    if h.version ~= "1.0" and h.version ~= "1.1" then
        return "version"
    end
    local m = h.method
    if m == "" or find(m, "[^A-Z]") then
        return "method"
    end
    if m == "CONNECT" then
        return "connect"
    end
    local target = h.target
    local hash = find(target, "#", 1, true)
    if hash then
        target = sub(target, 1, hash - 1)
    end
    local authority, rest, path
    if target == "" then
        authority, rest, path = false, "/", "/"
    else
        if target == "*" then
            return "asterisk_form"
        end
        if find(target, "[^\33-\126]") then
            return "target_byte"
        end
        authority, rest = split_target(target)
        if authority == nil then
            return rest
        end
        path = rest:match("^[^?]*")
        if path == "" then
            path = "/"
        end
        local bad = check_path(path)
        if bad then
            return bad
        end
    end
    local hosts = h.hosts
    local raw
    if #hosts > 1 then
        return "repeated_host"
    elseif #hosts == 1 then
        -- A tab anywhere in Host, padding included, is refused (nginx
        -- strips only spaces around a value).
        if find(hosts[1], "\t", 1, true) then
            return "invalid_host"
        end
        raw = trim_ows(hosts[1])
        if authority and authority ~= raw then
            return "host_mismatch"
        end
    elseif h.version == "1.1" then
        return "missing_host"
    else
        raw = authority
    end
    local host = false
    if raw then
        host = proto.normalize_host(raw)
        if not host then
            return "invalid_host"
        end
    end
    if h.repeated_single then
        return "repeated_field"
    end
    if h.fields > M.MAX_HEADER_FIELDS then
        return "too_many_fields"
    end
    if rest == "" or byte(rest, 1) == 63 then -- "http://host" or "http://host?q"
        rest = "/" .. rest
    end
    return nil, host, path, rest
end

-- True when `s` is valid UTF-8 (no overlongs, surrogates or values past
-- U+10FFFF), as Rust's str::from_utf8 decides.
local function valid_utf8(s)
    local i, n = 1, #s
    while i <= n do
        local c = byte(s, i)
        local len, min
        if c < 0x80 then
            len = 1
        elseif c >= 0xC2 and c <= 0xDF then
            len, min = 2, 0x80
        elseif c >= 0xE0 and c <= 0xEF then
            len, min = 3, 0x800
        elseif c >= 0xF0 and c <= 0xF4 then
            len, min = 4, 0x10000
        else
            return false
        end
        if len > 1 then
            local v = c % (2 ^ (7 - len))
            for k = 1, len - 1 do
                local cc = byte(s, i + k)
                if not cc or cc < 0x80 or cc > 0xBF then
                    return false
                end
                v = v * 64 + (cc - 0x80)
            end
            if v < min or v > 0x10FFFF or (v >= 0xD800 and v <= 0xDFFF) then
                return false
            end
        end
        i = i + len
    end
    return true
end

local HTTP_FAMILY = { http = true, https = true, ws = true, wss = true }

-- The status Pingora's HTTP/1 parser answers (bare: empty body) before the
-- Pingora edge's code sees the request, or nil. In Pingora's order: the
-- request line (method token, version), the target's bytes, the field
-- count, then its authority checks, then CONNECT.
function M.pingora_refusal(h)
    local m = h.method
    if m == "" or find(m, "[^%w!#$%%&'*+.^_`|~-]") or not h.target or h.target == "" then
        return 400
    end
    if h.version ~= "1.0" and h.version ~= "1.1" then
        return 400
    end
    local target = h.target
    local hash = find(target, "#", 1, true)
    if hash then
        target = sub(target, 1, hash - 1)
    end
    -- The http crate refuses these in a URI (raw spaces and controls are
    -- percent-encoded by Pingora first, so they pass).
    if find(target, "[<>`]") or (find(target, "[\128-\255]") and not valid_utf8(target)) then
        return 400
    end
    if h.fields > PINGORA_MAX_FIELDS then
        return 400
    end
    local hosts = h.hosts
    if #hosts > 1 then
        return 400
    end
    local host = hosts[1] and trim_ows(hosts[1])
    if host and (find(host, "@", 1, true) or find(host, "[%z\1-\8\10-\31\127]")) then
        return 400
    end
    if byte(target, 1) ~= 47 then
        -- raw_target_authority: scheme up to the first ':'.
        local colon = find(target, ":", 1, true)
        if colon then
            local scheme = sub(target, 1, colon - 1)
            local slashes = sub(target, colon + 1, colon + 2) == "//"
            local valid = find(scheme, "^[A-Za-z][A-Za-z0-9+.%-]*$") ~= nil
            local family = HTTP_FAMILY[lower(scheme)]
            if not valid then
                if slashes then
                    return 400
                end
            elseif not slashes then
                if family then
                    return 400
                end
            else
                local rest = sub(target, colon + 3)
                local e = find(rest, "[/?]") or (#rest + 1)
                local authority = sub(rest, 1, e - 1)
                if (family and (find(authority, "\\", 1, true) or authority == ""))
                    or find(authority, "@", 1, true)
                    or (host and host ~= authority) then
                    return 400
                end
            end
        end
    end
    if m == "CONNECT" then
        return 405
    end
    return nil
end

return M
