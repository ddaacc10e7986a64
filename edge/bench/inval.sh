#!/usr/bin/env bash
# CPU instructions per invalidation message an edge applies, counted by
# valgrind's callgrind (repeatable on a busy machine, unlike a load test):
#
#   edge/bench/inval.sh BIN [BIN ...]
#
# For each binary: a private Redis, the edge under callgrind (one server
# thread, counting off, nothing cached), counters zeroed once it is
# subscribed, then loadtest/inval_publisher.py publishes RATE (default
# 5,000) messages a second for SECS (default 10) seconds, each naming a
# code of the edge's default domain that it does not hold (as the kit's
# edge-hot-inval: a tombstone raised, the code's pages purged). Prints the
# messages the edge heard and the instructions per message (all threads).
# KEEP=DIR keeps the callgrind files. Needs valgrind, redis-server, curl.
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,14p' "$0"; exit 2; }
RATE=${RATE:-5000}; SECS=${SECS:-10}
REDIS_PORT=${REDIS_PORT:-26597}; EDGE_PORT=${EDGE_PORT:-28397}
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK=$(mktemp -d /tmp/shorturl-inval.XXXXXX)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
inval_field() { curl -s -H 'Host: s.shop55.com' "http://127.0.0.1:$EDGE_PORT/shorturl_status" | sed -n "s/.*\"inval\":{[^}]*\"$1\":\\([0-9a-z]*\\).*/\\1/p"; }

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no >"$WORK/redis.log" 2>&1 &
PIDS+=($!); wait_tcp "$REDIS_PORT"
for bin in "$@"; do
  { bench_edge_head "$WORK" "$EDGE_PORT" "$REDIS_PORT"; cat <<YAML
  access_log: { path: off }
  clicks: { enabled: false }
YAML
  } >"$WORK/edge.yaml"
  rm -f "$WORK"/callgrind.out.*
  RUST_LOG=error valgrind --tool=callgrind --callgrind-out-file="$WORK/callgrind.out.%p" \
    "$bin" -c "$WORK/edge.yaml" >"$WORK/edge.log" 2>&1 &
  vpid=$!; PIDS+=($vpid); WAIT_TCP_SECS=300 wait_tcp "$EDGE_PORT"
  for _ in $(seq 1 120); do [ "$(inval_field subscribed)" = true ] && break; sleep 1; done
  [ "$(inval_field subscribed)" = true ] || { echo "$bin: never subscribed" >&2; exit 1; }
  callgrind_control -z "$vpid" >/dev/null
  m0=$(inval_field messages)
  python3 "$ROOT/loadtest/inval_publisher.py" "$REDIS_PORT" "$RATE" "$SECS" "$WORK/published" s.shop55.com
  # Until the edge has heard every message published.
  want=$(( m0 + $(cat "$WORK/published") ))
  for _ in $(seq 1 120); do [ "$(inval_field messages)" -ge "$want" ] && break; sleep 1; done
  callgrind_control -d "$vpid" >/dev/null
  m1=$(inval_field messages)
  sleep 1
  [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$WORK"/callgrind.out.* "$KEEP/"
  ir=$(cat "$WORK"/callgrind.out.* | awk '/^summary:/ { s += $2 } END { print s + 0 }')
  kill "$vpid" 2>/dev/null || true; wait "$vpid" 2>/dev/null || true
  n=$(( m1 - m0 ))
  echo "$bin: $n messages heard of $(cat "$WORK/published") published, $ir instructions, $(( ir / n )) instructions per message"
done
