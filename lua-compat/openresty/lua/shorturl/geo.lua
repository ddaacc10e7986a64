-- The visitor's country for the link rules' `cc` condition (protocol
-- section 3.1.1), as the Pingora edge's edge/src/geo.rs: the
-- `geo.country_header` a trusted proxy sent (two ASCII letters,
-- upper-cased), else the MaxMind DB `geo.mmdb_path` for the client's
-- address (`country_code`, ip-location-db's, else GeoLite2's
-- `country.iso_code`), else none. Asked only when a rule of the link has a
-- `cc` condition.
--
-- The database is read with libmaxminddb through the FFI. libmaxminddb
-- maps its file, so the module maps a private copy (unlinked once mapped):
-- a file overwritten in place never changes under a lookup. Loaded in the
-- master (a file that does not load stops the start), then checked by
-- every worker each `geo.reload_interval_ms` and loaded again when its
-- modification time or size changed; a file that does not load keeps the
-- last good database (logged, counted).
--
-- With `clicks.city` the same database also gives a human click's `city`
-- dimension (M.city): the database only, never the header.
local net = require("shorturl.net")
local json = require("shorturl.json")

local find, upper, type, concat, format = string.find, string.upper, type, table.concat, string.format
local byte, gsub = string.byte, string.gsub

local M = {}

local CDEF = [[
typedef struct MMDB_entry_s {
    const void *mmdb;
    uint32_t offset;
} MMDB_entry_s;

typedef struct MMDB_lookup_result_s {
    bool found_entry;
    MMDB_entry_s entry;
    uint16_t netmask;
} MMDB_lookup_result_s;

/* The value union holds an unsigned __int128 on amd64 and arm64 builds
   (MMDB_UINT128_IS_BYTE_ARRAY 0), hence its 16-byte alignment. */
typedef struct MMDB_entry_data_s {
    bool has_data;
    union {
        uint32_t pointer;
        const char *utf8_string;
        double double_value;
        const uint8_t *bytes;
        uint16_t uint16;
        uint32_t uint32;
        int32_t int32;
        uint64_t uint64;
        uint8_t uint128[16];
        bool boolean;
        float float_value;
    } __attribute__((aligned(16)));
    uint32_t offset;
    uint32_t offset_to_next;
    uint32_t data_size;
    uint32_t type;
} MMDB_entry_data_s;

typedef struct MMDB_metadata_s {
    uint32_t node_count;
    uint16_t record_size;
    uint16_t ip_version;
    const char *database_type;
    struct { size_t count; const char **names; } languages;
    uint16_t binary_format_major_version;
    uint16_t binary_format_minor_version;
    uint64_t build_epoch;
    struct { size_t count; void **descriptions; } description;
} MMDB_metadata_s;

typedef struct MMDB_s {
    uint32_t flags;
    const char *filename;
    ssize_t file_size;
    const uint8_t *file_content;
    const uint8_t *data_section;
    uint32_t data_section_size;
    const uint8_t *metadata_section;
    uint32_t metadata_section_size;
    uint16_t full_record_byte_size;
    uint16_t depth;
    struct { uint16_t netmask; uint32_t node_value; } ipv4_start_node;
    MMDB_metadata_s metadata;
} MMDB_s;

/* MMDB_s and room to spare, should a later 1.x append fields. */
typedef struct su_mmdb { MMDB_s db; uint8_t spare[1024]; } su_mmdb;

int MMDB_open(const char *const filename, uint32_t flags, MMDB_s *const mmdb);
void MMDB_close(MMDB_s *const mmdb);
MMDB_lookup_result_s MMDB_lookup_string(MMDB_s *const mmdb, const char *const ipstr, int *const gai_error,
    int *const mmdb_error);
int MMDB_aget_value(MMDB_entry_s *const start, MMDB_entry_data_s *const entry_data,
    const char *const *const path);
const char *MMDB_strerror(int error_code);

/* The file's stamp: struct statx has one layout on every architecture. */
struct su_statx_ts { int64_t tv_sec; uint32_t tv_nsec; int32_t reserved; };
struct su_statx {
    uint32_t mask; uint32_t blksize; uint64_t attributes;
    uint32_t nlink; uint32_t uid; uint32_t gid; uint16_t mode; uint16_t spare0;
    uint64_t ino; uint64_t size; uint64_t blocks; uint64_t attributes_mask;
    struct su_statx_ts atime, btime, ctime, mtime;
    uint32_t rdev_major, rdev_minor, dev_major, dev_minor;
    uint64_t spare2[14];
};
int statx(int dirfd, const char *pathname, int flags, unsigned int mask, struct su_statx *buf);
]]

local MMDB_MODE_MMAP = 1
local MMDB_SUCCESS = 0
local MMDB_DATA_TYPE_UTF8_STRING = 2
local AT_FDCWD = -100
local STATX_MTIME_SIZE = 0x40 + 0x200

local cfg
local ffi, lib, data, gai_err, mmdb_err, stx
local path_cc, path_iso, path_city, path_city_en, path_keys
local db         -- the loaded database: { h = su_mmdb, stamp =, database_type =, build_epoch =, gen = }
local loads, load_failures = 0, 0
local generation = 0 -- of the last load: a memo of another file's answer is never taken for this one's
-- M.city's memo: the last address asked, the load that answered, the
-- value (false: none).
local last_addr, last_gen, last_city
local timer_started = false

local function setup()
    if lib then
        return
    end
    ffi = require("ffi")
    pcall(ffi.cdef, CDEF)
    local ok, l = pcall(ffi.load, "maxminddb")
    if not ok then
        ok, l = pcall(ffi.load, "libmaxminddb.so.0")
    end
    if not ok then
        error("geo.mmdb_path needs libmaxminddb (Debian: libmaxminddb0): " .. tostring(l), 0)
    end
    lib = l
    data = ffi.new("MMDB_entry_data_s")
    gai_err, mmdb_err = ffi.new("int[1]"), ffi.new("int[1]")
    stx = ffi.new("struct su_statx")
    local k1, k2, k3 = ffi.new("char[13]", "country_code"), ffi.new("char[8]", "country"), ffi.new("char[9]", "iso_code")
    local k4, k5, k6 = ffi.new("char[5]", "city"), ffi.new("char[6]", "names"), ffi.new("char[3]", "en")
    path_cc = ffi.new("const char *[2]", k1, nil)
    path_iso = ffi.new("const char *[3]", k2, k3, nil)
    path_city = ffi.new("const char *[2]", k4, nil)
    path_city_en = ffi.new("const char *[4]", k4, k5, k6, nil)
    path_keys = { k1, k2, k3, k4, k5, k6 } -- what the paths point to, kept alive
end

-- What identifies the file's content (Geo's `stamp`: modification time
-- and size; "missing" when it cannot be read).
local function stamp(path)
    local ok, rc = pcall(ffi.C.statx, AT_FDCWD, path, 0, STATX_MTIME_SIZE, stx)
    if ok and rc == 0 then
        return format("%d.%09d:%d", tonumber(stx.mtime.tv_sec), stx.mtime.tv_nsec, tonumber(stx.size))
    end
    -- No statx (an old kernel or libc): the size alone.
    local f = io.open(path, "rb")
    if not f then
        return "missing"
    end
    local size = f:seek("end")
    f:close()
    return "size:" .. tostring(size)
end

local function close(h)
    lib.MMDB_close(h.db)
end

-- Reads `path` into a private mapping: the database, or nil, err.
local function load(path)
    setup()
    local before = stamp(path)
    local f, err = io.open(path, "rb")
    if not f then
        return nil, err
    end
    local bytes = f:read("*a")
    f:close()
    if not bytes then
        return nil, "cannot read " .. path
    end
    local copy = os.tmpname()
    local out, werr = io.open(copy, "wb")
    if not out then
        os.remove(copy)
        return nil, "cannot write a private copy: " .. tostring(werr)
    end
    local wrote = out:write(bytes)
    out:close()
    local h = ffi.new("su_mmdb")
    local rc = wrote and lib.MMDB_open(copy, MMDB_MODE_MMAP, h.db) or -1
    os.remove(copy)
    if rc ~= MMDB_SUCCESS then
        return nil, rc == -1 and "cannot write a private copy" or ffi.string(lib.MMDB_strerror(rc))
    end
    ffi.gc(h, close) -- unmapped when replaced, or when this Lua state goes (a reload of nginx)
    local meta = h.db.metadata
    generation = generation + 1
    return {
        h = h,
        stamp = before,
        database_type = meta.database_type ~= nil and ffi.string(meta.database_type) or "",
        build_epoch = tonumber(meta.build_epoch),
        gen = generation,
    }
end
M.load = load

-- Loads the file again if it changed since it was read; a file that does
-- not load keeps the last good database. Returns true when it loaded one,
-- or nil, err.
function M.reload_if_changed()
    local path = cfg.geo.mmdb_path
    if path == "" then
        return false
    end
    if db and db.stamp == stamp(path) then
        return false
    end
    local d, err = load(path)
    if not d then
        load_failures = load_failures + 1
        return nil, "geo database " .. path .. ": " .. tostring(err)
    end
    db = d
    loads = loads + 1
    return true
end

-- Master (init_by_lua): the configuration, and the database when one is
-- configured (raises a message naming the setting when it does not load).
function M.init(c)
    cfg = c
    db, loads, load_failures = nil, 0, 0
    if c.geo.mmdb_path ~= "" then
        local d, err = load(c.geo.mmdb_path)
        if not d then
            error("geo.mmdb_path " .. c.geo.mmdb_path .. ": " .. tostring(err), 0)
        end
        db, loads = d, 1
    end
end

local function tick(premature)
    if premature then
        return
    end
    local ok, loaded, err = pcall(M.reload_if_changed)
    if not ok then
        ngx.log(ngx.WARN, "shorturl: geo reload failed: ", loaded)
    elseif loaded then
        ngx.log(ngx.INFO, "shorturl: geo database reloaded")
    elseif err then
        ngx.log(ngx.WARN, "shorturl: ", err, "; keeping the last good one")
    end
end

-- Each worker checks the file every geo.reload_interval_ms.
function M.init_worker()
    if cfg.geo.mmdb_path ~= "" and not timer_started then
        timer_started = true
        local ok, err = ngx.timer.every(cfg.geo.reload_interval_ms / 1000, tick)
        if not ok then
            ngx.log(ngx.ERR, "shorturl: geo reload timer: ", err)
        end
    end
end

-- Two ASCII letters, upper-cased; else nil.
local function code_of(v)
    if type(v) == "table" then
        v = v[1]
    end
    if type(v) == "string" and #v == 2 and find(v, "^[A-Za-z][A-Za-z]$") then
        return upper(v)
    end
    return nil
end
M.code_of = code_of

-- The string at `path` of the entry: the string, false when the value is
-- not one, nil when there is none.
local function string_at(entry, path)
    if lib.MMDB_aget_value(entry, data, path) ~= MMDB_SUCCESS or not data.has_data then
        return nil
    end
    if data.type ~= MMDB_DATA_TYPE_UTF8_STRING then
        return false
    end
    return ffi.string(data.utf8_string, data.data_size)
end

-- The database's record for address `addr` (a string; an IPv4-mapped
-- IPv6 address is looked up as its IPv4): the lookup's result, or nil.
local function record(addr)
    local ip = db and addr and net.parse_ip(addr)
    if not ip then
        return nil
    end
    if ip.v4 then
        addr = concat(ip.b, ".")
    end
    local res = lib.MMDB_lookup_string(db.h.db, addr, gai_err, mmdb_err)
    if gai_err[0] ~= 0 or mmdb_err[0] ~= MMDB_SUCCESS or not res.found_entry then
        return nil
    end
    return res
end

-- The country of a record: `country_code`, else `country.iso_code`.
local function country_at(entry)
    local code = string_at(entry, path_cc)
    if code == nil then
        code = string_at(entry, path_iso)
    end
    return code and code_of(code) or nil
end

-- The database's country for address `addr`, or nil.
function M.lookup(addr)
    local res = record(addr)
    return res and country_at(res.entry) or nil
end

local MAX_CITY_VALUE = 64

local function pct(c)
    return format("%%%02X", byte(c))
end

-- The `city` value of country `cc` (two upper-case letters) and city
-- `name` (bytes): `<cc>-<name>`, every byte of the name but
-- [A-Za-z0-9._~-] as `%XX` (upper-case hex); longer than 64 bytes:
-- `~other` (clicks_dims.OTHER).
function M.city_value(cc, name)
    local v = cc .. "-" .. gsub(name, "[^A-Za-z0-9._~%-]", pct)
    return #v <= MAX_CITY_VALUE and v or "~other"
end

-- The city of a record, as the Pingora edge's `city_of` reads it: the
-- name is `city` when that is a string (ip-location-db's city files),
-- else `city.names.en` (GeoLite2-City, where `city` is a map); the
-- country `country_code` when that is a string, else `country.iso_code`.
-- nil without a name or a two-letter country.
local function city_at(entry)
    local name = string_at(entry, path_city) or string_at(entry, path_city_en)
    if not name or name == "" then
        return nil
    end
    local cc = string_at(entry, path_cc) or string_at(entry, path_iso)
    cc = cc and code_of(cc)
    return cc and M.city_value(cc, name) or nil
end

-- The database's `city` value for address `addr`, or nil (looked up).
function M.city_lookup(addr)
    local res = record(addr)
    return res and city_at(res.entry) or nil
end

-- The `city` dimension's value for the client address `addr` (the
-- database only: the country header does not apply), or nil. The last
-- address's answer is remembered (per worker, per load): the clicks of
-- a visitor come in runs, a repeat costs no lookup.
function M.city(addr)
    if not db or not addr then
        return nil
    end
    if addr == last_addr and db.gen == last_gen then
        return last_city or nil
    end
    local v = M.city_lookup(addr) or false -- (through the module: the tests count the calls)
    last_addr, last_gen, last_city = addr, db.gen, v
    return v or nil
end

-- Whether there is any source of a country (a header or a database):
-- without one, every request's country is none, nothing to work out.
function M.configured()
    return cfg ~= nil and (cfg.geo.country_header ~= "" or db ~= nil)
end

-- The country of the request: `headers` (ngx.req.get_headers()), the
-- connection's `peer` and the `client` behind it (clients.client()).
function M.country(headers, peer, client)
    local g = cfg.geo
    if g.country_header ~= "" and headers and net.contains(cfg.trusted, peer) then
        local c = code_of(headers[g.country_header_lc])
        if c then
            return c
        end
    end
    if db then
        return M.lookup(client)
    end
    return nil
end

-- The status document's `geo` member (`,"geo":{...}`), "" without a
-- database; this worker's loads and failures (GeoDim).
function M.status_part()
    if not cfg or cfg.geo.mmdb_path == "" then
        return ""
    end
    local epoch = db and db.build_epoch or 0
    return format(',"geo":{"path":%s,"database_type":%s,"build_epoch":%d,"build_date":%s,"loads":%d,'
        .. '"load_failures":%d}', json.encode(cfg.geo.mmdb_path), json.encode(db and db.database_type or ""), epoch,
        json.encode(os.date("!%Y-%m-%d", epoch)), loads, load_failures)
end

return M
