-- wrk script: GET /<code> for codes read from a file, with the right Host.
-- Env: LOADTEST_CODES  file of codes, one per line (default loadtest codes.txt)
--      SHORTURL_HOST   Host header (the links' domain; default localhost)
--      LOADTEST_ORDER  random (default) | seq: each thread walks the file in
--                      order from its own offset (warm-up passes)
--      LOADTEST_THREADS  wrk -t, so seq offsets split the file evenly
--      LOADTEST_STATUS=0 skip per-response status counting (see common.lua)
-- done() prints one JSON line (see loadtest/common.lua).
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local host = os.getenv("SHORTURL_HOST") or "localhost"
local file = os.getenv("LOADTEST_CODES") or "codes.txt"
local seq = os.getenv("LOADTEST_ORDER") == "seq"
local nthreads = tonumber(os.getenv("LOADTEST_THREADS") or "1") or 1
local reqs, n, i

function setup(thread)
  common.setup(thread)
end

function init(args)
  common.thread_seed()
  reqs = common.get_requests(common.read_lines(file), host)
  n = #reqs
  i = math.floor(((id or 1) - 1) * n / nthreads)
end

function request()
  if seq then
    i = i % n + 1
    return reqs[i]
  end
  return reqs[math.random(n)]
end

if common.count_status() then response = common.response end
done = common.done
