-- Tests of geo.lua: the country header (trusted peers only, two letters)
-- and the MaxMind DB lookup through libmaxminddb, against a small
-- database this file writes (the MaxMind DB format: a binary search tree
-- of 24-bit records, the data section, the metadata map). Without
-- libmaxminddb the database part is skipped (and said so). And the
-- `city` dimension's values (clicks.city) from the committed city
-- database testkit/data/city-test.mmdb (testkit/src/mmdb.rs writes it).
-- Run by t/run.sh (content_by_lua_file).
local geo = require("shorturl.geo")
local net = require("shorturl.net")
local bit = require("bit")

local char, concat, floor = string.char, table.concat, math.floor
local t = require("check").new()
local eq, ok = t.eq, t.ok

---------------------------------------------------------------- a MaxMind DB writer

local function be(n, len) -- big-endian, `len` bytes
    local out = {}
    for i = len, 1, -1 do
        out[i] = char(n % 256)
        n = floor(n / 256)
    end
    return concat(out)
end

local function uint_bytes(n)
    local len = 0
    local m = n
    while m > 0 do
        len = len + 1
        m = floor(m / 256)
    end
    return be(n, len), len
end

local function m_str(s)
    assert(#s < 29)
    return char(0x40 + #s) .. s
end
local function m_u16(n)
    local b, len = uint_bytes(n)
    return char(0xA0 + len) .. b
end
local function m_u32(n)
    local b, len = uint_bytes(n)
    return char(0xC0 + len) .. b
end
local function m_u64(n)
    local b, len = uint_bytes(n)
    return char(len, 9 - 7) .. b
end
local function m_array(items)
    return char(#items, 11 - 7) .. concat(items)
end
local function m_map(pairs_)
    local out = { char(0xE0 + #pairs_ / 2) }
    for i = 1, #pairs_, 2 do
        out[#out + 1] = m_str(pairs_[i]) .. pairs_[i + 1]
    end
    return concat(out)
end

-- The 128 bits of a network ("a.b.c.d/len" as ::a.b.c.d/96+len).
local function bits_of(cidr)
    local c = assert(net.parse_cidr(cidr))
    local bytes, len = c.b, c.len
    if c.v4 then
        bytes = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, bytes[1], bytes[2], bytes[3], bytes[4] }
        len = len + 96
    end
    local out = {}
    for i = 1, len do
        local byte_ = bytes[floor((i - 1) / 8) + 1]
        out[i] = bit.band(bit.rshift(byte_, 7 - (i - 1) % 8), 1)
    end
    return out
end

-- Writes an IPv6 database mapping each { cidr, code } (non-nested): a
-- code "cc:XX" as ip-location-db's {"country_code":"XX"}, else GeoLite2's
-- {"country":{"iso_code":code}}.
local function write_mmdb(path, networks, epoch)
    local data, offsets = {}, {}
    local size = 0
    local root = {}
    for _, n in ipairs(networks) do
        local iso = n[2]
        if not offsets[iso] then
            local rec
            if iso:sub(1, 3) == "cc:" then
                rec = m_map({ "country_code", m_str(iso:sub(4)) })
            else
                rec = m_map({ "country", m_map({ "iso_code", m_str(iso) }), "registered_country",
                    m_map({ "iso_code", m_str("ZZ") }) })
            end
            offsets[iso] = size
            data[#data + 1] = rec
            size = size + #rec
        end
        local node = root
        local bits = bits_of(n[1])
        for i = 1, #bits - 1 do
            local b = bits[i] + 1
            node[b] = node[b] or {}
            node = node[b]
        end
        node[bits[#bits] + 1] = { data = offsets[iso] }
    end
    -- Number the nodes breadth first.
    local order, queue, head = {}, { root }, 1
    while head <= #queue do
        local node = queue[head]
        head = head + 1
        node.id = #order
        order[#order + 1] = node
        for b = 1, 2 do
            if node[b] and not node[b].data then
                queue[#queue + 1] = node[b]
            end
        end
    end
    local count = #order
    local tree = {}
    for i, node in ipairs(order) do
        local rec = {}
        for b = 1, 2 do
            local c = node[b]
            local v = count
            if c and c.data then
                v = count + 16 + c.data
            elseif c then
                v = c.id
            end
            rec[b] = be(v, 3)
        end
        tree[i] = rec[1] .. rec[2]
    end
    local meta = m_map({
        "node_count", m_u32(count),
        "record_size", m_u16(24),
        "ip_version", m_u16(6),
        "database_type", m_str("Test-Country"),
        "languages", m_array({ m_str("en") }),
        "binary_format_major_version", m_u16(2),
        "binary_format_minor_version", m_u16(0),
        "build_epoch", m_u64(epoch or 1800000000),
        "description", m_map({ "en", m_str("link rules test") }),
    })
    local f = assert(io.open(path, "wb"))
    f:write(concat(tree), string.rep("\0", 16), concat(data), "\171\205\239MaxMind.com", meta)
    f:close()
end

---------------------------------------------------------------- checks

local trusted = net.parse_list({ "127.0.0.1/32" }, "trusted_proxies")
local function cfg(header, mmdb_path)
    return { geo = { country_header = header, country_header_lc = header:lower(), mmdb_path = mmdb_path or "",
        reload_interval_ms = 5000 }, trusted = trusted }
end

-- The header: from a trusted peer, two ASCII letters, upper-cased.
geo.init(cfg("CF-IPCountry"))
eq(geo.country({ ["cf-ipcountry"] = "cn" }, "127.0.0.1", "203.0.113.9"), "CN", "header from a trusted peer")
eq(geo.country({ ["cf-ipcountry"] = { "de", "fr" } }, "127.0.0.1", "203.0.113.9"), "DE", "repeated header: the first")
eq(geo.country({ ["cf-ipcountry"] = "cn" }, "192.0.2.1", "192.0.2.1"), nil, "header from an untrusted peer")
eq(geo.country({ ["cf-ipcountry"] = "XX1" }, "127.0.0.1", "203.0.113.9"), nil, "header of three characters")
eq(geo.country({ ["cf-ipcountry"] = "C1" }, "127.0.0.1", "203.0.113.9"), nil, "header with a digit")
eq(geo.country({ ["cf-ipcountry"] = "\195\169" }, "127.0.0.1", "203.0.113.9"), nil, "header of non-ASCII bytes")
eq(geo.country({}, "127.0.0.1", "203.0.113.9"), nil, "no header")
geo.init(cfg(""))
eq(geo.country({ ["cf-ipcountry"] = "cn" }, "127.0.0.1", "203.0.113.9"), nil, "no header configured")

-- The database.
local have = pcall(require("ffi").load, "libmaxminddb.so.0")
if not have then
    t.note("MMDB checks skipped: no libmaxminddb.so.0 (Debian: libmaxminddb0)")
else
    -- Left in run.sh's directory for its end-to-end checks (127.0.0.0/8).
    local path = ngx.var.su_tmp .. "/test.mmdb"
    write_mmdb(path, {
        { "203.0.113.0/24", "JP" },
        { "198.51.100.0/25", "BR" },
        { "2001:db8::/32", "NL" },
        { "127.0.0.0/8", "KR" },
        { "192.0.2.0/24", "cc:au" },
        { "100.64.0.0/10", "cc:USA" },
        { "172.16.0.0/12", "Gb" },
    })
    local opened, oerr = pcall(geo.init, cfg("CF-IPCountry", path))
    eq(opened, true, "database opened: " .. tostring(oerr))
    if opened then
        -- libmaxminddb's layout on amd64/arm64 (the value union holds an
        -- unsigned __int128).
        local ffi = require("ffi")
        eq(ffi.sizeof("MMDB_entry_data_s"), 48, "sizeof MMDB_entry_data_s")
        eq(ffi.offsetof("MMDB_entry_data_s", "utf8_string"), 16, "offset of the value")
        eq(ffi.offsetof("MMDB_entry_data_s", "type"), 44, "offset of type")
        eq(ffi.sizeof("MMDB_lookup_result_s"), 32, "sizeof MMDB_lookup_result_s")
        eq(geo.status_part(), ',"geo":{"path":"' .. path .. '","database_type":"Test-Country","build_epoch":1800000000,'
            .. '"build_date":"2027-01-15","loads":1,"load_failures":0}', "status: the metadata as read (MMDB_s layout)")
        eq(geo.lookup("192.0.2.1"), "AU", "country_code, upper-cased")
        eq(geo.lookup("100.64.0.1"), nil, "country_code that is not two letters")
        eq(geo.lookup("172.16.0.1"), "GB", "iso_code, upper-cased")
        eq(geo.lookup("203.0.113.9"), "JP", "IPv4 in the database")
        eq(geo.lookup("198.51.100.127"), "BR", "IPv4 at the end of a /25")
        eq(geo.lookup("198.51.100.128"), nil, "IPv4 past the /25")
        eq(geo.lookup("::ffff:203.0.113.9"), "JP", "IPv4-mapped IPv6 as IPv4")
        eq(geo.lookup("2001:db8:1::5"), "NL", "IPv6 in the database")
        eq(geo.lookup("2001:db9::1"), nil, "IPv6 not in the database")
        eq(geo.lookup("10.0.0.1"), nil, "IPv4 not in the database")
        eq(geo.lookup("not-an-address"), nil, "not an address")
        eq(geo.lookup(nil), nil, "no address")
        -- The header first (trusted peer), the database otherwise.
        eq(geo.country({ ["cf-ipcountry"] = "us" }, "127.0.0.1", "203.0.113.9"), "US", "header before the database")
        eq(geo.country({ ["cf-ipcountry"] = "us" }, "192.0.2.1", "203.0.113.9"), "JP",
            "untrusted peer: the database for the client")
        eq(geo.country({ ["cf-ipcountry"] = "1" }, "127.0.0.1", "203.0.113.9"), "JP", "bad header: the database")
    end
    -- Reloads: only when the file changed; a bad file keeps the last good one.
    eq(geo.reload_if_changed(), false, "unchanged: not loaded again")
    local copy = path .. ".2"
    write_mmdb(copy, { { "203.0.113.0/24", "cc:FR" } }, 1900000000)
    ngx.sleep(0.01)
    assert(os.rename(copy, path))
    eq(geo.reload_if_changed(), true, "changed: loaded again")
    eq(geo.lookup("203.0.113.9"), "FR", "the new database answers")
    eq(geo.lookup("198.51.100.1"), nil, "the old one is gone")
    local f = assert(io.open(path, "wb")) -- overwritten in place with junk
    f:write("not a database")
    f:close()
    local r, err = geo.reload_if_changed()
    eq(r, nil, "a bad file is refused")
    ok(err and err:find(path, 1, true), "its error names the file: " .. tostring(err))
    eq(geo.lookup("203.0.113.9"), "FR", "the last good database still answers (private copy)")
    ok(geo.status_part():find('"loads":2,"load_failures":1}', 1, true), "status counts loads and failures: "
        .. geo.status_part())
    write_mmdb(path, {
        { "203.0.113.0/24", "JP" },
        { "198.51.100.0/25", "BR" },
        { "2001:db8::/32", "NL" },
        { "127.0.0.0/8", "KR" },
    })
    local bad = pcall(geo.init, cfg("", "/nonexistent/db.mmdb"))
    eq(bad, false, "a database that cannot be opened stops the start")
    bad = pcall(geo.init, cfg("", "/etc/hostname"))
    eq(bad, false, "a file that is not a database stops the start")
    geo.init(cfg(""))
    eq(geo.status_part(), "", "no database: no status member")

    -- The city (clicks.city): `<CC>-<name>`, the name percent-encoded,
    -- `~other` past 64 bytes; the database only.
    eq(geo.city_value("GB", "London"), "GB-London", "city value: as it is")
    eq(geo.city_value("XX", "az.AZ_09~-"), "XX-az.AZ_09~-", "city value: [A-Za-z0-9._~-] as they are")
    eq(geo.city_value("XX", "a b/c%d+e'f\0"), "XX-a%20b%2Fc%25d%2Be%27f%00", "city value: others %XX")
    eq(geo.city_value("SE", "Link\195\182ping"), "SE-Link%C3%B6ping", "city value: UTF-8 byte by byte, upper-case hex")
    eq(geo.city_value("US", string.rep("a", 61)), "US-" .. string.rep("a", 61), "city value: 64 bytes as it is")
    eq(geo.city_value("US", string.rep("a", 62)), "~other", "city value: 65 bytes: ~other")
    eq(geo.city_value("US", string.rep("a", 19) .. "\195\169"), "US-" .. string.rep("a", 19) .. "%C3%A9",
        "city value: counted once encoded")
    eq(geo.city("81.2.69.5"), nil, "city: no database, none")
    local city_db = ngx.var.su_repo .. "/testkit/data/city-test.mmdb"
    local opened_city, cerr = pcall(geo.init, cfg("CF-IPCountry", city_db))
    eq(opened_city, true, "city database opened: " .. tostring(cerr))
    if opened_city then
        local lookups = 0
        local real_lookup = geo.city_lookup
        geo.city_lookup = function(addr)
            lookups = lookups + 1
            return real_lookup(addr)
        end
        -- (testkit::mmdb::CITY_TEST_NETWORKS, and more.)
        for _, c in ipairs({
            { "81.2.69.5", "GB-London", "city.names.en, country.iso_code" },
            { "89.160.20.9", "SE-Link%C3%B6ping", "a UTF-8 name" },
            { "2.125.160.1", "BR-S%C3%A3o%20Paulo", "city as a string, country_code (ip-location-db)" },
            { "67.43.156.7", nil, "a record without a city" },
            { "175.16.199.3", "~other", "a name past 64 bytes" },
            { "216.160.83.4", nil, "an empty name" },
            { "2001:db8:1::5", "DE-Berlin", "IPv6" },
            { "2001:db8:2::5", nil, "IPv6 not in the database" },
            { "::ffff:89.160.20.9", "SE-Link%C3%B6ping", "IPv4-mapped IPv6 as IPv4" },
            { "10.0.0.1", nil, "no record" },
            { "not-an-address", nil, "not an address" },
        }) do
            eq(geo.city(c[1]), c[2], "city: " .. c[3] .. " (" .. c[1] .. ")")
        end
        eq(geo.lookup("67.43.156.7"), "US", "city database: its country for the country dimension")
        eq(geo.lookup("2.125.160.1"), "BR", "city database: country_code")
        -- The header is the country's, never the city's.
        eq(geo.country({ ["cf-ipcountry"] = "fr" }, "127.0.0.1", "81.2.69.5"), "FR",
            "city database: the header's country")
        eq(geo.city("81.2.69.5"), "GB-London", "city: the database's despite the header")
        -- The last address's answer is remembered: a repeat costs no lookup.
        lookups = 0
        eq(geo.city("81.2.69.5"), "GB-London", "city memo: a repeat")
        eq(geo.city("81.2.69.5"), "GB-London", "city memo: again")
        eq(lookups, 0, "city memo: a repeat looks nothing up")
        eq(geo.city("67.43.156.7"), nil, "city memo: another address")
        eq(geo.city("67.43.156.7"), nil, "city memo: its none remembered too")
        eq(geo.city("81.2.69.5"), "GB-London", "city memo: back to the first")
        eq(lookups, 2, "city memo: one lookup per change of address")
        eq(geo.city(nil), nil, "city: no address")
        -- Another load never answers from the memo of the last one.
        geo.init(cfg("", path))
        lookups = 0
        eq(geo.city("81.2.69.5"), nil, "city memo: a new database looked up (it has no city)")
        eq(lookups, 1, "city memo: not taken from another load")
        geo.city_lookup = real_lookup
    end
    geo.init(cfg(""))

    -- The database scripts/deps.sh installs (the conformance suite's).
    local real = "/usr/local/share/shorturl/country.mmdb"
    if io.open(real, "rb") then
        geo.init(cfg("", real))
        eq(geo.lookup("114.114.114.114"), "CN", "deps.sh database: 114.114.114.114")
        eq(geo.lookup("8.8.8.8"), "US", "deps.sh database: 8.8.8.8")
        eq(geo.lookup("210.140.92.183"), "JP", "deps.sh database: 210.140.92.183")
        eq(geo.lookup("240e::1"), "CN", "deps.sh database: 240e::1")
        eq(geo.lookup("127.0.0.1"), nil, "deps.sh database: loopback")
        geo.init(cfg(""))
    else
        t.note("no " .. real .. " (scripts/deps.sh)")
    end
end

t.report()
