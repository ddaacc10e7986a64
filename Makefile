# Two commands matter: `make up` (the whole stack, locally, in the
# background) and `make test` (every test). Both install what is missing.
SHELL := /bin/bash
CARGO ?= cargo

.PHONY: up down status deps build test lint bench clean

up:
	scripts/stack.sh up

down:
	scripts/stack.sh down

status:
	scripts/stack.sh status

deps:
	scripts/deps.sh

build: deps
	$(CARGO) build --workspace --bins

# Unit and integration tests against private Redis/MariaDB started by the
# tests themselves on free ports (nothing else needs to be running).
test: deps
	$(CARGO) build --workspace --bins
	$(CARGO) test --workspace --no-fail-fast

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Origin creation/issuer throughput next to MariaDB's raw single-row claim
# capacity, measured in the same run (see docs/perf.md).
bench: deps
	$(CARGO) build --release --bins -p shorturl-origin
	scripts/bench-origin.sh

clean:
	scripts/stack.sh down || true
	rm -rf var

# Load-test kit: the whole stack under wrk next to nginx static and the
# OpenResty edge, one command (see docs/perf.md). LOADTEST_ARGS passes
# options, e.g. LOADTEST_ARGS="--workers 2 -c 256".
.PHONY: loadtest loadtest-quick loadtest-memory
loadtest: deps
	loadtest/run $(LOADTEST_ARGS)

# A few seconds per scenario on the debug build: checks that every scenario
# runs and answers correctly (no speed assertions); non-zero exit otherwise.
loadtest-quick: deps
	loadtest/run --quick --profile debug $(LOADTEST_ARGS)

# The edge's memory: RSS at start, per cached link and with a full cache,
# next to cache.max_bytes (1M records through Redis; see docs/perf.md "Memory").
loadtest-memory: deps
	loadtest/memory $(LOADTEST_ARGS)
