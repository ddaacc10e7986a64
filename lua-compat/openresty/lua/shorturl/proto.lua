-- Protocol v1 rules (docs/protocol.md), mirroring common/src/{code,host,record,keys}.rs
-- byte for byte: the Pingora edge and this module must agree on every input.
local byte, sub, find, lower = string.byte, string.sub, string.find, string.lower

local M = {}

M.PREFIX = "su:1:"
M.NEGATIVE = "-"

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

-- Parsed answers. A found record is a table {exp=, domain=, url=, line=}.
M.NEG = { kind = "neg" }
M.UNAV = { kind = "unav" }

local U64_MAX = "18446744073709551615"

-- Rust's u64::from_str: optional '+', then digits, no overflow.
local function parse_u64(s)
    if byte(s, 1) == 43 then
        s = sub(s, 2)
    end
    if s == "" or not find(s, "^[0-9]+$") then
        return nil
    end
    local digits = s:gsub("^0+", "")
    if #digits > 20 or (#digits == 20 and digits > U64_MAX) then
        return nil
    end
    return tonumber(s)
end

-- Lookup::decode: "-" or "1 <exp> <domain> <url>"; nil when malformed.
function M.decode(v)
    if v == "-" then
        return M.NEG
    end
    -- splitn(4, ' ')
    local a = find(v, " ", 1, true)
    if not a or sub(v, 1, a - 1) ~= "1" then
        return nil
    end
    local b = find(v, " ", a + 1, true)
    if not b then
        return nil
    end
    local c = find(v, " ", b + 1, true)
    if not c then
        return nil
    end
    local exp = parse_u64(sub(v, a + 1, b - 1))
    local domain = sub(v, b + 1, c - 1)
    local url = sub(v, c + 1)
    if not exp or domain == "" or url == "" or find(url, "[ \t\n\f\r]") then
        return nil
    end
    return { kind = "found", exp = exp, domain = domain, url = url, line = v }
end

-- The stored (shared-dict) form of an answer.
function M.encode(ans)
    if ans.kind == "found" then
        return ans.line
    elseif ans.kind == "neg" then
        return "-"
    end
    return "!"
end

function M.decode_cached(v)
    if v == "!" then
        return M.UNAV
    end
    return M.decode(v)
end

return M
