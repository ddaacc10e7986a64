-- wrk script: GET /<code> for codes that do not exist (an enumeration storm).
-- Env: LOADTEST_MISS   file of valid-looking 6-char codes known to be absent
--                      (the runner draws them at random and checks them
--                      against every pre-generated code in MySQL)
--      SHORTURL_HOST, LOADTEST_STATUS as in get.lua
-- Every answer should be 404; done() prints one JSON line (common.lua).
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local host = os.getenv("SHORTURL_HOST") or "localhost"
local file = os.getenv("LOADTEST_MISS") or "miss.txt"
local reqs, n

function setup(thread)
  common.setup(thread)
end

function init(args)
  common.thread_seed()
  reqs = common.get_requests(common.read_lines(file), host)
  n = #reqs
end

function request()
  return reqs[math.random(n)]
end

if common.count_status() then response = common.response end
done = common.done
