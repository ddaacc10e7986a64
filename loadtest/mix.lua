-- wrk script: 95% GET /<code> (random codes from a file) / 5% POST
-- /api/v1/links with a unique URL, on one connection pool, as a rollout
-- check of a node that both redirects and creates.
-- Env: LOADTEST_CODES, SHORTURL_HOST as in get.lua; SHORTURL_KEY (bearer
--      key), SHORTURL_DOMAIN (optional link domain) as in create.lua;
--      LOADTEST_CREATE_PCT (default 5).
-- Expected answers: 3xx for GETs, 201 (or 200 on dedup) for POSTs.
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local host = os.getenv("SHORTURL_HOST") or "localhost"
local file = os.getenv("LOADTEST_CODES") or "codes.txt"
local key = os.getenv("SHORTURL_KEY") or ""
local domain = os.getenv("SHORTURL_DOMAIN")
local pct = tonumber(os.getenv("LOADTEST_CREATE_PCT") or "5") or 5
local reqs, n, prefix
local counter = 0

function setup(thread)
  common.setup(thread)
end

function init(args)
  prefix = common.thread_seed()
  reqs = common.get_requests(common.read_lines(file), host)
  n = #reqs
end

function request()
  if math.random() * 100 >= pct then
    return reqs[math.random(n)]
  end
  counter = counter + 1
  return common.create_request(host, key, domain, "mix-" .. prefix, counter)
end

-- Always counted: the mix is judged on 3xx + 2xx adding up to every request.
response = common.response
done = common.done
