# Sourced by the benchmark scripts (scripts/bench-*.sh): a private Redis and
# MariaDB under $B on loopback ports $REDIS_PORT and $MYSQL_PORT (buffer
# pool $POOL, default 512M), database `bench`; every process started is in
# `pids` and killed when the script exits. Then $B/origin.yaml: an origin
# on $ORIGIN_PORT over them with one app, `bench`, whose key is $KEY.
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_tcp() { for _ in $(seq 1 300); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }

redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$B" --save "" --appendonly no >"$B/redis.log" 2>&1 &
pids+=($!)
mariadb-install-db --no-defaults --datadir="$B/data" --auth-root-authentication-method=normal --skip-test-db --user="$(id -un)" >"$B/install.log" 2>&1
mariadbd --no-defaults --datadir="$B/data" --port="$MYSQL_PORT" --bind-address=127.0.0.1 --socket="$B/m.sock" \
  --pid-file="$B/m.pid" --user="$(id -un)" --skip-name-resolve --innodb-buffer-pool-size="${POOL:-512M}" --max-connections=500 >"$B/mariadb.log" 2>&1 &
pids+=($!)
wait_tcp "$REDIS_PORT"; wait_tcp "$MYSQL_PORT"
for _ in $(seq 1 100); do grep -q "ready for connections" "$B/mariadb.log" && break; sleep 0.1; done
mariadb -h127.0.0.1 -P"$MYSQL_PORT" -uroot -e "CREATE DATABASE bench"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(mariadbd --version | awk '{print $3}')" | tee "$B/machine.txt"
KEY=bench-key
HASH=$(printf %s "$KEY" | sha256sum | cut -d' ' -f1)
cat >"$B/origin.yaml" <<YAML
listen: 127.0.0.1:${ORIGIN_PORT:-18181}
default_domain: localhost
public_scheme: http
mysql: {url: "mysql://root@127.0.0.1:$MYSQL_PORT/bench", pool_max: 80}
redis: {url: "redis://127.0.0.1:$REDIS_PORT/"}
apps: [{name: bench, key_sha256: $HASH, rate_per_sec: 1000000, burst: 1000000}]
YAML
