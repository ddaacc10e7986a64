-- The node-wide click figures (protocol sections 6 and 7): what the
-- workers of clicks.lua added to the shared dict at their last flushes.
local format = string.format
local state = ngx.shared.shorturl_state

local M = {}

local cfg

function M.init(c)
    cfg = c
end


local function metric(key)
    return state:get(key) or 0
end

-- The workers' `ck:buffered:<id>` (or `ck:buffered_bytes:<id>`), summed.
local function buffered_now(what)
    local prefix = "ck:" .. (what or "buffered") .. ":"
    local n = 0
    for i = 0, ngx.worker.count() - 1 do
        n = n + (state:get(prefix .. i) or 0)
    end
    return n
end

local DROP_REASONS = { "buffer_full", "stream_full", "shutdown" }

-- The `clicks` object of /shorturl_status (node-wide, as of the workers'
-- last flushes); `unsalted`: human clicks with an address in no sketch of
-- unique visitors for want of their day's salt (protocol 3.4).
function M.status_part()
    local dropped = 0
    for _, r in ipairs(DROP_REASONS) do
        dropped = dropped + metric("ck:drop:" .. r)
    end
    local last = state:get("ck:last_flush")
    return format('"clicks":{"enabled":%s,"counted":%d,"sent":%d,"buffered":%d,"dropped":%d,"unsalted":%d,'
        .. '"last_flush_unix":%s}', cfg.clicks.enabled and "true" or "false", metric("ck:human") + metric("ck:bot"),
        metric("ck:sent"), buffered_now(), dropped, metric("ck:unsalted"), last and format("%d", last) or "null")
end

-- The click metrics (protocol section 7), appended to `out`.
function M.metrics(out)
    local function add(line)
        out[#out + 1] = line
    end
    add("# HELP shorturl_edge_clicks_total Clicks counted (redirects answered), by kind.")
    add("# TYPE shorturl_edge_clicks_total counter")
    add(format('shorturl_edge_clicks_total{kind="human"} %d', metric("ck:human")))
    add(format('shorturl_edge_clicks_total{kind="bot"} %d', metric("ck:bot")))
    add("# HELP shorturl_edge_click_batches_total Click batches appended to the stream (sent) and failed "
        .. "attempts (retried).")
    add("# TYPE shorturl_edge_click_batches_total counter")
    add(format('shorturl_edge_click_batches_total{result="sent"} %d', metric("ck:batches:sent")))
    add(format('shorturl_edge_click_batches_total{result="retried"} %d', metric("ck:batches:retried")))
    add("# HELP shorturl_edge_clicks_dropped_total Clicks lost (buffer_full, shutdown) or appended while the "
        .. "stream was at its MAXLEN (stream_full).")
    add("# TYPE shorturl_edge_clicks_dropped_total counter")
    for _, r in ipairs(DROP_REASONS) do
        add(format('shorturl_edge_clicks_dropped_total{reason="%s"} %d', r, metric("ck:drop:" .. r)))
    end
    add("# HELP shorturl_edge_clicks_unsalted_total Human clicks in no unique-visitor sketch: the edge did not know "
        .. "the day's salt (Redis unreachable since before the day).")
    add("# TYPE shorturl_edge_clicks_unsalted_total counter")
    add(format("shorturl_edge_clicks_unsalted_total %d", metric("ck:unsalted")))
    add("# HELP shorturl_edge_clicks_buffered Clicks in batches not yet appended to the stream.")
    add("# TYPE shorturl_edge_clicks_buffered gauge")
    add(format("shorturl_edge_clicks_buffered %d", buffered_now()))
    add("# HELP shorturl_edge_clicks_buffered_bytes Bytes of click batches not yet appended to the stream "
        .. "(at most clicks.max_buffered_bytes).")
    add("# TYPE shorturl_edge_clicks_buffered_bytes gauge")
    add(format("shorturl_edge_clicks_buffered_bytes %d", buffered_now("buffered_bytes")))
end

return M
