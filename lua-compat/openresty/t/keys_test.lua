-- Tests of the protocol 3.5 keys: proto.lua's link key, cache key and
-- invalidation messages (the cases of common/src/keys.rs and
-- common/src/inval.rs, same inputs and answers), protocol 3.6's fleet codes
-- and click (link) keys (common/src/code.rs), and cache.lua keyed by
-- (domain, code): one code on two domains is two entries, and a message
-- for one leaves the other alone.
-- Run by t/run.sh in a throwaway nginx (content_by_lua_file, with the
-- shorturl_cache and shorturl_state dicts); answers 200 and "PASS" when
-- every check holds, else 500 and the failures.
local proto = require("shorturl.proto")
local cache = require("shorturl.cache")

local t = require("check").new()
local eq, ok, show = t.eq, t.ok, t.show

---------------------------------------------------------------- keys
eq(proto.link_key("s.shop55.com", "aB3xYz"), "su:1:link:s.shop55.com/aB3xYz", "link key")
eq(proto.link_key("[::1]", "sale"), "su:1:link:[::1]/sale", "link key, IPv6 literal")
ok(proto.link_key("a.com", "sale") ~= proto.link_key("b.com", "sale"), "link keys differ by domain")
ok(proto.link_key("s.com", "aB3xYz") ~= proto.link_key("s.com", "Ab3xYz"), "link keys differ by code case")
eq(proto.cache_key("s.shop55.com", "sale"), "s.shop55.com/sale", "cache key")

---------------------------------------------------------------- fleet codes, click keys (protocol 3.6)
ok(proto.is_fleet_code("aB3xYz"), "fleet code")
ok(proto.is_fleet_code("000000"), "fleet code, digits")
for _, c in ipairs({ "sale", "ab_cde", "ab-cde", "aB3xYz0", "aB3xY", "salesale" }) do
    ok(not proto.is_fleet_code(c), "per-domain code " .. show(c))
end
eq(proto.click_key("aB3xYz", "s.shop55.com"), "aB3xYz", "click key of a fleet code: the code")
eq(proto.click_key("sale", "s.shop55.com"), "s.shop55.com/sale", "click key of a custom code")
eq(proto.click_key("ab_cde", "s.shop55.com"), "s.shop55.com/ab_cde", "6 characters with _: per domain")
eq(proto.click_key("ab-cde", "[::1]"), "[::1]/ab-cde", "6 characters with -, IPv6 literal")
ok(proto.click_key("sale", "a.com") ~= proto.click_key("sale", "b.com"), "click keys differ by domain")
eq(proto.click_key("aB3xYz", "a.com"), proto.click_key("aB3xYz", "b.com"), "a fleet code: one key everywhere")
do
    local longest = proto.click_key(string.rep("a", 32), string.rep("d", 253))
    eq(#longest, 286, "longest click key (253 + 1 + 32 bytes)")
end

---------------------------------------------------------------- invalidation messages
do
    local v, code, domain = proto.decode_inval("12 aB3xYz s.shop55.com")
    eq(v, 12, "message: version")
    eq(code, "aB3xYz", "message: code")
    eq(domain, "s.shop55.com", "message: domain")
    v, code, domain = proto.decode_inval("12 aB3xYz")
    eq(v, 12, "legacy: version")
    eq(code, "aB3xYz", "legacy: code")
    eq(domain, nil, "legacy: no domain")
    v, code, domain = proto.decode_inval("3 sale [::1]")
    eq(domain, "[::1]", "IPv6 literal domain")
    v, code, domain = proto.decode_inval("18446744073709551615 sale go.brand91.cn")
    eq(v, 18446744073709551615, "u64::MAX version")
    eq(domain, "go.brand91.cn", "u64::MAX version: domain")
    for _, bad in ipairs({
        "",
        "12",
        "12 ",
        " aB3xYz",
        "x aB3xYz",
        "+1 aB3xYz",
        "1 a/b",
        "1 aB3xYz x y",
        "1 aB3xYz S.shop55.com",
        "1 aB3xYz s.shop55.com:80",
        "1 aB3xYz s.shop55.com.",
        "1 aB3xYz ",
        "1 a/b s.com",
        "1  aB3xYz",
        "1 aB3xYz  s.com",
        "1 aB3xYz s.com\t",
        "1 aB3xYz s..com",
        "1 aB3xYz [::A]",
        "1 aB3xYz [::1]:80",
        "1 aB3xYz s/com",
        "18446744073709551616 aB3xYz s.com",
        "18446744073709551616 aB3xYz",
    }) do
        eq(proto.decode_inval(bad), nil, "malformed message " .. show(bad))
    end
end

---------------------------------------------------------------- cache by (domain, code)
do
    local dict = ngx.shared.shorturl_cache
    dict:flush_all()
    cache.init_worker({ cache = { unsubscribed_grace_ms = 5000, tombstone_ttl_ms = 10000, shared = true,
        lru = true, lru_items = 100 } })
    cache.subscribed()
    local far = 4102444800
    local ka, kb = proto.cache_key("s.shop55.com", "sale"), proto.cache_key("go.brand91.cn", "sale")
    local function rec(v, domain, url)
        return proto.decode(proto.encode_record(v, far, domain, url))
    end
    cache.put(ka, rec(3, "s.shop55.com", "https://a/"), 30, cache.epoch())
    cache.put(kb, rec(5, "go.brand91.cn", "https://b/"), 30, cache.epoch())
    local a, b = cache.get(ka), cache.get(kb)
    eq(a and a.url, "https://a/", "one code, first domain")
    eq(b and b.url, "https://b/", "one code, second domain")
    ok(dict:get(ka) and dict:get(kb), "both in the shared dict")
    eq(dict:get("sale"), nil, "nothing under the code alone")

    cache.invalidate(ka, 4)
    eq(cache.get(ka), nil, "invalidated (domain, code) dropped")
    eq(dict:get(ka), nil, "invalidated (domain, code) dropped from the shared dict")
    b = cache.get(kb)
    eq(b and b.url, "https://b/", "the other domain's entry kept")
    ok(cache.superseded(ka, rec(3, "s.shop55.com", "https://a/")), "older than the tombstone")
    ok(not cache.superseded(kb, rec(3, "go.brand91.cn", "https://b/")), "no tombstone for the other domain")
    cache.put(ka, rec(3, "s.shop55.com", "https://a/"), 30, cache.epoch())
    eq(cache.get(ka), nil, "an answer older than the tombstone is not stored")
    cache.put(ka, rec(4, "s.shop55.com", "https://a2/"), 30, cache.epoch())
    a = cache.get(ka)
    eq(a and a.url, "https://a2/", "the announced version is stored")

    cache.invalidate(kb, 5)
    b = cache.get(kb)
    eq(b and b.url, "https://b/", "an entry already at the version is kept")

    local neg = proto.cache_key("s.shop55.com", "none")
    cache.put(neg, { kind = "neg", v = 0 }, 5, cache.epoch())
    local n = cache.get(neg)
    eq(n and n.kind, "neg", "a negative under (domain, code)")
    eq(cache.get(proto.cache_key("go.brand91.cn", "none")), nil, "a negative serves its domain only")
    dict:flush_all()
end

---------------------------------------------------------------- report
t.report()
