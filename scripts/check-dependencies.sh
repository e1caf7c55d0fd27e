#!/usr/bin/env bash
# The dependency check of `make test`: cargo-deny's licenses, bans (duplicate majors, banned
# crates) and sources checks (deny.toml), offline, over the crates the host builds. It asks no
# network: the test build has already fetched every crate it reads. Yanked crates are checked by
# a test (e2e/tests/dependencies.rs), from cargo's index cache.
set -euo pipefail
cd "$(dirname "$0")/.."
deny=$(bash scripts/cargo-deny.sh)
host=$(rustc -vV | sed -n 's/^host: //p')
"$deny" --log-level error --color never --offline --locked --target "$host" --config deny.toml \
  check --show-stats licenses bans sources
