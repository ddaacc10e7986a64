-- Link-preview crawlers (protocol 4.4, the twin of common/src/crawlers.rs):
-- the User-Agents a live link with a social card (`g` in its options)
-- answers with its card page instead of the redirect. The tokens come from
-- common/data/crawlers.txt (`link_rules.crawlers_file`, rendered by
-- start.sh, SU_CRAWLERS_FILE): one a line, `#` comment lines and blank
-- lines ignored, each matched ASCII-case-insensitively as a plain
-- substring of the User-Agent.
local clicks_ua = require("shorturl.clicks_ua")

local find, lower = string.find, string.lower
local type = type

local M = {}

local tokens = {} -- lower case, in file order

-- Loads the crawler tokens (lines as `tokens()` reads them: trimmed as
-- `str::trim` does, then blank and `#` lines skipped). Returns the number
-- of tokens, or nil, err.
function M.load(path)
    local lines, err = clicks_ua.data_lines(path)
    if not lines then
        return nil, err
    end
    local list = {}
    for i = 1, #lines do
        -- LuaJIT's lower() folds ASCII letters only, as
        -- ascii_case_insensitive does.
        list[i] = lower(lines[i])
    end
    tokens = list
    return #list
end

-- The loaded tokens (lower case), for tests.
function M.tokens()
    return tokens
end

-- is_crawler: `ua` (the User-Agent header's value; nil when absent)
-- contains a token, ASCII case aside. Asked only for a link that has a
-- card.
function M.is_crawler(ua)
    if type(ua) ~= "string" or ua == "" then
        return false
    end
    local l = lower(ua)
    for i = 1, #tokens do
        if find(l, tokens[i], 1, true) then
            return true
        end
    end
    return false
end

-- Loads `link_rules.crawlers_file`; raises a message naming the setting.
function M.init(cfg)
    local path = cfg.link_rules.crawlers_file
    local n, err = M.load(path)
    if not n then
        error("link_rules.crawlers_file: " .. tostring(err), 0)
    end
    if n == 0 then
        error("link_rules.crawlers_file " .. path .. " holds no crawler", 0)
    end
end

return M
