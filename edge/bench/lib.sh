# Shared by the edge's bench scripts (sourced): a private Redis holding N
# records c00000.. for s.shop55.com, and the wrk scripts that read them.
# The caller sets WORK (a temp dir) and PIDS (pids to stop on exit).

# wait_tcp PORT: up to WAIT_TCP_SECS (default 30) for a listener.
wait_tcp() { for _ in $(seq 1 $(( ${WAIT_TCP_SECS:-30} * 20 ))); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "no listener on $1" >&2; exit 1; }

# bench_edge_head DIR PORT REDIS_PORT: the start of a bench edge's config
# (one server thread, its files under DIR, listening on PORT, the bench
# Redis on REDIS_PORT with generous timeouts: under callgrind everything is
# ~50x slower, no origin); the caller appends its own `edge:` keys.
bench_edge_head() {
  cat <<YAML
server:
  version: 1
  threads: 1
  pid_file: $1/edge.pid
  upgrade_sock: $1/edge.sock
  grace_period_seconds: 1
  graceful_shutdown_timeout_seconds: 1
edge:
  listen: ["127.0.0.1:$2"]
  default_domain: s.shop55.com
  redis: { url: "redis://127.0.0.1:$3/", timeout_ms: 2000, connect_timeout_ms: 2000 }
  origin: { servers: ["127.0.0.1:1"] }
YAML
}

# bench_redis PORT N: Redis on PORT (pinned to REDIS_CPU when set) with N
# records, valid for a day, under
# both key forms (protocol 3.5 `{domain}/{code}` and the code-only form of
# earlier versions), so a build from before 3.5 can be the baseline.
# RULES=1: each record carries five link rules (protocol 3.1.1) that a
# bench request (BENCH_HEADERS=1) walks through to the last, a country
# rule answered from the edge's country database.
RULES_JSON='{"r":[{"c":{"app":["wechat"]},"u":"https://example.com/wechat"},{"c":{"dev":["ios"]},"u":"https://example.com/ios"},{"c":{"lang":["ja"]},"u":"https://example.com/ja"},{"c":{"q":["ref","x"]},"u":"https://example.com/ref"},{"c":{"cc":["US"]},"u":"https://example.com/us"}]}'
bench_redis() {
  if (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null; then echo "port $1 is taken: another Redis still runs there" >&2; exit 1; fi
  local pin=(); [ -n "${REDIS_CPU:-}" ] && pin=(taskset -c "$REDIS_CPU")
  "${pin[@]}" redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" --daemonize no >"$WORK/redis.log" 2>&1 &
  PIDS+=($!); wait_tcp "$1"
  local exp=$(( $(date +%s) + 86400 ))
  if [ "${RULES:-0}" = 1 ]; then
    awk -v ex="$exp" -v n="$2" -v rules="$RULES_JSON" 'BEGIN { gsub(/"/, "\\\"", rules); for (i = 0; i < n; i++) for (k = 0; k < 2; k++) printf "SET su:1:link:%sc%05d \"3 1 %d s.shop55.com https://example.com/landing/%05d?utm_source=bench %s\"\n", (k ? "" : "s.shop55.com/"), i, ex, i, rules }' \
      | redis-cli -p "$1" --pipe >/dev/null
  else
    awk -v ex="$exp" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) for (k = 0; k < 2; k++) printf "SET su:1:link:%sc%05d \"1 %d s.shop55.com https://example.com/landing/%05d?utm_source=bench\"\n", (k ? "" : "s.shop55.com/"), i, ex, i }' \
      | redis-cli -p "$1" --pipe >/dev/null
  fi
}

# The bench requests' headers: Host, and with BENCH_HEADERS=1 those of a
# desktop browser in English behind a trusted proxy, client BENCH_XFF
# (default 8.8.8.8, US).
bench_headers() {
  if [ "${BENCH_HEADERS:-0}" = 1 ]; then
    printf '%s' '{ ["Host"] = "s.shop55.com", ["User-Agent"] = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/126.0 Safari/537.36", ["Accept-Language"] = "en-US,en;q=0.9", ["X-Forwarded-For"] = "'"${BENCH_XFF:-8.8.8.8}"'" }'
  else
    printf '%s' '{ ["Host"] = "s.shop55.com" }'
  fi
}

# bench_wrk_scripts N: $WORK/sequential.lua (every code in turn, from the
# offset given after `--`) and $WORK/random.lua (random codes, fixed seed).
bench_wrk_scripts() {
  cat >"$WORK/sequential.lua" <<LUA
local i = -1
init = function(args) i = (tonumber(args[1]) or 0) - 1 end
request = function()
  i = (i + 1) % $1
  return wrk.format("GET", string.format("/c%05d", i), $(bench_headers))
end
LUA
  cat >"$WORK/random.lua" <<LUA
math.randomseed(42)
request = function()
  return wrk.format("GET", string.format("/c%05d", math.random(0, $1 - 1)), $(bench_headers))
end
LUA
}

# bench_warm PORT NAME N: every code through Redis into an edge's memory
# (sequential passes, wrk on CPU 1), until its status shows all N were
# looked up once.
bench_warm() {
  local hits=0
  for _ in $(seq 1 20); do
    taskset -c 1 wrk -t1 -c64 -d3s -s "$WORK/sequential.lua" "http://127.0.0.1:$1/" -- "$hits" >/dev/null
    hits=$(curl -s -H 'Host: s.shop55.com' "http://127.0.0.1:$1/shorturl_status" | sed -n 's/.*"redis":{[^}]*"hit":\([0-9]*\).*/\1/p')
    [ "${hits:-0}" -ge "$3" ] && break
  done
  echo "warm $2: $hits codes read from Redis into its memory"
}
