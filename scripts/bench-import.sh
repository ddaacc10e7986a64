#!/usr/bin/env bash
# Import benchmark (not a test): `shorturl-origin import` of generated CSV
# rows into a private MariaDB and Redis: ROWS (default 1,000,000) without
# codes (issued pre-generated codes, the batch path's group commit) and
# CODED_ROWS (default 200,000) with their own codes (custom codes, one
# claim each: slower, so fewer keep the run short), next to
# MariaDB's raw durable single-row claims measured in the same run.
# Results: var/bench-import/results.jsonl (and printed). Loopback only, bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/var/bench-import
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release/shorturl-origin
ROWS=${ROWS:-1000000}
CODED_ROWS=${CODED_ROWS:-200000}
REDIS_PORT=17479 MYSQL_PORT=14406
rm -rf "$B"; mkdir -p "$B"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_tcp() { for _ in $(seq 1 300); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

redis-server --port $REDIS_PORT --bind 127.0.0.1 --dir "$B" --save "" --appendonly no >"$B/redis.log" 2>&1 &
pids+=($!)
mariadb-install-db --no-defaults --datadir="$B/data" --auth-root-authentication-method=normal --skip-test-db --user="$(id -un)" >"$B/install.log" 2>&1
mariadbd --no-defaults --datadir="$B/data" --port=$MYSQL_PORT --bind-address=127.0.0.1 --socket="$B/m.sock" \
  --pid-file="$B/m.pid" --user="$(id -un)" --skip-name-resolve --innodb-buffer-pool-size=1G --max-connections=500 >"$B/mariadb.log" 2>&1 &
pids+=($!)
wait_tcp $REDIS_PORT; wait_tcp $MYSQL_PORT
for _ in $(seq 1 100); do grep -q "ready for connections" "$B/mariadb.log" && break; sleep 0.1; done
mariadb -h127.0.0.1 -P$MYSQL_PORT -uroot -e "CREATE DATABASE bench"
HASH=$(printf %s bench-key | sha256sum | cut -d' ' -f1)
cat >"$B/origin.yaml" <<YAML
listen: 127.0.0.1:18181
default_domain: localhost
public_scheme: http
mysql: {url: "mysql://root@127.0.0.1:$MYSQL_PORT/bench", pool_max: 80}
redis: {url: "redis://127.0.0.1:$REDIS_PORT/"}
apps: [{name: bench, key_sha256: $HASH, rate_per_sec: 1000000, burst: 1000000}]
YAML
R=$B/results.jsonl
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(mariadbd --version | awk '{print $3}')" | tee "$B/machine.txt"
"$BIN" -c "$B/origin.yaml" pregen --quiet --count $((ROWS * $(echo ${IN_FLIGHT:-2} | wc -w) + 100000)) >/dev/null
python3 - "$B" "$ROWS" "$CODED_ROWS" <<'PY'
import sys
b, n, coded = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(f"{b}/issued.csv", "w") as f:
    f.write("url,tags,created_at\n")
    for i in range(n):
        f.write(f"https://import.example/item/{i}?ref=bench,bench,2024-01-01T00:00:00Z\n")
with open(f"{b}/coded.csv", "w") as f:
    f.write("url,code,tags\n")
    for i in range(coded):
        f.write(f"https://import.example/coded/{i},imp-{i:07d},bench\n")
PY
"$BIN" -c "$B/origin.yaml" bench raw-claims --concurrency 64 --seconds 10 | tee -a "$R"
# IN_FLIGHT="1 2 2 1": each in turn (ABBA, for this noisy machine), each on
# a fresh copy of the file (its own URLs and codes: no dedup between runs).
i=0
for n in ${IN_FLIGHT:-2}; do
  i=$((i + 1))
  for f in issued coded; do
    sed "s#import.example/#import.example/r$i/#; s#,imp-#,r$i-#" "$B/$f.csv" >"$B/$f-$i.csv"
    out=$("$BIN" -c "$B/origin.yaml" import "$B/$f-$i.csv" --app bench --quiet --in-flight "$n")
    echo "{\"bench\":\"import-$f\",\"in_flight\":$n,\"result\":$out}" | tee -a "$R"
    rm -f "$B/$f-$i.csv"
  done
done
