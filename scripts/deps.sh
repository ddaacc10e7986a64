#!/usr/bin/env bash
# Installs the Debian packages the stack and the tests need, only when a
# binary is missing (so it is a no-op on a prepared machine).
set -euo pipefail
need=()
check() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || need+=("$2"); }
check redis-server redis-server
check redis-cli redis-tools          # redis-cli --cluster create (testkit::RedisCluster)
check redis-sentinel redis-sentinel # Sentinel-managed master (testkit::RedisSentinel)
check mariadbd mariadb-server
check mariadb mariadb-client
check cmake cmake
check nginx nginx
check wrk wrk
check curl curl
check pebble pebble                 # ACME test CA (edge/tests/acme.rs)
check chromium chromium             # the admin console's browser tests (edge/tests/admin_browser.rs)
check chromedriver chromium-driver
check pkg-config pkg-config
check openssl openssl
[ -e /usr/share/java/zookeeper.jar ] || need+=(zookeeper)   # the ZooKeeper issuer backend (testkit::ZooKeeper)
[ -e /usr/include/openssl/ssl.h ] || need+=(libssl-dev)   # Pingora's openssl feature links Debian's OpenSSL
# The schemathesis test (origin/tests/schemathesis.rs) makes a venv.
check python3 python3
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
[ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || need+=(libnginx-mod-http-lua)
[ -d /usr/share/lua/5.1/resty/core ] || need+=(lua-resty-core)
[ -e /usr/share/lua/5.1/resty/lrucache.lua ] || need+=(lua-resty-lrucache)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
