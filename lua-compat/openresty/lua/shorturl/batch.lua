-- Counting the items of a batch creation (POST /api/v1/links/batch), so
-- the per-client creation limit spends one token per item: a line-for-line
-- port of common/src/batch_items.rs (ItemCounter). It counts the elements of
-- every array directly under the top-level object, never fewer than the
-- origin's count of `links`; anything that is not an object counts as 1.
-- Fed in pieces (a body nginx spooled to a file is read in chunks), with
-- the state kept across them.
local byte, find = string.byte, string.find
local max = math.max

local M = {}

local QUOTE, BACKSLASH, COMMA = 34, 92, 44
local LBRACE, RBRACE, LBRACKET, RBRACKET = 123, 125, 91, 93

-- A counter for a new body.
function M.new()
    return { depth = 0, object = nil, counting = false, in_element = false, in_string = false, escape = false,
        elements = 0 }
end

-- Counts the next piece `s` of the body.
function M.feed(c, s)
    if c.object == false then
        return -- not an object: 1, whatever follows
    end
    local i, n = 1, #s
    while i <= n do
        local b = byte(s, i)
        if c.in_string then
            if c.escape then
                c.escape = false
            elseif b == BACKSLASH then
                c.escape = true
            elseif b == QUOTE then
                c.in_string = false
            else
                -- Plain string bytes: on to the next quote or backslash.
                local j = find(s, '["\\]', i + 1)
                if not j then
                    return
                end
                i = j - 1
            end
        elseif b ~= 32 and b ~= 9 and b ~= 10 and b ~= 13 then
            if c.object == nil then
                c.object = b == LBRACE
                if not c.object then
                    return
                end
            end
            if c.counting and c.depth == 2 and not c.in_element and b ~= COMMA and b ~= RBRACKET then
                c.elements = c.elements + 1
                c.in_element = true
            end
            if b == QUOTE then
                c.in_string = true
            elseif b == LBRACE or b == LBRACKET then
                c.depth = c.depth + 1
                if c.depth == 2 then
                    c.counting = b == LBRACKET
                    c.in_element = false
                end
            elseif b == RBRACE or b == RBRACKET then
                if c.depth == 2 then
                    c.counting = false
                end
                if c.depth > 0 then
                    c.depth = c.depth - 1
                end
            elseif b == COMMA and c.depth == 2 then
                c.in_element = false
            end
        end
        i = i + 1
    end
end

-- The items counted so far: at least 1.
function M.items(c)
    return max(c.elements, 1)
end

-- Reads the request body (in memory, or from the file nginx spooled it to,
-- in 64 KiB pieces) and counts its items; nil when the spooled file cannot
-- be read (never a guess that could count fewer).
function M.count_request_body()
    ngx.req.read_body()
    local c = M.new()
    local data = ngx.req.get_body_data()
    if data then
        M.feed(c, data)
        return M.items(c)
    end
    local path = ngx.req.get_body_file()
    if path then
        local f, err = io.open(path, "rb")
        if not f then
            ngx.log(ngx.ERR, "shorturl: cannot read the spooled batch body: ", err)
            return nil
        end
        while true do
            local piece = f:read(65536)
            if not piece then
                break
            end
            M.feed(c, piece)
        end
        f:close()
    end
    return M.items(c)
end

return M
