-- A worker's counts as batches in the text format of protocol section 3.4
-- (as common/src/clicks/accum.rs `take_batches` writes them): per link
-- (named by its link key, protocol 3.6: the code, or `<domain>/<code>`),
-- `h` lines by hour, `r` lines by day (the 20 hosts with the most clicks,
-- ties by host in byte order, the rest summed as `~other`), `d` lines by
-- day and class, `t` lines by day and destination label (byte order) for
-- a link-day counted on a link with options (human clicks only), `x`
-- lines by day, dimension and value (protocol 3.7: per dimension the 20
-- values with the most human clicks, ties by value in byte order, the rest
-- summed as `~other`, written in value byte order), `u` lines by day
-- (protocol 3.7: the sketch of a link-day's unique visitors, clicks_uniq,
-- for a link-day with a visitor); a batch holds whole
-- links only and stays within the decoder's limits, and is format version
-- 5 when the worker counts dimensions (with or without `x` lines: its
-- human clicks were counted by dimension; protocol 3.8: without the lines
-- the others imply, a link-day's `r ... -` and `d ... bot`, the `-` not in
-- the referrers' ranking either), else 3 when it names a per-domain key, else 2
-- when it has `t` lines, else 1 (the oldest version that reads it: origins
-- of every version read a batch of fleet codes without options).
local clicks_ua = require("shorturl.clicks_ua")
local clicks_dims = require("shorturl.clicks_dims")
local clicks_uniq = require("shorturl.clicks_uniq")

local format, concat, sort, find, byte = string.format, table.concat, table.sort, string.find, string.byte
local min = math.min

local M = {}

-- Limits of a batch (common/src/clicks/batch.rs MAX_LINES, MAX_BODY_BYTES).
M.MAX_LINES = 100000
M.MAX_BODY_BYTES = 8 * 1024 * 1024
local TOP_REFERRERS = 20
local OTHER_REFERRER = "~other"
local NO_REFERRER = "-"
local DEVICES = clicks_ua.DEVICES
local DIMS, TOP_VALUES, OTHER_VALUE = clicks_dims.DIMS, clicks_dims.TOP_VALUES, clicks_dims.OTHER
local encode_sketch = clicks_uniq.encode

-- Links written between two calls of a paced build's `pace` (as
-- accum.rs PACE_LINKS).
M.PACE_LINKS = 64
-- Keys sorted in one step of a paced build at most: a larger bucket is
-- split again on its next byte (a field: the tests lower it).
M.MAX_SORT = 1024
-- Lines joined in one step of a paced build's batch bodies.
local CONCAT_LINES = 4096

local function sorted_keys(t)
    local keys = {}
    for k in pairs(t) do
        keys[#keys + 1] = k
    end
    sort(keys)
    return keys
end

local function by_count_then_host(a, b)
    if a[2] ~= b[2] then
        return a[2] > b[2]
    end
    return a[1] < b[1]
end

local function by_value(a, b)
    return a[1] < b[1]
end

-- The `x` lines of one link-day's dimension counts `x` (`[dim index] =
-- {[value] = n}`, clicks.lua) appended to `xl`; returns their byte size.
-- Per dimension (DIMS order) the TOP_VALUES values with the most clicks
-- (ties by value; a value `~other` is never kept, as referrer hosts are
-- ranked) and the rest summed as `~other`, all in value byte order
-- (dims.rs `fold_top`).
local function dim_lines(xl, key, day, x)
    local bytes = 0
    for i = 1, #DIMS do
        local m = x[i]
        if m then
            local ranked = {}
            for v, n in pairs(m) do
                ranked[#ranked + 1] = { v, n }
            end
            sort(ranked, by_count_then_host)
            local kept, other = {}, 0
            for _, r in ipairs(ranked) do
                if #kept < TOP_VALUES and r[1] ~= OTHER_VALUE then
                    kept[#kept + 1] = r
                else
                    other = other + r[2]
                end
            end
            if other > 0 then
                kept[#kept + 1] = { OTHER_VALUE, other }
            end
            sort(kept, by_value)
            local dim = DIMS[i]
            for _, r in ipairs(kept) do
                local l = format("x %s %d %s:%s %d\n", key, day, dim, r[1], r[2])
                xl[#xl + 1] = l
                bytes = bytes + #l
            end
        end
    end
    return bytes
end

-- The lines of one link, `key` its link key (`link` as clicks.lua counts:
-- `h[hour] = {human, bot}`, `d[day] = {r = {[host] = n}, t = {[dest] = n},
-- routed, [1..5] = per class, x = dimension counts or nil, u = sketch or
-- nil}`): six arrays, their total byte size, and the link's human and bot
-- clicks. `implied`: a version 5 batch's lines (no `-` referrer, no `bot`
-- device line).
local function link_lines(key, link, implied)
    local hl, rl, dl, tl, xl, ul = {}, {}, {}, {}, {}, {}
    local bytes, human, bot = 0, 0, 0
    for _, hour in ipairs(sorted_keys(link.h)) do
        local c = link.h[hour]
        local l = format("h %s %d %d %d\n", key, hour, c[1], c[2])
        hl[#hl + 1] = l
        bytes = bytes + #l
        human, bot = human + c[1], bot + c[2]
    end
    for _, day in ipairs(sorted_keys(link.d)) do
        local d = link.d[day]
        local refs = {}
        for host, n in pairs(d.r) do
            if not (implied and host == NO_REFERRER) then
                refs[#refs + 1] = { host, n }
            end
        end
        sort(refs, by_count_then_host)
        local other = 0
        for i, r in ipairs(refs) do
            if i <= TOP_REFERRERS and r[1] ~= OTHER_REFERRER then
                local l = format("r %s %d %s %d\n", key, day, r[1], r[2])
                rl[#rl + 1] = l
                bytes = bytes + #l
            else
                other = other + r[2]
            end
        end
        if other > 0 then
            local l = format("r %s %d %s %d\n", key, day, OTHER_REFERRER, other)
            rl[#rl + 1] = l
            bytes = bytes + #l
        end
        for i = 1, #DEVICES do
            local n = d[i]
            if n > 0 and not (implied and DEVICES[i] == "bot") then
                local l = format("d %s %d %s %d\n", key, day, DEVICES[i], n)
                dl[#dl + 1] = l
                bytes = bytes + #l
            end
        end
        if d.routed then
            for _, dest in ipairs(sorted_keys(d.t)) do
                local l = format("t %s %d %s %d\n", key, day, dest, d.t[dest])
                tl[#tl + 1] = l
                bytes = bytes + #l
            end
        end
        if d.x then
            bytes = bytes + dim_lines(xl, key, day, d.x)
        end
        if d.u then
            local l = format("u %s %d %s\n", key, day, encode_sketch(d.u))
            ul[#ul + 1] = l
            bytes = bytes + #l
        end
    end
    return hl, rl, dl, tl, xl, ul, bytes, human, bot
end

local function new_batch(dims)
    return { h = {}, r = {}, d = {}, t = {}, x = {}, u = {}, lines = 0, bytes = 0, human = 0, bot = 0, per_domain = false,
        dims = dims }
end

local function append(dst, src)
    for i = 1, #src do
        dst[#dst + 1] = src[i]
    end
end

local function version(b)
    if b.dims then
        return "5"
    elseif #b.x > 0 or #b.u > 0 then
        return "4"
    elseif b.per_domain then
        return "3"
    end
    return #b.t > 0 and "2" or "1"
end

local function finish(b, id, pace)
    local body
    if pace then
        -- Up to 100,000 lines, 8 MiB: joined CONCAT_LINES lines at a time,
        -- a step each (the last join, of the whole body, is one step).
        local parts = {}
        for _, lines in ipairs({ b.h, b.r, b.d, b.t, b.x, b.u }) do
            local n = #lines
            for i = 1, n, CONCAT_LINES do
                parts[#parts + 1] = concat(lines, "", i, min(i + CONCAT_LINES - 1, n))
                pace()
            end
        end
        body = concat(parts)
        pace()
    else
        body = concat(b.h) .. concat(b.r) .. concat(b.d) .. concat(b.t) .. concat(b.x) .. concat(b.u)
    end
    return { id = id, v = version(b), body = body, human = b.human, bot = b.bot }
end

-- Adds `k` to the bucket of its byte at `depth` in `buckets`; true when
-- `k` ends before that byte (it then goes in no bucket).
local function bucket(buckets, k, depth)
    local b = byte(k, depth)
    if b == nil then
        return true
    end
    local bk = buckets[b]
    if not bk then
        bk = {}
        buckets[b] = bk
    end
    bk[#bk + 1] = k
    return false
end

-- Calls `each(key)` for the keys of the array `keys` in byte order, in
-- steps (`pace()` between them) none of which grows with the number of
-- keys: at most MAX_SORT keys are sorted at once, a larger bucket is split
-- on its byte at `depth` (the bytes before it are the same in all its
-- keys; those they all share from `depth` on are skipped first: a domain's
-- keys share its name). A key that ends before `depth` + 1 comes first
-- (at most one: the keys are distinct), then the buckets in byte order:
-- the order one sort of all keys gives.
local function walk(keys, depth, pace, each)
    local n = #keys
    if n <= M.MAX_SORT then
        sort(keys)
        pace()
        for i = 1, n do
            each(keys[i])
        end
        return
    end
    local step = M.PACE_LINKS
    while true do
        local b0, same = byte(keys[1], depth), true
        for i = 2, n do
            if byte(keys[i], depth) ~= b0 then
                same = false
                break
            end
            if i % step == 0 then
                pace()
            end
        end
        -- (All alike and none ended: n > 1 distinct keys go on.)
        if not same or b0 == nil then
            break
        end
        depth = depth + 1
    end
    local ended, buckets = nil, {}
    for i = 1, n do
        local k = keys[i]
        if bucket(buckets, k, depth) then
            ended = k
        end
        if i % step == 0 then
            pace()
        end
    end
    pace()
    if ended then
        each(ended)
    end
    for b = 0, 255 do
        local bk = buckets[b]
        if bk then
            buckets[b] = nil
            walk(bk, depth + 1, pace, each)
        end
    end
end

-- The keys of `links` in byte order as `walk` gives them: bucketed on
-- their first byte (pace() every PACE_LINKS keys), each bucket then walked
-- (sorted, or split again).
local function paced_order(links, pace, each)
    local step = M.PACE_LINKS
    local empty, buckets, i = false, {}, 0
    for k in pairs(links) do
        if bucket(buckets, k, 1) then
            empty = true
        end
        i = i + 1
        if i % step == 0 then
            pace()
        end
    end
    pace()
    if empty then
        each("")
    end
    for b = 0, 255 do
        local bk = buckets[b]
        if bk then
            buckets[b] = nil
            walk(bk, 2, pace, each)
        end
    end
end

-- Turns `links` (link key -> counts) into batches `{id, v, body, human,
-- bot}`, ids from `next_id()`, links in key order (byte order, as the Rust
-- accumulator sorts its keys); `dims`: the worker counts dimensions.
--
-- `pace` (optional): called between steps of the work, every PACE_LINKS
-- links and between sorts (as accum.rs `take_encoded_paced` calls its
-- pace); the flush's yields to the requests there (clicks.lua). With it
-- the code order is made by bucketing on the first byte and sorting bucket
-- by bucket (`paced_order`: no step grows with the links); without it, by
-- one sort of all keys. The batches are the same byte for byte. `links`
-- must not change meanwhile (clicks.lua hands over a detached table).
function M.build(links, next_id, dims, pace)
    local out = {}
    local cur = new_batch(dims)
    local step, n = M.PACE_LINKS, 0
    local function add(key)
        local hl, rl, dl, tl, xl, ul, bytes, human, bot = link_lines(key, links[key], dims)
        local lines = #hl + #rl + #dl + #tl + #xl + #ul
        if cur.lines > 0 and (cur.lines + lines > M.MAX_LINES or cur.bytes + bytes > M.MAX_BODY_BYTES) then
            out[#out + 1] = finish(cur, next_id(), pace)
            cur = new_batch(dims)
        end
        append(cur.h, hl)
        append(cur.r, rl)
        append(cur.d, dl)
        append(cur.t, tl)
        append(cur.x, xl)
        append(cur.u, ul)
        cur.lines = cur.lines + lines
        cur.bytes = cur.bytes + bytes
        cur.human, cur.bot = cur.human + human, cur.bot + bot
        -- Only a per-domain key contains '/' (a code never does).
        if find(key, "/", 1, true) then
            cur.per_domain = true
        end
        if pace then
            n = n + 1
            if n % step == 0 then
                pace()
            end
        end
    end
    if pace then
        paced_order(links, pace, add)
    else
        for _, key in ipairs(sorted_keys(links)) do
            add(key)
        end
    end
    if cur.lines > 0 then
        out[#out + 1] = finish(cur, next_id(), pace)
    end
    return out
end

return M
