-- Protocol 2 rules (docs/protocol.md), mirroring common/src/{code,host,record,keys,inval}.rs
-- byte for byte: the Pingora edge and this module must agree on every input.
local byte, sub, find, lower = string.byte, string.sub, string.find, string.lower

local M = {}

M.PREFIX = "su:1:"

-- Custom-code grammar: 4-32 of [0-9A-Za-z_-] (contains the 6-char pre-generated one).
function M.is_valid_code(s)
    local n = #s
    if n < 4 or n > 32 then
        return false
    end
    return find(s, "^[0-9A-Za-z_%-]+$") ~= nil
end

-- code_from_path: the raw request path (never nginx's decoded $uri) must be
-- exactly "/" .. code; a query string is ignored.
function M.code_from_path(path)
    local q = find(path, "?", 1, true)
    if q then
        path = sub(path, 1, q - 1)
    end
    if byte(path, 1) ~= 47 then -- '/'
        return nil
    end
    local code = sub(path, 2)
    if M.is_valid_code(code) then
        return code
    end
    return nil
end

local function valid_port(p)
    return p ~= nil and #p >= 1 and #p <= 5 and find(p, "^[0-9]+$") ~= nil
end

-- normalize_host: trim, strip :port and one trailing dot, lower-case; nil when
-- malformed. IPv6 literals keep their brackets.
function M.normalize_host(raw)
    -- Rust's str::trim strips Unicode whitespace; ASCII whitespace is what
    -- can reach us in a header value.
    raw = raw:match("^[ \t\r\n\f\v]*(.-)[ \t\r\n\f\v]*$")
    local host
    if byte(raw, 1) == 91 then -- '['
        local close = find(raw, "]", 2, true)
        if not close then
            return nil
        end
        local inner = sub(raw, 2, close - 1)
        local after = sub(raw, close + 1)
        if after ~= "" then
            if byte(after, 1) ~= 58 or not valid_port(sub(after, 2)) then
                return nil
            end
        end
        if inner == "" or not find(inner, "^[0-9A-Fa-f:.]+$") then
            return nil
        end
        return "[" .. lower(inner) .. "]"
    end
    -- rsplit_once(':')
    local colon = raw:match("^.*():")
    if colon then
        if not valid_port(sub(raw, colon + 1)) then
            return nil
        end
        host = sub(raw, 1, colon - 1)
    else
        host = raw
    end
    if byte(host, -1) == 46 then -- one trailing '.'
        host = sub(host, 1, -2)
    end
    local n = #host
    if n == 0 or n > 253 then
        return nil
    end
    -- every label: 1..63 of [A-Za-z0-9-]
    local start = 1
    while true do
        local dot = find(host, ".", start, true)
        local label = sub(host, start, (dot or 0) - 1)
        local ln = #label
        if ln == 0 or ln > 63 or not find(label, "^[A-Za-z0-9%-]+$") then
            return nil
        end
        if not dot then
            break
        end
        start = dot + 1
    end
    return lower(host)
end

function M.link_key(code)
    return M.PREFIX .. "link:" .. code
end

-- Parsed answers: tables of `kind` "found" ({v=, exp=, domain=, url=,
-- line=}), "neg" ({v=}) or "unav" (the lookup failed). `v` is the link's
-- row version; protocol 1 values read as version 0. Each answer is its own
-- table: the caches annotate it (`at`, the time it was stored).
local U64_MAX = "18446744073709551615"

-- record::digits: a non-empty run of ASCII digits (Lua's %d+: no sign)
-- within u64.
local function digits(s)
    if s == "" or find(s, "[^0-9]") then
        return nil
    end
    local d = s:gsub("^0+", "")
    if #d > 20 or (#d == 20 and d > U64_MAX) then
        return nil
    end
    return tonumber(s)
end
M.digits = digits

function M.unav()
    return { kind = "unav" }
end

local function found(v, exp, domain, url, line)
    exp = digits(exp)
    -- Rust's u8::is_ascii_whitespace: space, \t, \n, \f, \r.
    if not exp or domain == "" or url == "" or find(url, "[ \t\n\f\r]") then
        return nil
    end
    return { kind = "found", v = v, exp = exp, domain = domain, url = url, line = line }
end

-- Lookup::decode: "2 <v> <exp> <domain> <url>" or "- <v>", and the
-- protocol 1 forms "1 <exp> <domain> <url>" and "-" as version 0; nil when
-- malformed.
function M.decode(s)
    if s == "-" then
        return { kind = "neg", v = 0 }
    end
    if sub(s, 1, 2) == "- " then
        local v = digits(sub(s, 3))
        return v and { kind = "neg", v = v } or nil
    end
    local a = find(s, " ", 1, true)
    if not a then
        return nil
    end
    local head = sub(s, 1, a - 1)
    local v
    if head == "2" then
        -- rest.splitn(4, ' '): version, expiry, domain, url
        local b = find(s, " ", a + 1, true)
        if not b then
            return nil
        end
        v = digits(sub(s, a + 1, b - 1))
        if not v then
            return nil
        end
        a = b
    elseif head == "1" then
        v = 0
    else
        return nil
    end
    -- splitn(3, ' '): expiry, domain, url
    local b = find(s, " ", a + 1, true)
    if not b then
        return nil
    end
    local c = find(s, " ", b + 1, true)
    if not c then
        return nil
    end
    return found(v, sub(s, a + 1, b - 1), sub(s, b + 1, c - 1), sub(s, c + 1), s)
end

-- The cached form of an answer (shared dict, coalesced results).
function M.encode(ans)
    if ans.kind == "found" then
        return ans.line
    elseif ans.kind == "neg" then
        return "- " .. ans.v
    end
    return "!"
end

function M.decode_cached(s)
    if s == "!" then
        return M.unav()
    end
    return M.decode(s)
end

-- Invalidation::decode: "<version> <code>" (protocol section 3.2); nil, nil
-- when malformed.
function M.decode_inval(msg)
    local sp = find(msg, " ", 1, true)
    if not sp then
        return nil
    end
    local v = digits(sub(msg, 1, sp - 1))
    local code = sub(msg, sp + 1)
    if not v or not M.is_valid_code(code) then
        return nil
    end
    return v, code
end

M.INVAL_CHANNEL = M.PREFIX .. "inval"

return M
