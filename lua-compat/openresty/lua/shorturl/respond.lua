-- Responses the module writes itself (protocol section 4): an explicit
-- Content-Length and Cache-Control on every answer; HEAD gets the headers
-- only.
local json = require("shorturl.json")

local header = ngx.header

local M = {}

M.NOT_FOUND_BODY = '{"error":"not_found","message":"no such short link"}'

local cfg

function M.init(c)
    cfg = c
end

function M.finish(body)
    if body ~= "" and ngx.req.get_method() ~= "HEAD" then
        ngx.print(body)
    else
        ngx.send_headers()
    end
    return ngx.exit(ngx.HTTP_OK)
end

function M.json(status, body, cache_control, retry_after)
    ngx.status = status
    header["Content-Type"] = "application/json"
    header["Content-Length"] = #body
    header["Cache-Control"] = cache_control
    if retry_after then
        header["Retry-After"] = retry_after
    end
    return M.finish(body)
end

function M.error(status, kind, message, retry_after)
    local body = '{"error":' .. json.encode(kind) .. ',"message":' .. json.encode(message) .. "}"
    return M.json(status, body, "no-store", retry_after)
end

function M.not_found()
    return M.json(404, M.NOT_FOUND_BODY, cfg.redirect.not_found_cache_control)
end

-- `no_store`: the answer was opened by the visitor's cookie (a password
-- link, protocol 4.5): no cache may keep it.
function M.redirect(url, no_store)
    ngx.status = cfg.redirect.status
    header["Location"] = url
    header["Content-Length"] = 0
    header["Cache-Control"] = no_store and "no-store" or cfg.redirect.cache_control
    return M.finish("")
end

return M
