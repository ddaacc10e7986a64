#!/usr/bin/env bash
# Installs the Debian packages the stack and the tests need, only when a
# binary is missing (so it is a no-op on a prepared machine).
set -euo pipefail
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
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
check h2load nghttp2-client         # the kit's HTTP/2 scenarios (loadtest/h2.py)
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
check npm npm                       # fetches the country database below
check node nodejs                   # runs the single sign-on tests' OpenID provider
[ -e /usr/lib/nginx/modules/ngx_http_lua_module.so ] || need+=(libnginx-mod-http-lua)
ldconfig -p 2>/dev/null | grep -q 'libmaxminddb\.so\.0 ' || need+=(libmaxminddb0)  # the OpenResty module's country database (FFI)
[ -d /usr/share/lua/5.1/resty/core ] || need+=(lua-resty-core)
[ -e /usr/share/lua/5.1/resty/lrucache.lua ] || need+=(lua-resty-lrucache)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The country database of the link rules (edge.geo.mmdb_path; the dev
# stack and the tests): ip-location-db's CC0 country MMDB from the npm
# registry, a pinned version (docs/architecture.md says how to use GeoLite2).
GEO_VERSION=2.3.2026061719
GEO_DIR=/usr/local/share/shorturl
GEO_FILE="$GEO_DIR/geo-whois-asn-country-$GEO_VERSION.mmdb"
if [ ! -s "$GEO_FILE" ]; then
  echo "fetching the country database ($GEO_VERSION)"
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@ip-location-db/geo-whois-asn-country-mmdb@$GEO_VERSION" >/dev/null && tar xzf ./*.tgz)
  $SUDO mkdir -p "$GEO_DIR"
  $SUDO cp "$tmp/package/geo-whois-asn-country.mmdb" "$GEO_FILE.tmp"
  $SUDO mv "$GEO_FILE.tmp" "$GEO_FILE"
  rm -rf "$tmp"
fi
[ "$(readlink "$GEO_DIR/country.mmdb" 2>/dev/null)" = "$GEO_FILE" ] || $SUDO ln -sfn "$GEO_FILE" "$GEO_DIR/country.mmdb"
# The OpenID provider of the console's single sign-on tests
# (origin/tests/oidc_browser.rs): oidc-provider from the npm registry, the
# version pinned in testkit/oidc/package-lock.json, run by Node.
OIDC_DIR="$(cd "$(dirname "$0")/.." && pwd)/testkit/oidc"
OIDC_VERSION=$(sed -n 's/.*"oidc-provider": "\(.*\)".*/\1/p' "$OIDC_DIR/package.json")
if [ "$(node -p "try { require('$OIDC_DIR/node_modules/oidc-provider/package.json').version } catch { '' }" 2>/dev/null)" != "$OIDC_VERSION" ]; then
  echo "installing oidc-provider $OIDC_VERSION (testkit/oidc)"
  (cd "$OIDC_DIR" && npm ci --no-audit --no-fund --silent)
fi
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
