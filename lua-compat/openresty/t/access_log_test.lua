-- Tests of net.truncated: client addresses as the access log writes them
-- with access_log.truncate_addresses, from the cases the Pingora edge's
-- test reads too (common/data/truncated_addresses.txt), so both logs
-- write the same text. (run.sh checks the log lines themselves.)
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file).
local net = require("shorturl.net")

local t = require("check").new()
local eq = t.eq

local n = 0
for line in io.lines(ngx.var.su_repo .. "/common/data/truncated_addresses.txt") do
    if line:sub(1, 1) ~= "#" then
        local ip, want = line:match("^(%S+) (%S+)$")
        eq(net.truncated(ip), want, ip)
        n = n + 1
    end
end
eq(n, 14, "cases read")
eq(net.truncated("not an address"), "not an address", "anything else as it is")

t.report()
