#!/usr/bin/env bash
# Runs the module's Lua-level tests:
#
#   lua-compat/openresty/t/run.sh
#
# 1. every t/*_test.lua in a throwaway nginx (Debian nginx +
#    libnginx-mod-http-lua, content_by_lua_file, a free 127.0.0.1 port):
#    each answers 200 "PASS ..." or 500 with its failures;
# 2. unless SU_SKIP_E2E=1 (or without redis-server): the module itself
#    (start.sh) in front of a private Redis holding protocol 3 records,
#    checking the redirects link rules answer (Location, 404s, the country
#    header from a trusted proxy, forwarding, pages of a disabled link, the
#    social card's decision, a password link's gate with unlock tokens
#    signed here by Python, and its form posts, the in-app browser
#    guidance's decision, destination screening's 403s and, last, their
#    pages through a recording origin started here: the upstream URI, the
#    key's language, no-store, no click) and
#    the protocol 3.5 keys (records and invalidations by (domain, code), a
#    request without Host), the protocol 3.6 click keys (the batches in
#    the stream), the protocol 3.7 click dimensions (their x lines, qr=1
#    never forwarded) and unique visitors (the day's salt in Redis, the
#    `u` lines); and a second module with clicks.city on the committed
#    city database (testkit/data/city-test.mmdb): its `city` x lines.
#
# Ports: SU_T_PORT1..5 (the unit nginx, Redis, the module, an origin port
# nobody listens on until the page checks at the end, the module's
# metrics; the conformance suite's test passes reserved ones), else free ones from the kernel. Exits non-zero when a check fails. Every process it starts is stopped by
# its pid, and its directory removed (SU_KEEP_TMP=1 keeps it).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
openresty="$(cd "$here/.." && pwd)"
repo="$(cd "$openresty/../.." && pwd)"
nginx_bin="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/su-lua-t.XXXXXX")"
pids=()

stop() { # pid: SIGQUIT, then SIGKILL after 5 s
  local pid="$1"
  kill -0 "$pid" 2>/dev/null || return 0
  kill -QUIT "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}
cleanup() {
  local i
  for (( i=${#pids[@]}-1; i>=0; i-- )); do stop "${pids[$i]}"; done
  wait 2>/dev/null || true
  if [ "${SU_KEEP_TMP:-0}" = 1 ]; then echo "kept $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_port() { # port: up to 10 s
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on 127.0.0.1:$1" >&2
  return 1
}

failed=0

# ---------------------------------------------------------------- 1. unit tests
port="${SU_T_PORT1:-$(free_port)}"
mkdir -p "$tmp/unit/logs" "$tmp/w"
# Started as root, nginx's workers run as nobody: they write the test
# database into $tmp/w.
chmod 755 "$tmp"; chmod 1777 "$tmp/w"
locations=""
for f in "$here"/*_test.lua; do
  name="$(basename "$f" .lua)"
  locations="$locations
        location = /t/$name { content_by_lua_file $f; }"
done
cat > "$tmp/unit/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
worker_processes 1;
pid $tmp/unit/nginx.pid;
error_log $tmp/unit/logs/error.log warn;
events { worker_connections 64; }
http {
    lua_package_path "$openresty/lua/?.lua;$here/?.lua;/usr/share/lua/5.1/?.lua;;";
    init_by_lua_block { require("resty.core") }
    lua_shared_dict shorturl_cache 1m;
    lua_shared_dict shorturl_state 1m;
    lua_shared_dict shorturl_pages_gen 1m;
    access_log off;
    server {
        listen 127.0.0.1:$port;
        set \$su_repo $repo;
        set \$su_tmp $tmp/w;$locations
    }
}
CONF
"$nginx_bin" -p "$tmp/unit" -c "$tmp/unit/nginx.conf" -g 'daemon off; master_process on;' &
pids+=("$!")
wait_port "$port"
for f in "$here"/*_test.lua; do
  name="$(basename "$f" .lua)"
  code="$(curl -sS -o "$tmp/unit/$name.out" -w '%{http_code}' --max-time 120 "http://127.0.0.1:$port/t/$name" || true)"
  echo "$name: $(head -1 "$tmp/unit/$name.out" 2>/dev/null || echo 'no answer')"
  if [ "$code" != 200 ]; then
    tail -n +2 "$tmp/unit/$name.out" 2>/dev/null || true
    grep -E '\[(error|crit|alert|emerg)\]' "$tmp/unit/logs/error.log" | tail -5 || true
    failed=1
  fi
done
stop "${pids[-1]}"

# start.sh renders clicks.dimensions (SU_CLICKS_DIMENSIONS, protocol 3.7)
# and the family file's path (nginx -t only).
if SU_CHECK=1 SU_CLICKS_DIMENSIONS=0 "$openresty/start.sh" "$tmp/render" 1 127.0.0.1:1 127.0.0.1:1 >"$tmp/render.log" 2>&1 &&
  grep -q '^    dimensions = false,$' "$tmp/render/conf/shorturl.lua" &&
  grep -q "families_file = \"$repo/common/data/ua_families.txt\"" "$tmp/render/conf/nginx.conf"; then
  echo "start.sh: SU_CLICKS_DIMENSIONS=0 and the family file rendered"
else
  echo "start.sh: FAIL rendering SU_CLICKS_DIMENSIONS=0 / the family file"; cat "$tmp/render.log"; failed=1
fi

# ---------------------------------------------------------------- 2. end to end
if [ "${SU_SKIP_E2E:-0}" = 1 ] || ! command -v redis-server >/dev/null; then
  echo "end to end: skipped"
  exit "$failed"
fi
rport="${SU_T_PORT2:-$(free_port)}"
redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --dir "$tmp" >"$tmp/redis.log" 2>&1 &
pids+=("$!")
wait_port "$rport"
eport="${SU_T_PORT3:-$(free_port)}"
oport="${SU_T_PORT4:-$(free_port)}" # no origin listens there (until the end): every record comes from Redis
mport="${SU_T_PORT5:-$(free_port)}"
# geo_test.lua left a database placing 127.0.0.0/8 in KR (when libmaxminddb is there).
mmdb=""
[ -s "$tmp/w/test.mmdb" ] && mmdb="$tmp/w/test.mmdb"
# Password links (protocol 4.5): the test key, bytes 0..31 (t/unlock_test.lua's K1).
UNLOCK_KEY="AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
# Redis reads get a second (production's 30 ms is a latency budget, not a
# behaviour under test here): on a loaded 2-core machine a read past 30 ms
# made an ordinary lookup a 503 (no origin) and failed a check at random.
SU_REDIS_TIMEOUT_MS=1000 SU_UNLOCK_KEYS="$UNLOCK_KEY" SU_DIE_WITH_MASTER=1 SU_CLICKS_ENABLED=1 SU_CLICKS_FLUSH_INTERVAL_MS=50 SU_DEFAULT_DOMAIN=s.test SU_TRUSTED_PROXIES=127.0.0.1/32 \
  SU_GEO_COUNTRY_HEADER=CF-IPCountry SU_GEO_MMDB_PATH="$mmdb" SU_ACCESS_LOG=off SU_UNKNOWN_LIMIT=0 \
  SU_METRICS_PORT="$mport" \
  "$openresty/start.sh" "$tmp/edge" "$eport" "127.0.0.1:$rport" "127.0.0.1:$oport" >"$tmp/edge.log" 2>&1 &
pids+=("$!")
wait_port "$eport"

# Records by (domain, code) (protocol 3.5): `rset code line` on s.test,
# `E2E_DOMAIN=d rset ...` on d.
rset() { redis-cli -p "$rport" SET "su:1:link:${E2E_DOMAIN:-s.test}/$1" "$2" >/dev/null; }
far=4102444800 # 2100-01-01
rset rules01 "3 1 $far s.test https://x.example/base {\"f\":true,\"r\":[{\"c\":{\"dev\":[\"ios\"]},\"u\":\"https://a/ios?src=sl\"},{\"c\":{\"cc\":[\"CN\"]},\"u\":\"https://a/cn\"},{\"c\":{\"cc\":[\"KR\"],\"lang\":[\"ko\"]},\"u\":\"https://a/kr\"},{\"c\":{\"lang\":[\"de\"]},\"u\":\"https://a/de#top\"}]}"
rset expx01 "3 2 5 s.test https://x.example/old {\"x\":\"https://a/over\",\"f\":true}"
rset gone01 "3 3 $far s.test https://x.example/off {\"x\":\"https://a/gone\",\"d\":true}"
rset expd01 "3 2 5 s.test https://x.example/old {\"f\":true}"
rset plain1 "2 1 $far s.test https://x.example/plain"
rset bad001 "3 1 $far s.test https://x.example/bad {\"f\": true}"
rset split1 "3 1 $far s.test https://x.example/base {\"r\":[{\"s\":[[\"https://a/A\",1],[\"https://a/B\",1]]}]}"
# Another domain's key holding s.test's records (never written so): `- 0`.
E2E_DOMAIN=other.test rset gone01 "3 3 $far s.test https://x.example/off {\"x\":\"https://a/gone\",\"d\":true}"
E2E_DOMAIN=other.test rset expx01 "3 2 5 s.test https://x.example/old {\"x\":\"https://a/over\",\"f\":true}"
# One code on two domains: two links.
rset sale01 "2 1 $far s.test https://x.example/sale-s"
E2E_DOMAIN=go.test rset sale01 "2 1 $far go.test https://x.example/sale-go"
# A custom code (not 6 alphanumerics) on two domains: its clicks by
# <domain>/<code> (protocol 3.6).
rset sale "2 1 $far s.test https://x.example/sale"
E2E_DOMAIN=go.test rset sale "2 1 $far go.test https://x.example/sale-go"
# Only under the key before protocol 3.5: not read any more.
redis-cli -p "$rport" SET "su:1:link:oldkey1" "2 1 $far s.test https://x.example/old-key" >/dev/null
# Social cards (protocol 4.4): `g`.
rset card01 "3 1 $far s.test https://x.example/card {\"g\":true,\"r\":[{\"c\":{\"dev\":[\"ios\"]},\"u\":\"https://a/ios\"}]}"
rset cardx1 "3 2 5 s.test https://x.example/old {\"x\":\"https://a/over\",\"g\":true}"
rset cardd1 "3 3 $far s.test https://x.example/off {\"x\":\"https://a/gone\",\"d\":true,\"g\":true}"
# Password links (protocol 4.5): `p`.
rset pass01 "3 5 $far s.test https://x.example/secret {\"p\":true,\"f\":true,\"g\":true,\"r\":[{\"c\":{\"dev\":[\"ios\"]},\"u\":\"https://a/ios\"}]}"
rset passx1 "3 2 5 s.test https://x.example/old {\"x\":\"https://a/over\",\"p\":true}"
rset passd1 "3 3 $far s.test https://x.example/off {\"x\":\"https://a/gone\",\"d\":true,\"p\":true}"
# In-app browser guidance (protocol 4.6): `b`.
rset guide1 "3 1 $far s.test https://x.example/app.apk {\"b\":[\"wechat\",\"qq\"],\"f\":true,\"r\":[{\"c\":{\"dev\":[\"ios\"]},\"u\":\"https://a/ios\"}]}"
rset guide2 "3 1 $far s.test https://x.example/app2.apk {\"b\":[\"wechat\"]}"
rset guidx1 "3 2 5 s.test https://x.example/old.apk {\"x\":\"https://a/over\",\"b\":[\"wechat\"]}"
rset guidd1 "3 3 $far s.test https://x.example/off.apk {\"x\":\"https://a/gone\",\"d\":true,\"b\":[\"wechat\"]}"
rset guidp1 "3 6 $far s.test https://x.example/secret.apk {\"p\":true,\"b\":[\"wechat\"]}"
rset guidc1 "3 1 $far s.test https://x.example/card.apk {\"g\":true,\"b\":[\"wechat\"]}"
rset guidb1 "3 1 $far s.test https://x.example/bad.apk {\"b\":[\"icq\"]}"
# Destination screening (protocol 4.7): `w`.
rset scrnb1 "3 1 $far s.test https://evil.example/a {\"w\":\"block\",\"b\":[\"wechat\"],\"p\":true,\"g\":true,\"f\":true}"
rset scrnw1 "3 1 $far s.test https://flagged.example/b {\"w\":\"warn\",\"f\":true,\"r\":[{\"c\":{\"dev\":[\"ios\"]},\"u\":\"https://a/ios\"}]}"
rset scrnp1 "3 4 $far s.test https://flagged.example/c {\"w\":\"warn\",\"p\":true}"
rset scrng1 "3 1 $far s.test https://flagged.example/d {\"w\":\"warn\",\"g\":true,\"b\":[\"wechat\"]}"
rset scrnx1 "3 2 5 s.test https://evil.example/old {\"x\":\"https://a/over\",\"w\":\"block\",\"p\":true}"
rset scrnd1 "3 3 $far s.test https://evil.example/off {\"x\":\"https://a/gone\",\"d\":true,\"w\":\"block\"}"
rset scrnn1 "3 1 $far s.test https://x.example/clean {\"w\":null,\"f\":true}"
rset scrnz1 "3 1 $far s.test https://x.example/last {\"w\":null}"
rset scrnbd "3 1 $far s.test https://evil.example/bad {\"w\":\"allow\"}"
rset inval1 "2 1 $far s.test https://x.example/v1"
# Click dimensions (protocol 3.7): a link with UTM parameters of its own,
# and one forwarding the request's query (never its qr=1).
rset dims01 "2 1 $far s.test https://x.example/d?utm_campaign=launch"
rset dimsf1 "3 1 $far s.test https://x.example/f {\"f\":true}"
E2E_DOMAIN=go.test rset inval1 "2 1 $far go.test https://x.example/go-v1"
# Unique visitors (protocol 3.7).
rset uniq01 "2 1 $far s.test https://x.example/u"

IOS="Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148"
DESKTOP="Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36"
e2e() { # name want-status want-location path [curl args...]; E2E_HOST= sends no Host
  local name="$1" want="$2" want_loc="$3" path="$4"; shift 4
  local code loc host="${E2E_HOST-s.test}"
  code="$(curl -sS -D "$tmp/headers" -o /dev/null -w '%{http_code}' -H "Host:${host:+ $host}" "$@" \
    "http://127.0.0.1:$eport$path" 2>/dev/null || true)"
  loc="$(tr -d '\r' < "$tmp/headers" | awk -F': ' 'tolower($1) == "location" { print $2 }')"
  local got="$code ${loc:--}"
  if [ "$got" = "$want ${want_loc:--}" ]; then
    echo "  ok   $name"
  else
    echo "  FAIL $name: got '$got', want '$want ${want_loc:--}'"
    failed=1
  fi
}
echo "end to end (start.sh, Redis on $rport):"
e2e "rule: iOS, query forwarded" 302 "https://a/ios?src=sl&utm=1" "/rules01?src=x&utm=1" -A "$IOS"
e2e "no rule: the link, query forwarded" 302 "https://x.example/base?a=b%22" "/rules01?a=b%22" -A "$DESKTOP"
e2e "country header from a trusted proxy" 302 "https://a/cn" "/rules01" -A "$DESKTOP" -H "CF-IPCountry: cn"
e2e "country header not two letters" 302 "https://x.example/base" "/rules01" -A "$DESKTOP" -H "CF-IPCountry: XX1"
if [ -n "$mmdb" ]; then
  e2e "country from the database" 302 "https://a/kr" "/rules01" -A "$DESKTOP" -H "Accept-Language: ko"
  e2e "country header before the database" 302 "https://a/cn" "/rules01" -A "$DESKTOP" -H "Accept-Language: ko" -H "CF-IPCountry: CN"
  st="$(curl -sS -H 'Host: s.test' "http://127.0.0.1:$eport/shorturl_status" || true)"
  case "$st" in
    *'"geo":{"path":"'"$mmdb"'","database_type":"Test-Country","build_epoch":1800000000,"build_date":"2027-01-15","loads":1,"load_failures":0}'*)
      echo "  ok   status: the geo member" ;;
    *) echo "  FAIL status: no geo member in $st"; failed=1 ;;
  esac
else
  echo "  (no database: the MMDB checks skipped)"
fi
e2e "language" 302 "https://a/de?x=1#top" "/rules01?x=1" -A "$DESKTOP" -H "Accept-Language: en;q=0.5, de"
e2e "HEAD answers alike" 302 "https://a/ios?src=sl" "/rules01" -A "$IOS" -I
e2e "expired with x: the fallback, nothing forwarded" 302 "https://a/over" "/expx01?a=1"
e2e "disabled (d) with x: the fallback" 302 "https://a/gone" "/gone01"
e2e "expired without x: 404" 404 "" "/expd01"
E2E_HOST=other.test e2e "another domain's record under this domain's key: 404" 404 "" "/gone01"
E2E_HOST=other.test e2e "another domain's expired record under this domain's key: 404" 404 "" "/expx01"
E2E_HOST=third.test e2e "no record for this domain (no origin: 503)" 503 "" "/gone01"
e2e "one code, two domains: this one" 302 "https://x.example/sale-s" "/sale01"
E2E_HOST=GO.test. e2e "one code, two domains: the other (host normalised)" 302 "https://x.example/sale-go" "/sale01"
e2e "custom code, two domains: this one" 302 "https://x.example/sale" "/sale"
E2E_HOST=GO.test. e2e "custom code, two domains: the other" 302 "https://x.example/sale-go" "/sale"
e2e "only under the legacy key: not read (no origin: 503)" 503 "" "/oldkey1"
E2E_HOST= e2e "no Host (HTTP/1.0): 404, nothing looked up" 404 "" "/oldkey1" -0
E2E_HOST= e2e "no Host (HTTP/1.0), a live code: 404" 404 "" "/plain1" -0
e2e "protocol 2 record unchanged" 302 "https://x.example/plain" "/plain1?a=1"
e2e "malformed options: a miss (no origin: 503)" 503 "" "/bad001"
e2e "page of a disabled link: 404" 404 "" "/gone01.png"
CRAWLER="facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)"
e2e "card: a crawler gets the page (no origin: 503)" 503 "" "/card01?utm=1" -A "$CRAWLER"
e2e "card: the page path (no origin: 503)" 503 "" "/card01.card"
e2e "card: a browser gets the rules' redirect" 302 "https://a/ios" "/card01" -A "$IOS"
e2e "card: no User-Agent, the redirect" 302 "https://x.example/card" "/card01"
e2e "card: a crawler on a link without one, the redirect" 302 "https://x.example/base" "/rules01" -A "$CRAWLER"
e2e "card: a crawler on an expired link, the fallback" 302 "https://a/over" "/cardx1" -A "Twitterbot/1.0"
e2e "card: a crawler on a disabled link, the fallback" 302 "https://a/gone" "/cardd1" -A "Twitterbot/1.0"
# Unlock tokens signed apart from the module (unlock.lua only checks them).
token() { # domain code version exp [base64 key]
  python3 -c 'import sys, hmac, hashlib, base64
d, c, v, e, k = sys.argv[1:6]
key = base64.b64decode(k)
mac = hmac.new(key, f"1\n{d}\n{c}\n{v}\n{e}".encode(), hashlib.sha256).digest()
print("1.%s.%s.%s" % (hashlib.sha256(key).hexdigest()[:8], e, base64.urlsafe_b64encode(mac).rstrip(b"=").decode()))' \
    "$1" "$2" "$3" "$4" "${5:-$UNLOCK_KEY}"
}
HTML="text/html,application/xhtml+xml,*/*;q=0.8"
PASS="su_pass=$(token s.test pass01 5 "$far")"
e2e "password: no token, JSON: 401" 401 "" "/pass01?utm=1"
e2e "password: no token, HEAD: 401" 401 "" "/pass01" -I
e2e "password: no token, a browser gets the form (no origin: 503)" 503 "" "/pass01?utm=1" -H "Accept: $HTML"
e2e "password: the form's page path (no origin: 503)" 503 "" "/pass01.password"
e2e "password: a valid token, the rules and forwarding" 302 "https://a/ios?utm=1" "/pass01?utm=1" -A "$IOS" -b "$PASS"
e2e "password: a valid token among others" 302 "https://x.example/secret" "/pass01" \
  -H "Cookie: a=1; su_pass=1.00000000.$far.x; $PASS; b=2"
e2e "password: a valid token, HEAD" 302 "https://x.example/secret" "/pass01" -I -b "$PASS"
e2e "password: a valid token, a crawler gets the redirect, never the card" 302 "https://x.example/secret" "/pass01" \
  -A "$CRAWLER" -b "$PASS"
e2e "password: no token, a crawler gets the 401, never the card" 401 "" "/pass01" -A "$CRAWLER"
e2e "password: an expired token" 401 "" "/pass01" -b "su_pass=$(token s.test pass01 5 1700000000)"
e2e "password: a token of an earlier version" 401 "" "/pass01" -b "su_pass=$(token s.test pass01 4 "$far")"
e2e "password: a token of another code" 401 "" "/pass01" -b "su_pass=$(token s.test pass02 5 "$far")"
e2e "password: a token of another domain" 401 "" "/pass01" -b "su_pass=$(token go.test pass01 5 "$far")"
e2e "password: a token of a key not configured" 401 "" "/pass01" \
  -b "su_pass=$(token s.test pass01 5 "$far" ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=)"
e2e "password: expired with x, the fallback without a password" 302 "https://a/over" "/passx1"
e2e "password: disabled with x, the fallback without a password" 302 "https://a/gone" "/passd1"
body="$(curl -sS -H 'Host: s.test' "http://127.0.0.1:$eport/pass01" || true)"
[ "$body" = '{"error":"password_required","message":"this link needs a password"}' ] &&
  echo "  ok   password: the 401's body" || { echo "  FAIL password: 401 body '$body'"; failed=1; }
# POST /{code} (the form's post): decided as GET, proxied for a password link only.
e2e "post: a live link without a password: 405" 405 "" "/plain1" -d "password=x"
e2e "post: a link kept for its fallback: 405" 405 "" "/passx1" -d "password=x"
e2e "post: an expired link without x: 404" 404 "" "/expd01" -d "password=x"
E2E_HOST=other.test e2e "post: another domain's record: 404" 404 "" "/gone01" -d "password=x"
e2e "post: a password link, a body over 4096 bytes: 413" 413 "" "/pass01" --data-binary "password=$(head -c 4100 /dev/zero | tr '\0' a)"
code="$(curl -sS -o /dev/null -w '%{http_code}' -H 'Host: s.test' -d 'password=x' "http://127.0.0.1:$eport/pass01" || true)"
case "$code" in
  502|503) echo "  ok   post: a password link is proxied (no origin: $code)" ;;
  *) echo "  FAIL post: a password link: $code, want 502 or 503"; failed=1 ;;
esac
e2e "put: still 405 before any lookup" 405 "" "/pass01" -X PUT
# In-app browser guidance (protocol 4.6): the decision (the page itself
# once an origin listens, below).
WECHAT="Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 MicroMessenger/8.0.47(0x18002f2c) NetType/WIFI"
QQ="Mozilla/5.0 (Linux; Android 14) Mobile Safari/537.36 QQ/9.0.0.1"
WEIBO="Mozilla/5.0 (iPhone) Mobile/15E148 Weibo (iPhone10,1__weibo__12.1.0__iphone__os17.0)"
e2e "guide: WeChat gets the page (no origin: 503)" 503 "" "/guide1?utm=1" -A "$WECHAT" -H "Accept-Language: zh-CN"
e2e "guide: QQ gets the page (no origin: 503)" 503 "" "/guide1" -A "$QQ"
e2e "guide: the page's path (no origin: 503)" 503 "" "/guide1.guide?lang=zh"
e2e "guide: an app not in b gets the rules' redirect" 302 "https://a/ios?utm=1" "/guide1?utm=1" -A "$WEIBO"
e2e "guide: a browser gets the rules' redirect" 302 "https://a/ios" "/guide1" -A "$IOS"
e2e "guide: no User-Agent, the redirect" 302 "https://x.example/app.apk" "/guide1"
e2e "guide: the token is case-sensitive" 302 "https://x.example/app.apk" "/guide1" -A "micromessenger/8.0"
e2e "guide: WeChat on a link without b, the rules' redirect" 302 "https://a/ios?src=sl" "/rules01" -A "$WECHAT"
e2e "guide: WeChat on a plain link, the redirect" 302 "https://x.example/plain" "/plain1" -A "$WECHAT"
e2e "guide: WeChat on an expired link, the fallback" 302 "https://a/over" "/guidx1" -A "$WECHAT"
e2e "guide: WeChat on a disabled link, the fallback" 302 "https://a/gone" "/guidd1" -A "$WECHAT"
e2e "guide: before the password (no token; no origin: 503)" 503 "" "/guidp1" -A "$WECHAT"
e2e "guide: the password for a browser (no token: 401)" 401 "" "/guidp1" -A "$IOS"
e2e "guide: an unknown app in b: a miss (no origin: 503)" 503 "" "/guidb1" -A "$IOS"
e2e "guide: POST is the password's, not the guide's: 405" 405 "" "/guide1" -A "$WECHAT" -d "password=x"
e2e "guide: POST from WeChat to a guided password link: 405 (the guide first)" 405 "" "/guidp1" -A "$WECHAT" -d "password=x"
e2e "guide: POST from a browser to it: the entry (no origin: 503)" 503 "" "/guidp1" -A "$IOS" -d "password=x"
# Destination screening (protocol 4.7): the 403s (the page itself once an
# origin listens, below).
header_of() { # field path [curl args...]: the value of the answer's header field
  local f="$1" path="$2"; shift 2
  curl -sS -o /dev/null -D - -H 'Host: s.test' "$@" "http://127.0.0.1:$eport$path" 2>/dev/null | tr -d '\r' |
    awk -F': ' -v f="$f" 'tolower($1) == f { print $2 }'
}
check_body() { # name want-body path [curl args...]
  local name="$1" want="$2" path="$3"; shift 3
  local got
  got="$(curl -sS -H 'Host: s.test' "$@" "http://127.0.0.1:$eport$path" 2>/dev/null || true)"
  if [ "$got" = "$want" ]; then echo "  ok   $name"; else echo "  FAIL $name: got '$got', want '$want'"; failed=1; fi
}
check_header() { # name field want path [curl args...]
  local name="$1" f="$2" want="$3" path="$4"; shift 4
  local got
  got="$(header_of "$f" "$path" "$@")"
  if [ "$got" = "$want" ]; then echo "  ok   $name"; else echo "  FAIL $name: $f '$got', want '$want'"; failed=1; fi
}
BLOCKED='{"error":"destination_blocked","message":"this link'"'"'s destination is blocked"}'
FLAGGED='{"error":"destination_flagged","message":"this link'"'"'s destination was flagged as unsafe"}'
e2e "screen: block, JSON: 403" 403 "" "/scrnb1?utm=1"
check_body "screen: block, the 403's body" "$BLOCKED" "/scrnb1?utm=1"
check_header "screen: block, the 403 is JSON" content-type "application/json" "/scrnb1"
check_header "screen: block, the 403 is no-store" cache-control "no-store" "/scrnb1"
e2e "screen: warn, JSON: 403" 403 "" "/scrnw1"
check_body "screen: warn, the 403's body" "$FLAGGED" "/scrnw1" -A "$IOS"
check_header "screen: warn, the 403 is JSON" content-type "application/json" "/scrnw1" -A "$IOS"
check_header "screen: warn, the 403 is no-store" cache-control "no-store" "/scrnw1"
e2e "screen: HEAD, JSON: 403" 403 "" "/scrnb1" -I
check_header "screen: HEAD, the body's length" content-length "${#BLOCKED}" "/scrnb1" -I
e2e "screen: an explicit JSON Accept: 403" 403 "" "/scrnw1" -H "Accept: application/json"
e2e "screen: before the rules (iOS: 403, not its rule)" 403 "" "/scrnw1" -A "$IOS"
e2e "screen: before the guidance (WeChat, JSON: 403)" 403 "" "/scrnb1" -A "$WECHAT"
e2e "screen: before the password (no token, JSON: 403, not 401)" 403 "" "/scrnb1"
e2e "screen: before the password (a valid token: 403, not the redirect)" 403 "" "/scrnp1" \
  -b "su_pass=$(token s.test scrnp1 4 "$far")"
e2e "screen: before the card (a crawler: 403)" 403 "" "/scrng1" -A "$CRAWLER"
check_body "screen: a crawler gets the warn body" "$FLAGGED" "/scrng1" -A "$CRAWLER"
e2e "screen: a browser gets the page (no origin: 503)" 503 "" "/scrnb1?utm=1" -H "Accept: $HTML"
e2e "screen: the page's path (no origin: 503)" 503 "" "/scrnb1.warning"
e2e "screen: expired with x, the fallback (no screening)" 302 "https://a/over" "/scrnx1"
e2e "screen: expired with x, a browser, the fallback" 302 "https://a/over" "/scrnx1" -H "Accept: $HTML"
e2e "screen: disabled with x, the fallback (no screening)" 302 "https://a/gone" "/scrnd1"
e2e "screen: disabled with x, a browser, the fallback" 302 "https://a/gone" "/scrnd1" -H "Accept: $HTML"
e2e "screen: w null, the redirect" 302 "https://x.example/clean?a=1" "/scrnn1?a=1"
e2e "screen: w allow is malformed: a miss (no origin: 503)" 503 "" "/scrnbd"
e2e "screen: POST to a screened password link: 405" 405 "" "/scrnp1" -d "password=x"
e2e "screen: POST to a screened link: 405" 405 "" "/scrnw1" -d "password=x"
e2e "screen: POST to an expired screened link with x: 405" 405 "" "/scrnx1" -d "password=x"
a="$(curl -sS -D - -o /dev/null -H 'Host: s.test' "http://127.0.0.1:$eport/split1" | tr -d '\r' | awk -F': ' 'tolower($1) == "location" { print $2 }')"
b="$(curl -sS -D - -o /dev/null -H 'Host: s.test' "http://127.0.0.1:$eport/split1" | tr -d '\r' | awk -F': ' 'tolower($1) == "location" { print $2 }')"
if [ -n "$a" ] && [ "$a" = "$b" ]; then echo "  ok   split: stable ($a)"; else echo "  FAIL split: '$a' then '$b'"; failed=1; fi

# Invalidation by (domain, code) (protocol 3.5); one worker (SU_WORKERS=1).
metric() { # the value of the metrics line starting with $1
  curl -sS "http://127.0.0.1:$mport/metrics" 2>/dev/null | awk -v m="$1" 'index($0, m " ") == 1 { print $NF }'
}
check_metric() { # name line want
  local got; got="$(metric "$2")"
  if [ "$got" = "$3" ]; then echo "  ok   $1"; else echo "  FAIL $1: $2 is '${got}', want $3"; failed=1; fi
}
for _ in $(seq 1 50); do [ "$(metric shorturl_inval_subscribed)" = 1 ] && break; sleep 0.1; done
publish() { redis-cli -p "$rport" PUBLISH su:1:inval "$1" >/dev/null; sleep 0.3; }
e2e "inval: cached" 302 "https://x.example/v1" "/inval1"
E2E_HOST=go.test e2e "inval: cached, other domain" 302 "https://x.example/go-v1" "/inval1"
rset inval1 "2 2 $far s.test https://x.example/v2"
E2E_DOMAIN=go.test rset inval1 "2 2 $far go.test https://x.example/go-v2"
publish "2 inval1"
e2e "inval: the legacy form is ignored" 302 "https://x.example/v1" "/inval1"
publish "2 inval1 s.test"
e2e "inval: (domain, code) dropped" 302 "https://x.example/v2" "/inval1"
E2E_HOST=go.test e2e "inval: the other domain's entry kept" 302 "https://x.example/go-v1" "/inval1"
publish "2 inval1 GO.test"
E2E_HOST=go.test e2e "inval: a domain not normalised is invalid" 302 "https://x.example/go-v1" "/inval1"
check_metric "metrics: legacy" 'shorturl_inval_messages_total{result="legacy"}' 1
check_metric "metrics: applied" 'shorturl_inval_messages_total{result="applied"}' 1
check_metric "metrics: invalid" 'shorturl_inval_messages_total{result="invalid"}' 1
st="$(curl -sS -H 'Host: s.test' "http://127.0.0.1:$eport/shorturl_status" || true)"
case "$st" in
  *'"inval":{"subscribed":true,"messages":3,'*) echo "  ok   status: inval messages, legacy included" ;;
  *) echo "  FAIL status: inval messages in $st"; failed=1 ;;
esac
# Click keys (protocol 3.6): the versions of the batches holding an `h`
# line of a key (XRANGE --raw: "v", its value, ..., the body's lines).
click_versions() { # key
  redis-cli -p "$rport" --raw XRANGE su:1:clicks - + 2>/dev/null |
    awk -v k="$1" 'prev == "v" { v = $0 } { prev = $0 } index($0, "h " k " ") == 1 { print v }' | sort -u | tr '\n' ' '
}
check_clicks() { # name key want-versions (a glob)
  local got=""
  for _ in $(seq 1 50); do got="$(click_versions "$2")"; [[ "$got" == $3 ]] && break; sleep 0.1; done
  if [[ "$got" == $3 ]]; then echo "  ok   $1"; else echo "  FAIL $1: versions '$got', want '$3'"; failed=1; fi
}
check_clicks "clicks: a fleet code under the code" plain1 "?*"
check_clicks "clicks: a fleet code on two domains under the code" sale01 "?*"
# (Version 4 with dimensions on, the default: it names keys as 3 does.)
check_clicks "clicks: a custom code under <domain>/<code> (v 5)" s.test/sale "5 "
check_clicks "clicks: the same custom code on the other domain apart (v 5)" go.test/sale "5 "
check_clicks "clicks: no fleet code under a domain" s.test/plain1 ""
check_clicks "clicks: nor on the other domain" go.test/sale01 ""
check_clicks "clicks: no custom code alone" sale ""

# Click dimensions (protocol 3.7, on by default): the x lines of a key
# summed over the batches, "<dim>:<value> <n>," in byte order.
click_dims() { # key
  redis-cli -p "$rport" --raw XRANGE su:1:clicks - + 2>/dev/null |
    awk -v k="$1" '$1 == "x" && $2 == k { n[$4] += $5 } END { for (v in n) print v, n[v] }' | LC_ALL=C sort | tr '\n' ','
}
check_dims() { # name key want
  local got=""
  for _ in $(seq 1 50); do got="$(click_dims "$2")"; [ "$got" = "$3" ] && break; sleep 0.1; done
  if [ "$got" = "$3" ]; then echo "  ok   $1"; else echo "  FAIL $1: '$got', want '$3'"; failed=1; fi
}
e2e "dims: a plain link, from a QR code" 302 "https://x.example/d?utm_campaign=launch" "/dims01?qr=1" -A "$DESKTOP" \
  -H "Accept-Language: zh-CN,zh;q=0.9" -H "CF-IPCountry: cn"
e2e "dims: a plain link" 302 "https://x.example/d?utm_campaign=launch" "/dims01" -A "$IOS" -H "Accept-Language: *"
e2e "dims: a plain link, HEAD (a bot)" 302 "https://x.example/d?utm_campaign=launch" "/dims01?qr=1" -A "$DESKTOP" -I \
  -H "Accept-Language: fr"
e2e "dims: forwarding drops qr=1" 302 "https://x.example/f?utm_source=news&utm_medium=a!b" \
  "/dimsf1?qr=1&utm_source=news&utm_medium=a!b" -A "$DESKTOP"
e2e "dims: forwarding qr=1 alone, no ?" 302 "https://x.example/f" "/dimsf1?qr=1" -A "$DESKTOP"
e2e "dims: forwarding drops qr=1 between others" 302 "https://x.example/f?a=1&b=2" "/dimsf1?a=1&qr=1&b=2" -A "$DESKTOP"
e2e "dims: forwarding keeps qr=10" 302 "https://x.example/f?qr=10" "/dimsf1?qr=10" -A "$DESKTOP"
# The country: the header from the trusted proxy, else the database's
# (127.0.0.0/8 in KR), else none.
kr1="" kr2="" kr4=""
[ -n "$mmdb" ] && { kr1="country:KR 1,"; kr4="country:KR 4,"; }
check_dims "dims: a plain link's x lines (bots in none)" dims01 \
  "browser:chrome 1,country:CN 1,${kr1}lang:zh 1,os:ios 1,os:windows 1,source:qr 1,utm_campaign:launch 2,"
check_dims "dims: the forwarded query's UTM parameters, qr=1 counted" dimsf1 \
  "browser:chrome 4,${kr4}os:windows 4,source:qr 3,utm_medium:~other 1,utm_source:news 1,"
check_clicks "dims: batches with x lines are version 5" dims01 "5 "

# Unique visitors (protocol 3.7): the day's salt in Redis (32 hex digits,
# gone an hour after the day), the `u` line of a link-day: the visitors
# (HMAC-SHA256 under the salt, worked out here by openssl) of the clients
# behind the trusted proxy (127.0.0.1), IPv6 by /64, sorted; bots in none.
today=$(( $(date +%s) / 86400 * 86400 ))
# (EX is in whole seconds from the edge's clock's second: up to 1 s more.)
left=$(( today + 86400 + 3600 - $(date +%s) + 1 ))
salt="$(redis-cli -p "$rport" GET "su:1:uniq_salt:$today")"
salt_ttl="$(redis-cli -p "$rport" TTL "su:1:uniq_salt:$today")"
if [[ "$salt" =~ ^[0-9a-f]{32}$ ]] && [ "$salt_ttl" -gt 0 ] && [ "$salt_ttl" -le "$left" ] &&
  [ "$salt_ttl" -ge $(( left - 60 )) ]; then
  echo "  ok   uniques: today's salt in Redis, expiring an hour after the day (TTL $salt_ttl)"
else
  echo "  FAIL uniques: salt '$salt' TTL '$salt_ttl' (at most $left)"; failed=1
fi
tomorrow_ttl="$(redis-cli -p "$rport" TTL "su:1:uniq_salt:$(( today + 86400 ))")"
[ "$tomorrow_ttl" -gt 86400 ] && echo "  ok   uniques: tomorrow's salt too (TTL $tomorrow_ttl)" ||
  { echo "  FAIL uniques: tomorrow's salt TTL '$tomorrow_ttl'"; failed=1; }
visitor() { # client-key user-agent: its 16 hex digits under $salt
  printf '%s\n%s' "$1" "$2" | openssl dgst -sha256 -hmac "$salt" | awk '{ print substr($NF, 1, 16) }'
}
e2e "uniques: a click from 203.0.113.7" 302 "https://x.example/u" "/uniq01" -A "$DESKTOP" -H "X-Forwarded-For: 203.0.113.7"
e2e "uniques: again" 302 "https://x.example/u" "/uniq01" -A "$DESKTOP" -H "X-Forwarded-For: 203.0.113.7"
e2e "uniques: another user agent" 302 "https://x.example/u" "/uniq01" -A "$IOS" -H "X-Forwarded-For: 203.0.113.7"
e2e "uniques: an IPv6 client" 302 "https://x.example/u" "/uniq01" -A "$DESKTOP" -H "X-Forwarded-For: 2001:db8:1:2::5"
e2e "uniques: the same /64" 302 "https://x.example/u" "/uniq01" -A "$DESKTOP" -H "X-Forwarded-For: 2001:db8:1:2:ff::1"
e2e "uniques: a bot" 302 "https://x.example/u" "/uniq01" -A "$DESKTOP" -H "X-Forwarded-For: 192.0.2.1" -I
want_u="s $( { visitor 203.0.113.7 "$DESKTOP"; visitor 203.0.113.7 "$IOS"
  visitor 20010db8000100020000000000000000/64 "$DESKTOP"; } | LC_ALL=C sort | tr -d '\n')"
click_uniques() { # key: its sparse u lines of today merged (the union: clicks flush every 50 ms), "s <visitors>"
  redis-cli -p "$rport" --raw XRANGE su:1:clicks - + 2>/dev/null |
    awk -v k="$1" -v d="$today" '$1 == "u" && $2 == k && $3 == d && NF == 5 && $4 == "s" {
      for (i = 1; i < length($5); i += 16) print substr($5, i, 16) }' | LC_ALL=C sort -u | tr -d '\n' | sed 's/^/s /'
}
got=""
for _ in $(seq 1 50); do got="$(click_uniques uniq01)"; [ "$got" = "$want_u" ] && break; sleep 0.1; done
if [ "$got" = "$want_u" ]; then echo "  ok   uniques: the u lines' visitors (3: IPv6 by /64, bots in none)"; else
  echo "  FAIL uniques: u lines' visitors '$got', want '$want_u'"; failed=1; fi
# (dims01: two browsers from 127.0.0.1, the peer, a trusted proxy without X-Forwarded-For.)
want_u="s $( { visitor 127.0.0.1 "$DESKTOP"; visitor 127.0.0.1 "$IOS"; } | LC_ALL=C sort | tr -d '\n')"
got="$(click_uniques dims01)"
[ "$got" = "$want_u" ] && echo "  ok   uniques: the peer's visitors" ||
  { echo "  FAIL uniques: dims01 u lines' visitors '$got', want '$want_u'"; failed=1; }
# Each u line's sketch well formed: sparse, 1-256 ascending distinct visitors.
bad="$(redis-cli -p "$rport" --raw XRANGE su:1:clicks - + 2>/dev/null | awk '$1 == "u" {
  ok = NF == 5 && $4 == "s" && $5 ~ /^([0-9a-f]{16})+$/ && length($5) / 16 <= 256
  for (i = 17; ok && i < length($5); i += 16) ok = substr($5, i - 16, 16) < substr($5, i, 16)
  if (!ok) print }')"
[ -z "$bad" ] && echo "  ok   uniques: every u line's sketch sparse, ascending" ||
  { echo "  FAIL uniques: u lines $bad"; failed=1; }
# u lines after every other line of their batch (a stream entry starts with its id).
order="$(redis-cli -p "$rport" --raw XRANGE su:1:clicks - + 2>/dev/null | awk '
  /^[0-9]+-[0-9]+$/ { seen = 0 }
  $1 == "u" && NF == 5 { seen = 1; u++ }
  $1 ~ /^[hrdtx]$/ && NF == 5 && seen { bad++ }
  END { print u + 0, bad + 0 }')"
case "$order" in
  "0 "*) echo "  FAIL uniques: no u line in the stream"; failed=1 ;;
  *" 0") echo "  ok   uniques: u lines after the others in each batch ($order)" ;;
  *) echo "  FAIL uniques: lines after a u line (u lines, misplaced: $order)"; failed=1 ;;
esac
st="$(curl -sS -H 'Host: s.test' "http://127.0.0.1:$eport/shorturl_status" || true)"
case "$st" in
  *'"unsalted":0,'*) echo "  ok   status: no unsalted click" ;;
  *) echo "  FAIL status: unsalted in $st"; failed=1 ;;
esac

# The guidance page through an origin (protocol 4.6): one that records
# what it is asked and answers every request 200 with the request's path
# and query as the body, cacheable as the origin's pages are.
python3 - "$oport" "$tmp/origin-requests" >"$tmp/origin.log" 2>&1 <<'PY' &
import os, signal, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, log = int(sys.argv[1]), sys.argv[2]
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self, body):
        with open(log, "a") as f:
            f.write("%s %s\n" % (self.command, self.path))
        b = self.path.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Cache-Control", "public, max-age=60")
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        if body:
            self.wfile.write(b)
    def do_GET(self):
        self.answer(True)
    def do_HEAD(self):
        self.answer(False)
    def log_message(self, *a):
        pass
# Started in the background, it would ignore stop()'s SIGQUIT.
signal.signal(signal.SIGQUIT, lambda *a: os._exit(0))
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
PY
pids+=("$!")
wait_port "$oport"
page_body() { # name want-body path [curl args...]: a 200 whose body is want-body
  local name="$1" want="$2" path="$3"; shift 3
  local got
  got="$(curl -sS -w ' %{http_code}' -H 'Host: s.test' "$@" "http://127.0.0.1:$eport$path" 2>/dev/null || true)"
  if [ "$got" = "$want 200" ]; then echo "  ok   $name"; else echo "  FAIL $name: got '$got', want '$want 200'"; failed=1; fi
}
asked() { grep -c -x -F "GET $1" "$tmp/origin-requests" 2>/dev/null || true; }
page_body "guide: WeChat, zh-CN: /{code}.guide?lang=zh, the query dropped" "/guide1.guide?lang=zh" "/guide1?utm=1&lang=en" \
  -A "$WECHAT" -H "Accept-Language: zh-CN,zh;q=0.9,en;q=0.8"
page_body "guide: WeChat, no language: lang=en" "/guide1.guide?lang=en" "/guide1" -A "$WECHAT"
page_body "guide: QQ, English first: lang=en (cached)" "/guide1.guide?lang=en" "/guide1" -A "$QQ" \
  -H "Accept-Language: en-US,zh;q=0.5"
page_body "guide: WeChat, zh-TW: lang=zh (cached)" "/guide1.guide?lang=zh" "/guide1" -A "$WECHAT" -H "Accept-Language: zh-TW"
page_body "guide: /{code}.guide?lang=fr shares the en entry" "/guide1.guide?lang=en" "/guide1.guide?lang=fr"
page_body "guide: /{code}.guide shares the en entry" "/guide1.guide?lang=en" "/guide1.guide"
n="$(asked "/guide1.guide?lang=zh") $(asked "/guide1.guide?lang=en")"
[ "$n" = "1 1" ] && echo "  ok   guide: one origin request per language" ||
  { echo "  FAIL guide: origin requests (zh en) '$n', want '1 1'"; failed=1; }
page_body "guide: before the password (no token)" "/guidp1.guide?lang=en" "/guidp1" -A "$WECHAT"
page_body "guide: with a token too" "/guidp1.guide?lang=en" "/guidp1" -A "$WECHAT" \
  -b "su_pass=$(token s.test guidp1 6 "$far")"
page_body "guide: before the social card (a crawler in WeChat)" "/guidc1.guide?lang=en" "/guidc1" -A "$CRAWLER $WECHAT"
page_body "guide: a crawler elsewhere gets the card" "/guidc1.card" "/guidc1" -A "$CRAWLER"
page_body "guide: WeChat on a link with a card, the guidance" "/guidc1.guide?lang=en" "/guidc1" -A "$WECHAT"
h="$(curl -sS -o /dev/null -D - -H 'Host: s.test' -A "$WECHAT" "http://127.0.0.1:$eport/guide2" | tr -d '\r' |
  awk -F': ' 'tolower($1) == "cache-control" { print $2 }')"
[ "$h" = "no-store" ] && echo "  ok   guide: no-store to the client (/{code} redirects others)" ||
  { echo "  FAIL guide: Cache-Control '$h'"; failed=1; }
e2e "guide: HEAD, the page" 200 "" "/guide2" -I -A "$WECHAT"
e2e "guide: a browser still gets the redirect" 302 "https://x.example/app2.apk" "/guide2" -A "$IOS"
# Not a click: guidp1 was only ever guided (or refused), before guide2's
# redirect reached the stream (one worker, clicks flushed in order).
check_clicks "guide: a browser's redirect is a click" guide2 "?*"
check_clicks "guide: the page is not a click" guidp1 ""
# The warning page through the same origin (protocol 4.7): kind `warning`,
# no parameter, the query dropped upstream, no-store to the client.
page_body "screen: block, a browser: /{code}.warning, the query dropped" "/scrnb1.warning" "/scrnb1?utm=1" \
  -H "Accept: $HTML"
page_body "screen: warn, a browser: /{code}.warning" "/scrnw1.warning" "/scrnw1?a=1" -H "Accept: $HTML" -A "$IOS"
page_body "screen: before the guidance (WeChat, a browser)" "/scrnb1.warning" "/scrnb1" -H "Accept: $HTML" -A "$WECHAT"
page_body "screen: before the password form (no token)" "/scrnp1.warning" "/scrnp1" -H "Accept: $HTML"
page_body "screen: before the password (a valid token)" "/scrnp1.warning" "/scrnp1" -H "Accept: $HTML" \
  -b "su_pass=$(token s.test scrnp1 4 "$far")"
page_body "screen: before the card (a crawler asking for HTML)" "/scrng1.warning" "/scrng1" -H "Accept: $HTML" \
  -A "$CRAWLER"
page_body "screen: the page's path shares the entry" "/scrnb1.warning" "/scrnb1.warning?lang=zh"
page_body "screen: the page's path, a JSON client too" "/scrnb1.warning" "/scrnb1.warning"
n="$(asked "/scrnb1.warning") $(asked "/scrnw1.warning") $(asked "/scrnp1.warning") $(asked "/scrng1.warning")"
[ "$n" = "1 1 1 1" ] && echo "  ok   screen: one origin request per link (cached, no parameter)" ||
  { echo "  FAIL screen: origin requests '$n', want '1 1 1 1'"; failed=1; }
n="$(grep -c -E '^GET /scrn[a-z0-9]+([?]|$)' "$tmp/origin-requests" 2>/dev/null || true)"
[ "$n" = 0 ] && echo "  ok   screen: never /{code} itself upstream" ||
  { echo "  FAIL screen: /{code} asked upstream $n times"; failed=1; }
check_header "screen: no-store to the client (block)" cache-control "no-store" "/scrnb1" -H "Accept: $HTML"
check_header "screen: no-store to the client (warn)" cache-control "no-store" "/scrnw1" -H "Accept: $HTML"
check_header "screen: the page's path keeps the origin's Cache-Control" cache-control "public, max-age=60" \
  "/scrnw1.warning"
e2e "screen: HEAD, a browser: the page" 200 "" "/scrnw1" -I -H "Accept: $HTML"
e2e "screen: JSON still gets the 403 (the page cached)" 403 "" "/scrnw1"
check_body "screen: JSON still gets the 403's body" "$FLAGGED" "/scrnw1"
# The 403's outcome is LOCAL (the Pingora edge's Outcome::Local), not the
# lookup's (scrnw1 is cached by now).
local_count() { metric 'shorturl_request_duration_seconds_count{outcome="LOCAL"}'; }
before="$(local_count)"
e2e "screen: a cached link's 403" 403 "" "/scrnw1"
for _ in $(seq 1 20); do [ "$(local_count)" = "$((before + 1))" ] && break; sleep 0.05; done
check_metric "screen: the 403's outcome is LOCAL" 'shorturl_request_duration_seconds_count{outcome="LOCAL"}' \
  "$((before + 1))"
e2e "screen: a link with w null redirects a browser" 302 "https://x.example/last" "/scrnz1" -H "Accept: $HTML"
# Neither is a click: the screened links were only ever warned or refused,
# before scrnz1's redirect reached the stream (one worker, clicks flushed
# in order).
check_clicks "screen: a redirect of a link with w null is a click" scrnz1 "?*"
check_clicks "screen: block is not a click" scrnb1 ""
check_clicks "screen: warn is not a click" scrnw1 ""
check_clicks "screen: a screened password link is not a click" scrnp1 ""
check_clicks "screen: a screened card link is not a click (crawlers neither)" scrng1 ""
# The city dimension (clicks.city): a second module, on the unit tests'
# port, with the committed city database; clicks through the trusted
# proxy (X-Forwarded-For), from London, Sao Paulo, an address in no record
# and a bot (in none).
city_db="$repo/testkit/data/city-test.mmdb"
if [ -n "$mmdb" ] && [ -s "$city_db" ]; then
  SU_REDIS_TIMEOUT_MS=1000 SU_DIE_WITH_MASTER=1 SU_CLICKS_FLUSH_INTERVAL_MS=50 SU_DEFAULT_DOMAIN=s.test \
    SU_TRUSTED_PROXIES=127.0.0.1/32 SU_GEO_MMDB_PATH="$city_db" SU_CLICKS_CITY=1 SU_ACCESS_LOG=off SU_UNKNOWN_LIMIT=0 \
    "$openresty/start.sh" "$tmp/edge-city" "$port" "127.0.0.1:$rport" "127.0.0.1:$oport" >"$tmp/edge-city.log" 2>&1 &
  pids+=("$!")
  wait_port "$port"
  rset city01 "2 1 $far s.test https://x.example/c"
  eport="$port" e2e "city: a click from London" 302 "https://x.example/c" "/city01" -A "$DESKTOP" \
    -H "X-Forwarded-For: 81.2.69.5"
  eport="$port" e2e "city: from Sao Paulo" 302 "https://x.example/c" "/city01" -A "$DESKTOP" \
    -H "X-Forwarded-For: 2.125.160.7"
  eport="$port" e2e "city: an address in no record" 302 "https://x.example/c" "/city01" -A "$DESKTOP" \
    -H "X-Forwarded-For: 192.0.2.1"
  eport="$port" e2e "city: a bot" 302 "https://x.example/c" "/city01" -A "$DESKTOP" -H "X-Forwarded-For: 81.2.69.5" -I
  check_dims "city: the x lines (the city the last dimension's, percent-encoded)" city01 \
    "browser:chrome 3,city:BR-S%C3%A3o%20Paulo 1,city:GB-London 1,country:BR 1,country:GB 1,os:windows 3,"
else
  echo "  (no libmaxminddb or no $city_db: the city checks skipped)"
fi
if { cat "$tmp/edge/logs/error.log"; cat "$tmp/edge-city/logs/error.log" 2>/dev/null || true; } |
  grep -E '\[(error|crit|alert|emerg)\]' | grep -v -E 'connect\(\) failed|health|origin' | head -5 | grep .; then
  echo "  FAIL errors in the edge's error.log"
  failed=1
fi
[ "$failed" = 0 ] && echo "all passed"
exit "$failed"
