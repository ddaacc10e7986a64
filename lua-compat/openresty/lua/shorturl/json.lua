-- Minimal JSON for the status document: decode the origin's /shorturl_status
-- and encode with sorted object keys (what serde_json::Value does on the
-- Pingora edge), so both edges print the copied-in dimensions alike.
-- Debian ships no lua-cjson for nginx's LuaJIT, hence this file.
local byte, sub, find, char, format = string.byte, string.sub, string.find, string.char, string.format
local concat, sort = table.concat, table.sort

local M = {}

M.null = setmetatable({}, { __tostring = function() return "null" end })

local escapes = { ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t" }

local function encode_string(s)
    return '"' .. s:gsub('[%c"\\]', function(c)
        return escapes[c] or format("\\u%04x", byte(c))
    end) .. '"'
end

local function is_array(t)
    local n = 0
    for _ in pairs(t) do
        n = n + 1
    end
    return n == #t and (n > 0 or getmetatable(t) == M.array_mt)
end

M.array_mt = {}

local encode

function encode(v)
    local t = type(v)
    if v == nil or v == M.null then
        return "null"
    elseif t == "boolean" then
        return v and "true" or "false"
    elseif t == "number" then
        if v == math.floor(v) and v > -2 ^ 53 and v < 2 ^ 53 then
            return format("%d", v)
        end
        return format("%.17g", v)
    elseif t == "string" then
        return encode_string(v)
    elseif t == "table" then
        if is_array(v) then
            local out = {}
            for i = 1, #v do
                out[i] = encode(v[i])
            end
            return "[" .. concat(out, ",") .. "]"
        end
        local keys = {}
        for k in pairs(v) do
            keys[#keys + 1] = tostring(k)
        end
        sort(keys)
        local out = {}
        for i, k in ipairs(keys) do
            out[i] = encode_string(k) .. ":" .. encode(v[k])
        end
        return "{" .. concat(out, ",") .. "}"
    end
    error("cannot encode " .. t)
end

M.encode = encode

-- Decoder: returns value or nil, err.
local function skip(s, i)
    return find(s, "[^ \t\r\n]", i) or #s + 1
end

local decode_value

local function decode_string(s, i)
    -- s[i] == '"'
    local out, j = {}, i + 1
    while true do
        local q = find(s, '["\\]', j)
        if not q then
            error("unterminated string")
        end
        out[#out + 1] = sub(s, j, q - 1)
        if byte(s, q) == 34 then
            return concat(out), q + 1
        end
        local e = sub(s, q + 1, q + 1)
        if e == "u" then
            local cp = tonumber(sub(s, q + 2, q + 5), 16)
            if not cp then
                error("bad \\u escape")
            end
            j = q + 6
            if cp >= 0xD800 and cp <= 0xDBFF and sub(s, j, j + 1) == "\\u" then
                local lo = tonumber(sub(s, j + 2, j + 5), 16)
                if lo and lo >= 0xDC00 and lo <= 0xDFFF then
                    cp = 0x10000 + (cp - 0xD800) * 0x400 + (lo - 0xDC00)
                    j = j + 6
                end
            end
            if cp < 0x80 then
                out[#out + 1] = char(cp)
            elseif cp < 0x800 then
                out[#out + 1] = char(0xC0 + math.floor(cp / 64), 0x80 + cp % 64)
            elseif cp < 0x10000 then
                out[#out + 1] = char(0xE0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
            else
                out[#out + 1] = char(0xF0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
                    0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
            end
        else
            local map = { b = "\b", f = "\f", n = "\n", r = "\r", t = "\t", ['"'] = '"', ["\\"] = "\\", ["/"] = "/" }
            if not map[e] then
                error("bad escape")
            end
            out[#out + 1] = map[e]
            j = q + 2
        end
    end
end

function decode_value(s, i)
    i = skip(s, i)
    local c = byte(s, i)
    if c == 123 then -- {
        local obj = {}
        i = skip(s, i + 1)
        if byte(s, i) == 125 then
            return obj, i + 1
        end
        while true do
            i = skip(s, i)
            if byte(s, i) ~= 34 then
                error("expected key")
            end
            local k
            k, i = decode_string(s, i)
            i = skip(s, i)
            if byte(s, i) ~= 58 then
                error("expected ':'")
            end
            obj[k], i = decode_value(s, i + 1)
            i = skip(s, i)
            local d = byte(s, i)
            if d == 125 then
                return obj, i + 1
            elseif d ~= 44 then
                error("expected ',' or '}'")
            end
            i = i + 1
        end
    elseif c == 91 then -- [
        local arr = setmetatable({}, M.array_mt)
        i = skip(s, i + 1)
        if byte(s, i) == 93 then
            return arr, i + 1
        end
        while true do
            arr[#arr + 1], i = decode_value(s, i)
            i = skip(s, i)
            local d = byte(s, i)
            if d == 93 then
                return arr, i + 1
            elseif d ~= 44 then
                error("expected ',' or ']'")
            end
            i = i + 1
        end
    elseif c == 34 then
        return decode_string(s, i)
    elseif sub(s, i, i + 3) == "true" then
        return true, i + 4
    elseif sub(s, i, i + 4) == "false" then
        return false, i + 5
    elseif sub(s, i, i + 3) == "null" then
        return M.null, i + 4
    end
    local num = s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if not num or num == "" then
        error("unexpected character at " .. i)
    end
    return tonumber(num), i + #num
end

function M.decode(s)
    local ok, v, i = pcall(decode_value, s, 1)
    if not ok then
        return nil, v
    end
    if skip(s, i) <= #s then
        return nil, "trailing data"
    end
    return v
end

return M
