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
REDIS_PORT=17479 MYSQL_PORT=14406 ORIGIN_PORT=18181
rm -rf "$B"; mkdir -p "$B"
POOL=1G
. scripts/bench-servers.sh
R=$B/results.jsonl
runs_max=$(( $(echo ${IN_FLIGHT:-2} | wc -w) > $(echo ${BINS:-x} | wc -w) ? $(echo ${IN_FLIGHT:-2} | wc -w) : $(echo ${BINS:-x} | wc -w) ))
"$BIN" -c "$B/origin.yaml" pregen --quiet --count $((ROWS * runs_max + 100000)) >/dev/null
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
# Runs, in order (ABBA for this noisy machine): IN_FLIGHT="1 2 2 1" varies
# --in-flight, BINS="/tmp/a /tmp/b /tmp/b /tmp/a" the binary (one value of
# either applies to every run); VARIANTS="coded" runs one file only. Each
# run imports a fresh copy of its file (its own URLs and codes: no dedup
# between runs).
read -ra flights <<<"${IN_FLIGHT:-2}"
read -ra bins <<<"${BINS:-$BIN}"
runs=$(( ${#flights[@]} > ${#bins[@]} ? ${#flights[@]} : ${#bins[@]} ))
for ((i = 0; i < runs; i++)); do
  n=${flights[$(( i < ${#flights[@]} ? i : 0 ))]}
  bin=${bins[$(( i < ${#bins[@]} ? i : 0 ))]}
  for f in ${VARIANTS:-issued coded}; do
    sed "s#import.example/#import.example/r$i/#; s#,imp-#,r$i-#" "$B/$f.csv" >"$B/$f-$i.csv"
    out=$("$bin" -c "$B/origin.yaml" import "$B/$f-$i.csv" --app bench --quiet --in-flight "$n")
    echo "{\"bench\":\"import-$f\",\"bin\":\"$bin\",\"in_flight\":$n,\"result\":$out}" | tee -a "$R"
    rm -f "$B/$f-$i.csv"
  done
done
