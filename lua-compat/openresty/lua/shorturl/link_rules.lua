-- Link rules (protocol 3, docs/protocol.md section 3.1.1), ported from
-- common/src/link_rules.rs so both edges answer a link with options alike:
-- the options of a protocol 3 record read (and refused) exactly as
-- LinkOptions::decode reads them, and choose(), what the link answers one
-- visitor (first matching rule, weighted splits by a stable hash, query
-- forwarding, the expiry fallback).
--
-- The options are parsed once per worker and options string (proto.lua
-- caches them), never per request; a plain link never comes here.
local clicks_ua = require("shorturl.clicks_ua")
local crawlers = require("shorturl.crawlers")
local net = require("shorturl.net")
local bit = require("bit")

local byte, sub, find, lower, char, format = string.byte, string.sub, string.find, string.lower, string.char,
    string.format
local concat, tonumber, type = table.concat, tonumber, type
local floor = math.floor
local bxor, rshift = bit.bxor, bit.rshift

local M = {}

-- Bounds a link's options keep (LinkOptions::validate).
M.MAX_RULES = 20
M.MAX_VALUES = 50
M.MAX_VARIANTS = 10
M.MAX_WEIGHT = 10000
M.MAX_PARAM = 128

local DEVICES = { ios = true, android = true, mobile = true, tablet = true, desktop = true }
local APPS = { wechat = true, qq = true, alipay = true, weibo = true, dingtalk = true, facebook = true,
    instagram = true, line = true, tiktok = true }
-- The apps in App::ALL's order: a set of them (`b`) is written in it.
local APP_ORDER = { "wechat", "qq", "alipay", "weibo", "dingtalk", "facebook", "instagram", "line", "tiktok" }
-- Screen's variants (`w`, protocol 4.7).
local SCREENS = { warn = true, block = true }

---------------------------------------------------------------- reading options

-- serde_json reading the derived Deserialize impls, restricted to what the
-- schema can hold. Every string of the schema is either a field or variant
-- name or a value validated as printable ASCII, so a string carrying
-- anything outside 0x21-0x7E fails one way or another: it is refused as
-- soon as it is read (which also covers every escape serde_json would
-- refuse: lone surrogates, control characters). Any error raises; decode()
-- turns it into nil.
local fail = error

local U64_MAX = "18446744073709551615"

-- A JSON string at `i` (its opening quote): the decoded text, next index.
local function str(s, i)
    if byte(s, i) ~= 34 then
        fail("string expected")
    end
    local j = i + 1
    local plain = find(s, '["\\]', j)
    if not plain then
        fail("unterminated string")
    end
    if byte(s, plain) == 34 then
        return sub(s, j, plain - 1), plain + 1
    end
    local out = {}
    while true do
        local q = find(s, '["\\]', j)
        if not q then
            fail("unterminated string")
        end
        out[#out + 1] = sub(s, j, q - 1)
        if byte(s, q) == 34 then
            return concat(out), q + 1
        end
        local e = byte(s, q + 1)
        if e == 34 or e == 92 or e == 47 then -- \" \\ \/
            out[#out + 1] = char(e)
            j = q + 2
        elseif e == 117 then -- \uXXXX
            local hex = sub(s, q + 2, q + 5)
            local cp = #hex == 4 and find(hex, "^[0-9A-Fa-f]+$") and tonumber(hex, 16)
            if not cp or cp < 0x21 or cp > 0x7E then
                fail("escape outside printable ASCII")
            end
            out[#out + 1] = char(cp)
            j = q + 6
        else
            -- \b \f \n \r \t: a control character no value may hold; others
            -- are not JSON.
            fail("bad escape")
        end
    end
end

-- A non-negative JSON integer literal (what serde_json reads as a u64:
-- no sign, fraction, exponent or leading zero; at most u64::MAX): its
-- digits, next index.
local function uint(s, i)
    local d = s:match("^%d+", i)
    if not d then
        fail("number expected")
    end
    local n = i + #d
    local nx = byte(s, n)
    if (#d > 1 and byte(d, 1) == 48) or nx == 46 or nx == 101 or nx == 69 then
        fail("not an integer")
    end
    if #d > 20 or (#d == 20 and d > U64_MAX) then
        fail("out of range")
    end
    return d, n
end

local function literal(s, i, word)
    if sub(s, i, i + #word - 1) ~= word then
        fail(word .. " expected")
    end
    return i + #word
end

local function bool(s, i)
    if byte(s, i) == 116 then
        return true, literal(s, i, "true")
    end
    return false, literal(s, i, "false")
end

-- Option<T>: null is None.
local function optional(read)
    return function(s, i)
        if byte(s, i) == 110 then
            return nil, literal(s, i, "null")
        end
        return read(s, i)
    end
end

-- A sequence `[a,b,...]` of `read` values (no trailing comma).
local function seq(read)
    return function(s, i)
        if byte(s, i) ~= 91 then
            fail("array expected")
        end
        local out = {}
        i = i + 1
        if byte(s, i) == 93 then
            return out, i + 1
        end
        while true do
            out[#out + 1], i = read(s, i)
            local c = byte(s, i)
            if c == 93 then
                return out, i + 1
            elseif c ~= 44 then
                fail("',' or ']' expected")
            end
            i = i + 1
        end
    end
end

-- A tuple: an array of exactly #reads values.
local function tuple(reads)
    return function(s, i)
        if byte(s, i) ~= 91 then
            fail("array expected")
        end
        local out = {}
        i = i + 1
        for k = 1, #reads do
            if k > 1 then
                if byte(s, i) ~= 44 then
                    fail("tuple too short")
                end
                i = i + 1
            end
            out[k], i = reads[k](s, i)
        end
        if byte(s, i) ~= 93 then
            fail("tuple too long")
        end
        return out, i + 1
    end
end

-- A unit-variant enum with `names`: "name", or serde_json's externally
-- tagged form {"name":null}.
local function enum(names)
    return function(s, i)
        local name
        if byte(s, i) == 123 then
            name, i = str(s, i + 1)
            if byte(s, i) ~= 58 then
                fail("':' expected")
            end
            i = literal(s, i + 1, "null")
            if byte(s, i) ~= 125 then
                fail("'}' expected")
            end
            i = i + 1
        else
            name, i = str(s, i)
        end
        if not names[name] then
            fail("unknown variant")
        end
        return name, i
    end
end

-- A derived struct (every field `#[serde(default)]`, deny_unknown_fields):
-- an object of known, distinct keys, or serde's sequence form, the fields
-- in declaration order (missing trailing ones default). `fields`: the
-- names in order; `reads`: name -> reader. Returns name -> value.
local function struct(fields, reads)
    return function(s, i)
        local out = {}
        local c = byte(s, i)
        if c == 91 then
            i = i + 1
            if byte(s, i) == 93 then
                return out, i + 1
            end
            for k = 1, #fields do
                local name = fields[k]
                out[name], i = reads[name](s, i)
                c = byte(s, i)
                if c == 93 then
                    return out, i + 1
                elseif c ~= 44 then
                    fail("',' or ']' expected")
                end
                i = i + 1
            end
            fail("too many fields")
        elseif c ~= 123 then
            fail("object expected")
        end
        i = i + 1
        if byte(s, i) == 125 then
            return out, i + 1
        end
        local seen = {}
        while true do
            local name
            name, i = str(s, i)
            local read = reads[name]
            if not read then
                fail("unknown field")
            end
            if seen[name] then
                fail("duplicate field")
            end
            seen[name] = true
            if byte(s, i) ~= 58 then
                fail("':' expected")
            end
            out[name], i = read(s, i + 1)
            c = byte(s, i)
            if c == 125 then
                return out, i + 1
            elseif c ~= 44 then
                fail("',' or '}' expected")
            end
            i = i + 1
        end
    end
end

local strings = seq(str)

local read_when = struct({ "dev", "app", "cc", "lang", "from", "until", "q" }, {
    dev = seq(enum(DEVICES)),
    app = seq(enum(APPS)),
    cc = strings,
    lang = strings,
    from = optional(uint),
    ["until"] = optional(uint),
    q = optional(tuple({ str, str })),
})

local read_rule = struct({ "c", "u", "s" }, {
    c = read_when,
    u = optional(str),
    s = seq(tuple({ str, uint })),
})

-- `g` (protocol 4.4: the link has a social card) and `p` (4.5: it needs
-- a password) are read as `f` is: plain bools, the 5th and 6th fields of
-- the sequence form. `b` (4.6: the in-app browsers that get the guidance
-- page) is a list of app names read as the `app` condition's (a Set<App>:
-- at most 50 names, an unknown one refused), the 7th field. `w` (4.7: a
-- destination is on a screened domain) is an Option<Screen>: "warn" or
-- "block" (or serde_json's {"warn":null}), null as absent, any other value
-- refused; the 8th field.
local read_options = struct({ "f", "x", "d", "r", "g", "p", "b", "w" }, {
    f = bool,
    x = optional(str),
    d = bool,
    r = seq(read_rule),
    g = bool,
    p = bool,
    b = seq(enum(APPS)),
    w = optional(enum(SCREENS)),
})

---------------------------------------------------------------- validation

-- is_destination: an absolute http(s) URL (scheme ASCII-case-insensitive,
-- at least 8 bytes) of printable ASCII, at most 4096 bytes.
local function is_destination(url)
    if #url < 8 or #url > 4096 or find(url, "[^\33-\126]") then
        return false
    end
    local head = lower(sub(url, 1, 8))
    return sub(head, 1, 7) == "http://" or head == "https://"
end
M.is_destination = is_destination

local function is_param(s)
    return #s <= M.MAX_PARAM and not find(s, "[^\33-\126]") and not find(s, "[&#]")
end

-- Digit strings compared as numbers (no leading zeros).
local function digits_less(a, b)
    if #a ~= #b then
        return #a < #b
    end
    return a < b
end

local function valid_when(w)
    for _, k in ipairs({ "dev", "app", "cc", "lang" }) do
        if w[k] and #w[k] > M.MAX_VALUES then
            return false
        end
    end
    for _, c in ipairs(w.cc or {}) do
        if not find(c, "^[A-Z][A-Z]$") then
            return false
        end
    end
    for _, l in ipairs(w.lang or {}) do
        if #l < 1 or #l > 8 or find(l, "[^a-z]") then
            return false
        end
    end
    if w.from and w["until"] and not digits_less(w.from, w["until"]) then
        return false
    end
    local q = w.q
    if q and (q[1] == "" or not is_param(q[1]) or not is_param(q[2]) or find(q[1], "=", 1, true)) then
        return false
    end
    return true
end

-- LinkOptions::validate.
local function valid(o)
    if #o.r > M.MAX_RULES or #o.b > M.MAX_VALUES then
        return false
    end
    if o.x and not is_destination(o.x) then
        return false
    end
    if o.d and not o.x then
        return false
    end
    for _, r in ipairs(o.r) do
        local s = r.s
        if r.u and #s == 0 then
            if not is_destination(r.u) then
                return false
            end
        elseif not r.u and #s > 0 then
            if #s < 2 or #s > M.MAX_VARIANTS then
                return false
            end
            for _, v in ipairs(s) do
                local w = tonumber(v[2])
                if w < 1 or w > M.MAX_WEIGHT or not is_destination(v[1]) then
                    return false
                end
            end
        else
            return false
        end
        if not valid_when(r.c) then
            return false
        end
    end
    return true
end

-- Absent fields as their defaults.
local function defaults(o)
    o.f = o.f or false
    o.d = o.d or false
    o.g = o.g or false
    o.p = o.p or false
    o.b = o.b or {}
    o.r = o.r or {}
    for _, r in ipairs(o.r) do
        r.c = r.c or {}
        r.s = r.s or {}
    end
    return o
end

-- A list of app names as the set it stands for (duplicates fold), nil
-- when empty.
local function app_set(list)
    local set
    for i = 1, #list do
        set = set or {}
        set[list[i]] = true
    end
    return set
end

-- The evaluated form: numbers as numbers, what each rule reads; `b` as
-- `guide`, the set of apps whose visitors get the guidance page (nil:
-- none).
local function prepare(o)
    o.guide = app_set(o.b)
    for _, r in ipairs(o.r) do
        local total = 0
        for _, v in ipairs(r.s) do
            v[2] = tonumber(v[2])
            total = total + v[2]
        end
        r.total = total
        local w = r.c
        -- Seconds past 2^53 are only ever compared with now: any large
        -- value does; the digits stay for encode().
        if w.from then
            w.from_n = tonumber(w.from)
        end
        if w["until"] then
            w.until_n = tonumber(w["until"])
        end
        w.ua = (w.dev and #w.dev > 0) or (w.app and #w.app > 0)
    end
    return o
end

-- LinkOptions::decode: the options of a protocol 3 record, or nil when
-- malformed (whitespace, not the schema, out of bounds).
function M.decode(s)
    if type(s) ~= "string" or find(s, "[^\33-\126]") then
        return nil
    end
    local ok, o, i = pcall(read_options, s, 1)
    if not ok or i ~= #s + 1 then
        return nil
    end
    defaults(o)
    if not valid(o) then
        return nil
    end
    return prepare(o)
end

-- True when the options change nothing (LinkOptions::is_empty).
function M.is_empty(o)
    return not o.f and not o.x and not o.d and not o.g and not o.p and #o.r == 0 and #o.b == 0 and not o.w
end

---------------------------------------------------------------- writing options

-- serde_json's strings (the values are printable ASCII: only `"` and `\`
-- are escaped).
local function jstr(s)
    return '"' .. s:gsub('[\\"]', "\\%0") .. '"'
end

local function jlist(t)
    local out = {}
    for i, s in ipairs(t) do
        out[i] = jstr(s)
    end
    return "[" .. concat(out, ",") .. "]"
end

-- LinkOptions::encode: compact JSON, fields in declaration order, defaults
-- left out (a rule's `c` always written).
function M.encode(o)
    local out = {}
    if o.f then
        out[#out + 1] = '"f":true'
    end
    if o.x then
        out[#out + 1] = '"x":' .. jstr(o.x)
    end
    if o.d then
        out[#out + 1] = '"d":true'
    end
    if #o.r > 0 then
        local rules = {}
        for i, r in ipairs(o.r) do
            local w, c = r.c, {}
            for _, k in ipairs({ "dev", "app", "cc", "lang" }) do
                if w[k] and #w[k] > 0 then
                    c[#c + 1] = jstr(k) .. ":" .. jlist(w[k])
                end
            end
            if w.from then
                c[#c + 1] = '"from":' .. w.from
            end
            if w["until"] then
                c[#c + 1] = '"until":' .. w["until"]
            end
            if w.q then
                c[#c + 1] = '"q":' .. jlist(w.q)
            end
            local rule = '{"c":{' .. concat(c, ",") .. "}"
            if r.u then
                rule = rule .. ',"u":' .. jstr(r.u)
            end
            if #r.s > 0 then
                local vs = {}
                for k, v in ipairs(r.s) do
                    vs[k] = "[" .. jstr(v[1]) .. "," .. format("%d", v[2]) .. "]"
                end
                rule = rule .. ',"s":[' .. concat(vs, ",") .. "]"
            end
            rules[i] = rule .. "}"
        end
        out[#out + 1] = '"r":[' .. concat(rules, ",") .. "]"
    end
    if o.g then
        out[#out + 1] = '"g":true'
    end
    if o.p then
        out[#out + 1] = '"p":true'
    end
    -- A Set<App>: its members in App::ALL's order, each once.
    local guide = app_set(o.b)
    if guide then
        local names = {}
        for _, a in ipairs(APP_ORDER) do
            if guide[a] then
                names[#names + 1] = a
            end
        end
        out[#out + 1] = '"b":' .. jlist(names)
    end
    if o.w then
        out[#out + 1] = '"w":' .. jstr(o.w)
    end
    return "{" .. concat(out, ",") .. "}"
end

---------------------------------------------------------------- the visitor

local inapp = {} -- { app, token }, in file order

-- Loads common/data/inapp.txt (`<app> <token>` a line, `#` comments; lines
-- naming an unknown app are skipped, as in_app's pattern list does).
-- Returns the number of patterns, or nil, err.
function M.load_inapp(path)
    local lines, err = clicks_ua.data_lines(path)
    if not lines then
        return nil, err
    end
    local list = {}
    for _, l in ipairs(lines) do
        local sp = find(l, " ", 1, true)
        if sp then
            local app, token = sub(l, 1, sp - 1), clicks_ua.trim(sub(l, sp + 1))
            if APPS[app] then
                list[#list + 1] = { app, token }
            end
        end
    end
    inapp = list
    return #list
end

-- in_app: the app of the first pattern whose token `ua` contains
-- (case-sensitive), or nil.
function M.in_app(ua)
    for i = 1, #inapp do
        local p = inapp[i]
        if find(ua, p[2], 1, true) then
            return p[1]
        end
    end
    return nil
end

-- Loads what the rules read besides the record: the in-app patterns, the
-- link-preview crawlers (a link with a card, `g`: crawlers.lua) and, when
-- clicks did not already load it, the bot list (the device class). Raises
-- a message naming the setting.
function M.init(cfg)
    crawlers.init(cfg)
    local n, err = M.load_inapp(cfg.link_rules.inapp_file)
    if not n then
        error("link_rules.inapp_file: " .. tostring(err), 0)
    end
    if n == 0 then
        error("link_rules.inapp_file " .. cfg.link_rules.inapp_file .. " holds no pattern", 0)
    end
    if clicks_ua.pattern_count() == 0 then
        local bots = cfg.clicks.bots_file
        n, err = clicks_ua.load(bots)
        if not n then
            error("clicks.bots_file (the link rules' device class): " .. tostring(err), 0)
        end
    end
end

local DEVICE_NAMES = clicks_ua.DEVICES

-- UaFacts::of: what the rules read off a User-Agent (nil: no header, an
-- empty one). Cached per worker: a repeated user agent costs one lookup.
local facts_cache
local function ua_facts(ua)
    ua = ua or ""
    if not facts_cache then
        facts_cache = require("resty.lrucache").new(10000)
    end
    local f = facts_cache:get(ua)
    if f then
        return f
    end
    local l = lower(ua)
    f = {
        device = DEVICE_NAMES[clicks_ua.device_class(ua)],
        ios = find(l, "iphone", 1, true) ~= nil or find(l, "ipad", 1, true) ~= nil or find(l, "ipod", 1, true) ~= nil,
        android = find(l, "android", 1, true) ~= nil,
        app = M.in_app(ua),
    }
    facts_cache:set(ua, f)
    return f
end
M.ua_facts = ua_facts

local function facts_are(f, d)
    if d == "ios" then
        return f.ios
    elseif d == "android" then
        return f.android
    end
    return f.device == d
end

-- qvalue: an RFC 9110 qvalue in thousandths (`0`, `0.5`, `1`, `1.000`),
-- or nil.
local function qvalue(v)
    local dot = find(v, ".", 1, true)
    local int, frac = v, ""
    if dot then
        int, frac = sub(v, 1, dot - 1), sub(v, dot + 1)
    end
    if #frac > 3 or find(frac, "[^0-9]") then
        return nil
    end
    local th = tonumber((frac .. "000"):sub(1, 3))
    if int == "0" then
        return th
    elseif int == "1" and th == 0 then
        return 1000
    end
    return nil
end

local function trim_sp(s)
    return (s:match("^[ \t]*(.-)[ \t]*$"))
end

-- preferred_language: the primary subtag (lower case) of the
-- Accept-Language range with the highest q-value (the first of equals),
-- skipping `*`, q=0 and what is not a language range, among the first 32;
-- nil without one. A value that is not UTF-8 has none.
function M.preferred_language(header)
    if not header or not clicks_ua.valid_utf8(header) then
        return nil
    end
    local best_q, best = nil, nil
    local items = 0
    for item in (header .. ","):gmatch("([^,]*),") do
        items = items + 1
        if items > 32 then
            break
        end
        local semi = find(item, ";", 1, true)
        local range = trim_sp(semi and sub(item, 1, semi - 1) or item)
        local q = 1000
        if semi then
            for p in (sub(item, semi + 1) .. ";"):gmatch("([^;]*);") do
                p = trim_sp(p)
                local h = sub(p, 1, 2)
                if h == "q=" or h == "Q=" then
                    q = qvalue(sub(p, 3)) or 0
                end
            end
        end
        local primary = range:match("^[^-]*")
        if q ~= 0 and #primary >= 1 and #primary <= 8 and not find(primary, "[^A-Za-z]") then
            if not best_q or q > best_q then
                best_q, best = q, primary
            end
        end
    end
    return best and lower(best) or nil
end

-- guide_language: the language of the in-app browser guidance (protocol
-- 4.6): `zh` when the visitor's language (preferred_language, as the
-- `lang` condition reads it) is `zh`, else `en`.
function M.guide_language(header)
    return M.preferred_language(header) == "zh" and "zh" or "en"
end

-- shows_guide: the in-app browser of a visitor with User-Agent `ua` (the
-- `app` condition's: in_app) is one of `b`'s, for options `o` (M.decode).
-- Whether the link is live is the caller's question.
function M.shows_guide(o, ua)
    local guide = o.guide
    if not guide then
        return false
    end
    local app = ua_facts(ua).app
    return app ~= nil and guide[app] == true
end

-- screened: the screening of a live link (protocol 4.7,
-- LinkOptions::screened): `w` ("warn" or "block") when the link is neither
-- disabled (`d`) nor `expired`, else nil. Checked before every other
-- option, for every visitor; a record kept for its fallback carries none.
function M.screened(o, expired)
    if o.w and not o.d and not expired then
        return o.w
    end
    return nil
end

-- gate: what a record's options `o` answer a visitor before the rules (the
-- options arms of decide() on the Pingora edge, in its order), for a link
-- bound to the request's host: "screened" and the screen (`w`, 4.7: before
-- everything else of the link, for every visitor); "guide" (4.6: an in-app
-- browser of `b`; before the password, which would be asked again in the
-- system browser); "locked" (4.5: a password link and no unlock token:
-- `opens(...)` is asked only then); "card" (4.4: a link-preview crawler on
-- a link with `g`, never with `p`); nil: the rules, or for an expired or
-- disabled link its fallback (none of the four).
function M.gate(o, expired, ua, opens, ...)
    local screen = M.screened(o, expired)
    if screen then
        return "screened", screen
    end
    if o.d or expired then
        return nil
    end
    if o.guide and M.shows_guide(o, ua) then
        return "guide"
    end
    if o.p and not opens(...) then
        return "locked"
    end
    if o.g and not o.p and crawlers.is_crawler(ua) then
        return "card"
    end
    return nil
end

-- has_pair: query `q` has the pair `name=value`, byte for byte (a pair
-- without `=` has the value "").
local function has_pair(q, name, value)
    for p in (q .. "&"):gmatch("([^&]*)&") do
        local eq = find(p, "=", 1, true)
        local k, v = p, ""
        if eq then
            k, v = sub(p, 1, eq - 1), sub(p, eq + 1)
        end
        if k == name and v == value then
            return true
        end
    end
    return false
end

---------------------------------------------------------------- splits

-- The split key of a client address (split_key): IPv4 dotted (an
-- IPv4-mapped IPv6 address as its IPv4), IPv6 cut to its /64 as 32 hex
-- digits and "/64"; nil when `addr` is not an address.
function M.split_key(addr)
    local ip = addr and net.parse_ip(addr)
    if not ip then
        return nil
    end
    if ip.v4 then
        return concat(ip.b, ".")
    end
    return net.client_key(addr, 64)
end

-- a * b mod 2^32 for a, b in [0, 2^32), exact in doubles: the high half
-- of `a` only contributes its product's low 16 bits.
local function mul32(a, b)
    local a_lo, a_hi = a % 65536, floor(a / 65536)
    return (a_lo * b + ((a_hi * (b % 65536)) % 65536) * 65536) % 4294967296
end

local function u32(x)
    return x % 4294967296 -- bit ops answer signed 32-bit
end

-- MurmurHash3's 32-bit finaliser.
local function fmix32(h)
    h = u32(bxor(h, rshift(h, 16)))
    h = mul32(h, 0x85ebca6b)
    h = u32(bxor(h, rshift(h, 13)))
    h = mul32(h, 0xc2b2ae35)
    return u32(bxor(h, rshift(h, 16)))
end
M.fmix32 = fmix32

-- split_hash: fmix32(crc32(code " " key)), CRC-32 as zlib's.
function M.split_hash(code, key)
    return fmix32(ngx.crc32_long(code .. " " .. key))
end

-- pick: the variant (1-based) of rule `r`'s split for `key`; no key: the
-- first.
local function pick(r, code, key)
    local s = r.s
    if not key then
        return 1
    end
    local at = M.split_hash(code, key) % (r.total > 0 and r.total or 1)
    for i = 1, #s do
        local w = s[i][2]
        if at < w then
            return i
        end
        at = at - w
    end
    return 1
end

---------------------------------------------------------------- forwarding

-- The QR marker (protocol 4.1 and 3.7, dims.rs QR_MARKER): the QR codes'
-- URLs carry it, the clicks count it (source `qr`, clicks_dims.has_qr),
-- and it is the edge's, never forwarded.
local QR_MARKER = "qr=1"
M.QR_MARKER = QR_MARKER

local function enc_byte(c)
    return format("%%%02X", byte(c))
end

-- forward_query: `target` with the pairs of query `q` whose name the
-- target's own query lacks appended (in order, empty ones and the QR
-- marker `qr=1` skipped) before its fragment; bytes a Location must not
-- carry raw percent-encoded. `target` itself when nothing is appended.
function M.forward_query(target, q)
    local hash = find(target, "#", 1, true)
    local base, frag = target, ""
    if hash then
        base, frag = sub(target, 1, hash - 1), sub(target, hash)
    end
    local qm = find(base, "?", 1, true)
    local own = qm and sub(base, qm + 1)
    local names
    if own then
        names = {}
        for p in (own .. "&"):gmatch("([^&]*)&") do
            if p ~= "" then
                names[p:match("^[^=]*")] = true
            end
        end
    end
    local out
    for p in (q .. "&"):gmatch("([^&]*)&") do
        if p ~= "" and p ~= QR_MARKER and not (names and names[p:match("^[^=]*")]) then
            if not out then
                out = { base }
                if not own then
                    out[2] = "?"
                elseif own ~= "" and byte(own, -1) ~= 38 then
                    out[2] = "&"
                end
            else
                -- Between appended pairs, always (never judged by the
                -- last byte: a pair may end in `?`).
                out[#out + 1] = "&"
            end
            out[#out + 1] = (p:gsub('[^!#-;=?-[%]_a-z~]', enc_byte))
        end
    end
    if not out then
        return target
    end
    out[#out + 1] = frag
    return concat(out)
end

---------------------------------------------------------------- choose

-- A visitor's value: a field, or a function computing it on first use.
local function get(v, k)
    local x = v[k]
    if type(x) == "function" then
        x = x(v)
        v[k] = x or false
    end
    return x or nil
end

-- Whether `x` (nil or false: nothing) is one of `list`'s values.
local function listed(list, x)
    if x then
        for i = 1, #list do
            if list[i] == x then
                return true
            end
        end
    end
    return false
end

-- Whether rule conditions `w` hold for visitor `v` at `now`. `memo`
-- carries what was worked out for an earlier rule.
local function holds(w, v, now, memo)
    if (w.from_n and now < w.from_n) or (w.until_n and now >= w.until_n) then
        return false
    end
    local q = w.q
    if q then
        local query = get(v, "query")
        if not query or not has_pair(query, q[1], q[2]) then
            return false
        end
    end
    if w.ua then
        local f = memo.ua
        if not f then
            f = ua_facts(get(v, "ua"))
            memo.ua = f
        end
        local dev = w.dev
        if dev and #dev > 0 then
            local any = false
            for i = 1, #dev do
                if facts_are(f, dev[i]) then
                    any = true
                    break
                end
            end
            if not any then
                return false
            end
        end
        local app = w.app
        if app and #app > 0 and not listed(app, f.app) then
            return false
        end
    end
    local langs = w.lang
    if langs and #langs > 0 then
        local l = memo.lang
        if l == nil then
            l = M.preferred_language(get(v, "lang")) or false
            memo.lang = l
        end
        if not listed(langs, l) then
            return false
        end
    end
    local ccs = w.cc
    if ccs and #ccs > 0 and not listed(ccs, get(v, "country")) then
        return false
    end
    return true
end

-- choose: what a link with options `o` (M.decode) and URL `url`, expired
-- or not, answers visitor `v` at `now` (Unix seconds): the URL and the
-- destination's label (`link`, `r<n>` for a single URL, `r<n>v<m>` for
-- variant m of a split, `expired`: Destination::label), or nil for the 404.
--
-- `v`: { ua =, lang = (Accept-Language), query = (raw, after `?`; nil
-- without `?`), country = (2 upper-case letters), key = (M.split_key) };
-- each may be a function of `v`, called only when a rule needs it.
function M.choose(o, url, expired, code, v, now)
    if expired or o.d then
        if o.x then
            return o.x, "expired"
        end
        return nil
    end
    local chosen, label = url, "link"
    local rules = o.r
    local memo = {}
    for i = 1, #rules do
        local r = rules[i]
        if holds(r.c, v, now, memo) then
            if r.u then
                chosen, label = r.u, "r" .. i
            else
                local k = pick(r, code, get(v, "key"))
                chosen = r.s[k][1]
                label = "r" .. i .. "v" .. k
            end
            break
        end
    end
    if o.f then
        local q = get(v, "query")
        if q then
            chosen = M.forward_query(chosen, q)
        end
    end
    return chosen, label
end

return M
