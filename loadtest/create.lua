-- wrk script: POST /api/v1/links with a unique URL per request.
-- Env: SHORTURL_KEY (bearer key), SHORTURL_DOMAIN (optional link domain),
--      SHORTURL_HOST (Host header, default localhost).
-- done() prints one JSON line (see loadtest/common.lua).
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local key = os.getenv("SHORTURL_KEY") or ""
local domain = os.getenv("SHORTURL_DOMAIN")
local host = os.getenv("SHORTURL_HOST") or "localhost"
local counter = 0
local prefix

function setup(thread)
  common.setup(thread)
end

function init(args)
  prefix = common.thread_seed()
end

function request()
  counter = counter + 1
  return common.create_request(host, key, domain, prefix, counter)
end

response = common.response
done = common.done
