-- wrk script: GET /<code>.png?size=256 (a QR code) for codes read from a
-- file, with the right Host. The same requests go to the edge (its page
-- cache) and to the nginx anchor, which serves the same PNG files from disk
-- (nginx ignores the query string of a static file).
-- Env: LOADTEST_QR_CODES  file of codes, one per line
--      SHORTURL_HOST      Host header (the links' domain)
--      LOADTEST_STATUS=0  skip per-response status counting (see common.lua)
-- done() prints one JSON line (see loadtest/common.lua).
package.path = package.path .. ";./loadtest/?.lua;" .. (os.getenv("LOADTEST_DIR") or ".") .. "/?.lua"
local common = require("common")

local host = os.getenv("SHORTURL_HOST") or "localhost"
local file = os.getenv("LOADTEST_QR_CODES") or "qr-codes.txt"
local reqs, n

function setup(thread)
  common.setup(thread)
end

function init(args)
  common.thread_seed()
  reqs = common.get_requests(common.read_lines(file), host, ".png?size=256")
  n = #reqs
end

function request()
  return reqs[math.random(n)]
end

if common.count_status() then response = common.response end
done = common.done
