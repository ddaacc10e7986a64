-- Unique visitors (protocol 3.7, section 3.4 "Unique visitors"; the twin
-- of common/src/clicks/uniq.rs): per link-day, a HyperLogLog sketch of
-- the visitors of its human clicks, written on a batch's `u` lines.
--
-- * Visitor: the first 8 bytes (a big-endian u64) of HMAC-SHA256(salt,
--   "<client key>\n<User-Agent>"), kept as its 16 lower-case hex digits
--   (LuaJIT numbers hold 53 bits; fixed-width lower-case hex sorts as the
--   numbers do).
-- * Salt: 32 lower-case hex digits per UTC day, one for the whole fleet,
--   in Redis at su:1:uniq_salt:<day_start_unix> (SET NX EX <to the end of
--   its day + 3600>, then GET), fetched from the click flush timer only
--   (M.refresh: today's and tomorrow's when unknown) and kept in a
--   worker-local table until an hour after its day. Never logged.
-- * Sketch: sparse (a set of visitors) while it holds at most 256, then
--   dense: 16,384 registers (an FFI byte array), visitor v into register
--   v >> 50 with 1 + the leading zeros of its low 50 bits (1-51).
local ffi = require("ffi")
local crypto = require("shorturl.crypto")
local redis = require("shorturl.redis")

local byte, sub, find, format, concat, sort = string.byte, string.sub, string.find, string.format, table.concat,
    table.sort
local floor = math.floor
local tohex = require("bit").tohex
local hmac_buf = crypto.hmac_sha256_buf

local M = {}

M.SPARSE_MAX = 256
M.REGISTERS = 16384
M.KEY_PREFIX = "su:1:uniq_salt:"
local SPARSE_MAX, REGISTERS = M.SPARSE_MAX, M.REGISTERS
local DAY, GRACE = 86400, 3600

---------------------------------------------------------------- visitors

-- The visitor of `client` (its split key) with user agent `ua` under
-- `salt` (the 32 hex digits, as they are: the HMAC key is that text).
function M.visitor(salt, client, ua)
    local d = hmac_buf(salt, client .. "\n" .. ua)
    -- Two 32-bit halves (exact in doubles; tohex takes them mod 2^32).
    local hi = ((d[0] * 256 + d[1]) * 256 + d[2]) * 256 + d[3]
    local lo = ((d[4] * 256 + d[5]) * 256 + d[6]) * 256 + d[7]
    return tohex(hi, 8) .. tohex(lo, 8)
end

-- The number of bits of x, 1 <= x < 2^32.
local function bit_length(x)
    local n = 0
    if x >= 65536 then
        n, x = n + 16, floor(x / 65536)
    end
    if x >= 256 then
        n, x = n + 8, floor(x / 256)
    end
    if x >= 16 then
        n, x = n + 4, floor(x / 16)
    end
    if x >= 4 then
        n, x = n + 2, floor(x / 4)
    end
    if x >= 2 then
        n, x = n + 1, floor(x / 2)
    end
    return n + x
end

-- The register of visitor `hex` (0-based, v >> 50) and its value there:
-- 1 + the leading zeros of the low 50 bits as a 50-bit number (51 when
-- they are all zero). On doubles, never on signed 32-bit `bit` results:
-- the high half is v >> 32 (18 of its bits below the index), the low half
-- the last 32 bits.
function M.register(hex)
    local hi = tonumber(sub(hex, 1, 8), 16)
    local lo = tonumber(sub(hex, 9, 16), 16)
    local top = hi % 262144 -- bits 49..32 of the low 50
    local zeros
    if top ~= 0 then
        zeros = 18 - bit_length(top)
    elseif lo ~= 0 then
        zeros = 50 - bit_length(lo)
    else
        zeros = 50
    end
    return floor(hi / 262144), zeros + 1
end
local register = M.register

---------------------------------------------------------------- sketches

-- A new sketch: sparse, empty.
function M.new()
    return { n = 0, set = {} }
end

local function put(regs, hex)
    local i, v = register(hex)
    if regs[i] < v then
        regs[i] = v
    end
end

-- Adds visitor `hex` to sketch `sk`: the 257th distinct visitor makes it
-- dense.
function M.add(sk, hex)
    local set = sk.set
    if set then
        if set[hex] then
            return
        end
        if sk.n < SPARSE_MAX then
            set[hex] = true
            sk.n = sk.n + 1
            return
        end
        local regs = ffi.new("uint8_t[?]", REGISTERS) -- zeroed
        for v in pairs(set) do
            put(regs, v)
        end
        sk.set, sk.regs = nil, regs
    end
    put(sk.regs, hex)
end

-- The base64url alphabet's bytes, by value (0 -> 'A').
local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
local CHAR = {}
for i = 0, 63 do
    CHAR[i] = byte(ALPHABET, i + 1)
end
local dense_buf = ffi.new("char[?]", REGISTERS + 2)
dense_buf[0], dense_buf[1] = byte("d"), byte(" ")

-- The sketch as a `u` line's last two fields write it: `s`, a space and
-- the visitors in ascending order, or `d`, a space and one character per
-- register (uniq.rs Sketch::encode).
function M.encode(sk)
    local set = sk.set
    if set then
        local vs = {}
        for v in pairs(set) do
            vs[#vs + 1] = v
        end
        sort(vs)
        return "s " .. concat(vs)
    end
    local regs = sk.regs
    for i = 0, REGISTERS - 1 do
        dense_buf[i + 2] = CHAR[regs[i]]
    end
    return ffi.string(dense_buf, REGISTERS + 2)
end

---------------------------------------------------------------- salts

-- day start -> salt, this worker's; day start -> true once a failure to
-- get it was logged (logged again only after a success).
local salts, warned = {}, {}

-- The salt of the UTC day starting at `day`, when this worker has it.
function M.salt(day)
    return salts[day]
end

-- Tests: sets (or with nil, forgets) the salt of `day`; with no argument
-- forgets every salt.
function M.set_salt(day, salt)
    if day == nil then
        salts = {}
    else
        salts[day] = salt
    end
end

local function valid_salt(s)
    return type(s) == "string" and #s == 32 and not find(s, "[^0-9a-f]")
end

local function new_salt()
    local b = crypto.random_bytes(16)
    if not b then
        return nil
    end
    return (b:gsub(".", function(ch)
        return format("%02x", byte(ch))
    end))
end

-- Makes sure this worker knows the salts of today and tomorrow (UTC, at
-- `now`), asking Redis (`conn`) for each it does not know: SET NX EX
-- with a new random salt (kept by Redis until an hour after the end of
-- its day), then GET, pipelined on the key's node. Forgets a salt an hour
-- after its day. From the flush timer only (it yields). Returns how many
-- it could not get.
function M.refresh(conn, now)
    for day in pairs(salts) do
        if now >= day + DAY + GRACE then
            salts[day] = nil
        end
    end
    for day in pairs(warned) do
        if now >= day + DAY + GRACE then
            warned[day] = nil
        end
    end
    local missing = 0
    local today = now - now % DAY
    for day = today, today + DAY, DAY do
        if not salts[day] then
            local key = M.KEY_PREFIX .. format("%d", day)
            local fresh = new_salt()
            local cmds = { redis.command("GET", key) }
            if fresh then
                cmds = { redis.command("SET", key, fresh, "NX", "EX", format("%d", day + DAY - now + GRACE)),
                    cmds[1] }
            end
            local replies, err = redis.run(conn, key, cmds)
            local got = replies and replies[#cmds]
            if valid_salt(got) then
                salts[day], warned[day] = got, nil
            else
                missing = missing + 1
                if replies then
                    err = type(got) == "table" and got.err or (got == false and "no salt" or "not a salt")
                end
                if not warned[day] then
                    warned[day] = true
                    ngx.log(ngx.WARN, "shorturl: unique visitors: no salt yet for the day of ", day, " (", err,
                        "); retried at every flush")
                end
            end
        end
    end
    return missing
end

return M
