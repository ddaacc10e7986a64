# Shared by the edge's bench scripts (sourced): a private Redis holding N
# records c00000.. for s.shop55.com, and the wrk scripts that read them.
# The caller sets WORK (a temp dir) and PIDS (pids to stop on exit).

# wait_tcp PORT: up to WAIT_TCP_SECS (default 30) for a listener.
wait_tcp() { for _ in $(seq 1 $(( ${WAIT_TCP_SECS:-30} * 20 ))); do (echo >/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "no listener on $1" >&2; exit 1; }

# bench_redis PORT N: Redis on PORT with N records, valid for a day.
bench_redis() {
  redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" --daemonize no >"$WORK/redis.log" 2>&1 &
  PIDS+=($!); wait_tcp "$1"
  local exp=$(( $(date +%s) + 86400 ))
  awk -v ex="$exp" -v n="$2" 'BEGIN { for (i = 0; i < n; i++) printf "SET su:1:link:c%05d \"1 %d s.shop55.com https://example.com/landing/%05d?utm_source=bench\"\n", i, ex, i }' \
    | redis-cli -p "$1" --pipe >/dev/null
}

# bench_wrk_scripts N: $WORK/sequential.lua (every code in turn, from the
# offset given after `--`) and $WORK/random.lua (random codes, fixed seed).
bench_wrk_scripts() {
  cat >"$WORK/sequential.lua" <<LUA
local i = -1
init = function(args) i = (tonumber(args[1]) or 0) - 1 end
request = function()
  i = (i + 1) % $1
  return wrk.format("GET", string.format("/c%05d", i), { ["Host"] = "s.shop55.com" })
end
LUA
  cat >"$WORK/random.lua" <<LUA
math.randomseed(42)
request = function()
  return wrk.format("GET", string.format("/c%05d", math.random(0, $1 - 1)), { ["Host"] = "s.shop55.com" })
end
LUA
}
