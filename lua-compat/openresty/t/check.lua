-- The checks every t/*_test.lua makes, and its report: 200 and
-- "PASS <n> checks" (with any notes) when every check held, else 500,
-- "FAIL <k> of <n> checks" and one line per failure. `new()` per request:
-- the module is cached by the worker, the counts must not be.
local M = {}

-- A record's options `json` read by `link_rules.decode` (the tests' fixture
-- reader): an error naming it when it is refused.
function M.options(json)
    local o = require("shorturl.link_rules").decode(json)
    if not o then
        error("not decoded: " .. json)
    end
    return o
end

local function show(v)
    if type(v) == "string" then
        return string.format("%q", v)
    end
    return tostring(v)
end

function M.new()
    -- `show`: a value as a failure line shows it (strings quoted).
    local t = { failures = {}, checks = 0, notes = {}, show = show }

    function t.eq(got, want, what)
        t.checks = t.checks + 1
        if got ~= want then
            t.failures[#t.failures + 1] = string.format("%s: got %s, want %s", what, show(got), show(want))
        end
    end

    function t.ok(cond, what)
        t.eq(not not cond, true, what)
    end

    -- A line added to the PASS report (a part skipped, and why).
    function t.note(s)
        t.notes[#t.notes + 1] = s
    end

    function t.report()
        if #t.failures > 0 then
            ngx.status = 500
            ngx.say("FAIL ", #t.failures, " of ", t.checks, " checks")
            for _, m in ipairs(t.failures) do
                ngx.say("  ", m)
            end
        else
            local notes = #t.notes > 0 and (" (" .. table.concat(t.notes, "; ") .. ")") or ""
            ngx.say("PASS ", t.checks, " checks", notes)
        end
    end

    return t
end

return M
