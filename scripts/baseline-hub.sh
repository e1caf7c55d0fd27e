#!/usr/bin/env bash
# Builds `meridian-hub` at a git revision, once, into the cache beside the test bed, and prints
# its path: `make bench-hub-scale BASELINE=<rev>` measures it next to the current hub.
set -euo pipefail
rev=$(git rev-parse --verify "$1^{commit}")
cache="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/baseline-hub/$rev"
if [ ! -x "$cache/meridian-hub" ]; then
  work=$(mktemp -d)
  trap 'git worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
  git worktree add --detach "$work/src" "$rev" >/dev/null
  echo "baseline: building meridian-hub at $rev (once)" >&2
  (cd "$work/src" && CARGO_TARGET_DIR="$work/target" cargo build --quiet --locked --release -p meridian-hub >&2)
  mkdir -p "$cache"
  cp "$work/target/release/meridian-hub" "$cache/meridian-hub"
fi
echo "$cache/meridian-hub"
