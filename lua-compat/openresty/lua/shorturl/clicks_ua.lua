-- User-agent classification for click counting, ported from
-- common/src/clicks/ua.rs so both edges classify every user agent alike
-- (protocol section 3.4): bot or not (common/data/bots.txt: ASCII-case-
-- insensitive substrings, `^` = at the start) and the device class.
--
-- The Rust side runs one Aho-Corasick automaton; here the ~1,500 patterns
-- are indexed by their first two bytes, and the lower-cased user agent is
-- scanned once, comparing (memcmp) only the patterns whose first two bytes
-- are at that position. The caller caches the answer per user agent
-- (clicks.lua), so a repeated user agent costs one LRU lookup.
local ffi = require("ffi")
local bit = require("bit")

local byte, sub, lower, find = string.byte, string.sub, string.lower, string.find
local bor, band, lshift = bit.bor, bit.band, bit.lshift

pcall(ffi.cdef, "int memcmp(const void *s1, const void *s2, size_t n);")
local C = ffi.C
local cast = ffi.cast

local M = {}

-- Device classes, in the order of `Device::ALL` (index = batch counter slot).
M.DEVICES = { "mobile", "desktop", "tablet", "bot", "other" }
local MOBILE, DESKTOP, TABLET, BOT, OTHER = 1, 2, 3, 4, 5
M.BOT = BOT

local index = {}    -- [b1 * 256 + b2] -> { pattern, ... } (lower-case)
local prefixes = {} -- `^` patterns, lower-case, without the `^`
local patterns = 0

---------------------------------------------------------------- UTF-8

-- Whether `s` is valid UTF-8 (what a Rust &str can hold): no overlong
-- forms, surrogates or code points past U+10FFFF.
function M.valid_utf8(s)
    if not find(s, "[\128-\255]") then
        return true
    end
    local i, n = 1, #s
    while i <= n do
        local c = byte(s, i)
        if c < 0x80 then
            i = i + 1
        else
            local len, lo, hi
            if c >= 0xC2 and c <= 0xDF then
                len, lo, hi = 2, 0x80, 0xBF
            elseif c == 0xE0 then
                len, lo, hi = 3, 0xA0, 0xBF
            elseif c == 0xED then
                len, lo, hi = 3, 0x80, 0x9F
            elseif c >= 0xE1 and c <= 0xEF then
                len, lo, hi = 3, 0x80, 0xBF
            elseif c == 0xF0 then
                len, lo, hi = 4, 0x90, 0xBF
            elseif c >= 0xF1 and c <= 0xF3 then
                len, lo, hi = 4, 0x80, 0xBF
            elseif c == 0xF4 then
                len, lo, hi = 4, 0x80, 0x8F
            else
                return false
            end
            if i + len - 1 > n then
                return false
            end
            local c2 = byte(s, i + 1)
            if c2 < lo or c2 > hi then
                return false
            end
            for k = i + 2, i + len - 1 do
                local ck = byte(s, k)
                if ck < 0x80 or ck > 0xBF then
                    return false
                end
            end
            i = i + len
        end
    end
    return true
end

-- Length of the White_Space character (what Rust's `char::is_whitespace`
-- accepts) starting at byte `i` of valid UTF-8 `s`, or 0.
local function space_at(s, i)
    local b = byte(s, i)
    if b == 32 or (b >= 9 and b <= 13) then
        return 1
    elseif b == 0xC2 then
        local c = byte(s, i + 1)
        if c == 0x85 or c == 0xA0 then
            return 2
        end
    elseif b == 0xE1 then
        local c, d = byte(s, i + 1, i + 2)
        if c == 0x9A and d == 0x80 then
            return 3
        end
    elseif b == 0xE2 then
        local c, d = byte(s, i + 1, i + 2)
        if (c == 0x80 and d and ((d >= 0x80 and d <= 0x8A) or d == 0xA8 or d == 0xA9 or d == 0xAF))
            or (c == 0x81 and d == 0x9F) then
            return 3
        end
    elseif b == 0xE3 then
        local c, d = byte(s, i + 1, i + 2)
        if c == 0x80 and d == 0x80 then
            return 3
        end
    end
    return 0
end

-- Length of the White_Space character ending at byte `j`, or 0.
local function space_before(s, j)
    local b = byte(s, j)
    if b == 32 or (b >= 9 and b <= 13) then
        return 1
    end
    if b < 0x80 or j < 2 then
        return 0
    end
    if byte(s, j - 1) == 0xC2 then
        return space_at(s, j - 1)
    end
    if j >= 3 then
        return space_at(s, j - 2) == 3 and 3 or 0
    end
    return 0
end

-- Rust's `str::trim` of valid UTF-8: White_Space removed at both ends.
function M.trim(s)
    local i, j = 1, #s
    while i <= j do
        local n = space_at(s, i)
        if n == 0 then
            break
        end
        i = i + n
    end
    while j >= i do
        local n = space_before(s, j)
        if n == 0 then
            break
        end
        j = j - n
    end
    if i == 1 and j == #s then
        return s
    end
    return sub(s, i, j)
end
local trim = M.trim

-- `[u8]::trim_ascii`: space, \t, \n, \f, \r removed at both ends (what
-- the Pingora edge trims from a header value that is not UTF-8).
local function ascii_space(b)
    return b == 32 or b == 9 or b == 10 or b == 12 or b == 13
end

function M.trim_ascii(s)
    local i, j = 1, #s
    while i <= j and ascii_space(byte(s, i)) do
        i = i + 1
    end
    while j >= i and ascii_space(byte(s, j)) do
        j = j - 1
    end
    if i == 1 and j == #s then
        return s
    end
    return sub(s, i, j)
end

-- A header value trimmed as the Pingora edge does: as `str::trim` when it
-- is UTF-8, of ASCII whitespace only when not (common::clicks
-- `device_class_bytes`, `referrer_host_buf`).
function M.trim_value(s)
    if M.valid_utf8(s) then
        return trim(s)
    end
    return M.trim_ascii(s)
end
local trim_value = M.trim_value

---------------------------------------------------------------- the bot list

-- The lines of one of common/data's files as its Rust reader takes them:
-- trimmed, blank lines and `#` comment lines skipped, in file order.
-- Returns the list, or nil, err.
function M.data_lines(path)
    local f, err = io.open(path, "r")
    if not f then
        return nil, err
    end
    local text = f:read("*a")
    f:close()
    if not text then
        return nil, "cannot read " .. path
    end
    local list = {}
    for line in (text .. "\n"):gmatch("([^\n]*)\n") do
        local l = trim((line:gsub("\r$", "")))
        if l ~= "" and byte(l, 1) ~= 35 then -- '#'
            list[#list + 1] = l
        end
    end
    return list
end

-- Loads the bot list (one pattern a line, `#` comments, blank lines
-- ignored, a leading `^` anchors it at the start); as ua.rs `parse_list`.
-- Returns the number of patterns, or nil, err.
function M.load(path)
    local lines, err = M.data_lines(path)
    if not lines then
        return nil, err
    end
    index, prefixes, patterns = {}, {}, 0
    for _, p in ipairs(lines) do
        if byte(p, 1) == 94 then -- '^'
            local rest = sub(p, 2)
            if rest ~= "" then
                prefixes[#prefixes + 1] = lower(rest)
                patterns = patterns + 1
            end
        else
            p = lower(p)
            if #p < 2 then
                return nil, "bot pattern " .. p .. " is shorter than 2 bytes"
            end
            local k = byte(p, 1) * 256 + byte(p, 2)
            local bucket = index[k]
            if not bucket then
                bucket = {}
                index[k] = bucket
            end
            bucket[#bucket + 1] = p
            patterns = patterns + 1
        end
    end
    return patterns
end

-- How many patterns the loaded list holds (substring and prefix).
function M.pattern_count()
    return patterns
end

-- Whether user agent `ua` (a header value) is a bot: empty after trimming,
-- or matching a pattern. A HEAD request is a bot too: the caller's test.
function M.is_bot(ua)
    ua = trim_value(ua)
    local n = #ua
    if n == 0 then
        return true
    end
    local l = lower(ua) -- ASCII only, as to_ascii_lowercase
    for i = 1, #prefixes do
        local p = prefixes[i]
        if sub(l, 1, #p) == p then
            return true
        end
    end
    local ptr = cast("const char *", l)
    local b1 = byte(l, 1)
    for i = 1, n - 1 do
        local b2 = byte(l, i + 1)
        local bucket = index[b1 * 256 + b2]
        if bucket then
            local left = n - i + 1
            for j = 1, #bucket do
                local p = bucket[j]
                local pl = #p
                if pl <= left and C.memcmp(ptr + (i - 1), p, pl) == 0 then
                    return true
                end
            end
        end
        b1 = b2
    end
    return false
end
local is_bot = M.is_bot

---------------------------------------------------------------- device class

-- ua.rs TOKENS, in its bit order.
local TOKENS = { "ipad", "tablet", "kindle", "silk/", "playbook", "android", "mobi", "iphone", "ipod",
    "windows phone", "blackberry", "opera mini", "smart-tv", "smarttv", "crkey", "xbox", "playstation",
    "windows nt", "macintosh", "x11", "cros", "linux" }
local TABLET_BITS = 0x1F
local ANDROID_BIT = lshift(1, 5)
local MOBI_BIT = lshift(1, 6)
local MOBILE_BITS = 0xFC0
local OTHER_BITS = lshift(0x1F, 12)
local DESKTOP_BITS = lshift(0x1F, 17)

-- The tokens found as the Rust automaton finds them (MatchKind::Standard,
-- non-overlapping): the match that ends first, then the search resumes
-- after it. No token contains another, so no two end at one byte.
local function token_bits(l)
    local seen, pos, n = 0, 1, #l
    while pos <= n do
        local best_end, best
        for t = 1, #TOKENS do
            local s = find(l, TOKENS[t], pos, true)
            if s then
                local e = s + #TOKENS[t] - 1
                if not best_end or e < best_end then
                    best_end, best = e, t
                end
            end
        end
        if not best then
            break
        end
        seen = bor(seen, lshift(1, best - 1))
        pos = best_end + 1
    end
    return seen
end

-- The device class (an index of M.DEVICES) of user agent `ua` (a header
-- value: any bytes), as ua.rs `device_class_bytes`.
function M.device_class(ua)
    if is_bot(ua) then
        return BOT
    end
    local seen = token_bits(lower(ua))
    if band(seen, TABLET_BITS) ~= 0 or (band(seen, ANDROID_BIT) ~= 0 and band(seen, MOBI_BIT) == 0) then
        return TABLET
    elseif band(seen, MOBILE_BITS) ~= 0 or band(seen, ANDROID_BIT) ~= 0 then
        return MOBILE
    elseif band(seen, OTHER_BITS) ~= 0 then
        return OTHER
    elseif band(seen, DESKTOP_BITS) ~= 0 then
        return DESKTOP
    end
    return OTHER
end

return M
