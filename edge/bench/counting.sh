#!/usr/bin/env bash
# Click counting's cost on the hot path, paired: one binary as three edges
# side by side on the same core — counting off, counting without
# dimensions, counting with dimensions and unique visitors (protocol 3.7) —
# measured in turn, ROUNDS rounds (default 5), the order rotating each round.
#
#   edge/bench/counting.sh [duration_secs]   (default 8)
#
# Requests: a desktop browser's headers from behind a trusted proxy (client
# 8.8.8.8, US in the country database), random codes of 100,000 in every
# edge's memory (edge/bench/lib.sh), wrk -t1 -c64 pinned to CPU 1, the
# edges to CPU 0. Each edge flushes every 5 s to the bench Redis (the
# stream is not consumed). Before each run the script waits until every
# edge is idle (its flusher done with the last run's clicks), so a run
# does not pay for the one before. Prints each run and, per counting
# edge, the median of its per-round ratios to the edge without counting
# (req/s and p99) with their spread.
#
# CLICKS_EXTRA adds settings to both counting edges' `clicks:` (e.g.
# CLICKS_EXTRA="max_links: 120000").
#
# BENCH_HEADERS=0: wrk's bare requests instead (no User-Agent: every click
# a bot's, as the kit's edge-hot-analytics). BASELINE_BIN=<binary>: a
# fourth edge, `dimsbase`, counting with dimensions on that binary, in the
# same rotation; the summary adds the per-round ratio dims / dimsbase (two
# builds' counting compared in one run).
#
# PERF=1 adds one more run of the edge with dimensions under
# `perf record -g` and prints the CPU per thread and the top symbols of
# the request thread and of the flusher. Needs: redis-server, wrk, curl,
# the country database of scripts/deps.sh, a release build.
set -euo pipefail
DUR=${1:-8}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${EDGE_BIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/shorturl-edge}
WORK=$(mktemp -d /tmp/shorturl-counting.XXXXXX)
REDIS_PORT=${REDIS_PORT:-26479}
ROUNDS=${ROUNDS:-5}
CODES=100000
MMDB=/usr/local/share/shorturl/country.mmdb
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
[ -x "$BIN" ] || { echo "build first: cargo build --release -p shorturl-edge ($BIN)" >&2; exit 1; }
[ -f "$MMDB" ] || { echo "no country database at $MMDB: run scripts/deps.sh" >&2; exit 1; }

export BENCH_HEADERS=${BENCH_HEADERS:-1}
bench_redis "$REDIS_PORT" "$CODES"
bench_wrk_scripts "$CODES"

# name port clicks-line
NAMES=(off nodims dims)
declare -A PORT=([off]=28180 [nodims]=28181 [dims]=28182 [dimsbase]=28183) PID
declare -A MPORT=([off]=28190 [nodims]=28191 [dims]=28192 [dimsbase]=28193)
declare -A EBIN=([off]=$BIN [nodims]=$BIN [dims]=$BIN)
if [ -n "${BASELINE_BIN:-}" ]; then
  [ -x "$BASELINE_BIN" ] || { echo "BASELINE_BIN $BASELINE_BIN is not an executable" >&2; exit 1; }
  NAMES+=(dimsbase); EBIN[dimsbase]=$BASELINE_BIN
fi
declare -A CLICKS=(
  [off]="{ enabled: false }"
  [nodims]="{ enabled: true, edge_name: nodims, dimensions: false${CLICKS_EXTRA:+, $CLICKS_EXTRA} }"
  [dims]="{ enabled: true, edge_name: dims, dimensions: true${CLICKS_EXTRA:+, $CLICKS_EXTRA} }"
  [dimsbase]="{ enabled: true, edge_name: dimsbase, dimensions: true${CLICKS_EXTRA:+, $CLICKS_EXTRA} }"
)
for n in "${NAMES[@]}"; do
  cat >"$WORK/$n.yaml" <<YAML
server:
  version: 1
  threads: 1
  pid_file: $WORK/$n.pid
  upgrade_sock: $WORK/$n.sock
  grace_period_seconds: 1
  graceful_shutdown_timeout_seconds: 1
edge:
  listen: ["127.0.0.1:${PORT[$n]}"]
  default_domain: s.shop55.com
  redis: { url: "redis://127.0.0.1:$REDIS_PORT/" }
  origin: { servers: ["127.0.0.1:1"] }
  cache: { max_bytes: 268435456, positive_ttl_secs: 3600 }
  limits: { unknown_per_ip_per_sec: 0, max_connections_per_ip: 0 }
  access_log: { path: off }
  metrics_listen: 127.0.0.1:${MPORT[$n]}
  clicks: ${CLICKS[$n]}
  trusted_proxies: ["127.0.0.1/32"]
  geo: { mmdb_path: $MMDB }
YAML
  RUST_LOG=error taskset -c 0 "${EBIN[$n]}" -c "$WORK/$n.yaml" >"$WORK/$n.log" 2>&1 &
  PID[$n]=$!; PIDS+=($!); wait_tcp "${PORT[$n]}"
done

for n in "${NAMES[@]}"; do bench_warm "${PORT[$n]}" "$n" "$CODES"; done

# Waits (at most 30 s) until no edge used more than 1% of a core in 500 ms.
idle() { python3 "$ROOT/loadtest/idle.py" 30 "${PID[@]}" >/dev/null 2>&1 || true; }

RES=$WORK/results
: >"$RES"
run() { # round name
  idle
  local out
  out=$(taskset -c 1 wrk -t1 -c64 -d"${DUR}s" --latency -s "$WORK/random.lua" "http://127.0.0.1:${PORT[$2]}/")
  local rps p99
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {v=$2; if (v ~ /us$/) {sub(/us/,"",v); v/=1000} else if (v ~ /ms$/) {sub(/ms/,"",v)} else if (v ~ /s$/) {sub(/s/,"",v); v*=1000}; print v}' <<<"$out")
  printf '%s %s %s %s\n' "$1" "$2" "$rps" "$p99" | tee -a "$RES"
}
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $ROUNDS rounds of ${DUR}s"
echo "round edge req/s p99_ms"
for r in $(seq 1 "$ROUNDS"); do
  k=$(( (r - 1) % ${#NAMES[@]} ))
  order=("${NAMES[@]:$k}" "${NAMES[@]:0:$k}")
  for n in "${order[@]}"; do run "$r" "$n"; done
done
python3 - "$RES" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = {}
for r, n, rps, p99 in rows:
    by.setdefault(int(r), {})[n] = (float(rps), float(p99))
pairs = [("nodims", "off", "counting without dimensions"), ("dims", "off", "counting with dimensions and visitors")]
if all("dimsbase" in v for v in by.values()):
    pairs += [("dimsbase", "off", "the baseline build's, with dimensions"), ("dims", "dimsbase", "this build against the baseline's")]
for n, a, what in pairs:
    rr = [v[n][0] / v[a][0] for v in by.values()]
    pp = [v[n][1] / v[a][1] for v in by.values()]
    print(f"{n:8s} vs {a} ({what}): req/s {statistics.median(rr):.3f}x ({min(rr):.3f}-{max(rr):.3f}), "
          f"p99 {statistics.median(pp):.3f}x ({min(pp):.3f}-{max(pp):.3f})")
PY
for n in nodims dims; do
  echo "status $n: $(curl -s -H 'Host: s.shop55.com' "http://127.0.0.1:${PORT[$n]}/shorturl_status" | sed -n 's/.*"clicks":\({[^}]*}\).*/\1/p')"
  curl -s "http://127.0.0.1:${MPORT[$n]}/metrics" | grep -E '^shorturl_edge_click_(queue_full|backpressure|early_cuts)' | sed "s/^/  $n /"
done

if [ "${PERF:-0}" = 1 ]; then
  idle
  taskset -c 1 wrk -t1 -c64 -d"$((DUR + 2))s" -s "$WORK/random.lua" "http://127.0.0.1:${PORT[dims]}/" >/dev/null &
  w=$!
  sleep 1
  perf record -g -p "${PID[dims]}" -F 999 -o "$WORK/perf.data" -- sleep "$DUR" >/dev/null 2>&1 || true
  wait "$w" || true
  echo "== CPU of the edge with dimensions, by thread"
  perf report -i "$WORK/perf.data" --stdio --no-children --sort comm 2>/dev/null | grep -E '^ +[0-9]' | head
  echo "== top symbols, by thread"
  perf report -i "$WORK/perf.data" --stdio --no-children --sort comm,sym -g none --percent-limit 0.5 2>/dev/null \
    | grep -E '^ +[0-9]' | head -60
fi

# SCHED=1: one more run of the edge with dimensions under `perf sched
# record` of CPU 0: what ran there, in stints of how long, and how long the
# request thread waited to run (where a p99 comes from).
if [ "${SCHED:-0}" = 1 ]; then
  idle
  taskset -c 1 wrk -t1 -c64 -d"$((DUR + 2))s" -s "$WORK/random.lua" "http://127.0.0.1:${PORT[dims]}/" >/dev/null &
  w=$!
  sleep 1
  perf sched record -C 0 -o "$WORK/sched.data" -- sleep "$DUR" >/dev/null 2>&1 || true
  wait "$w" || true
  cat >"$WORK/sched.py" <<'PY'
import collections, sys
run, wait = collections.defaultdict(list), collections.defaultdict(list)
for line in sys.stdin:
    f = line.split()
    if len(f) < 6 or not f[0][0].isdigit():
        continue
    try:
        d, r = float(f[-2]), float(f[-1])
    except ValueError:
        continue
    name = " ".join(f[2:-3]).rsplit("[", 1)[0]
    run[name].append(r)
    wait[name].append(d)
def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))]
print("%-28s %7s %9s %9s %7s %15s %7s" % ("task on CPU 0 (ms)", "stints", "run", "stint p99", "max", "sched delay p99", "max"))
for n, v in sorted(run.items(), key=lambda kv: -sum(kv[1]))[:10]:
    print("%-28s %7d %9.1f %9.3f %7.3f %15.3f %7.3f" % (n[:28], len(v), sum(v), q(v, .99), max(v), q(wait[n], .99), max(wait[n])))
PY
  perf sched timehist -i "$WORK/sched.data" 2>/dev/null | python3 "$WORK/sched.py"
fi

