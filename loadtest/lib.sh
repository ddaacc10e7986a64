# Shared shell helpers of the load-test kit (sourced by loadtest/run and
# loadtest/memory): logging, and bookkeeping of the processes a script
# starts, so every one of them is stopped on exit by its pid and nothing
# else is ever killed. Set LOG_TAG before sourcing to name the script.

log() { printf '[%s %s] %s\n' "${LOG_TAG:-loadtest}" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- process bookkeeping: everything started here is stopped by pid -----
PIDS=()
cleanup() {
  local rc=$?
  for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill "${PIDS[i]}" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM
stop_pid() { # pid: stop one server we started and forget it
  local p=$1 keep=()
  kill "$p" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
  for q in "${PIDS[@]}"; do [ "$q" = "$p" ] || keep+=("$q"); done
  PIDS=("${keep[@]}")
}
wait_tcp() { # port what
  for _ in $(seq 1 600); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done
  die "timed out waiting for $2 on 127.0.0.1:$1"
}
port_free() { ! (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null; }
free_port() { # -> a loopback port nothing listens on now (the kernel's pick)
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
