#!/usr/bin/env bash
# Origin benchmark (not a test): pregen rows/s, MariaDB's raw durable
# single-row claim capacity, issuer ids/s, click-rollup rows/s, and creations/s through the API
# at 1/16/64 connections, all against one private MariaDB in the same run.
# Results: var/bench/results.jsonl (and printed). Loopback only, bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/var/bench
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release/shorturl-origin
SECS=${SECS:-10}
ROWS=${ROWS:-1000000}
REDIS_PORT=17379 MYSQL_PORT=14306 ORIGIN_PORT=18081
rm -rf "$B"; mkdir -p "$B"
. scripts/bench-servers.sh
R=$B/results.jsonl

# PERF=pregen / PERF=create: that step under a system-wide `perf record`;
# CPU by process and the top symbols go to var/bench/profile-<step>.txt.
perf_start() { # step seconds
  [ "${PERF:-}" = "$1" ] && command -v perf >/dev/null || return 0
  perf record -a -g -F 499 -o "$B/perf.data" -- sleep "$2" >/dev/null 2>&1 &
  perf_pid=$!
}
perf_report() { # step pid-of-the-origin-process
  [ -n "${perf_pid:-}" ] || return 0
  wait "$perf_pid" || true; perf_pid=""
  printf '%s origin\n%s mariadb\n' "$2" "$(cat "$B/m.pid")" >"$B/pids"
  {
    echo "# perf record -a -g -F 499 during $1"
    echo "## CPU by process"
    perf script -i "$B/perf.data" -F pid,comm 2>/dev/null | python3 loadtest/report.py perfsum "$B/pids"
    echo "## top symbols (self)"
    perf report -i "$B/perf.data" --no-children --stdio --sort comm,dso,sym --percent-limit 0.8 -g none 2>/dev/null \
      | grep -v '^#' | grep -v '^$' | head -60
  } >"$B/profile-$1.txt"
  echo "profile: $B/profile-$1.txt"
}
t0=$(date +%s.%N)
perf_start pregen 4
"$BIN" -c "$B/origin.yaml" pregen --quiet --count "$ROWS" >"$B/pregen.txt" &
pregen_pid=$!
wait $pregen_pid
cat "$B/pregen.txt"
perf_report pregen $pregen_pid
t1=$(date +%s.%N)
echo "{\"bench\":\"pregen\",\"rows\":$ROWS,\"per_sec\":$(awk "BEGIN{printf \"%d\", $ROWS/($t1-$t0)}")}" | tee -a "$R"

for c in 1 16 64; do
  "$BIN" -c "$B/origin.yaml" bench raw-claims --concurrency $c --seconds "$SECS" | tee -a "$R"
done
"$BIN" -c "$B/origin.yaml" bench issuer --concurrency 16 --seconds 5 | tee -a "$R"
# The same with the counter in Redis and in ZooKeeper (standalone, Debian's
# package; skipped when it is not installed).
ZK_PORT=12281
for backend in redis zookeeper; do
  if [ $backend = zookeeper ]; then
    [ -e /usr/share/java/zookeeper.jar ] || { echo "zookeeper not installed: issuer bench skipped"; continue; }
    mkdir -p "$B/zookeeper"
    printf 'tickTime=2000\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n' \
      "$B/zookeeper/data" $ZK_PORT >"$B/zookeeper/zoo.cfg"
    java -Xmx256m -XX:+UseSerialGC -cp /usr/share/java/zookeeper.jar \
      org.apache.zookeeper.server.ZooKeeperServerMain "$B/zookeeper/zoo.cfg" >"$B/zookeeper/zookeeper.log" 2>&1 &
    pids+=($!)
    wait_tcp $ZK_PORT
  fi
  { cat "$B/origin.yaml"; echo "issuer: {backend: $backend, zookeeper: {hosts: [\"127.0.0.1:$ZK_PORT\"]}}"; } >"$B/origin-$backend.yaml"
  "$BIN" -c "$B/origin-$backend.yaml" bench issuer --concurrency 16 --seconds 5 | tee -a "$R"
done
# Click rollups through the consumer's apply: 1 and 4 batches in flight.
for c in 1 4; do
  "$BIN" -c "$B/origin.yaml" bench rollups --concurrency $c --seconds "$SECS" | tee -a "$R"
done

RUST_LOG=warn "$BIN" -c "$B/origin.yaml" serve >"$B/origin.log" 2>&1 &
pids+=($!)
wait_tcp $ORIGIN_PORT
ORIGIN_PID=${pids[-1]}
for c in 1 16 64; do
  [ $c = 64 ] && perf_start create "$SECS"
  out=$(SHORTURL_KEY=$KEY LOADTEST_DIR="$ROOT/loadtest" wrk -t1 -c$c -d"${SECS}s" --latency -s loadtest/create.lua \
        "http://127.0.0.1:$ORIGIN_PORT" | tail -n 1)
  echo "{\"bench\":\"create\",\"concurrency\":$c,\"wrk\":$out}" | tee -a "$R"
done
perf_report create "$ORIGIN_PID"
echo "results: $R"
