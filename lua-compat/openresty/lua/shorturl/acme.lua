-- ACME HTTP-01 answers on the OpenResty edge: the key authorisation the
-- issuing Pingora edge put in the shared store (`su:1:acme:challenge:{token}`),
-- so a mixed fleet answers the CA wherever it connects. Issuance itself
-- stays on the Pingora edges.
local redis = require("shorturl.redis")
local respond = require("shorturl.respond")
local tls = require("shorturl.tls")

local M = {}

-- content_by_lua for /.well-known/acme-challenge/.
function M.challenge()
    ngx.var.su_outcome = "LOCAL"
    local method = ngx.req.get_method()
    local token = ngx.var.uri:match("^/%.well%-known/acme%-challenge/([%w_%-]+)$")
    if (method ~= "GET" and method ~= "HEAD") or not token or #token > 128 then
        return respond.not_found()
    end
    local conn = tls.redis_conn()
    if not conn then
        return respond.not_found()
    end
    local v, err = redis.get(conn, "su:1:acme:challenge:" .. token)
    if v == nil then
        ngx.log(ngx.WARN, "shorturl acme: challenge lookup failed: ", err)
        return respond.error(503, "unavailable", "challenge store unavailable", 1)
    end
    if not v then
        return respond.not_found()
    end
    ngx.status = 200
    ngx.header["Content-Type"] = "text/plain"
    ngx.header["Content-Length"] = #v
    ngx.header["Cache-Control"] = "no-store"
    return respond.finish(v)
end

return M
