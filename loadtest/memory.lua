-- wrk script for loadtest/memory: GET every code of LOADTEST_CODES once, in
-- file order, then stop (run with -t1 so one Lua state walks the file).
-- Each request of the pass is a miss that the edge answers from Redis and
-- caches; a few requests past the end (one per open connection) wrap
-- around to the first codes. Statuses are counted: the pass must be all 3xx.
-- When every code has been answered the thread stops and the file
-- LOADTEST_DONE is created: wrk's main thread still sleeps for -d, so
-- loadtest/memory waits for that file and interrupts wrk (SIGINT), which
-- then prints its summary.
-- Env: LOADTEST_CODES, SHORTURL_HOST as in get.lua; LOADTEST_DONE.
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local host = os.getenv("SHORTURL_HOST") or "localhost"
local file = os.getenv("LOADTEST_CODES") or "codes.txt"
local reqs, n, i, answered

function setup(thread)
  common.setup(thread)
end

function init(args)
  reqs = common.get_requests(common.read_lines(file), host)
  n, i, answered = #reqs, 0, 0
end

function request()
  i = i % n + 1
  return reqs[i]
end

function response(status, headers, body)
  common.response(status, headers, body)
  answered = answered + 1
  if answered == n then
    local f = io.open(os.getenv("LOADTEST_DONE") or "memory.done", "w")
    if f then f:close() end
    wrk.thread:stop()
  end
end

done = common.done
