#!/usr/bin/env bash
# Edge hot path vs nginx's static `return 302`, same machine, same run.
#
#   edge/bench/wrk-vs-nginx.sh [duration_secs]   (default 10)
#
# One server worker each (edge: server.threads 1; nginx: worker_processes 1),
# server pinned to CPU 0 and wrk to CPU 1, loopback only, wrk -t1 -c64.
# The edge serves 100,000 codes (random per request, all in its in-process
# cache after a warm-up pass; the records come from a private Redis), nginx a
# fixed `return 302`. Nothing else from the stack is needed: no origin runs
# (every code is in Redis). Needs: redis-server, nginx, wrk, a release build
# (`cargo build --release -p shorturl-edge`).
#
# Click counting is the edge's default (on; wrk's requests are bots'
# clicks); CLICKS=false turns it off in every edge (the redirect alone).
#
# BASELINE_BIN=/path/to/an/older/shorturl-edge adds that binary as a third
# server (same records, same config but for BASELINE_LIMITS, the `limits`
# line an older config format accepts), interleaved with the other two in
# every round: the before/after comparison of a change on the hot path.
set -euo pipefail
DUR=${1:-10}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${EDGE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/shorturl-edge}
WORK=$(mktemp -d /tmp/shorturl-bench.XXXXXX)
REDIS_PORT=${REDIS_PORT:-26379}; EDGE_PORT=${EDGE_PORT:-28080}; NGINX_PORT=${NGINX_PORT:-28081}
BASE_PORT=${BASE_PORT:-28082}; BASELINE_BIN=${BASELINE_BIN:-}
BASELINE_LIMITS=${BASELINE_LIMITS:-"limits: { unknown_per_ip_per_sec: 0 }"}
ROUNDS=${ROUNDS:-2}
CODES=100000
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$WORK/nginx.pid" ] && kill "$(cat "$WORK/nginx.pid" 2>/dev/null)" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"

[ -x "$BIN" ] || { echo "build first: cargo build --release -p shorturl-edge ($BIN)" >&2; exit 1; }

# Redis with 100k records c00000..c99999 for s.shop55.com.
bench_redis "$REDIS_PORT" "$CODES"
bench_wrk_scripts "$CODES"

cat >"$WORK/edge.yaml" <<YAML
server:
  version: 1
  threads: 1
  work_stealing: ${WORK_STEALING:-true}
  pid_file: $WORK/edge.pid
  upgrade_sock: $WORK/edge.sock
  grace_period_seconds: 1
  graceful_shutdown_timeout_seconds: 1
edge:
  listen: ["127.0.0.1:$EDGE_PORT"]
  default_domain: s.shop55.com
  redis: { url: "redis://127.0.0.1:$REDIS_PORT/" }
  origin: { servers: ["127.0.0.1:1"] }
  cache: { max_bytes: 268435456, positive_ttl_secs: 3600 }
  limits: { unknown_per_ip_per_sec: 0, max_connections_per_ip: 0 }
  access_log: { path: ${ACCESS_LOG:-off} }
  clicks: { enabled: ${CLICKS:-true} }
YAML
RUST_LOG=error taskset -c 0 "$BIN" -c "$WORK/edge.yaml" >"$WORK/edge.log" 2>&1 &
PIDS+=($!); wait_tcp "$EDGE_PORT"
if [ -n "$BASELINE_BIN" ]; then
  sed -e "s|127.0.0.1:$EDGE_PORT|127.0.0.1:$BASE_PORT|" -e "s|$WORK/edge\.|$WORK/base.|g" \
    -e "s|^  limits:.*|  $BASELINE_LIMITS|" "$WORK/edge.yaml" >"$WORK/base.yaml"
  RUST_LOG=error taskset -c 0 "$BASELINE_BIN" -c "$WORK/base.yaml" >"$WORK/base.log" 2>&1 &
  PIDS+=($!); wait_tcp "$BASE_PORT"
fi

cat >"$WORK/nginx.conf" <<NGX
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location / { add_header Cache-Control "private, max-age=60" always; return 302 https://example.com/landing/00001?utm_source=bench; }
  }
}
NGX
taskset -c 0 nginx -c "$WORK/nginx.conf" -p "$WORK" 2>"$WORK/nginx-start.log" &
PIDS+=($!); wait_tcp "$NGINX_PORT"


# Sanity: both answer 302 with a Location.
curl -s -o /dev/null -w "edge  %{http_code} %{redirect_url}\n" -H "Host: s.shop55.com" "http://127.0.0.1:$EDGE_PORT/c00001"
curl -s -o /dev/null -w "nginx %{http_code} %{redirect_url}\n" "http://127.0.0.1:$NGINX_PORT/c00001"

bench_warm "$EDGE_PORT" edge "$CODES"
[ -n "$BASELINE_BIN" ] && bench_warm "$BASE_PORT" baseline "$CODES"

run() { # name port
  echo "== $1"
  taskset -c 1 wrk -t1 -c64 -d"${DUR}s" --latency -s "$WORK/random.lua" "http://127.0.0.1:$2/" \
    | grep -E "Requests/sec|Latency  |99%|50%|Non-2xx|Socket errors|requests in"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); duration ${DUR}s"
for round in $(seq 1 "$ROUNDS"); do
  echo "-- round $round"
  run nginx "$NGINX_PORT"
  run edge "$EDGE_PORT"
  [ -n "$BASELINE_BIN" ] && run baseline "$BASE_PORT"
done
echo "edge status: $(curl -s -H 'Host: s.shop55.com' "http://127.0.0.1:$EDGE_PORT/shorturl_status")"
