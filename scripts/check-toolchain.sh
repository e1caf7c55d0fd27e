#!/usr/bin/env bash
# Checks for the toolchains every build step needs and says what is missing. Nothing here can be
# installed by a script on this machine kind: Go and Rust (with rustfmt and clippy) come with it,
# and setpriv is part of Debian's essential util-linux.
set -euo pipefail
missing=()
command -v go >/dev/null || missing+=("go (Go 1.26 or newer)")
command -v cargo >/dev/null || missing+=("cargo (Rust 1.92 or newer)")
cargo fmt --version >/dev/null 2>&1 || missing+=("rustfmt (rustup component add rustfmt)")
cargo clippy --version >/dev/null 2>&1 || missing+=("clippy (rustup component add clippy)")
command -v setpriv >/dev/null || missing+=("setpriv (Debian package util-linux)")
if ((${#missing[@]})); then
  printf 'missing: %s\n' "${missing[@]}" >&2
  exit 1
fi
