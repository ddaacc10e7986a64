#!/usr/bin/env bash
# Stops the nginx started by start.sh under <prefix> (graceful: SIGQUIT).
set -euo pipefail
prefix="${1:?usage: stop.sh <prefix>}"
pidfile="$prefix/nginx.pid"
[ -f "$pidfile" ] || { echo "no $pidfile" >&2; exit 1; }
pid="$(cat "$pidfile")"
kill -QUIT "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.1; done
echo "nginx $pid still running" >&2; exit 1
