-- wrk script: GET /<code> for codes read from a file, with the right Host.
-- Env: LOADTEST_CODES  file of codes, one per line (default loadtest codes.txt)
--      SHORTURL_HOST   Host header (the links' domain; default localhost)
--      LOADTEST_ORDER  random (default) | seq: each thread walks the file in
--                      order from its own offset (warm-up passes)
--      LOADTEST_THREADS  wrk -t, so seq offsets split the file evenly
--      LOADTEST_ZIPF   S: random order picks line k with weight 1/k^S (a few
--                      links take most requests, as in real traffic)
--      LOADTEST_STATUS=0 skip per-response status counting (see common.lua)
-- done() prints one JSON line (see loadtest/common.lua).
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local host = os.getenv("SHORTURL_HOST") or "localhost"
local file = os.getenv("LOADTEST_CODES") or "codes.txt"
local seq = os.getenv("LOADTEST_ORDER") == "seq"
local nthreads = tonumber(os.getenv("LOADTEST_THREADS") or "1") or 1
local zipf = tonumber(os.getenv("LOADTEST_ZIPF") or "")
local reqs, n, i
-- Zipf: ZIPF_DRAWS precomputed picks (stratified over the law's CDF in
-- one pass), one drawn per request: a table lookup, not a search.
local ZIPF_DRAWS = 1048576
local picks

local function zipf_picks(count, s)
  local total = 0
  for k = 1, count do total = total + k ^ -s end
  local out, k, cdf = {}, 1, 1 / total
  for j = 1, ZIPF_DRAWS do
    local u = (j - 0.5) / ZIPF_DRAWS
    while cdf < u and k < count do
      k = k + 1
      cdf = cdf + k ^ -s / total
    end
    out[j] = k
  end
  return out
end

function setup(thread)
  common.setup(thread)
end

function init(args)
  common.thread_seed()
  reqs = common.get_requests(common.read_lines(file), host)
  n = #reqs
  i = math.floor(((id or 1) - 1) * n / nthreads)
  if zipf and not seq then picks = zipf_picks(n, zipf) end
end

function request()
  if seq then
    i = i % n + 1
    return reqs[i]
  end
  if picks then return reqs[picks[math.random(ZIPF_DRAWS)]] end
  return reqs[math.random(n)]
end

if common.count_status() then response = common.response end
done = common.done
