-- HMAC-SHA256 and random bytes through LuaJIT's FFI to the libcrypto nginx
-- is linked with, as seal.lua reaches it (no resty.hmac on Debian): the
-- unlock tokens' MAC (unlock.lua, protocol 4.5), the unique visitors' hash
-- and their daily salt (clicks_uniq.lua, protocol 3.4).
local ffi = require("ffi")

local M = {}

for _, decl in ipairs({
    "typedef struct evp_md_st EVP_MD;",
    "const EVP_MD *EVP_sha256(void);",
    "unsigned char *HMAC(const EVP_MD *evp_md, const void *key, int key_len, const unsigned char *d, size_t n, "
        .. "unsigned char *md, unsigned int *md_len);",
    "int RAND_bytes(unsigned char *buf, int num);",
}) do
    pcall(ffi.cdef, decl)
end

-- nginx's own libcrypto (already loaded), else the library by name.
local crypto = ffi.C
if not pcall(function()
    return crypto.HMAC
end) then
    crypto = ffi.load("libcrypto.so.3")
end

local md = ffi.new("unsigned char[32]")
local md_len = ffi.new("unsigned int[1]")

-- HMAC-SHA256(key, msg) in this module's 32-byte buffer, valid until the
-- next call (read it before anything can yield); returns the buffer.
local function hmac_sha256_buf(key, msg)
    if crypto.HMAC(crypto.EVP_sha256(), key, #key, msg, #msg, md, md_len) == nil or md_len[0] ~= 32 then
        error("HMAC-SHA256 failed", 0)
    end
    return md
end
M.hmac_sha256_buf = hmac_sha256_buf

-- HMAC-SHA256(key, msg), 32 raw bytes.
function M.hmac_sha256(key, msg)
    return ffi.string(hmac_sha256_buf(key, msg), 32)
end

-- `n` bytes from OpenSSL's generator, or nil when it fails.
function M.random_bytes(n)
    local buf = ffi.new("unsigned char[?]", n)
    if crypto.RAND_bytes(buf, n) ~= 1 then
        return nil
    end
    return ffi.string(buf, n)
end

return M
