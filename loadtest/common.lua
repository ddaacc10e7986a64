-- Shared helpers for the wrk scripts: per-thread seeds, code files,
-- status counting, and the one-line JSON summary printed by done().
--
-- The last line wrk prints is that JSON object (scripts/bench-origin.sh and
-- loadtest/run read it with `tail -n 1`), so nothing may be printed after it.
local M = {}
local threads = {}

function M.setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

-- A per-thread random seed (wrk threads share nothing; os.time alone collides).
function M.thread_seed()
  local f = io.open("/dev/urandom", "rb")
  local b = f and f:read(4) or tostring(os.clock())
  if f then f:close() end
  local seed = 0
  for i = 1, #b do seed = seed * 256 + b:byte(i) end
  math.randomseed(seed + (id or 0))
  return string.format("%08x%d", seed, id or 0)
end

-- The non-empty lines of `path`; a missing or empty file is fatal, because a
-- run that requests nothing (or only "/") would look like a fast server.
function M.read_lines(path)
  local f, err = io.open(path, "r")
  if not f then
    io.stderr:write("loadtest: cannot open code file " .. tostring(path) .. ": " .. tostring(err) .. "\n")
    os.exit(2)
  end
  local out = {}
  for line in f:lines() do
    if #line > 0 then out[#out + 1] = line end
  end
  f:close()
  if #out == 0 then
    io.stderr:write("loadtest: code file " .. path .. " is empty\n")
    os.exit(2)
  end
  return out
end

-- Pre-formatted GET requests, one per code: wrk's single thread must not be
-- the bottleneck, so request() only indexes a table (no formatting per call).
-- LOADTEST_CLOSE=1 adds `Connection: close`: a new connection (and, over
-- https, a full TLS handshake) for every request.
-- `suffix` (optional) follows the code: ".png?size=256" for QR codes.
function M.get_requests(codes, host, suffix)
  local reqs = {}
  local headers = { ["Host"] = host }
  if os.getenv("LOADTEST_CLOSE") == "1" then
    headers["Connection"] = "close"
  end
  if os.getenv("LOADTEST_BROWSER") == "1" then
    -- edge-hot-rules: a desktop browser in English behind a trusted proxy,
    -- client 8.8.8.8 (US in the country database).
    headers["User-Agent"] = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36"
    headers["Accept-Language"] = "en-US,en;q=0.9"
    headers["X-Forwarded-For"] = "8.8.8.8"
  end
  for i, c in ipairs(codes) do
    reqs[i] = wrk.format("GET", "/" .. c .. (suffix or ""), headers)
  end
  return reqs
end

-- A creation request with a URL unique to this thread (`tag`) and request
-- number `n`; `domain` is optional.
function M.create_request(host, key, domain, tag, n)
  local body
  if domain then
    body = string.format('{"url":"https://load.example/%s/%d","domain":"%s"}', tag, n, domain)
  else
    body = string.format('{"url":"https://load.example/%s/%d"}', tag, n)
  end
  return wrk.format("POST", "/api/v1/links", {
    ["Host"] = host,
    ["Authorization"] = "Bearer " .. key,
    ["Content-Type"] = "application/json",
  }, body)
end

status_2xx, status_3xx, status_404, status_429, status_5xx, status_other = 0, 0, 0, 0, 0, 0

function M.response(status, headers, body)
  if status >= 200 and status < 300 then status_2xx = status_2xx + 1
  elseif status >= 300 and status < 400 then status_3xx = status_3xx + 1
  elseif status == 404 then status_404 = status_404 + 1
  elseif status == 429 then status_429 = status_429 + 1
  elseif status >= 500 then status_5xx = status_5xx + 1
  else status_other = status_other + 1 end
end

-- Counting statuses in Lua costs wrk a Lua call and header parsing per
-- response. Scripts may leave `response` unset for pure-GET throughput runs
-- (LOADTEST_STATUS=0); done() then reports "status_counted":false and
-- non_3xx falls back to wrk's own count of responses >= 400.
function M.count_status()
  return os.getenv("LOADTEST_STATUS") ~= "0"
end

function M.done(summary, latency, requests)
  local c = { s2 = 0, s3 = 0, s404 = 0, s429 = 0, s5 = 0, so = 0 }
  for _, t in ipairs(threads) do
    c.s2 = c.s2 + (t:get("status_2xx") or 0)
    c.s3 = c.s3 + (t:get("status_3xx") or 0)
    c.s404 = c.s404 + (t:get("status_404") or 0)
    c.s429 = c.s429 + (t:get("status_429") or 0)
    c.s5 = c.s5 + (t:get("status_5xx") or 0)
    c.so = c.so + (t:get("status_other") or 0)
  end
  local counted = (c.s2 + c.s3 + c.s404 + c.s429 + c.s5 + c.so) > 0 or summary.requests == 0
  local secs = summary.duration / 1e6
  local e = summary.errors
  local non3 = counted and (summary.requests - c.s3) or e.status
  io.write(string.format(
    '{"requests":%d,"duration_s":%.3f,"rps":%.1f,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"timeout":%d,"status":%d},' ..
    '"status":{"2xx":%d,"3xx":%d,"404":%d,"429":%d,"5xx":%d,"other":%d},"status_counted":%s,"non_3xx":%d,' ..
    '"latency_ms":{"mean":%.3f,"p50":%.3f,"p80":%.3f,"p90":%.3f,"p99":%.3f,"p999":%.3f,"max":%.3f}}\n',
    summary.requests, secs, summary.requests / secs,
    e.connect, e.read, e.write, e.timeout, e.status,
    c.s2, c.s3, c.s404, c.s429, c.s5, c.so, tostring(counted), non3,
    latency.mean / 1000, latency:percentile(50) / 1000, latency:percentile(80) / 1000,
    latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency:percentile(99.9) / 1000,
    latency.max / 1000))
end

return M
