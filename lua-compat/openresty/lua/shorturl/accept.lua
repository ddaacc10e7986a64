-- Whether a client prefers HTML (protocol 4.2), mirroring
-- common/src/accept.rs step for step: the q-value of the most specific range
-- matching text/html against that of application/json. A client that
-- prefers HTML gets the origin's 404 page instead of the JSON 404.
local find, sub, lower, byte = string.find, string.sub, string.lower, string.byte

local M = {}

-- Rust's str::trim for the ASCII whitespace an Accept value holds.
local function trim(s)
    return (s:match("^[%s]*(.-)[%s]*$"))
end

-- Pieces of `s` split at `sep` (a plain single byte), empty ones kept.
local function split(s, sep)
    local out, i = {}, 1
    while true do
        local j = find(s, sep, i, true)
        if not j then
            out[#out + 1] = sub(s, i)
            return out
        end
        out[#out + 1] = sub(s, i, j - 1)
        i = j + 1
    end
end

-- `q=0.5` -> 500; an unparsable q counts as 0; nil when not a q parameter.
local function q_value(param)
    local eq = find(param, "=", 1, true)
    if not eq then
        return nil
    end
    if lower(trim(sub(param, 1, eq - 1))) ~= "q" then
        return nil
    end
    local v = trim(sub(param, eq + 1))
    local dot = find(v, ".", 1, true)
    local int, frac = v, ""
    if dot then
        int, frac = sub(v, 1, dot - 1), sub(v, dot + 1)
    end
    if int == "1" and not find(frac, "[^0]") then
        return 1000
    elseif int == "0" and #frac <= 3 and not find(frac, "[^0-9]") then
        local n = 0
        for i = 1, 3 do
            local b = byte(frac, i)
            n = n * 10 + (b and b - 48 or 0)
        end
        return n
    end
    return 0
end

-- The weight (q x 1000) `accept` gives `ty/subtype`: that of the most
-- specific range matching it (ty/sub over ty/* over */*), 0 if none does.
local function weight(accept, ty, subtype)
    local best_spec, best_q
    for _, range in ipairs(split(accept, ",")) do
        local parts = split(range, ";")
        local media = trim(parts[1])
        local slash = find(media, "/", 1, true)
        if slash then
            local t, s = trim(sub(media, 1, slash - 1)), trim(sub(media, slash + 1))
            local spec
            if lower(t) == ty and lower(s) == subtype then
                spec = 3
            elseif lower(t) == ty and s == "*" then
                spec = 2
            elseif t == "*" and s == "*" then
                spec = 1
            end
            if spec then
                local q = 1000
                for i = 2, #parts do
                    local v = q_value(parts[i])
                    if v then
                        q = v
                        break
                    end
                end
                if not best_spec or spec > best_spec then
                    best_spec, best_q = spec, q
                end
            end
        end
    end
    return best_q or 0
end

-- True when `accept` (a string or nil) wants text/html more than
-- application/json.
function M.prefers_html(accept)
    if type(accept) ~= "string" then
        return false
    end
    local html = weight(accept, "text", "html")
    return html > 0 and html > weight(accept, "application", "json")
end

return M
