-- Key material at rest in the shared TLS store (protocol section 3.3),
-- opened as the Pingora edge opens it (common/src/tls_seal.rs):
--
--   enc1:<key id>:<base64(nonce || ciphertext || tag)>
--
-- AES-256-GCM, a 96-bit nonce, the Redis key the value is stored under as
-- associated data (a value copied under another key does not open), and
-- the key chosen by its id: the first 8 hex digits of SHA-256 over the 32
-- key bytes. A value without the `enc` prefix is a plaintext one from
-- before sealing and is handed back as it is. Through LuaJIT's FFI to the
-- libcrypto nginx is linked with (OpenSSL 3 on Debian 12: EVP_* calls that
-- are the same in 1.1).
local ffi = require("ffi")

local sub, format, find = string.sub, string.format, string.find
local decode_base64 = ngx.decode_base64

local M = {}

-- One declaration per call: another module may have declared some already.
for _, decl in ipairs({
    "typedef struct evp_cipher_st EVP_CIPHER;",
    "typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;",
    "typedef struct evp_md_st EVP_MD;",
    "typedef struct engine_st ENGINE;",
    "EVP_CIPHER_CTX *EVP_CIPHER_CTX_new(void);",
    "void EVP_CIPHER_CTX_free(EVP_CIPHER_CTX *ctx);",
    "const EVP_CIPHER *EVP_aes_256_gcm(void);",
    "int EVP_DecryptInit_ex(EVP_CIPHER_CTX *ctx, const EVP_CIPHER *type, ENGINE *impl, "
        .. "const unsigned char *key, const unsigned char *iv);",
    "int EVP_CIPHER_CTX_ctrl(EVP_CIPHER_CTX *ctx, int type, int arg, void *ptr);",
    "int EVP_DecryptUpdate(EVP_CIPHER_CTX *ctx, unsigned char *out, int *outl, const unsigned char *in, int inl);",
    "int EVP_DecryptFinal_ex(EVP_CIPHER_CTX *ctx, unsigned char *outm, int *outl);",
    "const EVP_MD *EVP_sha256(void);",
    "int EVP_Digest(const void *data, size_t count, unsigned char *md, unsigned int *size, "
        .. "const EVP_MD *type, ENGINE *impl);",
}) do
    pcall(ffi.cdef, decl)
end

-- nginx's own libcrypto (already loaded), else the library by name.
local crypto = ffi.C
if not pcall(function()
    return crypto.EVP_aes_256_gcm
end) then
    crypto = ffi.load("libcrypto.so.3")
end

local PREFIX = "enc1:"
local NONCE_LEN, TAG_LEN, KEY_LEN = 12, 16, 32
local EVP_CTRL_GCM_SET_IVLEN, EVP_CTRL_GCM_SET_TAG = 0x9, 0x11

-- The key id of 32 raw key bytes.
local function key_id(key)
    local md = ffi.new("unsigned char[32]")
    local len = ffi.new("unsigned int[1]")
    if crypto.EVP_Digest(key, #key, md, len, crypto.EVP_sha256(), nil) ~= 1 then
        error("SHA-256 failed", 0)
    end
    return format("%02x%02x%02x%02x", md[0], md[1], md[2], md[3])
end

-- A key from its base64 text (white space around it ignored): { id, key }
-- or nil, why.
function M.parse_key(text)
    local raw = type(text) == "string" and decode_base64((text:gsub("^%s+", ""):gsub("%s+$", ""))) or nil
    if not raw then
        return nil, "not base64"
    end
    if #raw ~= KEY_LEN then
        return nil, format("must be %d bytes (base64 of 32 random bytes: `openssl rand -base64 32`), got %d",
            KEY_LEN, #raw)
    end
    return { id = key_id(raw), key = raw }
end

-- AES-256-GCM open; the plaintext or nil.
local function decrypt(key, nonce, ct, tag, aad)
    local ctx = crypto.EVP_CIPHER_CTX_new()
    if ctx == nil then
        return nil
    end
    local out = ffi.new("unsigned char[?]", #ct + TAG_LEN)
    local outl = ffi.new("int[1]")
    local tagbuf = ffi.new("unsigned char[?]", TAG_LEN)
    ffi.copy(tagbuf, tag, TAG_LEN)
    local ok = crypto.EVP_DecryptInit_ex(ctx, crypto.EVP_aes_256_gcm(), nil, nil, nil) == 1
        and crypto.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, nil) == 1
        and crypto.EVP_DecryptInit_ex(ctx, nil, nil, key, nonce) == 1
        and crypto.EVP_DecryptUpdate(ctx, nil, outl, aad, #aad) == 1
        and crypto.EVP_DecryptUpdate(ctx, out, outl, ct, #ct) == 1
    local n = outl[0]
    ok = ok and crypto.EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tagbuf) == 1
        and crypto.EVP_DecryptFinal_ex(ctx, out + n, outl) == 1
    crypto.EVP_CIPHER_CTX_free(ctx)
    if not ok then
        return nil
    end
    return ffi.string(out, n + outl[0])
end

local function is_hex8(s)
    return #s == 8 and not find(s, "[^0-9a-f]")
end

-- Opens `value`, stored at the Redis key `name`, with `keys` ({ current =
-- key, old = { key, ... } } or nil). Returns plain, how ("current", "old",
-- "plaintext"), or nil, reason ("malformed", "unknown_key",
-- "undecryptable"), key id (when the value names one).
function M.open(keys, name, value)
    if sub(value, 1, #PREFIX) ~= PREFIX then
        if find(value, "^enc%d+:") then
            return nil, "malformed"
        end
        return value, "plaintext"
    end
    local id, b64 = value:match("^([^:]*):(.*)$", #PREFIX + 1)
    if not id or not is_hex8(id) then
        return nil, "malformed"
    end
    local blob = decode_base64(b64)
    if not blob or #blob < NONCE_LEN + TAG_LEN then
        return nil, "malformed"
    end
    local nonce, ct, tag = sub(blob, 1, NONCE_LEN), sub(blob, NONCE_LEN + 1, -TAG_LEN - 1), sub(blob, -TAG_LEN)
    local known = false
    local candidates = {}
    if keys then
        candidates[1] = { keys.current, "current" }
        for _, k in ipairs(keys.old or {}) do
            candidates[#candidates + 1] = { k, "old" }
        end
    end
    for _, c in ipairs(candidates) do
        if c[1].id == id then
            known = true
            local plain = decrypt(c[1].key, nonce, ct, tag, name)
            if plain then
                return plain, c[2]
            end
        end
    end
    return nil, known and "undecryptable" or "unknown_key", id
end

return M
