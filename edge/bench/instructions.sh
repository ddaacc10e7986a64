#!/usr/bin/env bash
# CPU instructions per redirect from the edge's memory, counted by
# valgrind's callgrind: unlike req/s it does not move with whatever else the
# machine is doing, so two builds can be compared on a busy machine.
#
#   edge/bench/instructions.sh BIN [BIN ...]
#
# For each binary: a private Redis with 2,000 records, the edge under
# callgrind (one server thread), a warm-up pass that puts every code in the
# edge's memory, counters zeroed, then REQUESTS keep-alive GETs of random
# cached codes (wrk -t1 -c8 until the edge's status counts them), counters
# dumped. Prints instructions per request (all threads, so the background
# tasks' share is included: it is tiny next to thousands of requests).
# Each binary runs twice, with `fast_path.enabled` true and false (the
# redirect fast path, then the Pingora proxy session for every request);
# FAST_PATHS="true" (or "false") runs one, FAST_PATHS="-" leaves the key
# out (binaries that predate it). EDGE_LIMITS sets the config's `limits`
# line for binaries whose config format predates a key. PATH_KIND=redis
# measures the Redis path instead: the memory cache at its smallest
# (cache.max_bytes 4096, as the load test's edge-redis), no warm-up, and
# REQUESTS counted as memory misses answered from Redis. RULES=1 gives
# every record five link rules ending in a country rule (edge/bench/lib.sh),
# BENCH_HEADERS=1 sends a browser's headers from behind a trusted proxy (the
# edge gets `trusted_proxies` and the country database either way, so the
# three runs RULES/BENCH_HEADERS 0/0, 0/1, 1/1 differ only in what they
# name). CALLGRIND_OPTS adds callgrind options (e.g. `--cache-sim=yes`, read
# with KEEP= and callgrind_annotate). Click counting is the edge's default
# (on, flushed every 5 s to the bench Redis); CLICKS=0 turns it off,
# CLICKS=1 flushes every second: the flusher's work is in the count, so
# CLICKS=0/1 give counting's cost per click; CLICKS=2 is CLICKS=1 without
# the dimensions and unique visitors (`dimensions: false`), so CLICKS=2/1
# give theirs; CLICKS=3 is CLICKS=1 with the city too (`city: true`, the
# test city database testkit/data/city-test.mmdb as the geo database and,
# with BENCH_HEADERS=1, client 81.2.69.5, London), so CLICKS=1/3 give its
# cost. Needs valgrind, redis-server, wrk, curl, scripts/deps.sh's
# country database.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,36p' "$0"; exit 2; }
PATH_KIND=${PATH_KIND:-memory}
case "$PATH_KIND" in
  memory) MAX_BYTES=67108864; COUNTED=hit ;;
  redis) MAX_BYTES=4096; COUNTED=miss ;;
  *) echo "PATH_KIND must be memory or redis" >&2; exit 2 ;;
esac
REQUESTS=${REQUESTS:-20000}
CODES=2000
REDIS_PORT=${REDIS_PORT:-26479}; EDGE_PORT=${EDGE_PORT:-28180}
WORK=$(mktemp -d /tmp/shorturl-instr.XXXXXX)
PIDS=()
# Waits for each to exit: a Redis still shutting down would hold the port
# the next run's Redis binds (its writes would reach the old one).
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
status_field() { curl -s -H 'Host: s.shop55.com' "http://127.0.0.1:$EDGE_PORT/shorturl_status" | sed -n "s/.*\"local\":{[^}]*\"$1\":\\([0-9]*\\).*/\\1/p"; }

CLICKS_LINE=""
case "${CLICKS:-}" in
  0) CLICKS_LINE="clicks: { enabled: false }" ;;
  1) CLICKS_LINE="clicks: { enabled: true, edge_name: bench, flush_interval_ms: 1000 }" ;;
  2) CLICKS_LINE="clicks: { enabled: true, edge_name: bench, flush_interval_ms: 1000, dimensions: false }" ;;
  3) CLICKS_LINE="clicks: { enabled: true, edge_name: bench, flush_interval_ms: 1000, city: true }" ;;
esac
GEO_DB=/usr/local/share/shorturl/country.mmdb
if [ "${CLICKS:-}" = 3 ]; then
  GEO_DB="$(cd "$(dirname "$0")/../.." && pwd)/testkit/data/city-test.mmdb"
  export BENCH_XFF=${BENCH_XFF:-81.2.69.5}
fi
GEO_LINES=""
if [ -e "$GEO_DB" ] && [ "${GEO:-1}" = 1 ]; then
  GEO_LINES="trusted_proxies: [\"127.0.0.1/32\"]
  geo: { mmdb_path: $GEO_DB }"
fi
bench_redis "$REDIS_PORT" "$CODES"
bench_wrk_scripts "$CODES"

for bin in "$@"; do
for fp in ${FAST_PATHS:-true false}; do
  fp_line=""; [ "$fp" = "-" ] || fp_line="fast_path: { enabled: $fp }"
  # Generous Redis timeouts (bench_edge_head): a Redis read that timed out
  # under callgrind would turn hits into origin misses.
  { bench_edge_head "$WORK" "$EDGE_PORT" "$REDIS_PORT"; cat <<YAML
  cache: { max_bytes: $MAX_BYTES, positive_ttl_secs: 3600 }
  ${EDGE_LIMITS:-"limits: { unknown_per_ip_per_sec: 0, max_connections_per_ip: 0 }"}
  access_log: { path: off }
  $fp_line
  $CLICKS_LINE
  $GEO_LINES
YAML
  } >"$WORK/edge.yaml"
  rm -f "$WORK"/callgrind.out.*
  # shellcheck disable=SC2086 # CALLGRIND_OPTS: extra options, word-split on purpose
  RUST_LOG=error valgrind --tool=callgrind ${CALLGRIND_OPTS:-} --callgrind-out-file="$WORK/callgrind.out.%p" \
    "$bin" -c "$WORK/edge.yaml" >"$WORK/edge.log" 2>&1 &
  # Under callgrind on a busy machine the start alone can take a minute.
  vpid=$!; PIDS+=($vpid); WAIT_TCP_SECS=300 wait_tcp "$EDGE_PORT"
  if [ "$PATH_KIND" = memory ]; then
    # Warm: every code read once from Redis into memory.
    miss=0
    for _ in $(seq 1 30); do
      wrk -t1 -c8 -d2s -s "$WORK/sequential.lua" "http://127.0.0.1:$EDGE_PORT/" -- "$miss" >/dev/null
      miss=$(status_field miss); [ "${miss:-0}" -ge "$CODES" ] && break
    done
    # A second full pass: whatever the first left out (codes in flight when
    # a wrk run stopped) is read now, so the measured phase sees only hits.
    wrk -t1 -c8 -d4s -s "$WORK/sequential.lua" "http://127.0.0.1:$EDGE_PORT/" -- 0 >/dev/null
  else
    # Warm the connections (Redis, the edge's own) without counting them.
    wrk -t1 -c8 -d2s -s "$WORK/random.lua" "http://127.0.0.1:$EDGE_PORT/" >/dev/null
  fi
  callgrind_control -z "$vpid" >/dev/null
  h0=$(status_field hit); m0=$(status_field miss)
  # Keep the load on until the edge has counted REQUESTS more of its kind.
  while :; do
    wrk -t1 -c8 -d2s -s "$WORK/random.lua" "http://127.0.0.1:$EDGE_PORT/" >/dev/null
    c1=$(status_field "$COUNTED"); c0=$h0; [ "$COUNTED" = miss ] && c0=$m0
    [ $(( c1 - c0 )) -ge "$REQUESTS" ] && break
  done
  callgrind_control -d "$vpid" >/dev/null
  h1=$(status_field hit); m1=$(status_field miss)
  sleep 1
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP/$fp" && cp "$WORK"/callgrind.out.* "$KEEP/$fp/" && echo "kept $(ls "$KEEP/$fp")"
  ir=$(cat "$WORK"/callgrind.out.* | awk '/^summary:/ { s += $2 } END { print s + 0 }')
  kill "$vpid" 2>/dev/null || true; wait "$vpid" 2>/dev/null || true
  n=$(( h1 - h0 )); m=$(( m1 - m0 ))
  if [ "$PATH_KIND" = memory ]; then
    [ "$m" -eq 0 ] || echo "warning: $m misses while measuring (cache not warm, or lookups failed): the figure is not a pure memory-hit cost" >&2
    echo "$bin (fast_path: $fp): $n memory hits, $m misses, $ir instructions, $(( ir / n )) instructions per request"
  else
    echo "$bin (fast_path: $fp, Redis path): $m memory misses, $n hits, $ir instructions, $(( ir / (m + n) )) instructions per request"
  fi
done
done
