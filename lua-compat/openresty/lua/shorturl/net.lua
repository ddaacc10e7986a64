-- Client addresses, as the Pingora edge decides them (edge/src/net.rs):
-- CIDR lists (`trusted_proxies`, `status_allow`), the client behind trusted
-- proxies (X-Forwarded-For walked from the right past trusted hops: nginx
-- realip with `real_ip_recursive on`), and the key per-client limits count
-- under (IPv6 cut to a prefix).
local byte, sub, find, format = string.byte, string.sub, string.find, string.format
local floor, tonumber, concat = math.floor, tonumber, table.concat

local M = {}

local function parse_v4(s)
    local parts = { s:match("^(%d+)%.(%d+)%.(%d+)%.(%d+)$") }
    if #parts ~= 4 then
        return nil
    end
    local out = {}
    for i, p in ipairs(parts) do
        local n = tonumber(p)
        if #p > 3 or (#p > 1 and byte(p, 1) == 48) or n > 255 then
            return nil
        end
        out[i] = n
    end
    return out
end

-- 16 bytes of an IPv6 address ("::" compression and a dotted IPv4 tail
-- allowed), or nil.
local function parse_v6(s)
    if s == "" or find(s, "[^0-9A-Fa-f:.]") then
        return nil
    end
    local head, tail = s, nil
    local dc = find(s, "::", 1, true)
    if dc then
        if find(s, "::", dc + 1, true) then
            return nil
        end
        head, tail = sub(s, 1, dc - 1), sub(s, dc + 2)
    end
    local function groups(part)
        local out = {}
        if part == "" then
            return out
        end
        local fields = {}
        for f in (part .. ":"):gmatch("([^:]*):") do
            fields[#fields + 1] = f
        end
        for i, f in ipairs(fields) do
            if i == #fields and find(f, ".", 1, true) then
                local v4 = parse_v4(f)
                if not v4 then
                    return nil
                end
                out[#out + 1] = v4[1] * 256 + v4[2]
                out[#out + 1] = v4[3] * 256 + v4[4]
            elseif #f >= 1 and #f <= 4 and not find(f, ".", 1, true) then
                out[#out + 1] = tonumber(f, 16)
            else
                return nil
            end
        end
        return out
    end
    local h = groups(head)
    local t = tail and groups(tail) or {}
    if not h or not t then
        return nil
    end
    local n = #h + #t
    if (dc and n > 7) or (not dc and n ~= 8) then
        return nil
    end
    local words = {}
    for _, w in ipairs(h) do
        words[#words + 1] = w
    end
    for _ = 1, 8 - n do
        words[#words + 1] = 0
    end
    for _, w in ipairs(t) do
        words[#words + 1] = w
    end
    local bytes = {}
    for i = 1, 8 do
        bytes[2 * i - 1] = floor(words[i] / 256)
        bytes[2 * i] = words[i] % 256
    end
    return bytes
end

-- An address: { v4 = true|false, b = { bytes } }, IPv4-mapped IPv6
-- (::ffff:a.b.c.d) as the IPv4 address it carries; nil when not one.
function M.parse_ip(s)
    if not s then
        return nil
    end
    local v4 = parse_v4(s)
    if v4 then
        return { v4 = true, b = v4 }
    end
    local v6 = parse_v6(s)
    if not v6 then
        return nil
    end
    local mapped = true
    for i = 1, 10 do
        mapped = mapped and v6[i] == 0
    end
    if mapped and v6[11] == 255 and v6[12] == 255 then
        return { v4 = true, b = { v6[13], v6[14], v6[15], v6[16] } }
    end
    return { v4 = false, b = v6 }
end

-- `bytes` with every bit past the first `len` cleared.
local function masked(bytes, len)
    local out = {}
    for i = 1, #bytes do
        local bits = len - (i - 1) * 8
        if bits >= 8 then
            out[i] = bytes[i]
        elseif bits <= 0 then
            out[i] = 0
        else
            local unit = 2 ^ (8 - bits)
            out[i] = floor(bytes[i] / unit) * unit
        end
    end
    return out
end

-- `addr/len` or a bare address; host bits below the prefix cleared. nil,
-- message when invalid.
function M.parse_cidr(s)
    local addr, len = s:match("^%s*([^/%s]+)/(%d+)%s*$")
    if not addr then
        addr = s:match("^%s*([^/%s]+)%s*$")
    end
    local ip = M.parse_ip(addr)
    -- A CIDR written in IPv6 stays IPv6 (::ffff:0:0/96 is not 0.0.0.0/0).
    if ip and ip.v4 and find(addr, ":", 1, true) then
        ip = { v4 = false, b = parse_v6(addr) }
    end
    if not ip then
        return nil, format("%q is not an address or CIDR block (e.g. 10.0.0.0/8, ::1/128)", s)
    end
    local max = ip.v4 and 32 or 128
    len = len and tonumber(len) or max
    if len > max then
        return nil, format("%q: prefix longer than %d", s, max)
    end
    return { v4 = ip.v4, b = masked(ip.b, len), len = len }
end

-- Parses a list of CIDR strings; raises on the first bad one (config load).
function M.parse_list(items, name)
    local list = {}
    for i, s in ipairs(items) do
        if type(s) ~= "string" then
            error(name .. "[" .. i .. "] must be a string", 0)
        end
        local c, err = M.parse_cidr(s)
        if not c then
            error(name .. ": " .. err, 0)
        end
        list[#list + 1] = c
    end
    return list
end

local function inside(c, ip)
    if c.v4 ~= ip.v4 then
        return false
    end
    local m = masked(ip.b, c.len)
    for i = 1, #m do
        if m[i] ~= c.b[i] then
            return false
        end
    end
    return true
end

-- True when some block of `list` contains the address string `s`.
function M.contains(list, s)
    if #list == 0 then
        return false
    end
    local ip = M.parse_ip(s)
    if not ip then
        return false
    end
    for _, c in ipairs(list) do
        if inside(c, ip) then
            return true
        end
    end
    return false
end

-- What per-client limits count under: an IPv4 address, or an IPv6 address
-- cut to `prefix` bits.
function M.client_key(s, prefix)
    if not find(s, ":", 1, true) then
        return s -- IPv4 as nginx and Pingora print it
    end
    local ip = M.parse_ip(s)
    if not ip then
        return s
    end
    if ip.v4 then
        return concat(ip.b, ".")
    end
    local m = masked(ip.b, prefix)
    local hex = {}
    for i = 1, 16 do
        hex[i] = format("%02x", m[i])
    end
    return concat(hex) .. "/" .. prefix
end

-- `s` cut to its network for the access log (access_log.truncate_addresses,
-- as edge/src/access_log.rs): IPv4 (and IPv4-mapped IPv6) to /24, IPv6 to
-- /48 in RFC 5952 text (the zero tail as "::"); anything else as it is.
-- Cases: common/data/truncated_addresses.txt.
function M.truncated(s)
    local ip = M.parse_ip(s)
    if not ip then
        return s
    end
    local b = ip.b
    if ip.v4 then
        return format("%d.%d.%d.0", b[1], b[2], b[3])
    end
    local g = { b[1] * 256 + b[2], b[3] * 256 + b[4], b[5] * 256 + b[6] }
    -- The zero run from the fourth group on starts at group k.
    local k = 4
    while k > 1 and g[k - 1] == 0 do
        k = k - 1
    end
    local out = {}
    for i = 1, k - 1 do
        out[i] = format("%x", g[i])
    end
    return concat(out, ":") .. "::"
end

-- One X-Forwarded-For hop as an address: "1.2.3.4", "::1", and the
-- "1.2.3.4:5678" / "[::1]:5678" forms some proxies write.
local function parse_hop(hop)
    hop = hop:match("^%s*(.-)%s*$")
    if M.parse_ip(hop) then
        return hop
    end
    local v6 = hop:match("^%[([^%]]+)%]:%d+$")
    if v6 and M.parse_ip(v6) then
        return v6
    end
    local v4 = hop:match("^([%d.]+):%d+$")
    if v4 and M.parse_ip(v4) then
        return v4
    end
    return nil
end

-- Every hop of the X-Forwarded-For fields (a string or a list of them),
-- right to left.
local function hops_rev(xff)
    local hops = {}
    if type(xff) == "string" then
        xff = { xff }
    end
    for _, v in ipairs(xff or {}) do
        for h in (v .. ","):gmatch("([^,]*),") do
            hops[#hops + 1] = h
        end
    end
    local rev = {}
    for i = #hops, 1, -1 do
        rev[#rev + 1] = hops[i]
    end
    return rev
end

-- The client: the peer itself unless it is a trusted proxy; then the hops
-- are walked from the right past trusted ones and the first untrusted hop is
-- the client (all trusted: the leftmost; a hop that is not an address stops
-- the walk at the last good one). Returns the client and the hops used, in
-- left-to-right order.
function M.client_of(peer, xff, trusted)
    local client, used = peer, {}
    if #trusted == 0 or not xff then
        return client, used
    end
    for _, hop in ipairs(hops_rev(xff)) do
        if not M.contains(trusted, client) then
            break
        end
        local ip = parse_hop(hop)
        if not ip then
            break
        end
        client = ip
        table.insert(used, 1, ip)
    end
    return client, used
end

-- The X-Forwarded-For sent to the origin: the client, the trusted hops
-- between it and the edge, then the peer (what an untrusted client wrote
-- itself is dropped).
function M.forwarded_for(peer, used)
    if #used == 0 then
        return peer
    end
    return concat(used, ", ") .. ", " .. peer
end

return M
