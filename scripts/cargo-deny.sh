#!/usr/bin/env bash
# Installs cargo-deny (the dependency checker `make test` runs: licenses, duplicate majors,
# sources; see deny.toml) into the user's cache, once, built from crates.io with its own lock
# file, and prints its path (`--print-path` only prints it). A stamp file marks a finished
# install, so an interrupted one is redone rather than trusted.
set -euo pipefail
version=0.20.2
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/cargo-deny-$version"
if [[ "${1:-}" == "--print-path" ]]; then
  echo "$dir/bin/cargo-deny"
  exit 0
fi
if [[ ! -f "$dir/.installed" ]]; then
  echo "building cargo-deny $version into $dir" >&2
  rm -rf "$dir"
  # Its own target directory, removed afterwards: nothing of it lands in the workspace's.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "${CARGO:-cargo}" install --quiet --locked --version "$version" --root "$dir" \
    --target-dir "$work" cargo-deny
  echo "$version" > "$dir/.installed"
fi
echo "$dir/bin/cargo-deny"
