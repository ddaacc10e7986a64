#!/usr/bin/env bash
# Webhook delivery benchmark (not a test): the release origin on a private
# MariaDB and Redis, one endpoint of the creating app subscribed to
# link.created with a fast receiver on loopback (loadtest/webhook_receiver.py),
# and a creation load through wrk (loadtest/create.lua) for RUN_SECS (10) at
# each of CONNS ("4 64") connections, each run with the endpoint and without
# any (HOOKS="off on on off": the creation rate's cost of webhooks, same run, ABBA). Per
# run: creations/s, deliveries/s and the delay from each change's commit to
# its receipt (p50/p90/p99/max), all events received once the backlog
# drained. MAX_IN_FLIGHT sets
# webhooks.max_in_flight_per_endpoint (4). Results:
# var/bench-webhooks/results.jsonl (and printed). Loopback only, bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/var/bench-webhooks
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/release/shorturl-origin
RUN_SECS=${RUN_SECS:-10}
REDIS_PORT=17579 MYSQL_PORT=14506 ORIGIN_PORT=18281 RX_PORT=18299
rm -rf "$B"; mkdir -p "$B"
. scripts/bench-servers.sh
cat >>"$B/origin.yaml" <<YAML
webhooks:
  key: "$(head -c 32 /dev/urandom | base64)"
  allow_http: true
  allow_networks: [127.0.0.0/8]
  max_in_flight_per_endpoint: ${MAX_IN_FLIGHT:-4}
YAML
"$BIN" -c "$B/origin.yaml" pregen --quiet --count 2000000 >/dev/null
RUST_LOG=${RUST_LOG:-info} "$BIN" -c "$B/origin.yaml" serve >"$B/origin.log" 2>&1 &
pids+=($!)
wait_tcp $ORIGIN_PORT
R=$B/results.jsonl
for c in ${CONNS:-4 64}; do
 for h in ${HOOKS:-off on on off}; do
  if [ "$h" = off ]; then
    wrk_out=$(SHORTURL_KEY=$KEY wrk -t2 -c"$c" -d"${RUN_SECS}s" -s loadtest/create.lua "http://127.0.0.1:$ORIGIN_PORT" | tail -n 1)
    echo "{\"bench\":\"webhooks\",\"hooks\":\"off\",\"conns\":$c,\"wrk\":$wrk_out}" | tee -a "$R"
    continue
  fi
  python3 loadtest/webhook_receiver.py $RX_PORT "$B/rx-$c.json" &
  rx=$!
  pids+=($rx)
  wait_tcp $RX_PORT
  ep=$(curl -s -X POST "http://127.0.0.1:$ORIGIN_PORT/api/v1/webhooks" -H "Authorization: Bearer $KEY" \
    -d "{\"url\":\"http://127.0.0.1:$RX_PORT/hook\",\"events\":[\"link.created\"]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
  wrk_out=$(SHORTURL_KEY=$KEY wrk -t2 -c"$c" -d"${RUN_SECS}s" -s loadtest/create.lua "http://127.0.0.1:$ORIGIN_PORT" | tail -n 1)
  created=$(echo "$wrk_out" | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["status"]["2xx"])')
  # Wait (bounded) until the endpoint has nothing pending, then stop the receiver.
  for _ in $(seq 1 600); do
    pending=$(curl -s "http://127.0.0.1:$ORIGIN_PORT/api/v1/webhooks/$ep" -H "Authorization: Bearer $KEY" \
      | python3 -c 'import json,sys; d=json.load(sys.stdin)["deliveries"]; print(d["pending"])')
    [ "$pending" = 0 ] && break
    sleep 0.5
  done
  kill -TERM $rx; wait $rx || true
  curl -s -X DELETE "http://127.0.0.1:$ORIGIN_PORT/api/v1/webhooks/$ep" -H "Authorization: Bearer $KEY" >/dev/null
  echo "{\"bench\":\"webhooks\",\"hooks\":\"on\",\"conns\":$c,\"max_in_flight\":${MAX_IN_FLIGHT:-4},\"created\":$created,\"wrk\":$wrk_out,\"receiver\":$(cat "$B/rx-$c.json")}" | tee -a "$R"
 done
done
