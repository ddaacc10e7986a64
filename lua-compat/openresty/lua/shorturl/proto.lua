-- Protocol 2 rules (docs/protocol.md), mirroring common/src/{code,host,record,keys,inval}.rs
-- byte for byte: the Pingora edge and this module must agree on every input.
-- Protocol 3 adds the record of a link with options (link_rules.lua);
-- protocol 3.5 keys records and invalidations by (domain, code); protocol
-- 3.6 counts clicks by link key (click_key).
local link_rules = require("shorturl.link_rules")
local byte, sub, find, lower, format = string.byte, string.sub, string.find, string.lower, string.format

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

-- Pre-generated grammar: exactly 6 of [0-9A-Za-z]. Such a code names one
-- link in the whole fleet; every other code is unique per domain
-- (protocol 3.6, common/src/code.rs is_fleet_code).
function M.is_fleet_code(s)
    return #s == 6 and find(s, "^[0-9A-Za-z]+$") ~= nil
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

-- The record of `code` on `domain` (a normalised host), protocol 3.5: keyed
-- by both so a custom code can be one domain's and another's elsewhere.
function M.link_key(domain, code)
    return M.PREFIX .. "link:" .. domain .. "/" .. code
end

-- The key of (domain, code) in the node's caches, tombstones and lookup
-- locks: neither a code nor a domain contains '/'.
function M.cache_key(domain, code)
    return domain .. "/" .. code
end

-- Protocol 3.6's link key of `code` on `domain` (normalised), what clicks
-- are counted under and the origin keys its rollups by (common/src/code.rs
-- link_key): the code for a fleet code, `<domain>/<code>` for a per-domain
-- one, so one custom code on two domains is two links. Named apart from
-- link_key above, the record's Redis key.
function M.click_key(code, domain)
    if M.is_fleet_code(code) then
        return code
    end
    return domain .. "/" .. code
end

-- Parsed answers: tables of `kind` "found" ({v=, exp=, domain=, url=,
-- line=, and for a protocol 3 record options= (the JSON as stored) and
-- opts= (link_rules.decode's table, shared: never modified)}), "neg"
-- ({v=}) or "unav" (the lookup failed). `v` is the link's row version;
-- protocol 1 values read as version 0. Each answer is its own table: the
-- caches annotate it (`at`, the time it was stored).
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

-- Options read per worker once per distinct options string (a worker
-- decodes a record again on every copy from the node cache or Redis);
-- false: malformed.
local options_cache

local function options(raw)
    if not options_cache then
        options_cache = require("resty.lrucache").new(1024)
    end
    local o = options_cache:get(raw)
    if o == nil then
        o = link_rules.decode(raw) or false
        options_cache:set(raw, o)
    end
    return o
end

-- "3 <v> <exp> <domain> <url> <options>" (`a`: the space after the `3`):
-- rest.splitn(5, ' '), the options validated (link_rules.decode).
local function decode_options_record(s, a)
    local fields = {}
    for k = 1, 4 do
        local b = find(s, " ", a + 1, true)
        if not b then
            return nil
        end
        fields[k] = sub(s, a + 1, b - 1)
        a = b
    end
    local raw = sub(s, a + 1)
    local o = options(raw)
    local v = digits(fields[1])
    if not o or not v then
        return nil
    end
    local ans = found(v, fields[2], fields[3], fields[4], s)
    if ans then
        ans.options, ans.opts = raw, o
    end
    return ans
end

-- Lookup::decode: "2 <v> <exp> <domain> <url>", "3 <v> <exp> <domain>
-- <url> <options>" or "- <v>", and the protocol 1 forms "1 <exp> <domain>
-- <url>" and "-" as version 0; nil when malformed.
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
    elseif head == "3" then
        return decode_options_record(s, a)
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

-- Record::encode: the record line of a link; protocol 3 when it has
-- options that change anything (`opts`: link_rules.decode's table), else
-- protocol 2.
function M.encode_record(v, exp, domain, url, opts)
    local line = format("%d %d %s %s", v, exp, domain, url)
    if opts and not link_rules.is_empty(opts) then
        return "3 " .. line .. " " .. link_rules.encode(opts)
    end
    return "2 " .. line
end

-- The cached form of an answer (shared dict, coalesced results): the
-- record line as read, options included.
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

-- Invalidation::decode (protocol 3.5, section 3.2): "<version> <code>
-- <domain>" -> version, code, domain, with a normalised domain (as in the
-- link key); the legacy "<version> <code>" (published for edges of the
-- previous version during an upgrade) -> version, code, nil; nil when
-- malformed.
function M.decode_inval(msg)
    local sp = find(msg, " ", 1, true)
    if not sp then
        return nil
    end
    local v = digits(sub(msg, 1, sp - 1))
    if not v then
        return nil
    end
    local rest = sub(msg, sp + 1)
    local sp2 = find(rest, " ", 1, true)
    if not sp2 then
        if M.is_valid_code(rest) then
            return v, rest, nil
        end
        return nil
    end
    local code, domain = sub(rest, 1, sp2 - 1), sub(rest, sp2 + 1)
    -- Normalised: what normalize_host gives back unchanged (lower-case, no
    -- port, no trailing dot, no padding).
    if not M.is_valid_code(code) or domain == "" or M.normalize_host(domain) ~= domain then
        return nil
    end
    return v, code, domain
end

M.INVAL_CHANNEL = M.PREFIX .. "inval"

return M
