#!/usr/bin/env bash
# Starts the OpenResty short-link edge (Debian nginx + libnginx-mod-http-lua)
# as a private nginx under <prefix>:
#
#   lua-compat/openresty/start.sh <prefix> <port> <redis> <origin host:port[,host:port...]>
#
# <redis> by SU_REDIS_MODE: single (default): host:port or redis://url;
# cluster: the seed nodes, host:port[,host:port...]; sentinel: the
# Sentinels, host:port[,host:port...], watching SU_REDIS_MASTER_NAME
# (default shorturl). Credentials for cluster/sentinel nodes: SU_CONF (redis.url).
#
# Runs in the foreground (exec nginx, `daemon off`) unless SU_DAEMON=1; stop it
# with lua-compat/openresty/stop.sh <prefix> (or SIGQUIT/SIGTERM to the master).
# Knobs (environment), defaults as in conf/edge.yaml (SU_REDIS_MODE, SU_REDIS_MASTER_NAME above):
#   SU_MODE=full|redis-only   redis-only: no per-worker LRU, no shared dict (Redis on every request)
#   SU_WORKERS=1  SU_LISTEN_ADDR=127.0.0.1  SU_DEFAULT_DOMAIN=localhost  SU_CACHE_SIZE=64m
#   SU_PAGES_CACHE_SIZE=32m  (proxy_cache max_size of the QR codes, previews and cards)
#   SU_REDIS_TIMEOUT_MS=30  SU_REDIS_CONNECT_TIMEOUT_MS=200
#   SU_ORIGIN_CONNECT_TIMEOUT_MS=100  SU_ORIGIN_READ_TIMEOUT_MS=5000  SU_RECORD_TIMEOUT_MS=500
#   SU_STATUS_TIMEOUT_MS=300  SU_HEALTH_INTERVAL_MS=1000  SU_ORIGIN_POOL_IDLE_TIMEOUT_MS=5000
#   SU_ORIGIN_INTERNAL_TOKEN=<token> (default none)  sent as Authorization: Bearer on the module's own
#     origin requests; [A-Za-z0-9._~+/=-] only here (any visible ASCII through SU_CONF); the
#     rendered module config is owner-only (0600)
#   SU_POSITIVE_TTL_SECS=30  SU_NEGATIVE_TTL_SECS=5  SU_UNAVAILABLE_TTL_MS=1000
#   SU_TOMBSTONE_TTL_MS=10000  SU_UNSUBSCRIBED_GRACE_MS=5000  (invalidation, see README)
#   SU_UNKNOWN_LIMIT=50  SU_CREATION_LIMIT=20  (per client per second, 0 = off)
#   SU_REFUSED_CREATION_LIMIT=10 (per client per minute)  SU_CLIENTS_TRACKED=100000  SU_IPV6_PREFIX_LEN=64
#   SU_TRUSTED_PROXIES=<cidr,...> (default none)  SU_STATUS_ALLOW=<cidr,...> (default loopback + private)
#   SU_HEADER_TIMEOUT_SECS=5  SU_KEEPALIVE_SECS=60  SU_MAX_CONNECTIONS=10000  SU_MAX_CONNECTIONS_PER_IP=64
#   SU_REDIRECT_STATUS=302  SU_ACCESS_LOG=<prefix>/logs/access.log|off  SU_METRICS_PORT=<port>
#   SU_ACCESS_LOG_TRUNCATE=1 (client addresses logged as IPv4 /24, IPv6 /48; default 0)
#   SU_RESOLVER=<ip> (default: first nameserver of /etc/resolv.conf)
#   SU_TLS_PORT=<port>  also serve HTTPS (HTTP/2 and 1.1) there, certificates by SNI from the
#     shared store in Redis and SU_TLS_CERT_DIR (<name>.crt/.key); SU_TLS_DEFAULT_CERT=<name>
#     (default SU_DEFAULT_DOMAIN) is served when no other matches; SU_TLS_CACHE_SECS=5;
#     SU_TLS_STORE_KEY=<base64 of 32 bytes> (required with SU_TLS_PORT: opens the sealed private
#     keys in Redis, as the Pingora edge's tls.store_key) SU_TLS_STORE_OLD_KEYS=<key,...> (rotation)
#   Clicks (protocol 3.4): SU_CLICKS_ENABLED=1|0 (1)  SU_CLICKS_FLUSH_INTERVAL_MS=5000 (50..5000)
#     SU_CLICKS_EDGE_NAME=<batch-id prefix> (default the host name)  SU_CLICKS_MAX_BUFFERED_CLICKS=1000000
#     SU_CLICKS_MAX_BUFFERED_BYTES=67108864 (>= 4194304: the unsent batches' bytes, node-wide)
#     SU_BOTS_FILE=<bot list> (default common/data/bots.txt of this checkout)
#     SU_CLICKS_DIMENSIONS=1|0 (1: protocol 3.7's x lines, batch version 5 of 3.8; 0 for origins older than 3.8)
#     SU_FAMILIES_FILE=<browser/OS families> (default common/data/ua_families.txt of this checkout)
#     SU_CLICKS_CITY=1|0 (0)  1: human clicks also counted by city (clicks.city; needs SU_GEO_MMDB_PATH)
#   Link rules (protocol 3.1.1): SU_INAPP_FILE=<in-app browser patterns> (default
#     common/data/inapp.txt of this checkout)  SU_GEO_COUNTRY_HEADER=<header> (e.g. CF-IPCountry,
#     read from SU_TRUSTED_PROXIES only; default none)  SU_GEO_MMDB_PATH=<MaxMind DB> (default none;
#     needs libmaxminddb0)  SU_GEO_RELOAD_INTERVAL_MS=5000 (how often the database file is checked)
#   Social cards (protocol 4.4): SU_CRAWLERS_FILE=<link-preview crawler tokens> (default
#     common/data/crawlers.txt of this checkout)
#   Password links (protocol 4.5): SU_UNLOCK_KEYS=<base64 of 32 bytes>[,<base64>...] (default none:
#     no unlock token is valid) the keys whose `su_pass` tokens open a link, as the Pingora edge's
#     unlock.keys: the origin's unlock.key, plus its old_keys while their tokens live
#   SU_CONF=<file.lua>  use this module config instead of generating one (its `tls` and `unlock`
#     tables hold the keys then); the config is written mode 0600 (it may hold the keys)
#   SU_DIE_WITH_MASTER=1  workers exit when the master dies (test harnesses)
#   SU_CHECK=1  render and `nginx -t` only
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,57p' "$0" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
port="$2"; redis="$3"; origins="$4"
mkdir -p "$prefix/logs" "$prefix/conf"

redis_mode="${SU_REDIS_MODE:-single}"
master_name="${SU_REDIS_MASTER_NAME:-shorturl}"
case "$master_name" in ''|*[!A-Za-z0-9._-]*) echo "start.sh: SU_REDIS_MASTER_NAME must be of [A-Za-z0-9._-]" >&2; exit 2 ;; esac
redis_url="redis://127.0.0.1:6379/"; redis_nodes=""; redis_sentinels=""
case "$redis_mode" in
  single) case "$redis" in redis://*) redis_url="$redis" ;; *) redis_url="redis://$redis/" ;; esac ;;
  cluster|sentinel)
    case "$redis" in *[!A-Za-z0-9.:,_\[\]-]*) echo "start.sh: <redis> must be host:port[,host:port...] in $redis_mode mode" >&2; exit 2 ;; esac ;;&
  cluster) redis_nodes="$redis" ;;
  sentinel) redis_sentinels="$redis" ;;
  *) echo "start.sh: SU_REDIS_MODE must be single, cluster or sentinel" >&2; exit 2 ;;
esac
lru=true; shared=true
case "${SU_MODE:-full}" in
  full) ;;
  redis-only) lru=false; shared=false ;;
  *) echo "SU_MODE must be full or redis-only" >&2; exit 2 ;;
esac
servers=""
IFS=',' read -ra list <<< "$origins"
for o in "${list[@]}"; do servers="$servers\"$o\", "; done
# "a,b" -> { "a", "b", }
lua_list() {
  local out="" item
  IFS=',' read -ra items <<< "$1"
  for item in "${items[@]}"; do
    item="${item// /}"
    [ -n "$item" ] && out="$out\"$item\", "
  done
  printf '{ %s}' "$out"
}
int() { # name value: a whole number or exit
  case "$2" in ''|*[!0-9]*) echo "start.sh: $1 must be a whole number (got '$2')" >&2; exit 2 ;; esac
  printf '%s' "$2"
}
header_timeout="$(int SU_HEADER_TIMEOUT_SECS "${SU_HEADER_TIMEOUT_SECS:-5}")"
keepalive="$(int SU_KEEPALIVE_SECS "${SU_KEEPALIVE_SECS:-60}")"
max_conn="$(int SU_MAX_CONNECTIONS "${SU_MAX_CONNECTIONS:-10000}")"
max_conn_ip="$(int SU_MAX_CONNECTIONS_PER_IP "${SU_MAX_CONNECTIONS_PER_IP:-64}")"
clients="$(int SU_CLIENTS_TRACKED "${SU_CLIENTS_TRACKED:-100000}")"
workers="$(int SU_WORKERS "${SU_WORKERS:-1}")"
tombstone_ttl="$(int SU_TOMBSTONE_TTL_MS "${SU_TOMBSTONE_TTL_MS:-10000}")"
unsubscribed_grace="$(int SU_UNSUBSCRIBED_GRACE_MS "${SU_UNSUBSCRIBED_GRACE_MS:-5000}")"
pool_idle="$(int SU_ORIGIN_POOL_IDLE_TIMEOUT_MS "${SU_ORIGIN_POOL_IDLE_TIMEOUT_MS:-5000}")"
internal_token="${SU_ORIGIN_INTERNAL_TOKEN:-}"
case "$internal_token" in *[!A-Za-z0-9._~+/=-]*) echo "start.sh: SU_ORIGIN_INTERNAL_TOKEN must be of [A-Za-z0-9._~+/=-] (use SU_CONF for others)" >&2; exit 2 ;; esac
flush_ms="$(int SU_CLICKS_FLUSH_INTERVAL_MS "${SU_CLICKS_FLUSH_INTERVAL_MS:-5000}")"
max_buffered="$(int SU_CLICKS_MAX_BUFFERED_CLICKS "${SU_CLICKS_MAX_BUFFERED_CLICKS:-1000000}")"
max_buffered_bytes="$(int SU_CLICKS_MAX_BUFFERED_BYTES "${SU_CLICKS_MAX_BUFFERED_BYTES:-67108864}")"
case "${SU_CLICKS_ENABLED:-1}" in
  1|true) clicks_enabled=true ;;
  0|false) clicks_enabled=false ;;
  *) echo "start.sh: SU_CLICKS_ENABLED must be 1 or 0" >&2; exit 2 ;;
esac
case "${SU_CLICKS_DIMENSIONS:-1}" in
  1|true) clicks_dimensions=true ;;
  0|false) clicks_dimensions=false ;;
  *) echo "start.sh: SU_CLICKS_DIMENSIONS must be 1 or 0" >&2; exit 2 ;;
esac
case "${SU_CLICKS_CITY:-0}" in
  1|true) clicks_city=true ;;
  0|false) clicks_city=false ;;
  *) echo "start.sh: SU_CLICKS_CITY must be 1 or 0" >&2; exit 2 ;;
esac
edge_name="${SU_CLICKS_EDGE_NAME:-}"
case "$edge_name" in *[!A-Za-z0-9._-]*) echo "start.sh: SU_CLICKS_EDGE_NAME must be of [A-Za-z0-9._-]" >&2; exit 2 ;; esac
bots_file="${SU_BOTS_FILE:-$here/../../common/data/bots.txt}"
# Read with clicks off too: the link rules' device class.
[ -r "$bots_file" ] || { echo "start.sh: cannot read the bot list $bots_file (SU_BOTS_FILE)" >&2; exit 2; }
bots_file="$(cd "$(dirname "$bots_file")" && pwd)/$(basename "$bots_file")"
families_file="${SU_FAMILIES_FILE:-$here/../../common/data/ua_families.txt}"
[ -r "$families_file" ] || { echo "start.sh: cannot read the browser and OS families $families_file (SU_FAMILIES_FILE)" >&2; exit 2; }
families_file="$(cd "$(dirname "$families_file")" && pwd)/$(basename "$families_file")"
inapp_file="${SU_INAPP_FILE:-$here/../../common/data/inapp.txt}"
[ -r "$inapp_file" ] || { echo "start.sh: cannot read the in-app browser patterns $inapp_file (SU_INAPP_FILE)" >&2; exit 2; }
inapp_file="$(cd "$(dirname "$inapp_file")" && pwd)/$(basename "$inapp_file")"
crawlers_file="${SU_CRAWLERS_FILE:-$here/../../common/data/crawlers.txt}"
[ -r "$crawlers_file" ] || { echo "start.sh: cannot read the link-preview crawlers $crawlers_file (SU_CRAWLERS_FILE)" >&2; exit 2; }
crawlers_file="$(cd "$(dirname "$crawlers_file")" && pwd)/$(basename "$crawlers_file")"
country_header="${SU_GEO_COUNTRY_HEADER:-}"
case "$country_header" in *[!A-Za-z0-9_-]*) echo "start.sh: SU_GEO_COUNTRY_HEADER must be a header name" >&2; exit 2 ;; esac
mmdb_path="${SU_GEO_MMDB_PATH:-}"
geo_reload_ms="$(int SU_GEO_RELOAD_INTERVAL_MS "${SU_GEO_RELOAD_INTERVAL_MS:-5000}")"
case "$mmdb_path" in *[\\\"]*) echo "start.sh: SU_GEO_MMDB_PATH cannot hold \\ or \"" >&2; exit 2 ;; esac
status_allow=""
[ -n "${SU_STATUS_ALLOW:-}" ] && status_allow="status_allow = $(lua_list "$SU_STATUS_ALLOW"),"
store_key="${SU_TLS_STORE_KEY:-}"; store_old_keys="${SU_TLS_STORE_OLD_KEYS:-}"
case "$store_key$store_old_keys" in *[!A-Za-z0-9+/=,\ ]*)
  echo "start.sh: SU_TLS_STORE_KEY and SU_TLS_STORE_OLD_KEYS must be base64 (old keys comma-separated)" >&2; exit 2 ;;
esac
case "$store_key" in *,*) echo "start.sh: SU_TLS_STORE_KEY is one key" >&2; exit 2 ;; esac
unlock_keys="${SU_UNLOCK_KEYS:-}"
case "$unlock_keys" in *[!A-Za-z0-9+/=,\ ]*)
  echo "start.sh: SU_UNLOCK_KEYS must be base64 keys (32 bytes each: \`openssl rand -base64 32\`), comma-separated" >&2; exit 2 ;;
esac
# Each key's length here too: the module's config (config.lua) refuses it
# as well, but only when nginx starts (`nginx -t`, SU_CHECK=1, does not
# run the module's init).
unlock_i=0
IFS=',' read -ra unlock_list <<< "$unlock_keys"
for k in "${unlock_list[@]}"; do
  k="${k// /}"
  [ -n "$k" ] || continue
  if ! n="$(printf '%s' "$k" | base64 -d 2>/dev/null | wc -c)" || [ "${n// /}" != 32 ]; then
    echo "start.sh: SU_UNLOCK_KEYS: key $unlock_i is not base64 of 32 bytes (\`openssl rand -base64 32\`)" >&2; exit 2
  fi
  unlock_i=$((unlock_i + 1))
done

conf="$prefix/conf/shorturl.lua"
# The config may hold secrets (the store key, the unlock keys, the internal
# token, Redis credentials): readable by its owner only.
rm -f "$conf"
umask_was=$(umask); umask 077
if [ -n "${SU_CONF:-}" ]; then
  cp "$SU_CONF" "$conf"
else
  cat > "$conf" <<LUA
-- Generated by lua-compat/openresty/start.sh
return {
  default_domain = "${SU_DEFAULT_DOMAIN:-localhost}",
  redis = {
    mode = "$redis_mode",
    url = "$redis_url",
    nodes = $(lua_list "$redis_nodes"),
    sentinels = $(lua_list "$redis_sentinels"),
    master_name = "$master_name",
    timeout_ms = ${SU_REDIS_TIMEOUT_MS:-30},
    connect_timeout_ms = ${SU_REDIS_CONNECT_TIMEOUT_MS:-200},
  },
  origin = {
    servers = { $servers},
    connect_timeout_ms = ${SU_ORIGIN_CONNECT_TIMEOUT_MS:-100},
    read_timeout_ms = ${SU_ORIGIN_READ_TIMEOUT_MS:-5000},
    record_timeout_ms = ${SU_RECORD_TIMEOUT_MS:-500},
    status_timeout_ms = ${SU_STATUS_TIMEOUT_MS:-300},
    health_check_interval_ms = ${SU_HEALTH_INTERVAL_MS:-1000},
    pool_idle_timeout_ms = $pool_idle,
    internal_token = "$internal_token",
  },
  cache = {
    lru = $lru,
    shared = $shared,
    positive_ttl_secs = ${SU_POSITIVE_TTL_SECS:-30},
    negative_ttl_secs = ${SU_NEGATIVE_TTL_SECS:-5},
    unavailable_ttl_ms = ${SU_UNAVAILABLE_TTL_MS:-1000},
    tombstone_ttl_ms = $tombstone_ttl,
    unsubscribed_grace_ms = $unsubscribed_grace,
  },
  redirect = { status = ${SU_REDIRECT_STATUS:-302} },
  trusted_proxies = $(lua_list "${SU_TRUSTED_PROXIES:-}"),
  access_log = { truncate_addresses = $([ "${SU_ACCESS_LOG_TRUNCATE:-0}" = 1 ] && echo true || echo false) },
  $status_allow
  limits = {
    unknown_per_ip_per_sec = ${SU_UNKNOWN_LIMIT:-50},
    creations_per_ip_per_sec = ${SU_CREATION_LIMIT:-20},
    refused_creations_per_ip_per_min = ${SU_REFUSED_CREATION_LIMIT:-10},
    ipv6_prefix_len = ${SU_IPV6_PREFIX_LEN:-64},
  },
  clicks = {
    enabled = $clicks_enabled,
    flush_interval_ms = $flush_ms,
    edge_name = "$edge_name",
    max_buffered_clicks = $max_buffered,
    max_buffered_bytes = $max_buffered_bytes,
    dimensions = $clicks_dimensions,
    city = $clicks_city,
  },
  geo = {
    country_header = "$country_header",
    mmdb_path = "$mmdb_path",
    reload_interval_ms = $geo_reload_ms,
  },
  tls = {
    store_key = "$store_key",
    store_old_keys = $(lua_list "$store_old_keys"),
  },
  unlock = {
    keys = $(lua_list "$unlock_keys"),
  },
  die_with_master = $([ "${SU_DIE_WITH_MASTER:-0}" = 1 ] && echo true || echo false),
}
LUA
fi
umask "$umask_was"

resolver="${SU_RESOLVER:-$(awk '$1 == "nameserver" { print $2; exit }' /etc/resolv.conf 2>/dev/null || true)}"
resolver="${resolver:-127.0.0.53}"
case "$resolver" in *:*) resolver="[$resolver]" ;; esac
access_log="${SU_ACCESS_LOG:-$prefix/logs/access.log}"
if [ "$access_log" = off ]; then
  access_log_directive="off"
else
  access_log_directive="$access_log shorturl buffer=64k flush=200ms"
fi
# Per-client windows: up to three entries per client, ~128 bytes each.
limits_kb=$(( clients * 3 * 128 / 1024 )); [ "$limits_kb" -lt 1024 ] && limits_kb=1024
conn_kb=$(( clients * 128 / 1024 )); [ "$conn_kb" -lt 1024 ] && conn_kb=1024
# max_connections per worker, plus room for upstream (Redis, origin) sockets.
worker_conns=8192
if [ "$max_conn" -gt 0 ]; then worker_conns=$(( (max_conn + workers - 1) / workers + 1024 )); fi
conn_limits=""
if [ "$max_conn" -gt 0 ]; then
  conn_limits="        limit_conn su_conn_all $max_conn;"
fi
if [ "$max_conn_ip" -gt 0 ]; then
  conn_limits="$conn_limits
        # Per peer (IPv6 by prefix; trusted proxies exempt), as on the Pingora edge.
        set_by_lua_block \$su_conn_key { return require(\"shorturl.edge\").conn_key() }
        limit_conn su_conn_per_ip $max_conn_ip;"
fi
metrics=""
if [ -n "${SU_METRICS_PORT:-}" ]; then
  metrics="    server {
        listen ${SU_LISTEN_ADDR:-127.0.0.1}:${SU_METRICS_PORT};
        access_log off;
        location = /metrics { content_by_lua_block { require(\"shorturl.edge\").metrics() } }
        location / { return 404; }
    }"
fi

tls_dir="${SU_TLS_CERT_DIR:-}"
tls_listen=""
tls_listener=false
if [ -n "${SU_TLS_PORT:-}" ]; then
  tls_listener=true
  tls_port="$(int SU_TLS_PORT "$SU_TLS_PORT")"
  default_cert="${SU_TLS_DEFAULT_CERT:-${SU_DEFAULT_DOMAIN:-localhost}}"
  if [ -z "$tls_dir" ] || [ ! -s "$tls_dir/$default_cert.crt" ] || [ ! -s "$tls_dir/$default_cert.key" ]; then
    echo "start.sh: SU_TLS_PORT needs SU_TLS_CERT_DIR with $default_cert.crt and $default_cert.key (the default certificate)" >&2
    exit 2
  fi
  tls_dir="$(cd "$tls_dir" && pwd)"
  tls_listen="        # HTTPS: TLS 1.2/1.3, ALPN h2 + http/1.1, session cache and tickets;
        # the certificate by SNI from the shared store (tls.lua), else this one.
        listen ${SU_LISTEN_ADDR:-127.0.0.1}:$tls_port ssl http2 reuseport;
        ssl_certificate $tls_dir/$default_cert.crt;
        ssl_certificate_key $tls_dir/$default_cert.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_cache shared:su_tls:10m;
        ssl_session_timeout 1h;
        ssl_certificate_by_lua_block { require(\"shorturl.tls\").certificate() }"
fi

out="$prefix/conf/nginx.conf"
esc() { printf '%s' "$1" | sed -e 's/[\/&|]/\\&/g'; }
sed_args=()
for kv in "PREFIX=$prefix" "LUA_DIR=$here/lua" "CONF=$conf" "WORKERS=$workers" \
          "LISTEN=${SU_LISTEN_ADDR:-127.0.0.1}:$port" "CACHE_SIZE=${SU_CACHE_SIZE:-64m}" \
          "PAGES_CACHE_SIZE=${SU_PAGES_CACHE_SIZE:-32m}" \
          "RESOLVER=$resolver" "ERROR_LOG_LEVEL=${SU_ERROR_LOG_LEVEL:-warn}" \
          "ACCESS_LOG=$access_log_directive" "KEEPALIVE=$keepalive" \
          "HEADER_TIMEOUT=$header_timeout" "MAX_CONNECTIONS=$max_conn" "MAX_CONNECTIONS_PER_IP=$max_conn_ip" \
          "CLIENTS_TRACKED=$clients" "LIMITS_SIZE=${limits_kb}k" "CONN_ZONE_SIZE=${conn_kb}k" \
          "WORKER_CONNECTIONS=$worker_conns" \
          "CLIENT_TIMEOUT=${SU_CLIENT_TIMEOUT_SECS:-10}" \
          "ORIGIN_CONNECT_TIMEOUT=${SU_ORIGIN_CONNECT_TIMEOUT_MS:-100}" \
          "ORIGIN_READ_TIMEOUT=${SU_ORIGIN_READ_TIMEOUT_MS:-5000}" \
          "TLS_CERT_DIR=$tls_dir" "BOTS_FILE=$bots_file" "FAMILIES_FILE=$families_file" "INAPP_FILE=$inapp_file" "CRAWLERS_FILE=$crawlers_file" \
          "TLS_LISTENER=$tls_listener" \
          "TLS_CACHE_SECS=$(int SU_TLS_CACHE_SECS "${SU_TLS_CACHE_SECS:-5}")"; do
  sed_args+=(-e "s|@${kv%%=*}@|$(esc "${kv#*=}")|g")
done
sed "${sed_args[@]}" "$here/nginx.conf.tmpl" > "$out.tmp"
# Multi-line blocks: spliced in last.
awk -v block="$metrics" -v conn="$conn_limits" -v tls="$tls_listen" \
  '{ if ($0 == "@METRICS_SERVER@") print block; else if ($0 == "@CONN_LIMITS@") print conn; else if ($0 == "@TLS_LISTEN@") print tls; else print }' \
  "$out.tmp" > "$out"
rm -f "$out.tmp"

nginx_bin="${NGINX:-$(command -v nginx || echo /usr/sbin/nginx)}"
if ! check="$("$nginx_bin" -q -t -p "$prefix" -c "$out" -g 'daemon off; master_process on;' 2>&1)"; then
  echo "$check" >&2
  echo "start.sh: nginx rejected $out" >&2
  exit 1
fi
[ "${SU_CHECK:-0}" = 1 ] && exit 0
if [ "${SU_DAEMON:-0}" = 1 ]; then
  exec "$nginx_bin" -p "$prefix" -c "$out" -g 'daemon on; master_process on;'
fi
exec "$nginx_bin" -p "$prefix" -c "$out" -g 'daemon off; master_process on;'
