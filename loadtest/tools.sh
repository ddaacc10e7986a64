#!/usr/bin/env bash
# Load generators of the kit that Debian does not package: `oha` (the
# fixed-rate scenarios, loadtest/fixed.py), a pinned version from crates.io,
# built once into ~/.cargo/bin (about 4 minutes on 2 cores). Debian's wrk and
# h2load come from scripts/deps.sh. A no-op when the pinned version is there.
set -euo pipefail
OHA_VERSION=1.16.0
have=$(oha --version 2>/dev/null | awk '{print $2}' || true)
if [ "$have" != "$OHA_VERSION" ]; then
  echo "installing oha $OHA_VERSION (cargo install; the kit's fixed-rate load generator)" >&2
  cargo install --locked --quiet --version "$OHA_VERSION" oha
fi
