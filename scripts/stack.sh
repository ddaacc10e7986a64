#!/usr/bin/env bash
# The local stack under ./var: private Redis and MariaDB on non-default
# ports, the origin on 127.0.0.1:8081 and the edge on 127.0.0.1:8080
# (HTTPS on 127.0.0.1:8443 with a development CA under var/tls/).
#   scripts/stack.sh up     start what is not running (idempotent)
#   scripts/stack.sh down   stop what it started (by pid file)
#   scripts/stack.sh status
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VAR=$ROOT/var
REDIS_PORT=${REDIS_PORT:-16379}
MYSQL_PORT=${MYSQL_PORT:-13306}
ORIGIN_PORT=8081
EDGE_PORT=8080
PREGEN_COUNT=${PREGEN_COUNT:-100000}
PROFILE=${PROFILE:-release}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
BIN=$TARGET/$PROFILE

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_tcp() { # port, what
  for _ in $(seq 1 300); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for $2 on port $1" >&2; return 1
}

start_redis() {
  mkdir -p "$VAR/redis"
  alive "$VAR/redis/redis.pid" && return 0
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$VAR/redis" --save "" --appendonly no \
    --daemonize yes --pidfile "$VAR/redis/redis.pid" --logfile "$VAR/redis/redis.log"
  wait_tcp "$REDIS_PORT" redis
}

start_mariadb() {
  local d=$VAR/mariadb
  mkdir -p "$d"
  alive "$d/mariadb.pid" && return 0
  if [ ! -d "$d/data/mysql" ]; then
    mariadb-install-db --no-defaults --datadir="$d/data" --auth-root-authentication-method=normal \
      --skip-test-db --user="$(id -un)" >"$d/install.log" 2>&1
  fi
  nohup mariadbd --no-defaults --datadir="$d/data" --port="$MYSQL_PORT" --bind-address=127.0.0.1 \
    --socket="$d/mariadb.sock" --pid-file="$d/mariadb.pid" --user="$(id -un)" --skip-name-resolve \
    --innodb-buffer-pool-size=256M --max-connections=500 >"$d/mariadb.log" 2>&1 &
  for _ in $(seq 1 300); do grep -q "ready for connections" "$d/mariadb.log" 2>/dev/null && break; sleep 0.1; done
  wait_tcp "$MYSQL_PORT" mariadb
  mariadb -h127.0.0.1 -P"$MYSQL_PORT" -uroot -e "CREATE DATABASE IF NOT EXISTS shorturl"
}

# Secrets (var/dev-*, var/origin.yaml, private keys) are the user's only:
# written under umask 077, and chmod 600 on every run (older runs left
# some 0644).
new_key() { # file: a random key, kept across runs
  if [ ! -s "$1" ]; then
    (umask 077; head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$1")
  fi
  chmod 600 "$1"
  tr -d '\n' <"$1" | sha256sum | cut -d' ' -f1
}

dev_config() {
  local admin merchant internal
  admin=$(new_key "$VAR/dev-api-key")            # app "dev": admin
  merchant=$(new_key "$VAR/dev-merchant-key")    # app "merchant55": merchant 55 only
  # The edges' shared token for the origin's /internal/* and /metrics
  # (origin: its SHA-256 in internal.token_sha256; edge:
  # SHORTURL_EDGE_INTERNAL_TOKEN).
  internal=$(new_key "$VAR/dev-internal-token")
  # The console's user `admin` (role admin): a random password, kept across runs.
  if [ ! -s "$VAR/dev-admin-password" ]; then
    (umask 077; head -c 18 /dev/urandom | base64 | tr -d '/+=\n' >"$VAR/dev-admin-password")
  fi
  # The edge's shared TLS store key (edge.tls.store_key, given to the edge
  # as SHORTURL_EDGE_TLS_STORE_KEY): seals the private keys in Redis.
  if [ ! -s "$VAR/dev-tls-store-key" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 >"$VAR/dev-tls-store-key")
  fi
  # The unlock key of password links (protocol 4.5): the origin signs
  # tokens with it (SHORTURL_UNLOCK_KEY), the edge opens them
  # (SHORTURL_EDGE_UNLOCK_KEYS).
  if [ ! -s "$VAR/dev-unlock-key" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 >"$VAR/dev-unlock-key")
  fi
  # Seals webhook endpoints' secrets in MySQL (SHORTURL_WEBHOOK_KEY).
  if [ ! -s "$VAR/dev-webhook-key" ]; then
    (umask 077; head -c 32 /dev/urandom | base64 >"$VAR/dev-webhook-key")
  fi
  chmod 600 "$VAR/dev-admin-password" "$VAR/dev-tls-store-key" "$VAR/dev-unlock-key" "$VAR/dev-webhook-key"
  local phc
  phc=$("$BIN/shorturl-origin" hash-password <"$VAR/dev-admin-password")
  rm -f "$VAR/origin.yaml"
  (umask 077; sed -e "s/__DEV_KEY_SHA256__/$admin/" -e "s/__MERCHANT_KEY_SHA256__/$merchant/" \
    -e "s/__INTERNAL_TOKEN_SHA256__/$internal/" \
    -e "s|__ADMIN_PASSWORD_HASH__|$phc|" conf/origin.dev.yaml >"$VAR/origin.yaml")
}

# A development CA (var/tls/ca.pem: trust it in curl with --cacert) and
# certificates for localhost and the dev domains in the edge's certificate
# directory (var/tls/certs), made once with the openssl CLI.
DEV_TLS_NAMES="localhost s.shop55.com go.brand91.cn"
dev_tls() {
  local d=$VAR/tls
  mkdir -p "$d/certs"
  if [ ! -s "$d/ca.pem" ]; then
    (umask 077; openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
      -subj "/CN=shorturl development CA" -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null)
    chmod 644 "$d/ca.pem"
  fi
  chmod 600 "$d/ca.key"
  local n
  for n in $DEV_TLS_NAMES; do
    [ -s "$d/certs/$n.crt" ] && continue
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$n" \
      -keyout "$d/certs/$n.key" -out "$d/certs/$n.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' "$n" >"$d/certs/$n.ext"
    openssl x509 -req -in "$d/certs/$n.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 825 -sha256 -extfile "$d/certs/$n.ext" -out "$d/certs/$n.crt" 2>/dev/null
    rm -f "$d/certs/$n.csr" "$d/certs/$n.ext"
  done
  chmod 600 "$d"/certs/*.key
}

start_origin() {
  alive "$VAR/origin.pid" && return 0
  "$BIN/shorturl-origin" -c "$VAR/origin.yaml" pregen --count "$PREGEN_COUNT" --quiet
  SHORTURL_UNLOCK_KEY=$(cat "$VAR/dev-unlock-key") \
  SHORTURL_WEBHOOK_KEY=$(cat "$VAR/dev-webhook-key") \
    nohup "$BIN/shorturl-origin" -c "$VAR/origin.yaml" serve >"$VAR/origin.log" 2>&1 &
  echo $! >"$VAR/origin.pid"
  wait_tcp "$ORIGIN_PORT" origin
}

start_edge() {
  [ -x "$BIN/shorturl-edge" ] || return 0
  alive "$VAR/edge.pid" && return 0
  SHORTURL_EDGE_TLS_STORE_KEY=$(cat "$VAR/dev-tls-store-key") \
  SHORTURL_EDGE_INTERNAL_TOKEN=$(cat "$VAR/dev-internal-token") \
  SHORTURL_EDGE_UNLOCK_KEYS=$(cat "$VAR/dev-unlock-key") \
    nohup "$BIN/shorturl-edge" -c conf/edge.dev.yaml >"$VAR/edge.log" 2>&1 &
  echo $! >"$VAR/edge.pid"
  wait_tcp "$EDGE_PORT" edge
}

stop_pidfile() { # pidfile name
  if alive "$1"; then
    local pid; pid=$(cat "$1")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    echo "stopped $2 (pid $pid)"
  fi
  rm -f "$1"
}

case "${1:-}" in
  up)
    scripts/deps.sh
    mkdir -p "$VAR"
    if [ "$PROFILE" = release ]; then
      cargo build --release --bins
    else
      cargo build --bins
    fi
    start_redis
    start_mariadb
    dev_config
    dev_tls
    start_origin
    start_edge
    KEY=$(cat "$VAR/dev-api-key")
    PORT=$ORIGIN_PORT; [ -x "$BIN/shorturl-edge" ] && PORT=$EDGE_PORT
    cat <<MSG

Stack is up: origin 127.0.0.1:$ORIGIN_PORT, Redis 127.0.0.1:$REDIS_PORT, MariaDB 127.0.0.1:$MYSQL_PORT$([ -x "$BIN/shorturl-edge" ] && echo ", edge 127.0.0.1:$EDGE_PORT").
API keys: var/dev-api-key (admin), var/dev-merchant-key (merchant 55, domain s.shop55.com); secrets in var/ are mode 0600.
TLS store key (seals private keys in Redis): var/dev-tls-store-key, given to the edge as SHORTURL_EDGE_TLS_STORE_KEY.
Unlock key (password links' tokens): var/dev-unlock-key, given to the origin and the edge.
Webhook key (seals endpoint secrets): var/dev-webhook-key, given to the origin as SHORTURL_WEBHOOK_KEY.
Admin console: http://127.0.0.1:$ORIGIN_PORT/admin/ (user admin, password in var/dev-admin-password; docs/admin.md)
Logs: var/*.log. Stop with: make down

Create a link:
  curl -s -X POST http://127.0.0.1:$PORT/api/v1/links \\
       -H "Authorization: Bearer \$(cat var/dev-api-key)" \\
       -H 'Content-Type: application/json' -d '{"url":"https://example.com/hello"}'
Follow it (use the code from the answer):
  curl -i -H 'Host: localhost' http://127.0.0.1:$PORT/<code>
Its QR code and preview page (rendered by the origin, served by the edge
from its page cache):
  curl -s -H 'Host: localhost' 'http://127.0.0.1:$PORT/<code>.png?size=512' -o qr.png
  curl -s -H 'Host: localhost' 'http://127.0.0.1:$PORT/<code>+'
Over HTTPS (HTTP/2), trusting the development CA:
  curl -i --cacert var/tls/ca.pem https://localhost:8443/<code>
  curl -i --cacert var/tls/ca.pem --resolve s.shop55.com:8443:127.0.0.1 https://s.shop55.com:8443/<code>
A link with rules (iPhones to the App Store, the query forwarded):
  curl -s -X POST http://127.0.0.1:$PORT/api/v1/links -H "Authorization: Bearer \$(cat var/dev-api-key)" \\
       -H 'Content-Type: application/json' \\
       -d '{"url":"https://example.com/shop","forward_query":true,"rules":[{"when":{"device":["ios"]},"url":"https://apps.apple.com/app/id1"}]}'
Edit it, then read its history (README.md, "Quick start"):
  curl -s -X PATCH http://127.0.0.1:$PORT/api/v1/links/<code> -H "Authorization: Bearer \$(cat var/dev-api-key)" \\
       -H 'Content-Type: application/json' -d '{"url":"https://example.com/edited"}'
  curl -s http://127.0.0.1:$PORT/api/v1/links/<code>/history -H "Authorization: Bearer \$(cat var/dev-api-key)"
Find links (newest first; follow next_cursor for the next page):
  curl -s 'http://127.0.0.1:$PORT/api/v1/links?domain=localhost&limit=10' -H "Authorization: Bearer \$(cat var/dev-api-key)"
The API contract: http://127.0.0.1:$PORT/api/v1/openapi.json (docs/openapi.yaml)
MSG
    CODE=$(curl -s -X POST "http://127.0.0.1:$PORT/api/v1/links" -H "Authorization: Bearer $KEY" \
      -H 'Content-Type: application/json' -d '{"url":"https://example.com/hello"}' | sed -n 's/.*"code":"\([^"]*\)".*/\1/p')
    if [ -n "$CODE" ]; then
      echo
      echo "Example: created $CODE; following it:"
      curl -s -o /dev/null -w '  %{http_code} -> %{redirect_url}\n' -H 'Host: localhost' "http://127.0.0.1:$PORT/$CODE"
      if [ -x "$BIN/shorturl-edge" ]; then
        curl -s -o /dev/null --cacert "$VAR/tls/ca.pem" -w '  HTTPS (HTTP/%{http_version}): %{http_code} -> %{redirect_url}\n' \
          "https://localhost:8443/$CODE" || true
      fi
    fi
    if [ -x "$BIN/shorturl-edge" ]; then
      # The link rules' country database, as the edge reports it.
      curl -s -H 'Host: localhost' "http://127.0.0.1:$EDGE_PORT/shorturl_status" | python3 -c '
import json, sys
g = json.load(sys.stdin).get("geo")
print("Country database (link rules): " + ("{path}, {database_type}, built {build_date}".format(**g) if g else "none"))' || true
    fi
    ;;
  down)
    stop_pidfile "$VAR/edge.pid" edge
    stop_pidfile "$VAR/origin.pid" origin
    stop_pidfile "$VAR/mariadb/mariadb.pid" mariadb
    stop_pidfile "$VAR/redis/redis.pid" redis
    ;;
  status)
    for p in edge origin mariadb/mariadb redis/redis; do
      if alive "$VAR/$p.pid"; then echo "$p: running (pid $(cat "$VAR/$p.pid"))"; else echo "$p: stopped"; fi
    done
    ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
